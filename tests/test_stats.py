import itertools
import math
from collections import Counter

import numpy as np
import pytest
import sacrebleu
from scipy import stats as scipy_stats

from headprune.evaluation import metrics, stats


# ---------------------------------------------------------------- paired t-test

@pytest.mark.parametrize("seed", range(8))
def test_t_test_matches_scipy_on_correctness_vectors(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 500))
    a = (rng.random(n) < 0.8).astype(int)
    b = np.where(rng.random(n) < 0.1, 1 - a, a)
    if np.array_equal(a, b):
        b[0] = 1 - b[0]
    result = stats.paired_t_test(a, b)
    # our t is on B - A: scipy's ttest_rel(b, a)
    expected = scipy_stats.ttest_rel(b, a)
    assert result.n == n
    assert result.mean_diff == pytest.approx(np.mean(b - a), abs=1e-15)
    assert result.t == pytest.approx(expected.statistic, abs=1e-10)
    assert result.p_value == pytest.approx(expected.pvalue, abs=1e-10)


def test_t_test_matches_scipy_on_continuous_data():
    rng = np.random.default_rng(42)
    a = rng.normal(size=50)
    b = a + rng.normal(0.2, 1.0, size=50)
    expected = scipy_stats.ttest_rel(b, a)
    result = stats.paired_t_test(a, b)
    assert result.t == pytest.approx(expected.statistic, abs=1e-10)
    assert result.p_value == pytest.approx(expected.pvalue, abs=1e-10)


def test_t_test_zero_variance():
    same = stats.paired_t_test([1, 0, 1, 1], [1, 0, 1, 1])
    assert (same.t, same.p_value, same.mean_diff, same.n) == (0.0, 1.0, 0.0, 4)
    better = stats.paired_t_test([0, 0, 0], [1, 1, 1])
    assert better.t == math.inf and better.p_value == 0.0 and better.mean_diff == 1.0
    worse = stats.paired_t_test([1, 1, 1], [0, 0, 0])
    assert worse.t == -math.inf and worse.p_value == 0.0


def test_t_test_rejects_bad_input():
    with pytest.raises(ValueError):
        stats.paired_t_test([1], [0])
    with pytest.raises(ValueError):
        stats.paired_t_test([1, 0], [0, 1, 1])


def test_significant():
    assert stats.significant(0.009)
    assert not stats.significant(0.01)
    assert stats.significant(0.04, alpha=0.05)


# ------------------------------------------------------- paired bootstrap (ours)

def _exact_win_probabilities(score_fn, out_a, out_b, refs):
    """Enumerate all n^n resamples: exact P(A wins), P(B wins)."""
    n = len(refs)
    win_a = win_b = 0
    for idx in itertools.product(range(n), repeat=n):
        idx = np.array(idx)
        a = score_fn(out_a[idx], refs[idx])
        b = score_fn(out_b[idx], refs[idx])
        win_a += a > b
        win_b += b > a
    return win_a / n**n, win_b / n**n


LABELS = np.array([1, 0, 1, 1, 0])
PREDS_A = np.array([1, 0, 0, 1, 1])  # 3/5 correct
PREDS_B = np.array([1, 1, 1, 1, 0])  # 4/5 correct


@pytest.mark.parametrize("metric", ["accuracy", "f1", "mcc"])
def test_bootstrap_matches_exact_enumeration(metric):
    score_fn = lambda p, g: metrics.classification_score(metric, p, g)  # noqa: E731
    p_a, p_b = _exact_win_probabilities(score_fn, PREDS_A, PREDS_B, LABELS)
    n_resamples = 20000
    result = stats.paired_bootstrap_metric(PREDS_A, PREDS_B, LABELS, metric, n_resamples=n_resamples, seed=3)
    for observed, exact in ((result.wins_a, p_a), (result.wins_b, p_b)):
        se = math.sqrt(exact * (1 - exact) / n_resamples)
        assert abs(observed / n_resamples - exact) < 4 * se + 1e-12
    assert result.wins_a + result.wins_b + result.ties == n_resamples
    exact_p = 1 - max(p_a, p_b)
    assert result.p_value == pytest.approx(exact_p, abs=4 * math.sqrt(exact_p * (1 - exact_p) / n_resamples))
    assert result.score_a == metrics.classification_score(metric, PREDS_A, LABELS)
    assert result.score_b == metrics.classification_score(metric, PREDS_B, LABELS)
    assert result.delta == pytest.approx(result.score_b - result.score_a)


