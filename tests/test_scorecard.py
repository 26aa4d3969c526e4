"""The scorecard of the paper's claims (headprune.report.scorecard, rule scorecard) on small hand-built tables."""
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dry_run import write_config
from headprune.report import scorecard as sc
from headprune.report.claims import CLAIMS, COLUMNS, NO_PAPER_NUMBER, NOT_REPRODUCED, NOT_RUN, REPRODUCED
from headprune.report.claims.michel import prunable_percent

ROOT = Path(__file__).resolve().parents[1]
EMPTY = pd.DataFrame()
MODELS = {"wmt": "WMT", "mnli": "MNLI", "sst2": "SST-2", "iwslt": "IWSLT", "own": None}


def verdicts(rows):
    return {(r["study"], r["claim"]): r["verdict"] for r in rows}


# --- C1: single heads --------------------------------------------------------------------------


def ablation(study, significant, deltas=None, attn_types=None):
    """One row per head removed alone; ``significant`` as the CSV holds it (read back as bool or text)."""
    n = len(significant)
    return pd.DataFrame({"study": study, "attn_type": attn_types or ["enc_self"] * n, "layer": 0,
                         "head": range(n), "metric": "accuracy", "score_full": 0.8,
                         "delta": deltas or [-0.01] * n, "significant": significant, "alpha": 0.01})


def test_c1_most_heads_unchanged_is_reproduced_per_study():
    table = pd.concat([ablation("mnli", [True, False, False, False]),
                       ablation("own", [True, True, False, False])], ignore_index=True)
    rows = sc.judged("C1", MODELS, ablation=table)
    assert verdicts(rows) == {("mnli", "C1"): REPRODUCED, ("own", "C1"): NOT_REPRODUCED}  # 75% > 50%; 50% is not most
    assert rows[0]["this_run"].startswith("3/4 (75%) heads no significant change; 1 significant, 0 of them gains")
    assert rows[0]["paper"] == CLAIMS["C1"].paper["MNLI"] and rows[1]["paper"] == NO_PAPER_NUMBER


def test_c1_reads_significant_as_text_and_counts_enc_self_apart():
    table = ablation("wmt", ["True", "False", "False", "True"], deltas=[0.5, -0.1, 0.2, -3.0],
                     attn_types=["enc_self", "enc_self", "enc_dec", "dec_self"])
    (row,) = sc.judged("C1", MODELS, ablation=table)
    assert row["verdict"] == NOT_REPRODUCED  # 2 of 4 unchanged
    assert "2 significant, 1 of them gains" in row["this_run"] and "Enc-Enc (Table 1): 1/2 (50%)" in row["this_run"]


def test_c1_not_run_without_ablation():
    (row,) = sc.judged("C1", MODELS, ablation=EMPTY)
    assert row["verdict"] == NOT_RUN and row["claim"] == "C1" and "WMT" in row["paper"] and "MNLI" in row["paper"]


# --- C2: one head per layer ----------------------------------------------------------------------


def one_head(study, deltas, significant, metric="bleu"):
    return pd.DataFrame({"study": study, "attn_type": "enc_dec", "layer": range(len(deltas)), "metric": metric,
                         "delta": deltas, "significant": significant})


def test_c2_half_the_layers_without_a_significant_loss_is_reproduced():
    # a significant gain is no loss; half of the layers is "many" (the paper's WMT figure)
    rows = sc.judged("C2", MODELS, one_head=one_head("wmt", [-13.56, -1.55, 0.24, 0.1], [True, True, True, False]))
    assert verdicts(rows) == {("wmt", "C2"): REPRODUCED}
    assert rows[0]["this_run"] == "2/4 (50%) layers no significant loss; worst Enc-Dec layer 1 -13.56 BLEU (significant)"


def test_c2_most_layers_losing_is_not_reproduced_and_empty_is_not_run():
    rows = sc.judged("C2", MODELS, one_head=one_head("mnli", [-0.02, -0.03, -0.01, 0.0], [True, True, True, False],
                                                     metric="accuracy"))
    assert verdicts(rows) == {("mnli", "C2"): NOT_REPRODUCED} and "-3.00% accuracy" in rows[0]["this_run"]
    assert [r["verdict"] for r in sc.judged("C2", MODELS, one_head=EMPTY)] == [NOT_RUN]


