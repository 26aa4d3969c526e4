"""A registry test's table of outcomes in docs/models.md, between its two markers: what the docs say of each model
type, and the table rewritten (HEADPRUNE_WRITE_MODELS_TABLE=1)."""
from __future__ import annotations

import re
from pathlib import Path

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