def test_bootstrap_hand_worked_dominating_system():
    # B is right wherever A is, plus item 0. A resample ties iff it misses item 0:
    # P(tie) = (2/3)^3 = 8/27, P(B wins) = 19/27, P(A wins) = 0, so p = 8/27.
    correct_a = np.array([0, 1, 1])
    correct_b = np.array([1, 1, 1])
    refs = np.zeros(3)
    score_fn = lambda out, ref: float(np.mean(out))  # noqa: E731
    n_resamples = 20000
    result = stats.paired_bootstrap(score_fn, correct_a, correct_b, refs, n_resamples=n_resamples, seed=0)
    assert result.wins_a == 0
    se = math.sqrt((8 / 27) * (19 / 27) / n_resamples)
    assert abs(result.p_value - 8 / 27) < 4 * se
    assert result.ties == n_resamples - result.wins_b
    assert result.delta == pytest.approx(1 / 3)


def test_bootstrap_all_ties_gives_p_one():
    result = stats.paired_bootstrap_metric(PREDS_A, PREDS_A.copy(), LABELS, "accuracy", n_resamples=200)
    assert (result.wins_a, result.wins_b, result.ties) == (0, 0, 200)
    assert result.p_value == 1.0
    assert result.delta == 0.0
    assert not stats.significant(result.p_value)


def test_p_value_convention():
    # fraction of resamples in which the more frequent winner does not win
    assert stats.bootstrap_p_value(wins_a=995, wins_b=3, n_resamples=1000) == pytest.approx(0.005)
    assert stats.bootstrap_p_value(wins_a=3, wins_b=995, n_resamples=1000) == pytest.approx(0.005)
    assert stats.bootstrap_p_value(wins_a=0, wins_b=0, n_resamples=1000) == 1.0


def test_bootstrap_is_reproducible_and_works_on_lists():
    refs = ["a", "b", "c", "d", "e", "f"]
    out_a = ["a", "x", "c", "d", "x", "f"]
    out_b = ["a", "b", "x", "d", "e", "f"]
    score_fn = lambda out, ref: sum(o == r for o, r in zip(out, ref)) / len(ref)  # noqa: E731
    first = stats.paired_bootstrap(score_fn, out_a, out_b, refs, n_resamples=300, seed=7)
    again = stats.paired_bootstrap(score_fn, out_a, out_b, refs, n_resamples=300, seed=7)
    other = stats.paired_bootstrap(score_fn, out_a, out_b, refs, n_resamples=300, seed=8)
    assert first == again
    assert (first.wins_a, first.wins_b) != (other.wins_a, other.wins_b)


def test_bootstrap_rejects_length_mismatch_and_unknown_metric():
    with pytest.raises(ValueError):
        stats.paired_bootstrap(lambda o, r: 0.0, [1, 2], [1], [1, 2])
    with pytest.raises(ValueError, match="bleurt"):
        stats.paired_bootstrap_metric([1], [1], [1], "bleurt")


# ------------------------------------------------------- BLEU with compare-mt

def _synthetic_corpus(n_sent=30, seed=0):
    """Whitespace-tokenized refs and two noisy systems (B with a higher substitution rate than A).

    Every hypothesis has >= 4 tokens and keeps its first 4 tokens, so every resample has a
    match at every n-gram order: compare-mt's BLEU and unsmoothed sacrebleu then agree.
    """
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(40)]

    def corrupt(tokens, rate):
        return [t if i < 4 or rng.random() >= rate else "oov" for i, t in enumerate(tokens)]

    refs, hyps_a, hyps_b = [], [], []
    for _ in range(n_sent):
        ref = list(rng.choice(vocab, size=int(rng.integers(6, 14))))
        refs.append(" ".join(ref))
        hyps_a.append(" ".join(corrupt(ref, 0.25)))
        hyps_b.append(" ".join(corrupt(ref, 0.30)[: len(ref) - int(rng.integers(0, 2))]))
    return hyps_a, hyps_b, refs


