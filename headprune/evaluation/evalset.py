"""``EvalSet``: a test set and how it is scored. Below both the kinds of score (``headprune.evaluation.kinds``:
each builds its evaluation sets) and the runs that evaluate them (``headprune.evaluation.runs``)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EvalSet:
    """A test set and how it is scored (see also ``evalset_from_text`` and ``evalset_from_tsv``).

    >>> evalset = EvalSet("classification", [1, 0], [("good film", ""), ("bad film", "")], "accuracy")
    >>> len(evalset)
    2
    """

    kind: str  # a kind of score (headprune.evaluation.kinds): "translation", "classification", ...
    references: list  # reference translations, gold labels, the token windows, or the needles' values
    sources: list = field(default_factory=list)  # source sentences, (text_a, text_b) pairs, token windows, or items
    metric: str = "bleu"  # bleu | accuracy | mcc | f1 | perplexity | retrieval
    lang: str = "fr"  # target language (tokenized BLEU)
    task: object = None  # what a kind needs beside the items: an lm-evaluation-harness task (lm_eval)

    def __len__(self):
        return len(self.references)