def test_c2_is_judged_under_each_masking_mode_as_a_study_of_its_own():
    """experiments.masking_modes's one-head-per-layer rows (a study in experiments.one_head_per_layer): C2 per mode,
    after the config's own studies, from the same rows as Tables 2-3 would give."""
    from headprune.analyses.masking_modes import ONE_HEAD, as_scorecard_tables

    def runs(mode, deltas, significant):
        layers = pd.DataFrame({"study": "lm", "mode": mode, "experiment": ONE_HEAD, "attn_type": "dec_self",
                               "layer": range(len(deltas)), "head": 1, "metric": "perplexity", "score_full": 10.0,
                               "score": [10.0 + d for d in deltas], "delta": deltas, "p_bootstrap": 0.0,
                               "significant": significant})
        head = layers.iloc[:1].assign(experiment="single head", layer=0, head=0)  # not C2's rows, nor the step
        step = pd.DataFrame({"study": "lm", "mode": mode, "experiment": "pruning", "step": [0], "percent_pruned": 0.0,
                             "heads_pruned": 0, "metric": "perplexity", "score": 10.0})
        return pd.concat([layers, head, step], ignore_index=True)

    # zeroed: 3 of 4 layers lose significantly (perplexity up); under mean 1 of 4 does, one gains (a fall: no loss)
    modes = pd.concat([runs("zero", [2.0, 0.5, 3.0, 0.1], [True, True, True, False]),
                       runs("mean", [-0.4, 0.2, 1.5, 0.05], [True, False, True, False])], ignore_index=True)
    ablation, pruning, layers = as_scorecard_tables(modes)
    assert len(layers) == 8 and set(layers["study"]) == {"lm (zero masking)", "lm (mean masking)"}
    card = sc.scorecard({"one_head": one_head("wmt", [-13.56, -1.55, 0.24, 0.1], [True, True, True, False])},
                        MODELS, masking_modes=(ablation, pruning, layers))
    c2 = card[card["claim"] == "C2"].set_index("study")
    assert list(c2.index) == ["wmt", "lm (zero masking)", "lm (mean masking)"]
    assert c2.loc["lm (zero masking)", "this_run"] == \
        "1/4 (25%) layers no significant loss; worst Dec-Dec layer 3 +3.00 PPL (significant)"
    assert c2.loc["lm (zero masking)", "verdict"] == NOT_REPRODUCED
    assert c2.loc["lm (mean masking)", "this_run"].startswith("3/4 (75%) layers no significant loss; worst Dec-Dec "
                                                                "layer 3 +1.50 PPL (significant)")
    assert c2.loc["lm (mean masking)", "verdict"] == REPRODUCED
    # without one-head rows (a study not in experiments.one_head_per_layer) C2 has no row per mode
    assert as_scorecard_tables(modes[modes["experiment"] != ONE_HEAD])[2].empty


# --- C3: pruning curves --------------------------------------------------------------------------


def curve(study, scores, metric="bleu", order="importance", scope="all", step=10):
    return pd.DataFrame({"study": study, "order": order, "scope": scope, "step": range(len(scores)),
                         "percent_pruned": [step * i for i in range(len(scores))], "score": scores,
                         "metric": metric})


def test_c3_prunable_is_the_last_step_within_one_point():
    # drops 0.5, 1.0 (still within 1 point), then 5: prunable 20%
    wmt = curve("wmt", [36.0, 35.5, 35.0, 31.0, 36.0, 0.0])
    assert prunable_percent(wmt)[0] == 20.0 and prunable_percent(wmt)[1]["percent_pruned"] == 30.0
    # a fraction metric: 1 point is 0.01; 0.9775 - 0.9675 is one point although not in floating point
    sst2 = curve("sst2", [0.9775, 0.975, 0.9675, 0.95, 0.5], metric="accuracy")
    assert prunable_percent(sst2)[0] == 20.0
    # never more than a point below: everything prunable
    assert prunable_percent(curve("own", [0.5, 0.51, 0.5], metric="f1"))[0] == 20.0
    assert prunable_percent(curve("own", [0.5, 0.51, 0.5], metric="f1"))[1] is None


def test_c3_uses_the_importance_order_across_the_whole_model():
    table = pd.concat([curve("wmt", [36.0, 35.5, 35.0, 31.0]),
                       curve("wmt", [36.0, 20.0, 10.0, 0.0], order="random"),  # ignored: another order
                       curve("wmt", [36.0, 10.0, 5.0, 0.0], scope="enc_dec"),  # ignored: Figure 4's
                       curve("mnli", [0.83, 0.80, 0.79, 0.5], metric="accuracy")], ignore_index=True)
    rows = sc.judged("C3", MODELS, pruning=table)
    assert verdicts(rows) == {("wmt", "C3"): REPRODUCED, ("mnli", "C3"): NOT_REPRODUCED}
    assert rows[0]["this_run"] == "20% prunable (unpruned 36.00 BLEU; 31.00 BLEU at 30%)"
    assert rows[1]["this_run"] == "0% prunable (unpruned 83.00% accuracy; 80.00% accuracy at 10%)"
    assert rows[0]["paper"] == "WMT: ~20% (Figure 3a)"