def _sentence_stats(hyp, ref):
    """(hyp_len, ref_len, matches[1..4], totals[1..4]) for whitespace tokens."""
    h, r = hyp.split(), ref.split()
    matches, totals = [], []
    for n in range(1, 5):
        hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
        rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
        matches.append(sum(min(c, rc[g]) for g, c in hc.items()))
        totals.append(max(len(h) - n + 1, 0))
    return np.array([len(h), len(r), *matches, *totals], dtype=float)


def _bleu_from_stats(rows):
    """Unsmoothed corpus BLEU (0-100) from summed sentence statistics."""
    s = rows.sum(axis=0)
    hyp_len, ref_len, matches, totals = s[0], s[1], s[2:6], s[6:10]
    if (matches == 0).any():
        return 0.0
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(np.mean(np.log(matches / totals)))


def test_own_bleu_helper_matches_sacrebleu():
    hyps_a, _, refs = _synthetic_corpus()
    rows = np.array([_sentence_stats(h, r) for h, r in zip(hyps_a, refs)])
    expected = sacrebleu.corpus_bleu(hyps_a, [refs], tokenize="none", smooth_method="none").score
    assert _bleu_from_stats(rows) == pytest.approx(expected, abs=1e-9)


def test_compare_mt_full_sample_bleu_equals_sacrebleu_none():
    hyps_a, hyps_b, refs = _synthetic_corpus()
    result = stats.paired_bootstrap_bleu(hyps_a, hyps_b, refs, n_resamples=10, tokenized=True)
    for hyps, score in ((hyps_a, result.score_a), (hyps_b, result.score_b)):
        expected = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", smooth_method="none").score
        assert score == pytest.approx(expected, abs=1e-9)
        # no n-gram order is empty here, so sacrebleu's default exp smoothing changes nothing either
        assert score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score, abs=1e-9)
    assert result.delta == pytest.approx(result.score_b - result.score_a)


def test_compare_mt_bleu_differences_from_sacrebleu():
    """Document where compare-mt's BLEU departs from sacrebleu on the same tokens."""
    from compare_mt.scorers import BleuScorer

    def cm_bleu(hyps, refs):
        return BleuScorer().score_corpus([r.split() for r in refs], [h.split() for h in hyps])[0]

    def sb_bleu(hyps, refs):
        return sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", smooth_method="none").score

    long_h, long_r = "a b c d e f", "a b c d e f"
    # 1) a hypothesis shorter than n tokens adds 1 to compare-mt's n-gram denominator, 0 to sacrebleu's
    hyps, refs = [long_h, "x y"], [long_r, "x y"]
    assert sb_bleu(hyps, refs) == pytest.approx(100.0)
    # compare-mt: 3-gram 4/5, 4-gram 3/4 (sacrebleu: 4/4 and 3/3)
    assert cm_bleu(hyps, refs) == pytest.approx(100 * math.exp((math.log(4 / 5) + math.log(3 / 4)) / 4))
    # 2) an order with no match: sacrebleu (unsmoothed) gives 0, compare-mt drops the order's log term
    hyps, refs = ["a b c x"], ["a b c y"]
    assert sb_bleu(hyps, refs) == 0.0
    # 1-gram 3/4, 2-gram 2/3, 3-gram 1/2, 4-gram 0/1 -> log term treated as 0 (precision 1)
    expected = 100 * math.exp((math.log(3 / 4) + math.log(2 / 3) + math.log(1 / 2)) / 4)
    assert cm_bleu(hyps, refs) == pytest.approx(expected)


