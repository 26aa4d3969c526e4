"""Pruning orders and steps, head names, evaluation sets and significance wiring."""
import numpy as np
import pandas as pd
import pytest

from headprune.evaluation.runs import (EvalSet, all_heads, gates_keeping_one, gates_without, head_name, importance_order,
                                   oracle_order, parse_head_name, pruning_steps, random_order, score, significance)
from headprune.evaluation.stats import paired_t_test
from conftest import tiny_fsmt


def test_head_names_round_trip():
    for head in [("enc_self", 0, 3), ("dec_self", 5, 15), ("enc_dec", 11, 0)]:
        assert parse_head_name(head_name(head)) == head


def test_pruning_steps_are_ten_percent_of_all_heads():
    order = [("enc_self", 0, h) for h in range(288)]
    steps = pruning_steps(order, 10)
    assert [p for p, _ in steps] == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert [len(h) for _, h in steps] == [0, 29, 58, 86, 115, 144, 173, 202, 230, 259, 288]
    for (_, smaller), (_, larger) in zip(steps, steps[1:]):
        assert larger[:len(smaller)] == smaller  # fixed order: each step removes a superset


def test_orders():
    importance = pd.DataFrame({"attn_type": ["enc_self"] * 4, "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                               "importance": [0.5, 0.1, 0.9, 0.3]})
    assert importance_order(importance) == [("enc_self", 0, 1), ("enc_self", 1, 1), ("enc_self", 0, 0),
                                            ("enc_self", 1, 0)]
    ablation = importance.assign(score=[30.0, 35.5, 20.0, 36.1])
    # removing (1,1) alone hurts least (highest score left), so the oracle prunes it first
    assert oracle_order(ablation)[:2] == [("enc_self", 1, 1), ("enc_self", 0, 1)]
    heads = all_heads({"enc_self": (2, 2)})
    assert sorted(random_order(heads, 3)) == sorted(heads)
    assert random_order(heads, 3) == random_order(heads, 3)


def test_gates_helpers():
    model = tiny_fsmt()
    gates = gates_without(model, [("enc_dec", 1, 2)])
    assert gates["enc_dec"].sum() == 7 and gates["enc_dec"][1, 2] == 0
    keep = gates_keeping_one(model, "dec_self", 0, 3)
    assert keep["dec_self"][0].tolist() == [0, 0, 0, 1] and keep["dec_self"][1].sum() == 4


def test_classification_significance_uses_t_test_on_correctness():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 200).tolist()
    full = [l if rng.random() < 0.8 else (l + 1) % 3 for l in labels]
    ablated = [l if rng.random() < 0.6 else (l + 1) % 3 for l in labels]
    evalset = EvalSet("classification", labels, [("a", "")] * 200, "accuracy")
    result = significance(evalset, full, ablated, resamples=200)
    expected = paired_t_test(np.equal(full, labels), np.equal(ablated, labels))
    assert result["p_ttest"] == pytest.approx(expected.p_value)
    assert 0 <= result["p_bootstrap"] <= 1
    assert score(evalset, full) == pytest.approx(np.mean(np.equal(full, labels)))
