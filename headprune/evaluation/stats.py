"""Significance tests: a full model (system A) against an ablated or pruned one (system B).

p-value convention (compare-mt's): p = 1 - max(wins_a, wins_b) / n_resamples, the fraction of
resamples in which the system that wins more often does not win. With all resamples tied, p = 1.
"""

import math
from dataclasses import dataclass
from functools import lru_cache, partial

import numpy as np

from headprune.evaluation import metrics


@dataclass(frozen=True)
class BootstrapResult:
    score_a: float
    score_b: float
    delta: float  # score_b - score_a
    wins_a: int
    wins_b: int
    ties: int
    p_value: float
    n_resamples: int


@dataclass(frozen=True)
class TTestResult:
    t: float
    p_value: float
    mean_diff: float  # mean of (correct_b - correct_a)
    n: int


def bootstrap_p_value(wins_a: int, wins_b: int, n_resamples: int) -> float:
    """compare-mt's p-value: share of resamples the more frequent winner does not win."""
    return 1.0 - max(wins_a, wins_b) / n_resamples


def _take(seq, idx):
    """seq[idx] for arrays, a list of the selected items for any other sequence."""
    if isinstance(seq, np.ndarray):
        return seq[idx]
    return [seq[i] for i in idx]


def _check_lengths(outputs_a, outputs_b, references):
    n = len(references)
    if len(outputs_a) != n or len(outputs_b) != n:
        raise ValueError(f"lengths differ: A {len(outputs_a)}, B {len(outputs_b)}, references {n}")
    if n == 0:
        raise ValueError("no items to resample")
    return n


def paired_bootstrap(score_fn, outputs_a, outputs_b, references, n_resamples=1000, seed=0) -> BootstrapResult:
    """Paired bootstrap: score_fn(outputs, references) on the same resampled items for A and B."""
    n = _check_lengths(outputs_a, outputs_b, references)
    rng = np.random.default_rng(seed)
    wins_a = wins_b = 0
    for _ in range(n_resamples):
        idx = rng.integers(0, n, size=n)
        refs = _take(references, idx)
        a = score_fn(_take(outputs_a, idx), refs)
        b = score_fn(_take(outputs_b, idx), refs)
        wins_a += a > b
        wins_b += b > a
    score_a = float(score_fn(outputs_a, references))
    score_b = float(score_fn(outputs_b, references))
    return BootstrapResult(
        score_a=score_a,
        score_b=score_b,
        delta=score_b - score_a,
        wins_a=int(wins_a),
        wins_b=int(wins_b),
        ties=int(n_resamples - wins_a - wins_b),
        p_value=bootstrap_p_value(wins_a, wins_b, n_resamples),
        n_resamples=n_resamples,
    )


def paired_bootstrap_metric(preds_a, preds_b, labels, metric, n_resamples=1000, seed=0) -> BootstrapResult:
    """Paired bootstrap of accuracy / mcc / f1 (metrics.classification_score): what ``paired_bootstrap`` gives
    with that score, the same resamples and the same scores, from counts. Each resample's counts (correct, or
    tp/tn/fp/fn) are its count matrix times per-item 0/1 rows, and the score is computed from them once per
    resample, instead of scoring two resampled copies of the set (a comparison with 1000 resamples took 0.5 s
    of Python per head and criterion)."""
    if metric not in metrics.CLASSIFICATION_METRICS:
        raise ValueError(f"unknown classification metric {metric!r}")
    preds_a, preds_b, labels = np.asarray(preds_a), np.asarray(preds_b), np.asarray(labels)
    n = _check_lengths(preds_a, preds_b, labels)
    score_a = metrics.classification_score(metric, preds_a, labels)  # its checks, and the full-set scores
    score_b = metrics.classification_score(metric, preds_b, labels)
    rows_a, rows_b = metrics.count_rows(metric, preds_a, labels), metrics.count_rows(metric, preds_b, labels)
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ENTRIES // n)
    wins_a = wins_b = 0
    for start in range(0, n_resamples, chunk):
        rows = min(chunk, n_resamples - start)
        # one draw per resample, as paired_bootstrap makes them: a block drawn at once is another stream
        ids = np.stack([rng.integers(0, n, size=n) for _ in range(rows)])
        counts = np.bincount((ids + n * np.arange(rows)[:, None]).ravel(), minlength=rows * n).reshape(rows, n)
        for sums_a, sums_b in zip((counts @ rows_a.T).tolist(), (counts @ rows_b.T).tolist()):
            a = metrics.score_from_counts(metric, *sums_a)
            b = metrics.score_from_counts(metric, *sums_b)
            wins_a += a > b
            wins_b += b > a
    return BootstrapResult(score_a=score_a, score_b=score_b, delta=score_b - score_a, wins_a=int(wins_a),
                           wins_b=int(wins_b), ties=int(n_resamples - wins_a - wins_b),
                           p_value=bootstrap_p_value(wins_a, wins_b, n_resamples), n_resamples=n_resamples)