def test_compare_mt_wins_reproduced_exactly():
    """compare-mt draws indices with np.random.choice after np.random.seed(seed): replay it."""
    hyps_a, hyps_b, refs = _synthetic_corpus(seed=1)
    rows_a = np.array([_sentence_stats(h, r) for h, r in zip(hyps_a, refs)])
    rows_b = np.array([_sentence_stats(h, r) for h, r in zip(hyps_b, refs)])
    n, n_resamples, seed = len(refs), 300, 5
    for sample_ratio in (1.0, 0.5):
        rs = np.random.RandomState(seed)
        wins_a = wins_b = 0
        for _ in range(n_resamples):
            idx = rs.choice(n, size=int(n * sample_ratio), replace=True)
            a, b = _bleu_from_stats(rows_a[idx]), _bleu_from_stats(rows_b[idx])
            wins_a += a > b
            wins_b += b > a
        result = stats.paired_bootstrap_bleu(
            hyps_a, hyps_b, refs, n_resamples=n_resamples, seed=seed, tokenized=True, sample_ratio=sample_ratio
        )
        assert (result.wins_a, result.wins_b) == (wins_a, wins_b)
        assert result.ties == n_resamples - wins_a - wins_b
        assert result.p_value == pytest.approx(1 - max(wins_a, wins_b) / n_resamples)


def test_compare_mt_agrees_statistically_with_own_bootstrap():
    hyps_a, hyps_b, refs = _synthetic_corpus(seed=2)
    rows_a = np.array([_sentence_stats(h, r) for h, r in zip(hyps_a, refs)])
    rows_b = np.array([_sentence_stats(h, r) for h, r in zip(hyps_b, refs)])
    n_resamples = 2000
    ours = stats.paired_bootstrap(
        lambda rows, _refs: _bleu_from_stats(rows), rows_a, rows_b, np.arange(len(refs)),
        n_resamples=n_resamples, seed=0,
    )
    cm = stats.paired_bootstrap_bleu(hyps_a, hyps_b, refs, n_resamples=n_resamples, seed=0, tokenized=True)
    assert ours.score_a == pytest.approx(cm.score_a, abs=1e-9)
    assert ours.score_b == pytest.approx(cm.score_b, abs=1e-9)
    # two independent estimates of the same probabilities
    for x, y in ((ours.wins_a, cm.wins_a), (ours.wins_b, cm.wins_b)):
        p = (x + y) / (2 * n_resamples)
        se_diff = math.sqrt(2 * p * (1 - p) / n_resamples)
        assert abs(x - y) / n_resamples < 4 * se_diff + 1e-12
    assert 0.0 < ours.p_value < 0.5  # the example is not trivially significant


def test_compare_mt_bleu_on_detokenized_text_uses_moses():
    hyps_a = ["L'homme mange une pomme rouge.", "Il fait beau, n'est-ce pas?", "Le chat dort sur le tapis."]
    hyps_b = ["L'homme mange la pomme.", "Il fait beau aujourd'hui, n'est-ce pas?", "Le chat dort sur un tapis."]
    refs = ["L'homme mange la pomme rouge.", "Il fait très beau, n'est-ce pas?", "Le chat dort sur le tapis."]
    state = np.random.get_state()
    result = stats.paired_bootstrap_bleu(hyps_a, hyps_b, refs, n_resamples=50, seed=1, lang="fr")
    # the caller's global numpy state is left untouched
    after = np.random.get_state()
    assert all(np.array_equal(x, y) for x, y in zip(state, after))
    assert result.score_a == pytest.approx(metrics.bleu_tokenized(hyps_a, refs, "fr"), abs=1e-9)
    assert result.score_b == pytest.approx(metrics.bleu_tokenized(hyps_b, refs, "fr"), abs=1e-9)
    assert result == stats.paired_bootstrap_bleu(hyps_a, hyps_b, refs, n_resamples=50, seed=1, lang="fr")


def test_compare_mt_identical_systems_all_ties(capsys):
    _, _, refs = _synthetic_corpus()
    result = stats.paired_bootstrap_bleu(refs, list(refs), refs, n_resamples=100, tokenized=True)
    assert (result.wins_a, result.wins_b, result.ties) == (0, 0, 100)
    assert result.p_value == 1.0
    assert result.score_a == pytest.approx(100.0)
    assert capsys.readouterr().out == ""