def test_c3_not_run_without_an_importance_curve():
    assert [r["verdict"] for r in sc.judged("C3", MODELS, pruning=EMPTY)] == [NOT_RUN]
    random_order = curve("wmt", [36.0, 35.0], order="random")
    assert [r["verdict"] for r in sc.judged("C3", MODELS, pruning=random_order)] == [NOT_RUN]


def test_an_lm_eval_tasks_metric_has_its_points():
    """A metric of an lm-evaluation-harness task (kind lm_eval): a share where higher is better (1 point is 1%),
    one unit where lower is (a perplexity, whose change counts in percent of the unpruned one, as perplexity's
    does); the rows name the metric."""
    rows = sc.judged("C3", MODELS, pruning=pd.concat([curve("task", [1.0, 0.995, 0.98, 0.5], metric="acc_norm"),
                                                      curve("words", [20.0, 20.5, 23.0], metric="word_perplexity")],
                                                     ignore_index=True))
    assert rows[0]["this_run"] == "10% prunable (unpruned 100.00% acc_norm; 98.00% acc_norm at 20%)"
    assert rows[1]["this_run"] == "0% prunable (unpruned 20.00 word_perplexity; 20.50 word_perplexity at 10%)"


# --- C4: attention types -------------------------------------------------------------------------


def types(study, at_80, step=10):
    """Each type pruned alone: the unpruned score, then its score at the steps (flat at ``at_80``)."""
    steps = int(100 / step) + 1
    return pd.concat([curve(study, [36.0] + [at_80[t]] * (steps - 1), scope=t, step=step) for t in at_80],
                     ignore_index=True)


def test_c4_enc_dec_lowest_at_80_percent_is_reproduced():
    rows = sc.judged("C4", MODELS, attention_types=types("wmt", {"enc_self": 30.0, "enc_dec": 2.0, "dec_self": 29.0}))
    assert verdicts(rows) == {("wmt", "C4"): REPRODUCED}
    assert rows[0]["this_run"] == ("at 80% of a type's heads pruned: Enc-Enc 30.00, Enc-Dec 2.00, Dec-Dec 29.00 BLEU "
                                   "(unpruned 36.00); lowest Enc-Dec")


def test_c4_reads_the_last_step_at_or_below_80_percent():
    table = types("wmt", {"enc_self": 30.0, "enc_dec": 20.0, "dec_self": 29.0}, step=25)
    # at 100% (above 80) Enc-Dec would not be the lowest; at 75%, the last step at or below 80, it is
    table.loc[(table["percent_pruned"] == 100) & (table["scope"] == "enc_self"), "score"] = 0.0
    assert verdicts(sc.judged("C4", MODELS, attention_types=table)) == {("wmt", "C4"): REPRODUCED}
    table.loc[(table["percent_pruned"] == 75) & (table["scope"] == "dec_self"), "score"] = 10.0
    assert verdicts(sc.judged("C4", MODELS, attention_types=table)) == {("wmt", "C4"): NOT_REPRODUCED}


def test_c4_not_run_for_a_self_attention_model_or_without_the_experiment():
    (row,) = sc.judged("C4", MODELS, attention_types=types("mnli", {"enc_self": 0.5}))
    assert row["verdict"] == NOT_RUN and row["study"] == "mnli" and "only Enc-Enc" in row["this_run"]
    assert [r["verdict"] for r in sc.judged("C4", MODELS, attention_types=EMPTY)] == [NOT_RUN]


# --- C5: training dynamics -----------------------------------------------------------------------


def dynamics(kept_at_40):
    """Per checkpoint epoch, a pruning curve at 10 * epoch BLEU up to 30%, ``kept``% of it from 40% on."""
    return pd.concat([curve("iwslt", [10.0 * epoch] * 4 + [0.1 * epoch * kept] * 7).assign(epoch=epoch)
                      for epoch, kept in kept_at_40.items()], ignore_index=True)


