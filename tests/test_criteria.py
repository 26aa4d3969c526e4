"""Head criteria as pruning orders (headprune.analyses.criteria), checked on tables with known answers."""
import math

import numpy as np
import pandas as pd
import pytest
import torch

from headprune.analyses.criteria import (CRITERIA, area_under_curve, combined_scores, criterion_order,
                                            importance_column, iterative_order, largest_within, nearest_step,
                                            percentile_rank, summarize)
from headprune.evaluation.runs import EvalSet, pruning_steps
from headprune.scoring.importance import normalize_per_layer

HEADS = [("enc_self", 0, 0), ("enc_self", 0, 1), ("enc_self", 1, 0), ("enc_self", 1, 1)]


def importance_table():
    return pd.DataFrame({
        "attn_type": ["enc_self"] * 4, "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
        "importance": [0.6, 0.8, 1.0, 0.0],
        "importance_token": [3.0, 4.0, 2.0, 0.0], "importance_example": [1.0, 0.5, 0.2, 0.4],
        "importance_batch": [0.1, 0.3, 0.2, 0.0],
        "fisher": [0.5, 0.1, 0.9, 0.3], "attention_gradient": [2.0, 1.0, 4.0, 3.0],
        "confidence": [0.9, 0.2, 0.5, 0.7], "entropy_normalized": [0.1, 0.9, 0.5, 0.3],
    })


@pytest.mark.parametrize("name, expected", [
    ("importance", [3, 0, 1, 2]),
    ("fisher", [1, 3, 0, 2]),
    ("attention_gradient", [1, 0, 3, 2]),
    ("confidence", [1, 2, 3, 0]),
    ("entropy_low", [0, 3, 2, 1]),
    ("entropy_high", [1, 2, 3, 0]),
])
def test_static_criteria_prune_the_lowest_scored_head_first(name, expected):
    assert criterion_order(name, importance_table(), HEADS) == [HEADS[i] for i in expected]


def test_importance_placements_are_normalized_per_layer_as_the_importance_column_is():
    table = importance_table()
    by_hand = normalize_per_layer(torch.tensor([[3.0, 4.0], [2.0, 0.0]], dtype=torch.float64)).flatten().numpy()
    np.testing.assert_allclose(importance_column(table, "token", True), by_hand)  # [0.6, 0.8, 1, 0]
    np.testing.assert_allclose(importance_column(table, "token", False), [3.0, 4.0, 2.0, 0.0])
    # normalized: layer 1's 2.0 becomes 1.0, the largest; raw it would rank below layer 0's heads
    assert criterion_order("importance_token", table, HEADS) == [HEADS[i] for i in (3, 0, 1, 2)]
    assert criterion_order("importance_token", table, HEADS, normalize=False) == [HEADS[i] for i in (3, 2, 0, 1)]


