"""A toy criterion, screen, layout, metric and scorecard claim: each one class, registered by the test alone
(monkeypatch undoes it), and reached by the code that uses its vocabulary (issue #60): the criterion gives a pruning
order and its own prune job, the screen screens, the layout steps, the metric is shown, compared and counted in
points, the claim is judged in the scorecard and its Markdown."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from headprune.analyses import criteria, layouts, screening
from headprune.analyses.criteria import CRITERIA, Criterion, criterion_order
from headprune.analyses.layouts import LAYOUTS, Layout, layout_steps
from headprune.analyses.screening import SCREENS, Screen, screen_study
from headprune.evaluation.metrics import METRICS, Metric, better_sign
from headprune.report.claims import CLAIMS, Claim, NOT_RUN, REPRODUCED
from headprune.report.claims import base as claims
from headprune.report.scorecard import markdown, scorecard
from headprune.report.figures import change_label, format_score, order_labels, order_linestyles
from headprune.stages import pruning

HEADS = [("dec_self", layer, head) for layer in range(2) for head in range(3)]


def importance_table() -> pd.DataFrame:
    return pd.DataFrame([{"attn_type": t, "layer": layer, "head": head, "importance": 1.0 + layer + head / 10}
                         for t, layer, head in HEADS])


class HighestFirst(Criterion):
    """The toy: the most important heads first (the reverse of I_h), after the single-head ablation."""
    reads, waits_for_ablation, label, linestyle = "ablation", True, "toy (highest $I_h$ first)", "-."

    def order(self, asked):
        table = asked.table
        return [tuple(row) for row in table.sort_values("importance", ascending=False, kind="stable")
                [["attn_type", "layer", "head"]].itertuples(index=False)]


def test_a_toy_criterion_orders_heads_has_its_own_prune_job_and_its_line(monkeypatch):
    monkeypatch.setitem(CRITERIA, "highest_first", HighestFirst())
    order = criterion_order("highest_first", importance_table(), HEADS)
    assert order == sorted(HEADS, key=lambda h: -(1.0 + h[1] + h[2] / 10))
    assert order == criterion_order("importance", importance_table(), HEADS)[::-1]

    # the stage asks the class: a job of its own (it waits for the ablation), which reads the ablation
    study = SimpleNamespace(name="toy", attention_types=[], pipeline=SimpleNamespace(results_dir="results"),
                            importance_table="results/toy/importance.csv", importance_data="data/toy.txt",
                            takes_part_in=lambda experiment: experiment in ("pruning", "criteria"),
                            config={"pruning": {"orders": ["importance"], "orders_per_job": 2},
                                    "criteria": {"compare": ["importance", "fisher", "highest_first"]}})
    assert pruning.jobs(study) == [("all", "importance+fisher"), ("all", "highest_first")]
    assert pruning.inputs(study, "highest_first") == {"importance": "results/toy/importance.csv",
                                                      "ablation": "results/toy/eval/ablation.csv"}
    assert order_labels()["highest_first"] == "toy (highest $I_h$ first)"
    assert order_linestyles()["highest_first"] == "-."


def test_the_toy_criterion_is_gone_after_its_test():
    assert "highest_first" not in CRITERIA and "highest_first" not in order_labels()
    with pytest.raises(ValueError, match="unknown static criterion 'highest_first'"):
        criterion_order("highest_first", importance_table(), HEADS)


class LayerIndex(Screen):
    """The toy screen: the deeper the layer and the later the head, the larger its screen score."""

    def scores(self, model, tokenizer, settings, batches, screen_set):
        return pd.DataFrame([{"attn_type": t, "layer": layer, "head": head, "layer_index": 10 * layer + head}
                             for t, layer, head in HEADS])


def test_a_toy_screen_screens(monkeypatch):
    monkeypatch.setitem(SCREENS, "layer_index", LayerIndex())
    table = screen_study(None, None, {"settings": {}, "method": "layer_index", "top_k": 2, "sample": 0, "seed": 0})
    verified = table[table.verification == screening.VERIFIED]
    assert sorted(zip(verified["layer"], verified["head"])) == [(1, 1), (1, 2)]
    assert set(table.screen_method) == {"layer_index"}
    assert table.set_index(["layer", "head"]).loc[(1, 2), "screen_rank"] == 1


class Halves(Layout):
    """The toy layout: half of the order, then all of it."""

    def steps(self, order, *, step_percent, units=None):
        return [(0.0, []), (50.0, list(order[:len(order) // 2])), (100.0, list(order))]

    def removal(self, order, model, percent):
        return list(order[:len(order) // 2]) if percent < 100 else list(order)


def test_a_toy_layout_steps(monkeypatch):
    monkeypatch.setitem(LAYOUTS, "halves", Halves())
    assert layout_steps(HEADS, "halves") == [(0.0, []), (50.0, HEADS[:3]), (100.0, HEADS)]
    assert layouts.paper_layout() == "free"


class WordError(Metric):
    """The toy metric: a word error rate, lower is better, shown as a percentage."""
    label, scale, unit, point, point_unit, better = "WER", 100.0, "%", 0.01, "% WER", -1


def test_a_toy_metric_is_shown_compared_and_counted_in_points(monkeypatch):
    monkeypatch.setitem(METRICS, "toy_wer", WordError)
    assert format_score("toy_wer", 0.1234) == "WER 12.34%"
    assert change_label("toy_wer") == "WER change (%)"
    assert better_sign("toy_wer") == -1  # the tables' deltas and the criteria's curves read it
    assert claims.point("toy_wer") == 0.01 and claims.unit("toy_wer") == "% WER"
    assert claims.show(0.05, "toy_wer") == "5.00% WER"
    # lower is better: the curve falls off where the rate rises by more than 1% of the full model's
    curve = pd.DataFrame({"percent_pruned": [0, 10, 20], "score": [0.2, 0.201, 0.25]})
    tolerance = criteria.tolerance_points("toy_wer", 1.0, 0.2)
    assert np.isclose(tolerance, 0.002)
    assert criteria.largest_within(curve, 0.2, tolerance, better_sign("toy_wer")) == 10.0


class HalfKept(Claim):
    """A toy claim: every study keeps half its unpruned score with half its heads pruned."""
    code = "T1"
    statement = "Half the heads pruned keep half the score"
    evidence = "pruning.csv"
    source = "a toy claim of tests/test_toy_words.py"
    rule = "reproduced if the score at 50% pruned is at least half the unpruned one"

    def judge(self, evidence):
        pruning = evidence["pruning"]
        if pruning.empty:
            return [self.not_run()]
        rows = []
        for study, curve in claims.by_study(pruning):
            full, half = (float(curve.loc[curve["percent_pruned"] == p, "score"].iloc[0]) for p in (0, 50))
            rows.append(self.row(study, f"{half:.2f} of {full:.2f}", claims.verdict(half >= full / 2)))
        return rows


def test_a_toy_claim_is_judged_in_the_scorecard(monkeypatch):
    monkeypatch.setitem(CLAIMS, "T1", HalfKept())
    curves = pd.DataFrame({"study": ["a", "a", "b", "b"], "percent_pruned": [0, 50, 0, 50],
                           "score": [0.8, 0.5, 0.8, 0.3], "metric": "accuracy", "order": "random", "scope": "all"})
    card = scorecard({"pruning": curves}, {})
    toy = card[card["claim"] == "T1"]
    assert list(zip(toy["study"], toy["this_run"], toy["verdict"])) == [
        ("a", "0.50 of 0.80", REPRODUCED), ("b", "0.30 of 0.80", "not reproduced")]
    assert (toy["paper"] == HalfKept.source).all() and (toy["rule"] == HalfKept.rule).all()
    assert "| T1 | a | Half the heads pruned keep half the score (pruning.csv) | 0.50 of 0.80 |" in markdown(card)
    assert scorecard({}, {}).query("claim == 'T1'")["verdict"].tolist() == [NOT_RUN]


def test_the_schema_lists_no_word_of_a_registry():
    """The schema's enums of the vocabularies are their registries' words (headprune.config_schema injects them);
    the schema files say none of them."""
    from pathlib import Path

    import yaml

    from headprune.config_schema import schema, vocabularies

    full = schema()
    for definition, words in vocabularies().items():
        assert full["definitions"][definition]["enum"] == words
    assert vocabularies()["screen"] == list(SCREENS) and vocabularies()["layout"] == list(LAYOUTS)
    assert vocabularies()["paper_order"] == ["importance", "oracle", "random"]
    assert vocabularies()["classification_metric"] == ["accuracy", "mcc", "f1"]
    # concrete.compare: the two orders the Hard Concrete figure draws beside the gates (report/figures/concrete.py)
    allowed = {"concrete.schema.yaml.properties.concrete.properties.compare.items"}
    folder = Path(__file__).resolve().parents[1] / "rules" / "schemas"
    for path in folder.glob("*.yaml"):
        text = yaml.safe_load(path.read_text())
        found = []

        def walk(node, where):
            if isinstance(node, dict):
                enum = set(node.get("enum", ()))
                if where not in allowed and len(enum) > 1 and any(enum <= set(words) for words in vocabularies().values()):
                    found.append(where)
                for key, value in node.items():
                    walk(value, f"{where}.{key}")
            elif isinstance(node, list):
                for i, value in enumerate(node):
                    walk(value, f"{where}[{i}]")

        walk(text, path.name)
        assert not found, f"an enum of a registry's words in the schema file: {found}"
