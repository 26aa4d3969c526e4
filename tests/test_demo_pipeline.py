"""End to end: the embedded demo runs the whole DAG offline and produces every table, figure and the report.

The demo run (about five minutes on 2 cores) happens once per test session, in a
temporary working directory, through the same Snakefile the paper's study uses.
"""
import subprocess
import sys
from pathlib import Path

import pandas as pd

from headprune.analyses.engines import ENGINE_UNITS, llama_cpp_missing

ROOT = Path(__file__).resolve().parents[1]


def run_snakemake(workdir, *args, timeout=1200):
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
               "--configfile", str(ROOT / "demo" / "config.yaml"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


# demo_run, the finished demo (one per session), is a fixture in conftest.py.


def test_demo_produces_every_table_and_figure(demo_run):
    results = demo_run / "results" / "demo"
    for study in ("demo_en_fr", "mnli"):
        for name in ("table1.csv", "table1.md", "figure1_bins.csv", "figure1.png", "figure1.pdf",
                     "figure3.png", "figure3.pdf", "figure2.csv", "figure2.png", "figure2.pdf",
                     "one_head_per_layer.csv", "one_head_per_layer.md"):
            path = results / "figures" / study / name
            assert path.stat().st_size > 0, path
        assert (results / "figures" / study / "figure1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (results / "figures" / study / "figure3.pdf").read_bytes()[:5] == b"%PDF-"
    for name in ("figure4.png", "figure4.pdf"):
        assert (results / "figures" / "demo_en_fr" / name).stat().st_size > 0
    assert (results / "figures" / "figure6.png").stat().st_size > 0
    for study in ("demo_en_fr", "mnli"):  # Table 4
        table4 = pd.read_csv(results / "figures" / study / "table4.csv")
        assert sorted(table4.batch_size) == [1, 4, 16, 64] and (table4.original_mean > 0).all()
    figure5 = pd.read_csv(next((results / "figures").glob("*/figure5.csv")))
    assert figure5.epoch.nunique() >= 2  # one curve per checkpoint epoch
    html = (results / "report.html").read_text(errors="replace")
    for name in ("figure1.png", "figure2.png", "figure3.png", "figure4.png", "figure5.png", "figure6.png",
                 "table1.md", "one_head_per_layer.md", "table4.md", "criteria.png", "criteria_summary.md",
                 "scorecard.md", "concrete.png", "head_roles.png", "roles_by_step.md"):
        assert name in html, name


def test_demo_learns_hard_concrete_gates_and_reads_head_roles(demo_run):
    """Voita's gates: one row per penalty, a larger penalty keeps no more heads, the kept counts per type and
    layer add up, the compared orders keep as many heads; head roles: one row per head, a role for each."""
    import yaml

    config = yaml.safe_load((ROOT / "demo" / "config.yaml").read_text())
    results = demo_run / "results" / "demo"
    for study in config["experiments"]["concrete"]:
        concrete = pd.read_csv(results / study / "concrete.csv").sort_values("penalty")
        assert list(concrete.penalty) == sorted(config["concrete"]["penalties"])
        assert concrete.heads_kept.is_monotonic_decreasing and concrete.heads_kept.iloc[-1] < concrete.heads_total.iloc[0]
        kept_columns = [c for c in concrete if c.startswith("kept_") and not c.endswith("_per_layer")]
        assert (concrete[kept_columns].sum(axis=1) == concrete.heads_kept).all()
        for row in concrete.itertuples():
            heads = pd.read_csv(results / study / "concrete" / f"{row.penalty:g}.heads.csv")
            assert heads.kept.sum() == row.heads_kept and ((heads.gate > 0) == heads.kept).all()
        for name in ("importance", "random"):
            assert concrete[f"p_vs_{name}"].between(0, 1).all()
        assert (results / "figures" / study / "concrete.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for study in config["experiments"]["head_roles"]:
        if config["models"].get(study, {}).get("kind") in ("language_modeling", "retrieval"):
            continue  # a language model's roles: test_demo_language_model_retrieval
        roles = pd.read_csv(results / study / "head_roles.csv", keep_default_na=False, na_values=[""])
        importance = pd.read_csv(results / study / "importance.csv")
        assert len(roles) == len(importance)
        assert set(roles.role) <= {"positional", "syntactic", "rare-word", "other", "n/a"}
        measured = roles[roles.role != "n/a"]
        assert set(measured.attn_type) == {"enc_self"} and measured.positional.between(0, 1).all()
        steps = pd.read_csv(results / "figures" / study / "roles_by_step.csv")
        assert steps.heads_left.iloc[0] == len(roles) and steps.heads_left.iloc[-1] == 0


def test_demo_compares_every_head_criterion(demo_run):
    """Every study that prunes compares the criteria of its config on the same steps, against I_h."""
    import yaml

    config = yaml.safe_load((ROOT / "demo" / "config.yaml").read_text())
    from headprune.config_schema import schema as config_schema

    default = config_schema()["properties"]["criteria"]["properties"]["compare"]["default"]
    results = demo_run / "results" / "demo"
    for study in config["experiments"]["criteria"]:
        criteria = config["criteria"].get("per_study", {}).get(study, config["criteria"].get("compare", default))
        curves = pd.read_csv(results / study / "pruning" / "criteria.csv")
        assert list(dict.fromkeys(curves.criterion)) == criteria
        assert {"iterative", "fisher"} <= set(curves.criterion) or "retrieval" in set(curves.criterion)
        assert curves.groupby("criterion").step.count().eq(11).all()  # 0, 10, ..., 100%
        assert curves[curves.step == 0].score.nunique() == 1  # every curve starts at the full model
        summary = pd.read_csv(results / study / "pruning" / "criteria_summary.csv").set_index("criterion")
        assert summary.loc["importance", ["p_30", "p_50", "p_70"]].isna().all()
        assert summary.drop(index="importance")[["p_30", "p_50", "p_70"]].apply(lambda p: p.between(0, 1)).all().all()
        # the curve's own CSV rows are what the summary reports at 50%
        at50 = curves[curves.percent_pruned == 50].set_index("criterion").score
        assert (summary.score_50 == at50.loc[summary.index]).all()
        assert (results / "figures" / study / "criteria.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    scorecard = pd.read_csv(results / "figures" / "scorecard.csv")
    assert {"C1", "C2", "C3", "C4", "C5", "C6"} <= set(scorecard.claim)


def test_demo_cross_domain_and_one_head_per_layer(demo_run):
    figures = demo_run / "results" / "demo" / "figures"
    for study, n_heads, n_layers in (("demo_en_fr", 24, 6), ("mnli", 8, 2)):
        cross = pd.read_csv(figures / study / "figure2.csv")
        assert len(cross) == n_heads and cross.pearson_r.between(-1, 1).all() and cross.pearson_r.nunique() == 1
        one_head = pd.read_csv(demo_run / "results" / "demo" / study / "one_head_per_layer.csv")
        assert len(one_head) == n_layers
        assert one_head.best_head.between(0, 3).all()
        assert (one_head.delta == one_head.score - one_head.score_full).all()


def test_demo_translation_study_numbers(demo_run):
    results = demo_run / "results" / "demo" / "demo_en_fr"
    importance = pd.read_csv(results / "importance.csv")
    assert len(importance) == 3 * 2 * 4 and set(importance.attn_type) == {"enc_self", "enc_dec", "dec_self"}
    assert (importance.importance >= 0).all() and importance.entropy_normalized.between(0, 1).all()
    ablation = pd.read_csv(results / "eval" / "ablation.csv")
    assert len(ablation) == 24 and ablation.p_bootstrap.between(0, 1).all()
    assert (ablation.score_full > 50).all()  # the tiny model really learned the task
    assert ablation.delta.min() < -1  # some heads matter
    pruning = pd.read_csv(results / "pruning.csv")
    orders = pruning.order.isin(["importance", "oracle", "random"])  # the others: criteria.csv
    paper = pruning[orders & (pruning.layout == "free")]
    assert set(paper.order) == {"importance", "oracle", "random"}
    assert len(paper) == 3 * 11 + 3 * 11  # three orders globally, importance order within each type
    for _, curve in paper[paper.scope == "all"].groupby("order"):
        curve = curve.sort_values("percent_pruned")
        assert curve.score.iloc[0] > 50 and curve.score.iloc[-1] < 5  # no heads left: no translation
    # the uniform layout beside it: one of the 4 heads of every layer (6 layers of 3 types) a step
    uniform = pruning[orders & (pruning.layout == "uniform")]
    assert len(uniform) == 3 * 5 + 3 * 5
    for _, curve in uniform[uniform.scope == "all"].groupby("order"):
        curve = curve.sort_values("percent_pruned")
        assert list(curve.percent_pruned) == [0.0, 25.0, 50.0, 75.0, 100.0]
        assert list(curve.heads_pruned) == [0, 6, 12, 18, 24]
        assert curve.score.iloc[0] == paper.loc[paper.scope == "all", "score"].iloc[0]  # the same full model


def test_demo_classification_study_numbers(demo_run):
    results = demo_run / "results" / "demo" / "mnli"
    ablation = pd.read_csv(results / "eval" / "ablation.csv")
    assert len(ablation) == 8 and ablation.p_ttest.between(0, 1).all()
    assert (ablation.score_full > 0.5).all()  # chance is 1/3
    assert ablation.significant.equals(ablation.p_ttest < 0.01)


def test_demo_figure6_prunes_three_glue_tasks_in_importance_order(demo_run):
    """Figure 6 (the paper's Appendix B): SST-2, CoLA (Matthews correlation) and MRPC (F1), 10% steps."""
    results = demo_run / "results" / "demo"
    for task, metric in (("sst2", "accuracy"), ("cola", "mcc"), ("mrpc", "f1")):
        tables = [pd.read_csv(path) for path in (results / task / "pruning" / "all").glob("*.csv")]
        curve = pd.concat(tables).query("order == 'importance' and layout == 'free'").sort_values("percent_pruned")
        assert list(curve.percent_pruned) == [10.0 * k for k in range(11)]
        assert list(curve.heads_pruned) == [round(0.8 * k) for k in range(11)]  # 8 heads, 10% per step
        assert set(curve.order) == {"importance"} and set(curve.metric) == {metric}
        # The baseline a constant prediction reaches on this dev set, worked out from its labels alone.
        labels = pd.read_csv(demo_run / "data" / "demo" / "glue" / task / "dev.tsv", sep="\t").label
        positive = (labels == 1).mean()
        constant = {"accuracy": max(positive, 1 - positive), "mcc": 0.0, "f1": 2 * positive / (1 + positive)}[metric]
        assert curve.score.iloc[0] > constant + 0.05, (task, curve.score.iloc[0], constant)  # it learned the task
        assert curve.score.iloc[-1] < curve.score.iloc[0]  # with no attention left, it is worse
    html = (results / "report.html").read_text(errors="replace")
    assert "figure6.png" in html


def test_demo_any_model_by_config(demo_run):
    """models.tiny_llama (a GQA causal LM from a model-folder tarball, perplexity on WikiText-style text) runs
    every experiment of the paper with lower-is-better read right; models.roberta_mnli is a second encoder on
    the MNLI-like task, fine-tuned by the same rule."""
    results = demo_run / "results" / "demo"
    ablation = pd.read_csv(results / "tiny_llama" / "eval" / "ablation.csv")
    assert len(ablation) == 8 and set(ablation.attn_type) == {"dec_self"} and set(ablation.metric) == {"perplexity"}
    assert set(ablation.testset) == {"test (64-token windows)"}  # every table states the window
    assert (ablation.score_full < 20).all() and ablation.delta.max() > 0  # learned; some head matters
    pruning = pd.read_csv(results / "tiny_llama" / "pruning.csv")
    for order, curve in pruning.groupby("order"):
        curve = curve.sort_values("percent_pruned")
        assert curve.score.iloc[-1] > curve.score.iloc[0]  # no heads left: perplexity rises
    oracle = pruning[pruning.order == "oracle"].sort_values("percent_pruned")
    first = ablation.sort_values("score").iloc[0]  # the head whose removal raises perplexity least goes first
    assert oracle.score.iloc[1] <= ablation.score.max() and first.score == ablation.score.min()
    one_head = pd.read_csv(results / "tiny_llama" / "one_head_per_layer.csv")
    for row in one_head.itertuples():  # the best head has the lowest selection perplexity
        layer = one_head[one_head.layer == row.layer].iloc[0]
        assert layer.selection_score == row.selection_score
    table1 = (results / "figures" / "tiny_llama" / "table1.md").read_text()
    assert table1.startswith("**Table 1** (tiny_llama (llama), Causal self-attention)")  # labelled for its family
    table4 = pd.read_csv(results / "figures" / "tiny_llama" / "table4.csv")
    # llama.cpp's rows where the gguf extra is installed (analyses.engines)
    engine = set() if llama_cpp_missing() else set(ENGINE_UNITS)
    assert set(table4.unit) == {"prefill tokens", "decode tokens"} | engine and (table4.check_agreement == 1).all()
    roberta = pd.read_csv(results / "roberta_mnli" / "eval" / "ablation.csv")
    assert len(roberta) == 8 and (roberta.score_full > 0.5).all()  # chance is 1/3
    assert "Roberta" in (results / "models" / "roberta_mnli" / "config.json").read_text()
    scorecard = pd.read_csv(results / "figures" / "scorecard.csv")
    assert {"tiny_llama", "roberta_mnli", "tiny_llama (decode tokens)"} <= set(scorecard.study)


def test_demo_language_model_retrieval(demo_run):
    """models.tiny_llama_niah scores the tiny Llama on finding a value in its context, through the paper's
    experiments, beside its perplexity; its heads' roles (one row per query head and per KV head), Wu et
    al.'s experiment and the scorecard's W rows; tiny_llama_streaming masks heads to a streaming window."""
    import yaml

    config = yaml.safe_load((ROOT / "demo" / "config.yaml").read_text())
    results = demo_run / "results" / "demo"
    ablation = pd.read_csv(results / "tiny_llama_niah" / "eval" / "ablation.csv")
    assert len(ablation) == 8 and set(ablation.metric) == {"retrieval"} and ablation.p_bootstrap.between(0, 1).all()
    assert ablation.score.between(0, 1).all()
    items = pd.read_json(demo_run / "data" / "demo" / "retrieval" / "tiny_llama_niah" / "test.jsonl", lines=True)
    niah = config["models"]["tiny_llama_niah"]
    assert len(items) == len(niah["context_lengths"]) * len(niah["depths"]) * niah["needles_per_setting"]
    assert (items.context_span.map(lambda span: span[1] - span[0]) == items.context_length).all()
    roles = pd.read_csv(results / "tiny_llama_niah" / "head_roles.csv")
    assert len(roles) == 8 and {"previous_token", "induction", "sink", "retrieval", "retrieval_distinct"} <= set(roles)
    assert roles.previous_token.between(0, 1).all() and roles.sink.between(0, 1).all()
    kv = pd.read_csv(results / "tiny_llama_niah" / "head_roles_kv.csv")
    assert len(kv) == 2 * 2  # 2 layers x 2 key/value heads, each the largest of its query heads
    for row in kv.itertuples():
        readers = roles[(roles.layer == row.layer) & (roles.kv_head == row.kv_head)]
        assert row.induction == readers.induction.max()
    wu = pd.read_csv(results / "tiny_llama_niah" / "retrieval_heads.csv")
    assert sorted(wu.k.unique()) == config["retrieval_heads"]["k"]
    assert (wu.groupby("k").selection.apply(lambda s: (s == "random").sum()) == config["retrieval_heads"]["random_sets"]).all()
    assert wu.perplexity.gt(0).all() and wu.retrieval.between(0, 1).all()
    side = pd.read_csv(results / "figures" / "tiny_llama_niah" / "perplexity_and_retrieval.csv")
    assert (side.experiment == "single head off").sum() == 8
    for name in ("head_roles.png", "retrieval_heads.png", "perplexity_and_retrieval.png", "criteria.png"):
        assert (results / "figures" / "tiny_llama_niah" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    streaming = pd.read_csv(results / "tiny_llama_streaming" / "eval" / "ablation.csv")
    assert len(streaming) == 8 and set(streaming.metric) == {"retrieval"}
    scorecard = pd.read_csv(results / "figures" / "scorecard.csv")
    assert set(scorecard[scorecard.claim.isin(["W1", "W2", "W3"])].study) == {"tiny_llama_niah"}
    assert "tiny_llama_niah" in set(scorecard[scorecard.claim == "C1"].study)


BLOCKED_LOAD = """
import sys
sys.modules["headprune"] = None  # headprune blocked from import: the folder's own files and transformers only
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True)
ids = torch.tensor([[int(i) for i in sys.argv[2].split(",")]])
with torch.no_grad():
    print(" ".join(repr(x) for x in model(input_ids=ids).logits.flatten().tolist()))
"""


def test_demo_recovers_the_pruned_models(demo_run):
    """experiments.recovery (issue #59): the tiny Llama and BERT on MNLI at two points each, every method's
    recovered score better than the pruned one (perplexity lower, accuracy higher), bias compensation beside them;
    the tiny Llama recovered at the cut exported and loaded in plain transformers with headprune blocked, its logits
    the ones headprune's loader gives; Figure 3 and the scorecard's R1 show it."""
    import numpy as np
    import torch

    from headprune.evaluation.metrics import better_sign
    from headprune.models.loading import load_model

    results = demo_run / "results" / "demo"
    for study, points, steps in (("tiny_llama", [30.0, 50.0], 20), ("mnli", [60.0, 70.0], 40)):
        table = pd.read_csv(results / study / "recovery.csv")
        assert sorted(set(table.percent_pruned)) == points
        assert sorted(table.method) == sorted(["lora", "full", "distill", "bias_compensation"] * 2)
        trained = table[table.method != "bias_compensation"]
        gain = (trained.score_recovered - trained.score_pruned) * better_sign(table.metric.iloc[0])
        assert (gain > 0).all(), trained
        assert (trained.steps == steps).all() and (table.train_items == 400).all()
    folder = results / "tiny_llama" / "recovered"
    card = (folder / "README.md").read_text()
    assert "recovered: lora, 20 steps on 400 training items" in card and "cut at 30% of the heads" in card
    model, _ = load_model(folder)
    ids = list(range(1, 17))
    run = subprocess.run([sys.executable, "-c", BLOCKED_LOAD, str(folder), ",".join(map(str, ids))],
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    with torch.no_grad():
        want = model(input_ids=torch.tensor([ids])).logits.flatten().numpy()
    assert np.allclose(np.array(run.stdout.split(), dtype=float), want, atol=1e-5)
    scorecard = pd.read_csv(results / "figures" / "scorecard.csv")
    assert set(scorecard[scorecard.claim == "R1"].study) == {"tiny_llama", "mnli"}


def test_a_killed_recovery_job_leaves_nothing_finished_and_reruns_to_the_same_table(demo_run, tmp_path):
    """Issue #59: the tiny Llama's recovery job killed while it trains (SIGKILL to Snakemake and the job: a lost
    node) leaves no recovery.csv; Snakemake, unlocked, reruns it with --rerun-incomplete, and the table it writes
    is the finished demo's (seeded), but for the seconds each method took."""
    import os
    import shutil
    import signal
    import time

    work = tmp_path / "demo"
    for name in ("data", "results", ".snakemake"):
        shutil.copytree(demo_run / name, work / name, symlinks=True, ignore=shutil.ignore_patterns("*.sock"))
    study = work / "results" / "demo" / "tiny_llama"
    want = pd.read_csv(study / "recovery.csv")
    (study / "recovery.csv").unlink()
    shutil.rmtree(study / "recovered")
    log = work / "results" / "demo" / "logs" / "recover" / "tiny_llama.log"
    log.unlink(missing_ok=True)
    # no warm start: a job forked by the warm server would outlive the kill (headprune.warm)
    (tmp_path / "cold.yaml").write_text("warm_start: false\n")
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work),
               "--cores", "1", "results/demo/tiny_llama/recovery.csv",
               "--configfile", str(ROOT / "demo" / "config.yaml"), str(tmp_path / "cold.yaml")]
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                           env={**os.environ, "HEADPRUNE_PROGRESS_SECONDS": "0"})  # a line at the first step
    try:
        deadline = time.monotonic() + 300
        while not (log.exists() and "recover " in log.read_text()) and job.poll() is None:
            assert time.monotonic() < deadline, "the recovery job never started training"
            time.sleep(0.2)
        assert job.poll() is None, "the job finished before it could be killed"
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert not (study / "recovery.csv").exists()
    assert subprocess.run([*command, "--unlock"], capture_output=True).returncode == 0
    rerun = subprocess.run([*command, "--rerun-incomplete"], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    got = pd.read_csv(study / "recovery.csv")
    pd.testing.assert_frame_equal(got.drop(columns="seconds"), want.drop(columns="seconds"))
    assert (study / "recovered" / "config.json").exists()
