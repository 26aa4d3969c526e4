"""Task metrics: GLUE classification scores and the two BLEU variants the paper reports; which way is better.

sacrebleu and sacremoses are imported where BLEU is computed (sacremoses takes most of a second): every
job that scores or plots imports this module, most never compute BLEU."""

from functools import lru_cache

import numpy as np

CLASSIFICATION_METRICS = ("accuracy", "mcc", "f1")
# lm-evaluation-harness's lower-is-better metrics beside perplexity (its higher_is_better says so; the
# lm_eval kind checks a task's metric against this set)
LOWER_IS_BETTER = frozenset({"perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte"})


def better_sign(metric: str) -> int:
    """+1 where a higher score is better (BLEU, accuracy, MCC, F1, retrieval accuracy), -1 where lower is
    (perplexity): ``sign * score`` ranks any metric best-last, and ``sign * delta`` is positive for an
    improvement."""
    return -1 if metric in LOWER_IS_BETTER else 1


def _binary_counts(predictions, labels):
    """Confusion-matrix counts (tp, tn, fp, fn) for 0/1 predictions and labels."""
    pred = np.asarray(predictions)
    gold = np.asarray(labels)
    for name, values in (("predictions", pred), ("labels", gold)):
        if not np.isin(values, (0, 1)).all():
            raise ValueError(f"{name} must be 0/1 for a binary metric")
    pred = pred.astype(bool)
    gold = gold.astype(bool)
    tp = int(np.sum(pred & gold))
    tn = int(np.sum(~pred & ~gold))
    fp = int(np.sum(pred & ~gold))
    fn = int(np.sum(~pred & gold))
    return tp, tn, fp, fn


def classification_score(metric: str, predictions, labels) -> float:
    """Score predictions against labels with "accuracy", "mcc" (CoLA) or "f1" (MRPC, class 1).

    >>> [round(classification_score(m, [1, 0, 1, 1], [1, 0, 0, 1]), 3) for m in ("accuracy", "f1", "mcc")]
    [0.75, 0.8, 0.577]
    """
    if metric not in CLASSIFICATION_METRICS:
        raise ValueError(f"unknown classification metric {metric!r}; expected one of {CLASSIFICATION_METRICS}")
    pred = np.asarray(predictions)
    gold = np.asarray(labels)
    if pred.shape != gold.shape or pred.ndim != 1:
        raise ValueError(f"predictions {pred.shape} and labels {gold.shape} must be 1-D and the same length")
    if pred.size == 0:
        raise ValueError("cannot score an empty set of predictions")

    if metric == "accuracy":
        return float(np.mean(pred == gold))
    return score_from_counts(metric, *_binary_counts(pred, gold))


def count_rows(metric: str, predictions, labels) -> np.ndarray:
    """Per-item 0/1 rows whose sums over a set of items are what ``score_from_counts`` takes for ``metric``:
    one row (correct) for accuracy, four (tp, tn, fp, fn) for mcc and f1. A resampled set's counts are then
    a weighted sum (the bootstrap's count matrix times these rows)."""
    pred = np.asarray(predictions)
    gold = np.asarray(labels)
    if metric == "accuracy":
        return (pred == gold)[None].astype(np.int64)
    _binary_counts(pred, gold)  # the 0/1 checks
    pred, gold = pred.astype(bool), gold.astype(bool)
    return np.stack([pred & gold, ~pred & ~gold, pred & ~gold, ~pred & gold]).astype(np.int64)


def score_from_counts(metric: str, *counts: int) -> float:
    """``classification_score`` from the sums of ``count_rows``: accuracy from (correct, items), mcc and f1
    from (tp, tn, fp, fn), with the same arithmetic."""
    if metric == "accuracy":
        correct, items = counts
        return float(correct / items)
    tp, tn, fp, fn = (int(count) for count in counts)
    if metric == "mcc":
        # Python ints: the product of four counts can overflow int64 on large sets.
        denom = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
        # A constant prediction or label vector has no correlation: 0, as GLUE/sklearn report it.
        return 0.0 if denom == 0 else float((tp * tn - fp * fn) / np.sqrt(float(denom)))
    # f1 of the positive class; no positive predicted nor present -> 0 (sklearn's zero_division).
    denom = 2 * tp + fp + fn
    return 0.0 if denom == 0 else 2 * tp / denom


@lru_cache(maxsize=None)
def _moses(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def moses_tokenize(lines, lang: str) -> list[str]:
    """Moses-tokenize each line (no XML escaping), as fairseq's WMT preprocessing does."""
    tokenizer = _moses(lang)
    return [tokenizer.tokenize(line, escape=False, return_str=True) for line in lines]


def _check_parallel(hypotheses, references):
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def bleu_detokenized(hypotheses: list[str], references: list[str]) -> float:
    """sacrebleu corpus BLEU (13a tokenization, default exp smoothing) on detokenized text.

    >>> round(bleu_detokenized(["the cat sat on the mat ."], ["the cat sat on the mat ."]), 2)
    100.0
    """
    import sacrebleu

    _check_parallel(hypotheses, references)
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)], tokenize="13a").score)


def bleu_tokenized(hypotheses: list[str], references: list[str], lang: str) -> float:
    """"Tokenized BLEU" of fairseq's pruning script: Moses-tokenize both sides, BLEU on the tokens.

    >>> round(bleu_tokenized(["le chat est assis sur le tapis."], ["le chat est assis sur le tapis."], "fr"), 2)
    100.0
    """
    import sacrebleu

    _check_parallel(hypotheses, references)
    hyps = moses_tokenize(hypotheses, lang)
    refs = moses_tokenize(references, lang)
    return float(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score)