# ------------------------------------- vectorized bootstrap == compare-mt's own loop

def _compare_mt_bootstrap(hyps_a, hyps_b, refs, n_resamples, seed, sample_ratio, tokenized, lang="fr"):
    """The independent reference: compare-mt's eval_with_paired_bootstrap itself, seeded as its CLI does."""
    from compare_mt import scorers as cm_scorers
    from compare_mt import sign_utils

    if not tokenized:
        hyps_a, hyps_b, refs = (metrics.moses_tokenize(x, lang) for x in (hyps_a, hyps_b, refs))
    ref_tok = [r.split() for r in refs]
    outs = [[h.split() for h in hyps_a], [h.split() for h in hyps_b]]
    scorer = cm_scorers.BleuScorer()
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        ratios, _ = sign_utils.eval_with_paired_bootstrap(
            ref_tok, outs, [None] * len(refs), scorer, compare_directions=[(0, 1)],
            num_samples=n_resamples, sample_ratio=sample_ratio,
        )
    finally:
        np.random.set_state(saved)
    wins_a, wins_b = round(ratios[0][0] * n_resamples), round(ratios[0][1] * n_resamples)
    return dict(wins_a=wins_a, wins_b=wins_b, ties=n_resamples - wins_a - wins_b,
                score_a=float(scorer.score_corpus(ref_tok, outs[0])[0]),
                score_b=float(scorer.score_corpus(ref_tok, outs[1])[0]))


