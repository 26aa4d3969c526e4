import math

import numpy as np
import pytest
import sacrebleu

from headprune.evaluation import metrics

# Hand-worked example: predictions and labels give tp=2, fp=1, tn=2, fn=1.
PRED = [1, 1, 0, 0, 1, 0]
GOLD = [1, 0, 0, 0, 1, 1]


def test_accuracy_hand_worked():
    assert metrics.classification_score("accuracy", PRED, GOLD) == pytest.approx(4 / 6)


def test_accuracy_accepts_non_binary_labels():
    # accuracy is defined for any label set (MNLI has 3 classes)
    assert metrics.classification_score("accuracy", [0, 2, 1, 2], [0, 1, 1, 2]) == pytest.approx(0.75)


def test_mcc_hand_worked():
    # (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)) = (4 - 1) / sqrt(3^4) = 1/3
    assert metrics.classification_score("mcc", PRED, GOLD) == pytest.approx(1 / 3)


def test_f1_hand_worked():
    # precision = 2/3, recall = 2/3 -> F1 = 2/3
    assert metrics.classification_score("f1", PRED, GOLD) == pytest.approx(2 / 3)


@pytest.mark.parametrize("seed", range(5))
def test_mcc_equals_pearson_correlation_of_binary_vectors(seed):
    rng = np.random.default_rng(seed)
    gold = rng.integers(0, 2, size=200)
    pred = np.where(rng.random(200) < 0.7, gold, 1 - gold)
    pearson = np.corrcoef(pred.astype(float), gold.astype(float))[0, 1]
    assert metrics.classification_score("mcc", pred, gold) == pytest.approx(pearson, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_f1_equals_harmonic_mean_of_precision_and_recall(seed):
    rng = np.random.default_rng(100 + seed)
    gold = rng.integers(0, 2, size=150)
    pred = np.where(rng.random(150) < 0.6, gold, 1 - gold)
    precision = gold[pred == 1].mean()
    recall = pred[gold == 1].mean()
    expected = 2 * precision * recall / (precision + recall)
    assert metrics.classification_score("f1", pred, gold) == pytest.approx(expected, abs=1e-12)


def test_degenerate_cases_score_zero():
    # constant predictions: MCC undefined (0/0), reported as 0
    assert metrics.classification_score("mcc", [1, 1, 1], [0, 1, 0]) == 0.0
    # no positive predicted and none present: F1 0/0, reported as 0
    assert metrics.classification_score("f1", [0, 0], [0, 0]) == 0.0
    # perfect and perfectly wrong
    assert metrics.classification_score("mcc", [0, 1, 1], [0, 1, 1]) == pytest.approx(1.0)
    assert metrics.classification_score("mcc", [1, 0, 0], [0, 1, 1]) == pytest.approx(-1.0)


def test_unknown_metric_is_named_in_error():
    with pytest.raises(ValueError, match="spearman"):
        metrics.classification_score("spearman", [1], [1])


def test_binary_metrics_reject_other_labels():
    with pytest.raises(ValueError, match="0/1"):
        metrics.classification_score("mcc", [0, 2], [0, 1])


def test_length_mismatch_and_empty_rejected():
    with pytest.raises(ValueError):
        metrics.classification_score("accuracy", [0, 1], [0])
    with pytest.raises(ValueError):
        metrics.classification_score("accuracy", [], [])


# Two French sentences. Moses (fr) splits elided articles ("L' homme") and punctuation.
HYPS = ["L'homme mange une pomme.", "Il fait beau, n'est-ce pas?"]
REFS = ["L'homme mange la pomme rouge.", "Il fait très beau, n'est-ce pas?"]


def test_moses_tokenize_french():
    assert metrics.moses_tokenize(HYPS, "fr") == ["L' homme mange une pomme .", "Il fait beau , n' est-ce pas ?"]
    # escape=False: no XML entities in what BLEU sees
    assert metrics.moses_tokenize(["a&b <x>"], "en") == ["a & b < x >"]


def _bleu(matches, totals, hyp_len, ref_len):
    log_prec = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(log_prec)


def test_bleu_tokenized_hand_worked():
    # Tokens: hyp1 "L' homme mange une pomme ." (6)   ref1 "L' homme mange la pomme rouge ." (7)
    #         hyp2 "Il fait beau , n' est-ce pas ?" (8)  ref2 "Il fait très beau , n' est-ce pas ?" (9)
    # matches/totals   1-gram  2-gram  3-gram  4-gram
    #   sentence 1      5/6     2/5     1/4     0/3
    #   sentence 2      8/8     6/7     4/6     3/5
    expected = _bleu(matches=[13, 8, 5, 3], totals=[14, 12, 10, 8], hyp_len=14, ref_len=16)
    assert metrics.bleu_tokenized(HYPS, REFS, "fr") == pytest.approx(expected, abs=1e-9)


def test_bleu_detokenized_hand_worked():
    # 13a keeps "n'est-ce" as one token and splits off "," and "?":
    # hyp "Il fait beau , n'est-ce pas ?" (7), ref "Il fait très beau , n'est-ce pas ?" (8)
    # 1-gram 7/7, 2-gram 5/6, 3-gram 3/5, 4-gram 2/4
    expected = _bleu(matches=[7, 5, 3, 2], totals=[7, 6, 5, 4], hyp_len=7, ref_len=8)
    assert metrics.bleu_detokenized(HYPS[1:], REFS[1:]) == pytest.approx(expected, abs=1e-9)


def test_bleu_detokenized_is_sacrebleu_default():
    # sentence 1 has no 4-gram match: sacrebleu's default exp smoothing applies
    expected = sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert metrics.bleu_detokenized(HYPS, REFS) == pytest.approx(expected, abs=1e-12)
    assert metrics.bleu_detokenized(REFS, REFS) == pytest.approx(100.0)


def test_bleu_rejects_length_mismatch():
    with pytest.raises(ValueError):
        metrics.bleu_detokenized(HYPS, REFS[:1])
    with pytest.raises(ValueError):
        metrics.bleu_tokenized(HYPS[:1], REFS, "fr")
