"""WikiText-2 (Merity et al., 2016), the usual perplexity corpus of causal LMs, from the files its hosts
publish: the original zip (``wikitext-2-raw-v1.zip``, member ``wikitext-2-raw/wiki.test.raw``), a
plain ``.raw``/``.txt`` file, or Hugging Face's parquet split (``Salesforce/wikitext``,
``wikitext-2-raw-v1/test-*.parquet``, one row per line; reading it needs pyarrow).

The usual protocol joins the test split's lines with blank lines ("\\n\\n".join(rows)) and tokenizes
the result once; the raw file is that text already (its lines are separated by blank lines), so
both sources give the same text up to the blank lines at the ends.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

from headprune.data.datasets import DataFormatError
from headprune.data.download import fetch

SPLIT_MEMBERS = {"test": "wiki.test.raw", "validation": "wiki.valid.raw", "train": "wiki.train.raw"}


def read_wikitext(path, split: str = "test") -> str:
    """The text of one split, as the protocol tokenizes it."""
    path = Path(path)
    if split not in SPLIT_MEMBERS:
        raise ValueError(f"WikiText split must be one of {sorted(SPLIT_MEMBERS)}, got {split!r}")
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            members = [n for n in archive.namelist() if n.endswith("/" + SPLIT_MEMBERS[split])
                       or n == SPLIT_MEMBERS[split]]
            if not members:
                raise DataFormatError(f"{path}: no {SPLIT_MEMBERS[split]} in the archive")
            return archive.read(members[0]).decode("utf-8")
    if path.suffix == ".parquet":
        import pandas as pd

        try:
            rows = pd.read_parquet(path, columns=["text"])["text"].tolist()
        except ImportError as error:
            raise ImportError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from error
        return "\n\n".join(rows)
    return path.read_text(encoding="utf-8")


def fetch_wikitext(url: str, dest, sha256: str | None = None, split: str = "test") -> str:
    """Download (resumable, checksum when given) and read one split."""
    return read_wikitext(fetch(url, dest, sha256), split)