def _short_corpus(n_sent=25, seed=0):
    """1-4 token hypotheses of shuffled words: 4-gram (often 3-gram) matches are rare or absent,
    and a sentence without any match makes small resamples score 0; one hypothesis is empty."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(12)]
    refs, hyps_a, hyps_b = [], [], []
    for _ in range(n_sent):
        ref = list(rng.choice(vocab, size=int(rng.integers(2, 7))))
        refs.append(" ".join(ref))
        hyps_a.append(" ".join(rng.permutation(ref)[: int(rng.integers(1, 5))]))
        hyps_b.append(" ".join(rng.choice(vocab, size=int(rng.integers(1, 5)))))
    hyps_b[3] = ""
    return hyps_a, hyps_b, refs


def _clear_winner_corpus(n_sent=30, seed=3):
    hyps_a, _, refs = _synthetic_corpus(n_sent=n_sent, seed=seed)
    rng = np.random.default_rng(seed)
    hyps_b = [" ".join(t if rng.random() < 0.4 else "oov" for t in r.split()) for r in refs]
    return hyps_a, hyps_b, refs


def _french_corpus():
    """Detokenized text whose Moses tokenization splits elisions and punctuation."""
    refs = ["L'homme mange la pomme rouge.", "Il fait très beau, n'est-ce pas?", "Le chat dort sur le tapis.",
            "Nous irons à Paris demain matin.", "C'est l'heure du déjeuner !", "Les enfants jouent dans le parc.",
            "Qu'en penses-tu, Marie?", "Il y a 3 pommes sur la table."]
    hyps_a = ["L'homme mange une pomme rouge.", "Il fait beau, n'est-ce pas?", "Le chat dort sur le tapis.",
              "Nous irons à Paris demain.", "C'est l'heure de déjeuner !", "Les enfants jouent au parc.",
              "Qu'en penses-tu, Marie ?", "Il y a trois pommes sur la table."]
    hyps_b = ["L'homme mange la pomme.", "Il fait beau aujourd'hui, n'est-ce pas?", "Le chat dort sur un tapis.",
              "Nous allons à Paris.", "", "Des enfants jouent dans le parc.", "Que penses-tu?",
              "Il y a 3 pommes sur la table."]
    return hyps_a, hyps_b, refs


CORPORA = {
    "synthetic": lambda: _synthetic_corpus(seed=1),
    "short": _short_corpus,
    "identical": lambda: (_synthetic_corpus()[2], list(_synthetic_corpus()[2]), _synthetic_corpus()[2]),
    "clear_winner": _clear_winner_corpus,
}


def _assert_same_as_compare_mt(hyps_a, hyps_b, refs, n_resamples, seed, sample_ratio, tokenized):
    result = stats.paired_bootstrap_bleu(hyps_a, hyps_b, refs, n_resamples=n_resamples, seed=seed,
                                         tokenized=tokenized, sample_ratio=sample_ratio)
    expected = _compare_mt_bootstrap(hyps_a, hyps_b, refs, n_resamples, seed, sample_ratio, tokenized)
    got = {k: getattr(result, k) for k in expected}
    assert got == expected  # exact: same floats, same counts
    assert result.p_value == stats.bootstrap_p_value(expected["wins_a"], expected["wins_b"], n_resamples)
    return result


@pytest.mark.parametrize("corpus", sorted(CORPORA))
@pytest.mark.parametrize("sample_ratio", [1.0, 0.5])
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_bleu_bootstrap_identical_to_compare_mt(corpus, sample_ratio, seed):
    hyps_a, hyps_b, refs = CORPORA[corpus]()
    result = _assert_same_as_compare_mt(hyps_a, hyps_b, refs, 200, seed, sample_ratio, tokenized=True)
    if corpus == "identical":
        assert (result.wins_a, result.wins_b, result.ties, result.p_value) == (0, 0, 200, 1.0)
    if corpus == "clear_winner":
        assert result.wins_a == 200


@pytest.mark.parametrize("sample_ratio", [1.0, 0.5])
@pytest.mark.parametrize("seed", [0, 4])
def test_bleu_bootstrap_identical_to_compare_mt_on_detokenized_text(sample_ratio, seed):
    hyps_a, hyps_b, refs = _french_corpus()
    result = _assert_same_as_compare_mt(hyps_a, hyps_b, refs, 300, seed, sample_ratio, tokenized=False)
    assert result.wins_a > 0 and result.wins_b > 0  # neither system wins every resample


def test_bleu_bootstrap_has_resamples_without_4gram_or_any_match():
    """The short corpus exercises score_cached_corpus's zero branches, not only the main path."""
    from compare_mt import scorers as cm_scorers

    hyps_a, hyps_b, refs = _short_corpus()
    stats_b = stats._bleu_stats(tuple(refs), tuple(hyps_b))
    assert stats_b[:, 5].sum() == 0 or stats_b[:, 5].min() == 0  # 4-gram matches: none in some sentences
    assert 0 in stats_b[:, 1]  # the empty hypothesis
    ids = np.random.RandomState(0).choice(len(refs), size=(200, len(refs)))
    sums = np.stack([stats_b[i].sum(axis=0) for i in ids])
    assert (sums[:, 5] == 0).any()  # a resample with no 4-gram match at all
    one = np.random.RandomState(0).choice(len(refs), size=(400, 1))
    assert (stats_b[one[:, 0], 2] == 0).any()  # a one-sentence resample without a unigram match
    # the exact zero branch of compare-mt itself: no unigram match -> 0
    assert cm_scorers.BleuScorer().score_corpus([["a"]], [["b"]])[0] == 0


def test_bleu_bootstrap_identical_to_compare_mt_on_tiny_samples():
    # int(n * 0.05) = 1 sentence per resample: most resamples hit the zero branches
    hyps_a, hyps_b, refs = _short_corpus()
    _assert_same_as_compare_mt(hyps_a, hyps_b, refs, 300, 2, 0.05, tokenized=True)
    # int(n * 0.01) = 0: empty resamples, all scored 0 by compare-mt
    result = _assert_same_as_compare_mt(hyps_a, hyps_b, refs, 50, 2, 0.01, tokenized=True)
    assert result.ties == 50


def test_bleu_bootstrap_chunks_draw_the_same_ids(monkeypatch):
    """Resamples are drawn in blocks: block boundaries (here 7 resamples, ragged end) change nothing."""
    hyps_a, hyps_b, refs = _synthetic_corpus(seed=1)
    monkeypatch.setattr(stats, "_CHUNK_ENTRIES", 7 * len(refs))
    for sample_ratio in (1.0, 0.5):
        _assert_same_as_compare_mt(hyps_a, hyps_b, refs, 52, 9, sample_ratio, tokenized=True)


