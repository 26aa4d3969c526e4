"""The models (rules/checkpoints.smk): the translation checkpoint, BERT and each models entry, fetched from
their sources."""
from __future__ import annotations


def fetch_params(study):
    """A models entry's source (hub or URL, revision, checksum): what reruns its fetch when it changes."""
    return study.entry["source"]
