"""What the registry tests (decoder, encoder and encoder-decoder families) share: their table of outcomes in
docs/models.md, between its two markers (what the docs say of each model type, the table rewritten with
HEADPRUNE_WRITE_MODELS_TABLE=1), the check that exported folders load with headprune blocked, and an error in one
line."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import threads_for_tests

DOCS = Path(__file__).resolve().parents[1] / "docs" / "models.md"


def documented(begin: str, end: str) -> dict[str, str]:
    """Model type -> the outcome the table between ``begin`` and ``end`` lists (empty where there is no table)."""
    text = DOCS.read_text()
    if begin not in text:
        return {}
    block = text[text.index(begin):text.index(end)]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| (\S+) \| ([a-z -]+) \|", block, re.MULTILINE)}


def write_block(begin: str, end: str, block: str) -> None:
    """``block`` (its markers included) in place of the table between ``begin`` and ``end``, else at the end."""
    text = DOCS.read_text()
    if begin in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOCS.write_text(text)


def export_verdicts(script: str, folders, cwd) -> dict:
    """Folder -> "ok" or what went wrong, from one subprocess that runs ``script`` (it prints ``EXPORT <folder>
    <verdict>`` for each folder it is given) with the folders' own files only, headprune blocked by the script."""
    run = subprocess.run([sys.executable, "-c", script, *map(str, folders)], capture_output=True, text=True, cwd=cwd,
                         timeout=600,
                         env={**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": str(threads_for_tests(1))})
    verdicts = {}
    for folder in folders:
        verdict = re.search(rf"^EXPORT {re.escape(str(folder))} (.*)$", run.stdout, re.MULTILINE)
        verdicts[folder] = verdict.group(1) if verdict else f"no answer ({run.stderr.strip()[-150:]})"
    return verdicts


def family_table(model_types, check_family, generic_adapter, export_check: str, tmp_path) -> dict:
    """Model type -> (outcome, why): ``check_family(type, folder)`` of every type with the family's generic adapter
    (``generic_adapter()``, a context), one thread; then the exports of those that pass loaded with headprune blocked
    (``export_verdicts`` of ``export_check``): a folder that does not load fails."""
    import torch

    results = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(threads_for_tests(1))  # tiny matrices: a second thread only waits
    try:
        with generic_adapter():
            for model_type in model_types:
                results[model_type] = check_family(model_type, tmp_path / model_type)
    finally:
        torch.set_num_threads(threads)
    exported = [tmp_path / t for t, (outcome, _) in results.items() if outcome == "passes"]
    for folder, verdict in export_verdicts(export_check, exported, tmp_path).items():
        if verdict != "ok":
            results[folder.name] = ("fails", f"export: {verdict}")
    return results


def one_line(error) -> str:
    """An error in one line of at most 200 characters: a config validator's own words, not its dataclass wrapper's."""
    cause = error.__cause__ if type(error).__name__ == "StrictDataclassClassValidationError" else None
    text = str(cause or error).strip()
    text = text.splitlines()[0] if text else type(error).__name__
    return f"{type(cause or error).__name__}: {text}"[:200]