@pytest.mark.parametrize("kept, expected", [
    ({1: 60.0, 2: 62.0, 10: 88.0}, REPRODUCED),      # the paper: linear early, 85-90% from epoch 10
    ({1: 60.0, 10: 80.0}, NOT_REPRODUCED),           # more prunable later, but below 85%
    ({1: 90.0, 10: 86.0}, NOT_REPRODUCED),           # above 85% but no more than at first
])
def test_c5_last_checkpoint_keeps_85_percent_and_more_than_the_first(kept, expected):
    (row,) = sc.judged("C5", MODELS, dynamics=dynamics(kept))
    assert row["verdict"] == expected and row["paper"] == CLAIMS["C5"].paper["IWSLT"]
    assert f"epoch 1 {kept[1]:.1f}%" in row["this_run"]


def test_c5_not_run_with_one_checkpoint_or_none():
    (row,) = sc.judged("C5", MODELS, dynamics=dynamics({5: 90.0}))
    assert row["verdict"] == NOT_RUN and "one checkpoint" in row["this_run"]
    assert [r["verdict"] for r in sc.judged("C5", MODELS, dynamics=EMPTY)] == [NOT_RUN]


# --- C6: speed -----------------------------------------------------------------------------------


def table4(study, speedups, items=9815):
    return pd.DataFrame({"study": study, "batch_size": [1, 4, 16, 64], "speedup_percent": speedups,
                         "items": items, "device": "GTX 1080Ti"})


def test_c6_speedup_growing_with_the_batch_size_is_reproduced():
    rows = sc.judged("C6", MODELS, speed=pd.concat([table4("mnli", [1.9, 2.7, 17.5, 17.5]),  # the paper's Table 4
                                  table4("wmt", [5.0, 3.0, 2.0, 1.0]),     # shrinks with the batch size
                                  table4("own", [-3.0, -2.0, -1.0, -0.5])]))  # grows, but a slowdown
    assert verdicts(rows) == {("mnli", "C6"): REPRODUCED, ("wmt", "C6"): NOT_REPRODUCED,
                              ("own", "C6"): NOT_REPRODUCED}
    assert rows[0]["this_run"] == "+1.9% (batch 1), +2.7% (batch 4), +17.5% (batch 16), +17.5% (batch 64); GTX 1080Ti"


def test_c6_leaves_out_batches_larger_than_the_items_timed():
    # 16 items: batch 64 is one batch of 16 again, its +50% is not a larger batch's speedup
    (row,) = sc.judged("C6", MODELS, speed=table4("mnli", [10.0, 12.0, 5.0, 50.0], items=16))
    assert row["verdict"] == NOT_REPRODUCED and "left out: batch 64 (one batch of the 16 items timed)" in row["this_run"]
    (row,) = sc.judged("C6", MODELS, speed=table4("mnli", [1.0, 2.0, 3.0, 4.0], items=1))
    assert row["verdict"] == NOT_RUN and [r["verdict"] for r in sc.judged("C6", MODELS, speed=EMPTY)] == [NOT_RUN]


# --- the scorecard, the rule, the report -----------------------------------------------------------


def test_scorecard_has_one_row_per_claim_and_study_in_claim_order():
    card = sc.scorecard({"ablation": ablation("mnli", [False, False, True]),
                         "pruning": curve("sst2", [0.9, 0.9, 0.5], metric="accuracy")}, MODELS)
    assert list(card.columns) == list(COLUMNS)
    assert list(zip(card["claim"], card["study"], card["verdict"])) == [
        ("C1", "mnli", REPRODUCED), ("C2", "(none)", NOT_RUN), ("C3", "sst2", NOT_REPRODUCED), ("C4", "(none)", NOT_RUN),
        ("C5", "(none)", NOT_RUN), ("C6", "(none)", NOT_RUN)]
    assert all(card["rule"] == [CLAIMS[c].rule for c in card["claim"]])
    text = sc.markdown(card)
    assert text.startswith("**Scorecard**") and "1 reproduced, 1 not reproduced, 4 not run" in text
    assert [line[:5] for line in text.splitlines() if line.startswith("| C")] == [
        "| Cla", "| C1 ", "| C2 ", "| C3 ", "| C4 ", "| C5 ", "| C6 "]
    assert "| **reproduced** |" in text


def test_markdown_escapes_pipes():
    card = sc.scorecard({}, {})
    card.loc[0, "this_run"] = "a | b"
    assert "a \\| b" in sc.markdown(card)


