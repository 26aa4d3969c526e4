"""Significance tests: a full model (system A) against an ablated or pruned one (system B).

p-value convention (compare-mt's): p = 1 - max(wins_a, wins_b) / n_resamples, the fraction of
resamples in which the system that wins more often does not win. With all resamples tied, p = 1.
"""

import contextlib
import io
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy import stats as scipy_stats

from headprune import metrics


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
    """Paired bootstrap of accuracy / mcc / f1 (metrics.classification_score)."""
    if metric not in metrics.CLASSIFICATION_METRICS:
        raise ValueError(f"unknown classification metric {metric!r}")
    score_fn = partial(metrics.classification_score, metric)
    return paired_bootstrap(
        score_fn, np.asarray(preds_a), np.asarray(preds_b), np.asarray(labels), n_resamples=n_resamples, seed=seed
    )


def paired_bootstrap_bleu(
    hyps_a, hyps_b, refs, n_resamples=1000, seed=0, tokenized=False, lang="fr", sample_ratio=1.0
) -> BootstrapResult:
    """Paired bootstrap of corpus BLEU with compare-mt (the paper's tool).

    compare-mt scores whitespace-separated tokens: detokenized input (tokenized=False) is
    Moses-tokenized for `lang` first; tokenized=True means the strings are already tokenized.
    Scores are compare-mt's BLEU (0-100), equal to sacrebleu tokenize="none", smooth_method="none"
    on the same tokens unless a hypothesis has fewer than 4 tokens or an n-gram order has no match.
    sample_ratio=1.0 resamples as many items as the test set has; compare-mt's own CLI uses 0.5.
    """
    # Imported here: compare-mt pulls in nltk, slow to import and needed only for this test.
    from compare_mt import scorers as cm_scorers
    from compare_mt import sign_utils

    n = _check_lengths(hyps_a, hyps_b, refs)
    if not tokenized:
        hyps_a = metrics.moses_tokenize(hyps_a, lang)
        hyps_b = metrics.moses_tokenize(hyps_b, lang)
        refs = metrics.moses_tokenize(refs, lang)
    ref_tok = [line.split() for line in refs]
    outs = [[line.split() for line in hyps_a], [line.split() for line in hyps_b]]

    scorer = cm_scorers.BleuScorer()
    score_a = float(scorer.score_corpus(ref_tok, outs[0])[0])
    score_b = float(scorer.score_corpus(ref_tok, outs[1])[0])

    # compare-mt draws from numpy's global RandomState: seed it for reproducibility and put the
    # caller's state back afterwards. Its stdout is silenced in case a version prints.
    saved_state = np.random.get_state()
    np.random.seed(seed)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            win_ratios, _ = sign_utils.eval_with_paired_bootstrap(
                ref_tok, outs, [None] * n, scorer,
                compare_directions=[(0, 1)], num_samples=n_resamples, sample_ratio=sample_ratio,
            )
    finally:
        np.random.set_state(saved_state)

    # compare-mt returns ratios [A wins, B wins, "ties"]; its third entry also counts A's wins
    # (an if/else bug), so ties are recomputed from the two win counts.
    wins_a = round(win_ratios[0][0] * n_resamples)
    wins_b = round(win_ratios[0][1] * n_resamples)
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
    t = r * np.sqrt((n - 2) / (1 - r ** 2))
    return Correlation(r, float(2 * scipy_stats.t.sf(abs(t), n - 2)), n)
