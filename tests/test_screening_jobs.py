"""A screened Table 1 run as the pipeline's jobs run it (the scripts with a ``snakemake`` object, issue #40), on a
saved tiny Llama beside the exhaustive one: the screen job, the one ablation job of the heads it picked, the
significance job marking every head, Table 1 with its bound, the scorecard's C1 and the oracle order. One child
process runs every job (torch imported once)."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(30)]
HEADS = [("dec_self", layer, head) for layer in range(3) for head in range(4)]

# Each job run as Snakemake's script directive runs it (one runner for the script tests)
from test_masking_scripts import RUNNER  # noqa: E402
from headprune import stages


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A tiny Llama (3 layers of 4 query heads on 2 key/value heads) saved with its tokenizer and its windows."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("screening_jobs")
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<unk>", *WORDS])}, "<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>").save_pretrained(folder / "model")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS) + 1, hidden_size=32, intermediate_size=48,
                                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                         initializer_range=0.3, attn_implementation="eager")).eval()
    model.save_pretrained(folder / "model")
    rng = np.random.default_rng(0)
    for name, n in (("train", 8), ("eval", 10)):
        np.save(folder / f"{name}.npy", rng.integers(1, len(WORDS) + 1, (n, 12)).astype(np.int64))
    return folder


def windows_spec(folder, name, max_items=None):
    return {"kind": "language_modeling", "windows": str(folder / f"{name}.npy"), "name": name, "window": 12,
            "max_items": max_items}


def table1_job(name, ablation, full, out):
    return {"rule": "plot_ablation", "script": "plot_ablation.py", "input": {"ablation": ablation, "full": full},
            "output": {key: str(out / f"{name}.{key}") for key in ("table_csv", "table_md", "bins_csv")}
            | {"fig_png": str(out / f"{name}.png"), "fig_pdf": str(out / f"{name}.pdf"),
               "bound_csv": str(out / f"{name}.bound.csv")},
            "params": {"style": {}, "attn_type": "dec_self", "confidence": 0.9}, "wildcards": {"study": "lm"}}


@pytest.fixture(scope="module")
def jobs(place):
    """The full model, the exhaustive sweep (one job of every head) and its significance; the screen (first order,
    top 3, a sample of 3), the screened ablation job and its significance; Table 1 of both; the scorecard."""
    folder = place
    out = folder / "out"
    study = {"name": "lm", "kind": "language_modeling", "model": str(folder / "model"), "layers": 3, "heads": 4,
             "device": "cpu"}
    settings = {"masking": "zero", "batch_size": 3, "variant_batch_size": 7, "progress": False}
    evaluation = {"roles": {"eval": windows_spec(folder, "eval")}, "settings": settings}
    significance = {"eval": windows_spec(folder, "eval"), "resamples": 200, "seed": 0, "alpha": 0.05}
    screen = {"method": "first_order", "items": 4, "top_k": 3, "sample": 3, "confidence": 0.9, "seed": 5,
              "settings": settings, "data": {"kind": "language_modeling", "windows": str(folder / "train.npy"),
                                             "batch_size": 4, "max_items": None}}
    names = ["-".join(map(str, h)) for h in HEADS]
    specs = [
        {"rule": "evaluate_full", "script": "evaluate.py", "input": {}, "output": {"json": str(out / "full.json")},
         "params": {"study": study, "evaluation": evaluation}},
        {"rule": "ablate_head", "script": "evaluate.py", "input": {}, "output": {"json": str(out / "all.json")},
         "wildcards": {"head": f"{names[0]}..{names[-1]}"},
         "params": {"study": study, "evaluation": {**evaluation, "heads": names}}},
        {"rule": "significance", "script": "significance.py",
         "input": {"full": str(out / "full.json"), "heads": [str(out / "all.json")], "screen": []},
         "output": {"csv": str(out / "exhaustive.csv")}, "wildcards": {"role": "eval"},
         "params": {"study": study, "significance": significance}},
        {"rule": "screen_heads", "script": "screen_heads.py", "input": {}, "output": {"csv": str(out / "screen.csv")},
         "params": {"study": study, "screen": screen}},
        {"rule": "ablate_screened", "script": "evaluate.py", "input": {"screen": str(out / "screen.csv")},
         "output": {"json": str(out / "screened.json")},
         "params": {"study": study, "evaluation": {**evaluation, "heads": []}}},
        {"rule": "significance", "script": "significance.py",
         "input": {"full": str(out / "full.json"), "heads": [str(out / "screened.json")],
                   "screen": [str(out / "screen.csv")]},
         "output": {"csv": str(out / "screened.csv")}, "wildcards": {"role": "eval"},
         "params": {"study": study, "significance": significance}},
        table1_job("exhaustive", str(out / "exhaustive.csv"), str(out / "full.json"), out),
        table1_job("screened", str(out / "screened.csv"), str(out / "full.json"), out),
        {"rule": "scorecard", "script": "scorecard.py", "input": {"ablation": [str(out / "screened.csv")]},
         "output": {"csv": str(out / "scorecard.csv"), "md": str(out / "scorecard.md")},
         "params": {"paper_models": {}, "epochs": [], "confidence": 0.9}},
    ]
    for i, spec in enumerate(specs):
        spec["script"] = str(ROOT / "scripts" / spec["script"])
        spec["log"] = str(out / f"{i}-{spec['rule']}.log")
    (folder / "jobs.json").write_text(json.dumps(specs))
    result = subprocess.run([sys.executable, "-c", RUNNER, str(folder / "jobs.json")], capture_output=True, text=True,
                            cwd=ROOT, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1",
                                                        "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"})
    logs = "\n".join(p.read_text()[-3000:] for p in out.glob("*.log")) if out.exists() else ""
    assert result.returncode == 0, result.stderr[-3000:] + logs
    return out


KEY = ["attn_type", "layer", "head"]


def test_the_screen_job_scores_on_the_importance_data_and_picks_top_k_and_a_seeded_sample(place, jobs):
    from headprune.evaluation.perplexity import load_windows, window_batches
    from headprune.analyses.screening import gradient_screens
    from headprune.models.loading import load_causal_lm

    screen = pd.read_csv(jobs / "screen.csv")
    model = load_causal_lm(place / "model")[0]
    here = gradient_screens(model, window_batches(load_windows(place / "train.npy"), 4))
    assert screen["first_order"].to_numpy() == pytest.approx(here["first_order"].to_numpy(), rel=1e-5, abs=1e-9)
    assert screen["screen"].to_numpy() == pytest.approx(here["first_order"].abs().to_numpy(), rel=1e-5, abs=1e-9)
    top = set(here["first_order"].abs().nlargest(3).index)
    assert set(screen.index[screen.verification == "verified"]) == top
    sampled = screen.index[screen.verification == "sampled"]
    rest = sorted(set(range(12)) - top)
    assert list(sampled) == sorted(np.random.default_rng(5).choice(rest, size=3, replace=False))  # seed 5's draw
    assert set(screen["study"]) == {"lm"} and set(screen["screen_method"]) == {"first_order"}


def test_the_screened_table_has_every_head_and_the_exhaustive_rows_of_those_ablated(jobs):
    exhaustive, screened = pd.read_csv(jobs / "exhaustive.csv"), pd.read_csv(jobs / "screened.csv")
    assert len(screened) == 12 and screened["verification"].value_counts().to_dict() == {
        "screened": 6, "verified": 3, "sampled": 3}
    ablated = screened[screened.verification != "screened"].set_index(KEY)
    truth = exhaustive.set_index(KEY).loc[ablated.index]
    for column in ("score", "delta", "p_bootstrap", "significant", "score_full", "testset"):
        assert ablated[column].tolist() == truth[column].tolist(), column
    only = screened[screened.verification == "screened"]
    assert only[["score", "delta", "p_bootstrap", "significant"]].isna().all().all()
    assert json.loads((jobs / "screened.json").read_text())["heads"].keys() == {
        "-".join(map(str, k)) for k in ablated.index}


def test_table1_says_what_it_stands_on_and_bounds_the_screened_only_heads_by_hand(jobs):
    from scipy.stats import beta

    screened = pd.read_csv(jobs / "screened.csv")
    bound = pd.read_csv(jobs / "screened.bound.csv").iloc[0]
    sampled = screened[screened.verification == "sampled"]
    verified = screened[screened.verification == "verified"]
    s = int((sampled["significant"] == True).sum())  # noqa: E712
    share = 1.0 if s == 3 else beta(s + 1, 3 - s).ppf(0.9)  # 9 heads outside the top 3, 3 of them sampled
    assert bound["table1"] == "screened" and bound["confidence"] == 0.9
    assert (bound["verified"], bound["sampled"], bound["screened_only"]) == (3, 3, 6)
    assert bound["bound_significant_unverified"] == min(6, math.floor(share * 9 + 1e-9) - s)
    threshold = verified["delta"].abs().min()
    larger = int((sampled["delta"].abs() > threshold).sum())
    share = 1.0 if larger == 3 else beta(larger + 1, 3 - larger).ppf(0.9)
    assert bound["effect_threshold"] == pytest.approx(threshold)
    assert bound["bound_larger_unverified"] == min(6, math.floor(share * 9 + 1e-9) - larger)
    md = (jobs / "screened.table_md").read_text()
    assert "screened Table 1 (first_order screen): 3 heads verified, 3 sampled, 6 screened only" in md
    assert "· marks a head screened only" in md and md.count("·") == 6 + 1
    cells = pd.read_csv(jobs / "screened.table_csv")
    assert (cells["verification"] == "screened").sum() == 6 and set(cells.loc[cells.verification == "screened",
                                                                               "cell"]) == {"·"}
    bins = pd.read_csv(jobs / "screened.bins_csv")
    assert bins["count"].sum() == 6  # Figure 1: the heads ablated
    exhaustive = pd.read_csv(jobs / "exhaustive.bound.csv").iloc[0]
    assert exhaustive["table1"] == "exhaustive" and exhaustive["verified"] == 12
    assert exhaustive["bound_significant_unverified"] == 0
    assert "screened" not in (jobs / "exhaustive.table_md").read_text()


def test_the_scorecards_c1_gives_the_range_the_bound_leaves(jobs):
    from headprune.report.claims.michel import MOST_HEADS

    bound = pd.read_csv(jobs / "screened.bound.csv").iloc[0]
    c1 = pd.read_csv(jobs / "scorecard.csv").query("claim == 'C1'").iloc[0]
    found = int(bound["significant_verified"] + bound["significant_sampled"])
    most, fewest = 12 - found, 12 - found - int(bound["bound_significant_unverified"])
    assert c1["this_run"].startswith(f"{fewest}/12 ")
    assert f"to {most}/12 " in c1["this_run"] and "screened Table 1" in c1["this_run"]
    expected = ("reproduced" if 100 * fewest / 12 > MOST_HEADS else
                "not reproduced" if 100 * most / 12 <= MOST_HEADS else "undecided")
    assert c1["verdict"] == expected


def test_the_oracle_order_of_a_screened_table_prunes_the_screened_only_heads_first(jobs):
    from headprune.evaluation.runs import oracle_order

    screened = pd.read_csv(jobs / "screened.csv")
    order = oracle_order(screened)
    only = screened[screened.verification == "screened"].sort_values("screen")
    assert order[:6] == [(r.attn_type, r.layer, r.head) for r in only.itertuples()]
    ablated = screened[screened.verification != "screened"].sort_values("score", kind="stable")  # perplexity: lowest
    assert order[6:] == [(r.attn_type, r.layer, r.head) for r in ablated.itertuples()]


# --- the config: ablation.strategy / ablation.per_study and ablation.screen ---------------------------------------


def demo_config(**ablation):
    import yaml

    config = yaml.safe_load((ROOT / "demo" / "config.yaml").read_text())
    config["ablation"].update(ablation)
    return config


def pipeline_of(config):
    from headprune.config_schema import validate

    from headprune.studies import Pipeline

    validate(config)
    return Pipeline(config)


def test_a_screened_study_has_one_ablation_job_and_its_screen_reads_the_importance_data_not_the_test_set():
    pipeline = pipeline_of(demo_config(per_study={"tiny_llama": "screened"}, screen={"method": "exact", "items": 4}))
    lm, bert = pipeline.study("tiny_llama"), pipeline.study("mnli")
    assert stages.ablation.screened(lm) and not stages.ablation.screened(bert) and stages.ablation.jobs(lm) == ["screened"] and len(stages.ablation.jobs(bert)) > 0
    params = stages.ablation.screen_params(lm)
    assert params["method"] == "exact" and params["top_k"] == "20%" and params["sample"] == "5%"  # the defaults
    assert params["screen_set"]["windows"].endswith("/train.npy") and params["screen_set"]["max_items"] == 4
    assert lm.evalset_spec("eval")["windows"] != params["screen_set"]["windows"]  # never the test set
    assert stages.ablation.screen_table(lm) == [f"{pipeline.results_dir}/tiny_llama/screen.csv"] and stages.ablation.screen_table(bert) == []
    default = pipeline_of(demo_config())
    assert not any(stages.ablation.screened(default.study(name)) for name in default.study_names)  # exhaustive, the paper's


@pytest.mark.parametrize("ablation, message", [
    ({"per_study": {"gpt5": "screened"}}, "ablation.per_study names 'gpt5'"),
    ({"per_study": {"tiny_llama": "screened"}, "screen": {"top_k": 9}, "masking": "zero"}, None),  # 9 > 8: all heads
    ({"per_study": {"tiny_llama": "screened"}, "screen": {"top_k": "50%", "sample": "ten"}},
     r"\['screen'\]\['properties'\]\['sample'\]"),  # the schema names the key its way
    ({"per_study": {"tiny_llama": "screened"}, "masking": "uniform"}, "ablation.masking is uniform"),
    ({"strategy": "screened", "screen": {"method": "exact"}}, "ablation.screen.method 'exact'"),
    ({"strategy": "sampled"}, r"'sampled' is not one of \['exhaustive', 'screened'\]"),
])
def test_a_screened_config_that_cannot_run_names_its_key(ablation, message):
    config = demo_config(**ablation)
    if message is None:
        assert stages.ablation.screened(pipeline_of(config).study("tiny_llama"))
        return
    with pytest.raises(Exception, match=message):
        pipeline_of(config)


def test_the_dag_of_a_screened_study_screens_then_ablates_once(tmp_path):
    from dry_run import job_stats, write_config

    config = write_config(tmp_path / "config.yaml",
                          lambda c: c["ablation"].update(per_study={"tiny_llama": "screened"}))
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(config), "--directory",
                             str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    out = result.stdout
    assert "output: results/demo/tiny_llama/screen.csv" in out
    assert "output: results/demo/tiny_llama/ablation/screened.json" in out
    assert "results/demo/tiny_llama/ablation/dec_self" not in out  # no per-head jobs for it
    assert "output: results/demo/mnli/screen.csv" not in out and "results/demo/mnli/ablation/enc_self" in out
    stats = job_stats(out)
    assert stats["screen_heads"] == 1 and stats["ablate_screened"] == 1


def test_the_head_maps_and_figure_2_stand_on_the_heads_ablated(jobs):
    from headprune.report.figures import figure2_table
    from headprune.report.figures.head_maps import build_head_maps_figure, head_maps_table

    screened, exhaustive = pd.read_csv(jobs / "screened.csv"), pd.read_csv(jobs / "exhaustive.csv")
    table = head_maps_table({"lm": screened, "lm_exhaustive": exhaustive.assign(study="lm_exhaustive")})
    mine = table[table.study == "lm"].set_index(KEY)
    marks = screened.set_index(KEY)["verification"]
    assert (mine["verification"] == marks.loc[mine.index]).all()
    assert mine.loc[marks[marks == "screened"].index, "cost_points"].isna().all()
    assert not mine.loc[marks[marks == "screened"].index, "significant"].any()
    assert set(table.loc[table.study == "lm_exhaustive", "verification"]) == {"exhaustive"}
    title = build_head_maps_figure(table, "lm").axes[0].get_title()
    assert "screened: blank = not ablated" in title
    assert len(figure2_table(screened, screened)) == 6  # the heads ablated in both test sets


def test_an_oracle_from_a_screened_table_says_so_in_figure_3():
    from headprune.report.figures import build_figure3

    rows = [{"study": "lm", "order": order, "scope": "all", "step": step, "percent_pruned": 50.0 * step,
             "heads_pruned": 2 * step, "heads_left": 4 - 2 * step, "score": 10.0 + step + (order == "oracle"),
             "metric": "perplexity", "table1": "screened" if order == "oracle" else ""}
            for order in ("importance", "oracle", "random") for step in range(3)]
    figure = build_figure3(pd.DataFrame(rows))
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert "oracle (single-head ablation), screened Table 1" in labels and "importance $I_h$" in labels
    exhaustive = build_figure3(pd.DataFrame(rows).drop(columns="table1"))
    assert "oracle (single-head ablation)" in [t.get_text() for t in exhaustive.axes[0].get_legend().get_texts()]
