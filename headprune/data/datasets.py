"""Download the study's data once, under data/.

Translation: the WMT newstest sets (wmt09..wmt14, en-fr) and MTNT come through sacrebleu's own
test-set registry (`sacrebleu.dataset.DATASETS`), which knows their URLs, checks their md5 and
parses their formats (SGML, TSV). `fetch_sacrebleu_testset` writes source and reference as plain
text, one sentence per line.

Plain text files one line each (`read_lines`, `write_lines`, written atomically), a seeded `subset`, and
`DataFormatError` for a file that is not what it should be. GLUE tasks: headprune.data.glue.
"""

from __future__ import annotations

import contextlib
import copy
import os
import random
import warnings
from pathlib import Path
from typing import Iterable, Iterator, TextIO

from headprune.io.atomic import atomic_path
from headprune.io.download import DownloadError, file_digest

__all__ = ["DataFormatError", "MTNT_TESTSET", "fetch_sacrebleu_testset", "read_lines", "subset", "write_lines"]


class DataFormatError(ValueError):
    """A data file does not have the layout its task says; the message names file and line."""


# ---------------------------------------------------------------------------------------------
# Plain text, one sentence per line
# ---------------------------------------------------------------------------------------------


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a UTF-8 file without their trailing newline; nothing else is stripped.

    Only "\\n" ends a line (no universal newlines), so a stray "\\r" or U+2028 inside a
    sentence cannot shift the alignment between a source file and its reference.
    """
    with open(path, encoding="utf-8", newline="\n") as stream:
        return [line[:-1] if line.endswith("\n") else line for line in stream]


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> int:
    """Write one string per line (UTF-8, "\\n" endings), atomically; return the line count."""
    lines = list(lines)
    for number, line in enumerate(lines, start=1):
        if "\n" in line or "\r" in line:
            raise ValueError(f"{path}: line {number} contains a line break: {line!r}")
    with _atomic_text_writer(path) as stream:
        for line in lines:
            stream.write(line + "\n")
    return len(lines)


@contextlib.contextmanager
def _atomic_text_writer(path: str | os.PathLike) -> Iterator[TextIO]:
    """Open a temporary file next to `path` and rename it onto `path` only on success, so
    that an interrupted run never leaves a truncated output that looks finished."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8", newline="\n") as stream:
        yield stream


# ---------------------------------------------------------------------------------------------
# WMT and MTNT through sacrebleu
# ---------------------------------------------------------------------------------------------

# MTNT (Michel and Neubig, 2018), the paper's out-of-domain MT test set (Section 3.4), is
# registered in sacrebleu 2.6.0 as "mtnt1.1/test" (the MTNT.1.1 release; en-fr, fr-en, en-ja,
# ja-en). "mtnt2019" is the later WMT19 robustness task test set, not the one in the paper.
MTNT_TESTSET = "mtnt1.1/test"


def fetch_sacrebleu_testset(
    testset: str,
    langpair: str,
    src_out: str | os.PathLike,
    ref_out: str | os.PathLike,
    *,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[int, int]:
    """Download `testset` (e.g. "wmt13", "mtnt1.1/test") for `langpair` (e.g. "en-fr") with
    sacrebleu and write its source and reference, one sentence per line.

    sacrebleu keeps its downloads in `cache_dir/<testset>` when `cache_dir` is given, otherwise
    in its usual cache ($SACREBLEU, default ~/.sacrebleu; read when sacrebleu is imported).
    Each line is stripped of surrounding whitespace, as sacrebleu's own `source()` does.
    Where a set has several references, the first is written (with a warning).
    Returns (source lines, reference lines), which are equal.
    """
    from sacrebleu.dataset import DATASETS

    if testset not in DATASETS:
        raise ValueError(f"sacrebleu has no test set {testset!r}")
    dataset = DATASETS[testset]
    if langpair not in dataset.langpairs:
        raise ValueError(
            f"sacrebleu test set {testset} has no language pair {langpair!r}; "
            f"it has {', '.join(sorted(dataset.langpairs))}"
        )
    if cache_dir is not None:
        dataset = _dataset_cached_in(dataset, Path(cache_dir))

    urls = ", ".join(dataset.data or [])
    try:
        source_file = dataset.get_source_file(langpair)
        reference_files = dataset.get_reference_files(langpair)
    except SystemExit:
        # sacrebleu calls sys.exit() when a download has the wrong md5 (or on an SSL error),
        # after logging why. Turn that into an exception, and delete the bad archive: sacrebleu
        # would otherwise find it next time and use it without checking again.
        _delete_archives_with_wrong_md5(dataset)
        raise DownloadError(
            f"sacrebleu could not download test set {testset} from {urls} "
            "(wrong md5 or SSL error; sacrebleu logged the details)"
        ) from None
    except OSError as error:  # urllib's URLError and HTTPError are OSErrors
        message = f"could not download test set {testset} from {urls}: {error}"
        raise DownloadError(message) from error

    if len(reference_files) > 1:
        warnings.warn(
            f"test set {testset} {langpair} has {len(reference_files)} references; "
            f"writing only the first ({reference_files[0]})",
            stacklevel=2,
        )
    sources = [line.strip() for line in read_lines(source_file)]
    references = [line.strip() for line in read_lines(reference_files[0])]
    if len(sources) != len(references):
        raise DataFormatError(
            f"test set {testset} {langpair}: {len(sources)} source lines ({source_file}) but "
            f"{len(references)} reference lines ({reference_files[0]})"
        )
    if not sources:
        raise DataFormatError(f"test set {testset} {langpair} is empty ({source_file})")
    return write_lines(src_out, sources), write_lines(ref_out, references)


def _dataset_cached_in(dataset, cache_dir: Path):
    """A copy of a sacrebleu dataset that downloads and processes under `cache_dir`.

    sacrebleu fixes each dataset's folders from $SACREBLEU when it is imported; a copy with
    other folders leaves the shared registry untouched."""
    if not (hasattr(dataset, "_outdir") and hasattr(dataset, "_rawdir")):
        raise RuntimeError(
            "this sacrebleu version lays out its cache differently; call with cache_dir=None "
            "and set $SACREBLEU before importing sacrebleu instead"
        )
    cached = copy.copy(dataset)
    cached._outdir = os.path.join(cache_dir, dataset.name)
    cached._rawdir = os.path.join(cached._outdir, "raw")
    return cached


def _delete_archives_with_wrong_md5(dataset) -> None:
    expected_md5s = dataset.md5 or [None] * len(dataset.data)
    for url, expected_md5 in zip(dataset.data, expected_md5s):
        archive = Path(dataset._rawdir) / dataset._get_tarball_filename(url)
        if expected_md5 and archive.exists() and file_digest(archive, "md5") != expected_md5:
            archive.unlink()


def subset(items: list, max_items: int | None, seed: int = 0) -> list:
    """A seeded random subset (in original order), or everything."""
    if max_items is None or max_items >= len(items):
        return items
    keep = sorted(random.Random(seed).sample(range(len(items)), max_items))
    return [items[i] for i in keep]
