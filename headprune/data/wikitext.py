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
from headprune.io.atomic import atomic_dir
from headprune.io.download import fetch

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


def prepare_corpus(spec: dict, raw_dir, out_dir) -> dict:
    """Fetch a corpus (config ``corpora.<name>``) into ``raw_dir`` and write each split as
    ``out_dir/<split>.txt``, the text the protocol tokenizes. ``spec``: ``url`` (+ ``sha256``) of WikiText's
    zip with ``splits`` to read from it, or ``files``: one file per split (Hugging Face's parquet splits,
    .raw/.txt files). Written to a sibling and renamed, so a half-written folder never appears.
    Returns the characters per split."""
    if "files" in spec:
        sources = {split: (f["url"], f.get("sha256")) for split, f in spec["files"].items()}
    else:
        splits = list(spec.get("splits", ["train", "validation", "test"]))
        if not spec["url"].split("?")[0].endswith(".zip") and len(splits) != 1:
            raise ValueError(f"corpus {spec['url']}: a single file is one split, but splits lists {splits}: "
                             "give files: {split: {url: ...}} for one file per split")
        sources = {split: (spec["url"], spec.get("sha256")) for split in splits}
    sizes = {}
    with atomic_dir(out_dir) as staging:
        for split, (url, sha256) in sources.items():
            name = url.split("?")[0].rstrip("/").rsplit("/", 1)[-1] or f"{split}.txt"
            text = read_wikitext(fetch(url, Path(raw_dir) / name, sha256), split)
            (staging / f"{split}.txt").write_text(text, encoding="utf-8")
            sizes[split] = len(text)
    return sizes