def test_oracle_and_random_orders():
    ablation = pd.DataFrame({"attn_type": ["enc_self"] * 4, "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                             "score": [30.0, 31.0, 10.0, 29.0]})
    assert criterion_order("oracle", importance_table(), HEADS, ablation=ablation) == [HEADS[i] for i in (1, 0, 3, 2)]
    with pytest.raises(ValueError, match="ablation"):
        criterion_order("oracle", importance_table(), HEADS)
    shuffled = criterion_order("random", importance_table(), HEADS, seed=3)
    assert sorted(shuffled) == HEADS and shuffled == criterion_order("random", importance_table(), HEADS, seed=3)
    with pytest.raises(ValueError, match="unknown static criterion"):
        criterion_order("iterative", importance_table(), HEADS)


def test_combined_criterion_by_hand():
    # ranks of I_h [0.6, 0.8, 1.0, 0.0] -> [1/3, 2/3, 1, 0]; of entropy [0.1, 0.9, 0.5, 0.3] -> [0, 1, 2/3, 1/3]
    np.testing.assert_allclose(percentile_rank([0.6, 0.8, 1.0, 0.0]), [1 / 3, 2 / 3, 1, 0])
    importance, entropy = np.array([0.6, 0.8, 1.0, 0.0]), np.array([0.1, 0.9, 0.5, 0.3])
    np.testing.assert_allclose(combined_scores(importance, entropy, 0.5, "high"),
                               [(1 / 3 + 0) / 2, (2 / 3 + 1) / 2, (1 + 2 / 3) / 2, (0 + 1 / 3) / 2])
    np.testing.assert_allclose(combined_scores(importance, entropy, 0.5, "low"),
                               [(1 / 3 + 1) / 2, (2 / 3 + 0) / 2, (1 + 1 / 3) / 2, (0 + 2 / 3) / 2])
    np.testing.assert_allclose(combined_scores(importance, entropy, 0.0, "high"), percentile_rank(importance))
    # weight 0.5, keep high: scores [1/6, 5/6, 5/6, 1/6]; keep low: [2/3, 1/3, 2/3, 1/3]; ties keep the table's order
    assert criterion_order("combined", importance_table(), HEADS, keep_entropy="high") == [HEADS[i] for i in (0, 3, 1, 2)]
    assert criterion_order("combined", importance_table(), HEADS) == [HEADS[i] for i in (1, 3, 0, 2)]
    with pytest.raises(ValueError, match="keep"):
        combined_scores(importance, entropy, 0.5, "middle")


def test_iterative_order_re_estimates_before_every_step():
    heads = [("enc_self", 0, h) for h in range(10)]
    calls = []

    def estimate(removed):
        calls.append(list(removed))
        # a head's score depends on what is gone: head h scores h, but once head 9 is gone head 8 scores -1
        return {h: (-1.0 if h[2] == 8 and ("enc_self", 0, 9) in removed else float(h[2])) for h in heads}

    order = iterative_order(estimate, heads, 10.0)
    # one estimate per step, on the model pruned so far, but for the last: it removes every head left
    assert [len(c) for c in calls] == list(range(9))
    assert order[:3] == [heads[0], heads[1], heads[2]] and sorted(order) == heads
    # step sizes follow pruning_steps, so the steps of the order are the steps the estimates chose
    assert [len(removed) for _, removed in pruning_steps(order, 10.0)] == list(range(11))


def test_iterative_order_reacts_to_the_estimates():
    heads = [("enc_self", 0, h) for h in range(4)]

    def estimate(removed):
        # head 3 becomes the least important as soon as head 0 is gone
        return {h: (-5.0 if h[2] == 3 and heads[0] in removed else float(h[2])) for h in heads}

    assert iterative_order(estimate, heads, 25.0) == [heads[0], heads[3], heads[1], heads[2]]


def curve(scores, percents=None):
    percents = percents or [10.0 * i for i in range(len(scores))]
    return pd.DataFrame({"step": range(len(scores)), "percent_pruned": percents, "score": scores})


def test_largest_within_stops_at_the_first_fall():
    assert largest_within(curve([30, 29.5, 29.1, 28.0, 29.5]), 30, 1.0) == 20.0  # 28 < 29; the late recovery is ignored
    assert largest_within(curve([30, 20]), 30, 1.0) == 0.0
    assert largest_within(curve([30, 30, 30]), 30, 1.0) == 20.0


def test_area_under_curve_is_the_trapezoid_rule():
    # points (0, 1), (0.5, 1), (1, 0): area 0.5 + 0.25
    assert math.isclose(area_under_curve(curve([1.0, 1.0, 0.0], [0.0, 50.0, 100.0])), 0.75)
    steps = curve(list(np.linspace(10, 0, 11)))
    assert math.isclose(area_under_curve(steps), 5.0)  # a straight line from 10 to 0
    assert nearest_step(steps, 30) == 3 and nearest_step(curve([1, 1, 1], [0, 33.3, 66.7]), 30) == 1


def test_summarize_tests_each_criterion_against_importance():
    labels = [0, 1] * 50
    evalset = EvalSet("classification", labels, [("a", "b")] * 100, "accuracy")
    right, wrong = list(labels), [1 - y for y in labels]
    half = right[:50] + wrong[50:]
    curves = pd.concat([
        curve([1.0, 1.0, 0.5]).assign(criterion="importance"),
        curve([1.0, 0.0, 0.0]).assign(criterion="random"),
        curve([1.0, 1.0, 0.5]).assign(criterion="fisher"),
    ]).assign(metric="accuracy")
    outputs = {"importance": [right, right, half], "random": [right, wrong, wrong], "fisher": [right, right, half]}
    summary = summarize(curves, outputs, evalset, within=1.0, test_at=(10, 20), resamples=200).set_index("criterion")
    assert math.isnan(summary.loc["importance", "p_10"])  # the reference is not tested against itself
    assert summary.loc["random", "p_10"] < 0.01 and summary.loc["random", "significant_10"]
    assert summary.loc["fisher", "p_10"] > 0.1 and not summary.loc["fisher", "significant_10"]  # identical outputs
    assert summary.loc["importance", "largest_percent_within"] == 10.0  # 1 accuracy point is 0.01
    assert summary.loc["random", "largest_percent_within"] == 0.0
    assert math.isclose(summary.loc["importance", "area_under_curve"], 0.1 * 1.0 + 0.1 * 0.75)
    assert summary.loc["random", "score_20"] == 0.0


def test_summarize_refuses_curves_from_different_full_models():
    curves = pd.concat([curve([1.0, 0.5]).assign(criterion="importance"),
                        curve([0.9, 0.5]).assign(criterion="random")]).assign(metric="accuracy")
    with pytest.raises(ValueError, match="full-model"):
        summarize(curves, {}, EvalSet("classification", [0], [("a", "b")], "accuracy"))


def test_every_criterion_is_a_config_choice():
    """The config's criterion words are CRITERIA, from the criteria themselves (the schema file lists none)."""
    import yaml

    from headprune.config_schema import SCHEMA_FILE, schema

    assert tuple(schema()["definitions"]["criterion"]["enum"]) == tuple(CRITERIA)
    assert "enum" not in yaml.safe_load(SCHEMA_FILE.read_text())["definitions"]["criterion"]


def test_importance_on_pruned_scores_the_heads_left_on_the_gated_model():
    """The iterative criterion's estimate: removed heads score 0 and drop out of the layer's l2 norm; the
    others are I_h of the model with the removed heads switched off."""
    from conftest import tiny_model_and_batch
    from headprune.analyses.criteria import importance_on_pruned
    from headprune.evaluation.runs import gates_without
    from headprune.scoring.importance import head_importance

    model, batch = tiny_model_and_batch("bert")
    removed = [("enc_self", 0, 1), ("enc_self", 1, 0)]
    scores = importance_on_pruned(model, [batch], estimator="token", normalize=True)(removed)
    assert all(scores[head] == 0.0 for head in removed)
    raw = head_importance(model, [batch], normalize=False, gates=gates_without(model, removed), progress=False)
    layer0 = raw[(raw.layer == 0) & (raw["head"] != 1)]
    by_hand = layer0.importance_token / np.sqrt((layer0.importance_token ** 2).sum())
    for row, value in zip(layer0.itertuples(), by_hand):
        assert math.isclose(scores[("enc_self", 0, int(row.head))], value, rel_tol=1e-9)


def test_retrieval_criterion_prunes_the_lowest_retrieval_scores_first():
    """Wu et al.'s retrieval score as a criterion: the heads that copy from the context are kept longest; a
    head without a score (NaN) goes first; ties keep the table's order."""
    roles = pd.DataFrame({"attn_type": "dec_self", "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                          "retrieval": [0.5, float("nan"), 0.0, 0.0]})
    heads = [("dec_self", 0, 0), ("dec_self", 0, 1), ("dec_self", 1, 0), ("dec_self", 1, 1)]
    order = criterion_order("retrieval", pd.DataFrame(), heads, roles=roles)
    assert order == [("dec_self", 0, 1), ("dec_self", 1, 0), ("dec_self", 1, 1), ("dec_self", 0, 0)]
    with pytest.raises(ValueError, match="needs a language model's head roles"):
        criterion_order("retrieval", pd.DataFrame(), heads)