# Entries of the resample-by-sentence count matrix built at once (int64: 32 MiB).
_CHUNK_ENTRIES = 1 << 22


@lru_cache(maxsize=8)
def _moses_tokenized(lines: tuple, lang: str) -> tuple:
    # The pipeline compares every ablated head with the same references and full-model output:
    # remembering the last few tokenizations spares re-tokenizing those two on every call.
    return tuple(metrics.moses_tokenize(lines, lang))


@lru_cache(maxsize=8)
def _bleu_stats(refs: tuple, hyps: tuple) -> np.ndarray:
    """compare-mt's BleuScorer.cache_stats as int64 rows: ref_len, out_len, num 1-4, denom 1-4."""
    from compare_mt import scorers as cm_scorers  # pulls in nltk: slow to import, needed only here

    cached = cm_scorers.BleuScorer().cache_stats([r.split() for r in refs], [h.split() for h in hyps])
    rows = np.array([(ref_len, out_len, *(num for num, _ in prec), *(denom for _, denom in prec))
                     for ref_len, out_len, prec in cached], dtype=np.int64).reshape(len(cached), 10)
    rows.flags.writeable = False  # shared by later calls through the cache
    return rows


def _compare_mt_bleu(sums, weights, scale):
    """BleuScorer.score_cached_corpus on summed statistics, same float operations in the same order.

    Its quirks are kept: 0 when no unigram matches, an order without matches adds a log term of 0.
    """
    ref_len, out_len, *counts = sums
    num, denom = counts[:4], counts[4:]
    if num[0] == 0:
        return 0
    prec = 0
    for w, m, d in zip(weights, num, denom):
        p = m / d if d != 0 else 0
        p = math.log(p) if p > 0 else 0
        prec += p * w
    bp = min(1, math.exp(1 - ref_len / out_len)) if out_len != 0 else 0
    return scale * bp * math.exp(prec)