def test_scorecard_category_comes_first_in_the_report():
    """The report's menu sorts categories lexicographically (localeCompare): the scorecard's must sort
    before every other category of the rule files."""
    names = {name for path in (ROOT / "rules").glob("*.smk")
             for name in re.findall(r'(?<!sub)category="([^"{]+)"', path.read_text())}
    assert "Claims scorecard" in names and len(names) > 1
    assert min(names, key=lambda name: (name.casefold(), name)) == "Claims scorecard"


def test_rule_writes_the_scorecard_from_the_configured_experiments_only(tmp_path):
    """A config running only MNLI's ablation, SST-2's pruning and the training dynamics: the scorecard job
    reads exactly those CSVs (built here), each dynamics curve with its epoch; the other claims say 'not run'."""
    def edit(config):
        config["experiments"] = {"ablation": ["mnli"], "pruning": [], "glue_pruning": ["sst2"]}
        config["speed"]["studies"] = []
        config["dynamics"]["train"]["checkpoint_epochs"] = [1, 2, 5]
    config = write_config(tmp_path / "config.yaml", edit)
    results = tmp_path / "results" / "demo"
    built = {"mnli/eval/ablation.csv": ablation("mnli", [False, False, True]),
             "sst2/pruning/all/importance.csv": curve("sst2", [0.9, 0.9, 0.9, 0.5], metric="accuracy")}
    for epoch, kept in {1: 60.0, 2: 62.0, 5: 90.0}.items():
        built[f"demo_de_en/epoch{epoch}/pruning_importance.csv"] = \
            dynamics({epoch: kept}).drop(columns="epoch").assign(study="demo_de_en")
    for path, table in built.items():
        (results / path).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(results / path, index=False)
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
               "--configfile", str(config), "--cores", "1", "results/demo/figures/scorecard.md",
               "--allowed-rules", "scorecard"]  # the target first: --allowed-rules takes every name after it
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    inputs = re.search(r"rule scorecard:\n\s+input: (.*)\n", result.stdout + result.stderr).group(1).split(", ")
    # each stage's inputs in its own order (the dynamics tables in their epochs'), the stages in theirs
    assert sorted(inputs) == sorted(f"results/demo/{path}" for path in built)
    assert [path for path in inputs if "epoch" in path] == [f"results/demo/{path}" for path in built if "epoch" in path]
    card = pd.read_csv(results / "figures" / "scorecard.csv")
    assert list(zip(card["claim"], card["study"], card["verdict"])) == [
        ("C1", "mnli", REPRODUCED), ("C2", "(none)", NOT_RUN), ("C3", "sst2", REPRODUCED), ("C4", "(none)", NOT_RUN),
        ("C5", "demo_de_en", REPRODUCED), ("C6", "(none)", NOT_RUN), ("W1", "(none)", NOT_RUN),
        ("W2", "(none)", NOT_RUN), ("W3", "(none)", NOT_RUN), ("W4", "(none)", NOT_RUN)]
    assert card.loc[4, "this_run"].startswith("% of unpruned BLEU kept at 40% pruned: epoch 1 60.0%, epoch 2 62.0%, "
                                              "epoch 5 90.0% (unpruned BLEU 10.0, 20.0, 50.0)")
    assert (results / "figures" / "scorecard.md").read_text() == sc.markdown(card)


