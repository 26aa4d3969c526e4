"""Task metrics: GLUE classification scores and the two BLEU variants the paper reports; each metric's class
(``METRICS``): which way is better, how the figures show it and what one point of it is.

sacrebleu and sacremoses are imported where BLEU is computed (sacremoses takes most of a second): every
job that scores or plots imports this module, most never compute BLEU."""

from functools import lru_cache
from typing import ClassVar

import numpy as np

from headprune.io.registry import Registry


class Metric:
    """A score's metric, as the CSVs' ``metric`` column names it: one class each, registered in ``METRICS`` by
    that word. The figures, the tables and the scorecard read these and never compare a metric's word."""

    label: ClassVar[str]  # as figures write it on an axis: "BLEU", "accuracy"
    scale: ClassVar[float] = 1.0  # a displayed value is the raw score times this
    unit: ClassVar[str] = ""  # the suffix of a displayed value or an axis label; "" for none
    # One point in the units of the CSVs' score and delta columns (the scorecard's thresholds), and how the
    # scorecard writes a value in points; a lower-is-better metric has no absolute scale: C3 reads its point as 1% of
    # the unpruned score (scorecard.points_worse)
    point: ClassVar[float] = 0.01
    point_unit: ClassVar[str]
    better: ClassVar[int] = 1  # +1 where a higher score is better, -1 where lower is (a perplexity)
    classification: ClassVar[bool] = False  # a GLUE task's score from predicted and gold labels


METRICS: Registry[type[Metric]] = Registry("metric", base=Metric)


@METRICS.register("bleu")
class Bleu(Metric):
    label, point, point_unit = "BLEU", 1.0, " BLEU"


@METRICS.register("accuracy")
class Accuracy(Metric):
    label, scale, unit, point_unit, classification = "accuracy", 100.0, "%", "% accuracy", True


@METRICS.register("mcc")
class Mcc(Metric):
    """Matthews' correlation (CoLA), in [-1, 1]: shown x100, not as a percentage."""
    label, scale, unit, point_unit, classification = "MCC", 100.0, "x100", " MCC x100", True


@METRICS.register("f1")
class F1(Metric):
    label, scale, unit, point_unit, classification = "F1", 100.0, "%", "% F1", True


@METRICS.register("perplexity")
class Perplexity(Metric):
    """Lower is better: a positive change is a loss."""
    label, point, point_unit, better = "perplexity", 1.0, " PPL", -1


@METRICS.register("retrieval")
class Retrieval(Metric):
    """A needle-in-a-haystack task's share of the needles retrieved (headprune.evaluation.kinds.retrieval)."""
    label, point_unit = "retrieval", "% retrieved"


def _lm_eval_lower(word: str) -> type[Metric]:
    """lm-evaluation-harness's lower-is-better metrics beside perplexity (its higher_is_better says so; the lm_eval
    kind checks a task's metric against these), shown under their own names."""
    return type(word, (Metric,), {"label": word, "point": 1.0, "point_unit": f" {word}", "better": -1,
                                  "__module__": __name__, "__doc__": _lm_eval_lower.__doc__})


for _word in ("word_perplexity", "byte_perplexity", "bits_per_byte"):
    METRICS.add(_word, _lm_eval_lower(_word))


def metric_of(word: str) -> type[Metric]:
    """The metric called ``word``; another (a metric of an lm-evaluation-harness task: acc, acc_norm, exact_match,
    ...) is higher-is-better, shown as is under its own name, one point of it 1% (a share)."""
    if word in METRICS:
        return METRICS[word]
    return type(str(word), (Metric,), {"label": word, "point_unit": f"% {word}", "__module__": __name__})


CLASSIFICATION_METRICS = tuple(word for word, metric in METRICS.items() if metric.classification)
LOWER_IS_BETTER = frozenset(word for word, metric in METRICS.items() if metric.better < 0)


def better_sign(metric: str) -> int:
    """+1 where a higher score is better (BLEU, accuracy, MCC, F1, retrieval accuracy), -1 where lower is
    (perplexity): ``sign * score`` ranks any metric best-last, and ``sign * delta`` is positive for an
    improvement."""
    return metric_of(metric).better


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
    two rows (correct, and 1 for the item) for accuracy, four (tp, tn, fp, fn) for mcc and f1. A resampled set's
    counts are then a weighted sum (the bootstrap's count matrix times these rows)."""
    pred = np.asarray(predictions)
    gold = np.asarray(labels)
    if metric == "accuracy":
        return np.stack([pred == gold, np.ones(pred.shape, dtype=bool)]).astype(np.int64)
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