def paired_bootstrap_bleu(
    hyps_a, hyps_b, refs, n_resamples=1000, seed=0, tokenized=False, lang="fr", sample_ratio=1.0
) -> BootstrapResult:
    """Paired bootstrap of corpus BLEU as compare-mt (the paper's tool) does it.

    compare-mt scores whitespace-separated tokens: detokenized input (tokenized=False) is
    Moses-tokenized for `lang` first; tokenized=True means the strings are already tokenized.
    Scores are compare-mt's BLEU (0-100), equal to sacrebleu tokenize="none", smooth_method="none"
    on the same tokens unless a hypothesis has fewer than 4 tokens or an n-gram order has no match.
    sample_ratio=1.0 resamples as many items as the test set has; compare-mt's own CLI uses 0.5.

    This replays compare-mt 0.2.10's sign_utils.eval_with_paired_bootstrap with BleuScorer,
    vectorized: BleuScorer.cache_stats per sentence, the same resample ids (np.random.choice after
    np.random.seed(seed), drawn here from a private RandomState so numpy's global state is left
    alone), integer sums of the statistics per resample, and score_cached_corpus's float
    arithmetic. Tests check scores and win counts identical to compare-mt's own.
    """
    from compare_mt import scorers as cm_scorers

    n = _check_lengths(hyps_a, hyps_b, refs)
    hyps_a, hyps_b, refs = tuple(hyps_a), tuple(hyps_b), tuple(refs)
    if not tokenized:
        hyps_a, hyps_b, refs = (_moses_tokenized(lines, lang) for lines in (hyps_a, hyps_b, refs))
    stats_a, stats_b = _bleu_stats(refs, hyps_a), _bleu_stats(refs, hyps_b)

    scorer = cm_scorers.BleuScorer()
    bleu = partial(_compare_mt_bleu, weights=scorer.weights, scale=scorer.scale)
    score_a = float(bleu(stats_a.sum(axis=0).tolist()))
    score_b = float(bleu(stats_b.sum(axis=0).tolist()))

    # compare-mt draws each resample with np.random.choice(ids, size=int(n * sample_ratio)); the
    # legacy RandomState's draws are a plain stream, so drawing a block of resamples at once
    # gives the same ids in the same order.
    rng = np.random.RandomState(seed)
    sample_size = int(n * sample_ratio)
    chunk = max(1, _CHUNK_ENTRIES // max(n, sample_size, 1))
    wins_a = wins_b = 0
    for start in range(0, n_resamples, chunk):
        rows = min(chunk, n_resamples - start)
        ids = rng.choice(n, size=(rows, sample_size), replace=True)
        # How often each sentence was drawn, per resample: the summed statistics are then
        # counts @ stats, exact in int64.
        counts = np.bincount((ids + n * np.arange(rows)[:, None]).ravel(), minlength=rows * n).reshape(rows, n)
        for sums_a, sums_b in zip((counts @ stats_a).tolist(), (counts @ stats_b).tolist()):
            a, b = bleu(sums_a), bleu(sums_b)
            wins_a += a > b
            wins_b += a < b

    # compare-mt also counts "ties", but its third entry counts A's wins too (an if/else bug):
    # ties are what neither system wins.
    return BootstrapResult(
        score_a=score_a,
        score_b=score_b,
        delta=score_b - score_a,
        wins_a=wins_a,
        wins_b=wins_b,
        ties=n_resamples - wins_a - wins_b,
        p_value=bootstrap_p_value(wins_a, wins_b, n_resamples),
        n_resamples=n_resamples,
    )


def paired_t_test(correct_a, correct_b) -> TTestResult:
    """Two-sided paired t-test on per-example correctness (0/1) of systems A and B.

    t is computed on the differences B - A, so t > 0 means B is more accurate
    (scipy.stats.ttest_rel(correct_b, correct_a) gives the same t and p).
    """
    a = np.asarray(correct_a, dtype=float)
    b = np.asarray(correct_b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"correct_a {a.shape} and correct_b {b.shape} must be 1-D and the same length")
    n = a.size
    if n < 2:
        raise ValueError("a paired t-test needs at least 2 items")
    diff = b - a
    mean_diff = float(diff.mean())
    sd = float(diff.std(ddof=1))
    if sd == 0.0:
        # Constant differences: no evidence of a difference if they are all 0, certainty otherwise.
        if mean_diff == 0.0:
            return TTestResult(t=0.0, p_value=1.0, mean_diff=0.0, n=n)
        return TTestResult(t=float(np.copysign(np.inf, mean_diff)), p_value=0.0, mean_diff=mean_diff, n=n)
    from scipy import stats as scipy_stats  # 0.8 s to import: only where a test is run, not in every job

    t = mean_diff / (sd / np.sqrt(n))
    p_value = 2.0 * scipy_stats.t.sf(abs(t), df=n - 1)
    return TTestResult(t=float(t), p_value=float(p_value), mean_diff=mean_diff, n=n)


def significant(p_value: float, alpha: float = 0.01) -> bool:
    """True when p_value < alpha (the paper uses alpha = 0.01)."""
    return bool(p_value < alpha)


@dataclass(frozen=True)
class Correlation:
    r: float
    p_value: float
    n: int


def pearson(x, y) -> Correlation:
    """Pearson's r with the two-sided p-value of the t-test for r = 0 (n - 2 degrees of freedom)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 3:
        raise ValueError(f"pearson needs two equally long series of at least 3 values, got {x.shape} and {y.shape}")
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt((dx ** 2).sum() * (dy ** 2).sum())
    if denominator == 0:
        return Correlation(float("nan"), float("nan"), len(x))
    r = float(np.clip((dx * dy).sum() / denominator, -1.0, 1.0))
    n = len(x)
    if abs(r) == 1.0:
        return Correlation(r, 0.0, n)
    from scipy import stats as scipy_stats

    t = r * np.sqrt((n - 2) / (1 - r ** 2))
    return Correlation(r, float(2 * scipy_stats.t.sf(abs(t), n - 2)), n)