def lm_roles(study, retrieval):
    return pd.DataFrame({"study": study, "attn_type": "dec_self", "layer": [i // 4 for i in range(len(retrieval))],
                         "head": [i % 4 for i in range(len(retrieval))], "retrieval": retrieval})


def wu_runs(study, top, randoms, full=0.9, ppl_top=10.2, ppl_full=10.0, significant=True):
    rows = [{"study": study, "k": 2, "selection": "top", "seed": 0, "retrieval": top, "retrieval_full": full,
             "significant_retrieval": significant, "perplexity": ppl_top, "perplexity_full": ppl_full}]
    rows += [{"study": study, "k": 2, "selection": "random", "seed": i, "retrieval": r, "retrieval_full": full,
              "significant_retrieval": False, "perplexity": 10.1, "perplexity_full": ppl_full}
             for i, r in enumerate(randoms)]
    rows.append({**rows[0], "k": 1, "retrieval": 0.1})  # a smaller K: the rule reads the largest
    return pd.DataFrame(rows)


def test_wu_few_retrieval_heads_counts_heads_above_the_threshold():
    # 1 of 8 heads above 0.1 (12.5%): not fewer than 5%; 2 of 48 (4.2%): reproduced; 0.1 itself is not above
    (small,) = sc.judged("W1", roles=lm_roles("a", [0.5, 0.1, 0.0, 0.05, 0, 0, 0, 0]))
    (large,) = sc.judged("W1", roles=lm_roles("b", [0.3, 0.2] + [0.01] * 46))
    assert (small["verdict"], large["verdict"]) == (NOT_REPRODUCED, REPRODUCED)
    assert small["this_run"].startswith("1/8 (12%) heads score above 0.1 (highest: layer 0 head 0, 0.50)")
    (none,) = sc.judged("W1", roles=lm_roles("c", [float("nan")] * 4))
    assert none["verdict"] == NOT_RUN


def masked(runs):
    """W2's rows and W3's, on one retrieval_heads.csv."""
    return sc.judged("W2", retrieval_heads=runs), sc.judged("W3", retrieval_heads=runs)


def test_wu_masking_rules_compare_top_k_with_random_heads():
    # top-2 masked: 30% retrieved; random pairs 70% and 90% (mean 80%): 50 points more; perplexity +2%
    (w2,), (w3,) = masked(wu_runs("a", 0.3, [0.7, 0.9]))
    assert (w2["verdict"], w3["verdict"]) == (REPRODUCED, REPRODUCED)
    assert w2["this_run"] == ("K=2: top-K heads masked 30.00% retrieved, K random heads 80.00% retrieved (mean of 2 "
                              "sets), all heads 90.00% retrieved")
    assert "(+2.0%)" in w3["this_run"]
    # 15 points apart is not far more; a drop that is not significant is not either; +10% perplexity is not little
    assert masked(wu_runs("b", 0.65, [0.8, 0.8]))[0][0]["verdict"] == NOT_REPRODUCED
    assert masked(wu_runs("c", 0.3, [0.8], significant=False))[0][0]["verdict"] == NOT_REPRODUCED
    assert masked(wu_runs("d", 0.3, [0.8], ppl_top=11.0))[1][0]["verdict"] == NOT_REPRODUCED


def task_runs(study, top, randoms, metric="acc", full=0.9, significant=True):
    """Wu et al.'s experiment scored on a task: task, task_full, significant_task and task_metric columns."""
    rows = [{"study": study, "k": 2, "selection": "top", "seed": 0, "task": top, "task_full": full,
             "significant_task": significant, "task_metric": metric, "perplexity": 10.2, "perplexity_full": 10.0}]
    rows += [{**rows[0], "selection": "random", "seed": i, "task": r, "significant_task": False}
             for i, r in enumerate(randoms)]
    rows.append({**rows[0], "k": 1, "task": 0.1})  # a smaller K: the rule reads the largest
    return pd.DataFrame(rows)


def test_wu_on_a_task_compares_top_k_with_random_heads_in_the_tasks_metric():
    # accuracy 0.60 with the top-2 masked against 0.80 with random pairs: 20 points more, significant
    (w4,) = sc.judged("W4", retrieval_heads=task_runs("t", 0.6, [0.75, 0.85]))
    assert w4["verdict"] == REPRODUCED and w4["study"] == "t"
    assert w4["this_run"].startswith("K=2: acc 60.00")
    # 4 points is not far more; not significant is not either
    assert sc.judged("W4", retrieval_heads=task_runs("t", 0.78, [0.82]))[0]["verdict"] == NOT_REPRODUCED
    unsure = task_runs("t", 0.6, [0.8], significant=False)
    assert sc.judged("W4", retrieval_heads=unsure)[0]["verdict"] == NOT_REPRODUCED
    # a lower-is-better metric (a task's perplexity): a rise is the cost
    rising = task_runs("p", 30.0, [12.0, 14.0], metric="word_perplexity", full=11.0)
    assert sc.judged("W4", retrieval_heads=rising)[0]["verdict"] == REPRODUCED
    lower = task_runs("p", 12.0, [30.0], metric="word_perplexity")
    assert sc.judged("W4", retrieval_heads=lower)[0]["verdict"] == NOT_REPRODUCED
    # a retrieval study's runs beside a task's: W2/W3 read the one, W4 the other
    both = pd.concat([wu_runs("a", 0.3, [0.7, 0.9]), task_runs("t", 0.6, [0.8])], ignore_index=True)
    assert [[r["study"] for r in rows] for rows in masked(both)] == [["a"], ["a"]]
    assert [r["study"] for r in sc.judged("W4", retrieval_heads=both)] == ["t"]
    assert sc.judged("W4", retrieval_heads=wu_runs("a", 0.3, [0.7]))[0]["verdict"] == NOT_RUN
