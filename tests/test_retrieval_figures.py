"""The figures of a language model's heads: the tables behind them hold the numbers by hand, and the
figures draw."""
import math

import pandas as pd
import pytest

from headprune.report import figures


def runs():
    rows = [{"study": "s", "k": 2, "selection": "top", "seed": 0, "retrieval": 0.2, "retrieval_full": 0.9,
             "perplexity": 7.5, "perplexity_full": 7.4, "significant_retrieval": True, "significant_perplexity": False}]
    rows += [{"study": "s", "k": 2, "selection": "random", "seed": i, "retrieval": r, "retrieval_full": 0.9,
              "perplexity": p, "perplexity_full": 7.4, "significant_retrieval": False, "significant_perplexity": s}
             for i, (r, p, s) in enumerate([(0.8, 7.6, True), (0.9, 7.8, False), (0.7, 7.7, False)])]
    rows.append({**rows[0], "k": 1, "retrieval": 0.5})
    return pd.DataFrame(rows)


def test_retrieval_heads_table_summarises_each_k_and_selection():
    table = figures.retrieval_heads_table(runs())
    random_k2 = table[(table.k == 2) & (table.selection == "random")].iloc[0]
    assert random_k2["sets"] == 3
    assert math.isclose(random_k2["retrieval"], 0.8) and (random_k2["retrieval_min"], random_k2["retrieval_max"]) == (0.7, 0.9)
    assert math.isclose(random_k2["perplexity"], 7.7) and random_k2["significant_perplexity"] == 1
    top = table[(table.k == 1) & (table.selection == "top")].iloc[0]
    assert (top["retrieval"], top["retrieval_full"], top["sets"]) == (0.5, 0.9, 1)
    figure = figures.build_retrieval_heads_figure(table)
    assert len(figure.axes) == 2


def ablation(score, full, heads=((0, 0), (0, 1), (1, 0))):
    return pd.DataFrame({"attn_type": "dec_self", "layer": [h[0] for h in heads], "head": [h[1] for h in heads],
                         "score": score, "score_full": full})


def pruning(scores, orders=("importance", "random")):
    return pd.DataFrame([{"order": order, "scope": "all", "percent_pruned": 50.0 * step, "score": scores[order][step]}
                         for order in orders for step in range(3)])


def test_perplexity_and_retrieval_table_joins_both_scores_per_head_and_step():
    table = figures.perplexity_and_retrieval_table(
        ablation([0.9, 0.1, 0.85], 0.9), ablation([7.5, 7.41, 9.0], 7.4),
        pruning({"importance": [0.9, 0.6, 0.0], "random": [0.9, 0.3, 0.0]}),
        pruning({"importance": [7.4, 8.0, 30.0], "random": [7.4, 9.0, 31.0]}))
    heads = table[table.experiment == "single head off"].set_index(["layer", "head"])
    assert (heads.loc[(0, 1), "perplexity"], heads.loc[(0, 1), "retrieval"]) == (7.41, 0.1)
    assert (heads.loc[(0, 1), "perplexity_full"], heads.loc[(0, 1), "retrieval_full"]) == (7.4, 0.9)
    steps = table[table.experiment == "pruning"].set_index(["order", "percent_pruned"])
    assert (steps.loc[("random", 50.0), "perplexity"], steps.loc[("random", 50.0), "retrieval"]) == (9.0, 0.3)
    assert len(steps) == 6
    figure = figures.build_perplexity_and_retrieval_figure(table, "s")
    assert len(figure.axes) == 3  # the pruning panel has a twin axis


def lm_roles(retrieval=(0.5, 0.0, float("nan"), 0.0)):
    return pd.DataFrame({"study": "s", "attn_type": "dec_self", "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                         "importance": [0.4, 0.3, 0.2, 0.1], "previous_token": [0.9, 0.1, 0.1, 0.1],
                         "induction": [0.0, 0.6, 0.0, 0.0], "sink": [0.1, 0.1, 0.8, 0.1], "retrieval": list(retrieval),
                         "role": ["retrieval", "induction", "sink", "other"]})


def test_language_model_roles_by_step_count_their_own_roles():
    steps = figures.roles_by_step(lm_roles(), step_percent=50)
    # the least important first: step 1 removes (1,1) other and (1,0) sink
    assert list(steps.columns[4:9]) == ["retrieval", "induction", "previous-token", "sink", "other"]
    assert steps.loc[0, ["retrieval", "induction", "sink", "other"]].tolist() == [1, 1, 1, 1]
    assert steps.loc[1, ["retrieval", "induction", "sink", "other"]].tolist() == [1, 1, 0, 0]
    assert figures.is_language_model_roles(lm_roles())


@pytest.mark.parametrize("retrieval, panels", [((0.5, 0.0, float("nan"), 0.0), 4), ((float("nan"),) * 4, 3)])
def test_language_model_roles_figure_leaves_out_a_score_it_lacks(retrieval, panels):
    figure = figures.build_lm_roles_figure(lm_roles(retrieval))
    assert len([ax for ax in figure.axes if ax.get_title()]) == panels


def ablation_of(study, metric, full, scores, significant):
    """An eval/ablation.csv of 2 layers x 2 heads."""
    return pd.DataFrame({"study": study, "metric": metric, "attn_type": "dec_self", "layer": [0, 0, 1, 1],
                         "head": [0, 1, 0, 1], "score": scores, "score_full": full,
                         "delta": [s - full for s in scores], "significant": significant})


def test_head_maps_put_each_heads_cost_under_every_score_side_by_side():
    from scipy.stats import spearmanr

    from headprune.report.figures.head_maps import build_head_maps_figure, head_maps_table, rank_correlations

    perplexity = ablation_of("lm", "perplexity", 10.0, [10.5, 12.0, 10.0, 9.8], [False, True, False, False])
    task = ablation_of("task", "acc", 0.80, [0.70, 0.80, 0.40, 0.81], [False, False, True, False])
    table = head_maps_table({"lm": perplexity, "task": task})
    # worse is positive in points of each metric: perplexity up 2 is +2; accuracy down 0.40 is +40
    costs = table.set_index(["study", "layer", "head"])["cost_points"]
    assert costs[("lm", 0, 1)] == pytest.approx(2.0) and costs[("lm", 1, 1)] == pytest.approx(-0.2)
    assert costs[("task", 1, 0)] == pytest.approx(40.0) and costs[("task", 1, 1)] == pytest.approx(-1.0)
    correlations = rank_correlations(table)
    expected = spearmanr([0.5, 2.0, 0.0, -0.2], [10.0, 0.0, 40.0, -1.0]).statistic
    assert correlations.loc["lm", "task"] == pytest.approx(expected)
    figure = build_head_maps_figure(table, "lm")
    images = [ax.images[0].get_array() for ax in figure.axes if ax.images]
    assert len(images) == 2 and images[1][1, 0] == pytest.approx(40.0)  # every cell is a row of the table