def test_bleu_bootstrap_leaves_global_random_state_alone():
    hyps_a, hyps_b, refs = _synthetic_corpus(seed=1)
    np.random.seed(123)
    before = np.random.get_state()
    stats.paired_bootstrap_bleu(hyps_a, hyps_b, refs, n_resamples=100, seed=0, tokenized=True)
    after = np.random.get_state()
    assert all(np.array_equal(x, y) for x, y in zip(before, after))
    np.random.seed(123)
    assert np.random.random() == np.random.RandomState(123).random()


def test_bleu_bootstrap_tokenizes_repeated_inputs_once(monkeypatch):
    hyps_a, hyps_b, refs = _french_corpus()
    calls = []
    tokenize = metrics.moses_tokenize
    monkeypatch.setattr(metrics, "moses_tokenize", lambda lines, lang: calls.append(tuple(lines)) or tokenize(lines, lang))
    stats._moses_tokenized.cache_clear()
    try:
        first = stats.paired_bootstrap_bleu(hyps_a, hyps_b, refs, n_resamples=20, seed=1)
        other_b = [h + " encore" for h in hyps_b]
        stats.paired_bootstrap_bleu(hyps_a, other_b, refs, n_resamples=20, seed=1)
        again = stats.paired_bootstrap_bleu(list(hyps_a), list(hyps_b), list(refs), n_resamples=20, seed=1)
    finally:
        stats._moses_tokenized.cache_clear()
    # refs and hyps_a once each, then each new B once
    assert sorted(calls) == sorted([tuple(refs), tuple(hyps_a), tuple(hyps_b), tuple(other_b)])
    assert first == again
    assert stats._moses_tokenized.cache_info().maxsize is not None


def test_pearson_matches_scipy():
    import scipy.stats

    from headprune.evaluation.stats import pearson

    rng = np.random.default_rng(3)
    for n in (3, 10, 96):
        x = rng.normal(size=n)
        y = 0.5 * x + rng.normal(size=n)
        expected = scipy.stats.pearsonr(x, y)
        got = pearson(x, y)
        assert got.r == pytest.approx(expected.statistic, abs=1e-12)
        assert got.p_value == pytest.approx(expected.pvalue, rel=1e-9)
        assert got.n == n
    assert pearson([1, 2, 3], [2, 4, 6]).p_value == 0.0
    with pytest.raises(ValueError):
        pearson([1, 2], [1, 2])


@pytest.mark.parametrize("metric", ["accuracy", "mcc", "f1"])
@pytest.mark.parametrize("case", ["random", "constant", "three classes"])
def test_classification_bootstrap_from_counts_equals_scoring_each_resample(metric, case):
    """paired_bootstrap_metric sums per-item counts per resample; it must give exactly what paired_bootstrap gives
    by scoring every resampled copy with classification_score (same resamples, same wins, same p), on a random
    pair of systems, on a system that predicts one class only (mcc and f1 are 0 there), and on three classes."""
    from functools import partial

    from headprune.evaluation.metrics import classification_score
    from headprune.evaluation.stats import paired_bootstrap, paired_bootstrap_metric

    rng = np.random.default_rng(7)
    classes = 3 if case == "three classes" else 2
    if classes == 3 and metric != "accuracy":
        pytest.skip("mcc and f1 are binary metrics")
    labels = rng.integers(0, classes, size=101)
    a = np.where(rng.random(101) < 0.8, labels, rng.integers(0, classes, size=101))
    b = np.zeros(101, dtype=int) if case == "constant" else np.where(rng.random(101) < 0.7, labels, 1 - labels % 2)
    fast = paired_bootstrap_metric(a, b, labels, metric, n_resamples=300, seed=3)
    slow = paired_bootstrap(partial(classification_score, metric), a, b, labels, n_resamples=300, seed=3)
    assert fast == slow
    assert 0 < fast.wins_a + fast.wins_b  # the resamples did decide something
