"""The masking modes through the experiments' batched evaluations (#32): a study's EvalSettings name a mode by its
config word and the file of its data, and a job's gate settings evaluated together (the layers below each
setting's first masked head replayed from the full model's pass where the mode allows it) give what each setting
gives alone under headprune.gated."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from headprune.experiments.perplexity import window_batches, window_nll_variants
from headprune.experiments.runs import EvalSettings, gates_without
from headprune.experiments.shared_layers import replays_head_outputs
from headprune.models.heads import gated
from headprune.models.masking import Mean, Resample, Uniform
from headprune.scoring.constants import mean_constants, resample_pool


@pytest.fixture(scope="module")
def llama():
    """6 query heads on 2 key/value heads, 3 layers, tied embeddings."""
    config = LlamaConfig(vocab_size=40, hidden_size=24, intermediate_size=32, num_hidden_layers=3, num_attention_heads=6,
                         num_key_value_heads=2, head_dim=4, max_position_embeddings=64, tie_word_embeddings=True,
                         initializer_range=0.3, attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def windows(seed, n=6, length=12):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 40, (n, length), generator=g).tolist()


def nll_alone(model, batches, gates, masking):
    """(summed next-token NLL, predicted tokens) per window, the setting alone under gated()."""
    out = []
    with torch.no_grad(), gated(model, gates, masking=masking):
        for batch in batches:
            logits = model(input_ids=batch["input_ids"]).logits[:, :-1]
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch["input_ids"][:, 1:], reduction="none")
            out += [(float(row.sum()), row.numel()) for row in nll]
    return out


@pytest.fixture(scope="module")
def data(llama, tmp_path_factory):
    """The constants and donors from "training" windows, saved as a job saves them."""
    folder = tmp_path_factory.mktemp("constants")
    train = window_batches(windows(1, n=8), 4)
    constants = mean_constants(llama, train, data="train windows", progress=False)
    constants.save(folder / "mean.safetensors")
    resample_pool(llama, train, data="train windows", progress=False).save(folder / "resample.safetensors")
    return folder


@pytest.mark.parametrize("word", ["mean", "resample", "uniform"])
def test_a_modes_batched_variants_equal_each_setting_alone(llama, data, word):
    files = {"mean": {"constants": str(data / "mean.safetensors")}, "resample": {"pool": str(data / "resample.safetensors"),
                                                                               "resample_seed": 3, "draw": 1}}
    settings = EvalSettings(masking=word, **files.get(word, {}))
    masking = settings.mask
    assert isinstance(masking, {"mean": Mean, "resample": Resample, "uniform": str}[word])
    assert replays_head_outputs(masking) == (word == "mean")  # resample reads positions: its layer runs
    batches = window_batches(windows(2), 3)
    gates_list = [None] + [gates_without(llama, [("dec_self", layer, head)]) for layer, head in
                           [(0, 1), (1, 4), (2, 0), (2, 5)]] + [gates_without(llama, [("dec_self", 1, h) for h in range(3)])]
    batched = window_nll_variants(llama, batches, gates_list, variant_batch_size=9, masking=masking)
    for gates, got in zip(gates_list, batched):
        expected = nll_alone(llama, batches, gates, masking)
        assert [n for _, n in got] == [n for _, n in expected]
        assert [s for s, _ in got] == pytest.approx([s for s, _ in expected], rel=1e-5, abs=1e-5)
    assert len({round(sum(s for s, _ in got), 4) for got in batched}) == len(gates_list)  # the settings differ


def test_a_mode_that_needs_data_says_which_file(llama, data):
    with pytest.raises(ValueError, match="optimal masking needs its constants file"):
        EvalSettings(masking="optimal")
    with pytest.raises(ValueError, match="resample masking needs its pool file"):
        EvalSettings(masking="resample", constants=str(data / "mean.safetensors"))
    # the file is read once per process, whichever job's settings name it
    a = EvalSettings(masking="mean", constants=str(data / "mean.safetensors")).mask
    b = EvalSettings(masking="mean", constants=str(data / "mean.safetensors"), batch_size=3).mask
    assert isinstance(a, Mean) and a is b
    with pytest.raises(ValueError, match="Optimal masking takes optimal constants; these are 'mean'"):
        EvalSettings(masking="optimal", constants=str(data / "mean.safetensors")).mask  # noqa: B018
    assert not replays_head_outputs(Uniform())


# --- the pipeline: a study's masking word, its data job, the jobs that read it ---------------------------------

def demo_pipeline(**maskings):
    import yaml
    from snakemake.utils import validate

    from headprune.studies import Pipeline

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    config = yaml.safe_load((root / "demo/config.yaml").read_text())
    for study, word in maskings.items():
        config["models"][study]["masking"] = word
    validate(config, str(root / "rules/schemas/config.schema.yaml"))
    return Pipeline(config)


def test_a_study_masked_by_a_constant_reads_its_importance_datas_file():
    pipeline = demo_pipeline(tiny_llama="mean", roberta_mnli="optimal", tiny_llama_niah="resample")
    results = pipeline.results_dir
    lm, roberta, niah = (pipeline.study(name) for name in ("tiny_llama", "roberta_mnli", "tiny_llama_niah"))
    settings = lm.ablation_eval_params(lm.ablation_jobs[0])["settings"]
    assert settings["masking"] == "mean"
    assert settings["constants"] == f"{results}/tiny_llama/head_constants/mean.safetensors"
    assert EvalSettings(**settings).masking == "mean"  # what the job builds its settings from
    assert roberta.pruning_params("importance")["settings"]["constants"] == \
        f"{results}/roberta_mnli/head_constants/optimal.safetensors"
    # a retrieval study's I_h is its language model's: so are its donors (from the model's importance windows)
    niah_settings = niah.one_head_params(niah.one_head_jobs[0])["settings"]
    assert niah_settings["pool"] == f"{results}/tiny_llama/head_constants/resample.safetensors"
    assert niah_settings["resample_seed"] == 0
    assert lm.head_constants_params("optimal") == {"mode": "optimal", "steps": 50, "lr": 0.05, "repeats": 1, "seed": 0}
    assert pipeline.study("mnli").masking_data("zero") == []


def test_the_dag_makes_a_modes_data_once_and_its_jobs_wait_for_it(tmp_path):
    import subprocess
    import sys

    import yaml

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    config = yaml.safe_load((root / "demo/config.yaml").read_text())
    config["models"]["tiny_llama"]["masking"] = "mean"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(root / "Snakefile"), "--configfile",
                             str(tmp_path / "config.yaml"), "-d", str(tmp_path), "--printshellcmds",
                             "results/demo/tiny_llama/eval/ablation.csv"], capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    blocks = [block.strip() for block in (result.stdout + result.stderr).split("rule ")]  # grouped jobs are indented
    made = [b for b in blocks if b.startswith("head_constants:")]
    assert len(made) == 1 and "mode=mean" in made[0] and "study=tiny_llama" in made[0]
    ablations = [b for b in blocks if b.startswith("ablate_head:")]
    assert ablations and all("results/demo/tiny_llama/head_constants/mean.safetensors" in b for b in ablations)


def test_pruning_by_a_constant_ranks_heads_by_the_change_to_it():
    """Under mean or optimal pruning masking the importance job measures |(o_h - c_h) . dL/do_h| with the study's
    constants; under the others it is the paper's I_h (and its settings are as they were: no rerun)."""
    pipeline = demo_pipeline(tiny_llama="optimal", tiny_llama_niah="resample")
    assert pipeline.study("tiny_llama").importance_settings() == {
        "estimator": "token", "normalize": True,
        "constants": f"{pipeline.results_dir}/tiny_llama/head_constants/optimal.safetensors"}
    assert pipeline.study("mnli").importance_settings() == {"estimator": "token", "normalize": True}


# --- the comparison of modes ------------------------------------------------------------------------------------

def mode_runs(mode, deltas, curve, significant, full=10.0, study="lm"):
    import pandas as pd

    heads = [{"study": study, "mode": mode, "experiment": "single head", "attn_type": "dec_self", "layer": i // 2,
              "head": i % 2, "metric": "perplexity", "score_full": full, "score": full + d, "delta": d,
              "p_bootstrap": 0.0 if s else 0.5, "significant": s} for i, (d, s) in enumerate(zip(deltas, significant))]
    steps = [{"study": study, "mode": mode, "experiment": "pruning", "step": k, "percent_pruned": 25.0 * k,
              "heads_pruned": k, "metric": "perplexity", "score": score} for k, score in enumerate(curve)]
    return pd.DataFrame(heads + steps)


def test_the_modes_side_by_side_count_heads_prunable_share_and_rank_agreement():
    import pandas as pd
    from scipy.stats import spearmanr

    from headprune.experiments.masking_modes import as_scorecard_tables, build_modes_figure, compare_modes
    from headprune.experiments import scorecard

    runs = pd.concat([mode_runs("zero", [3.0, 0.5, 0.1, 1.0], [10.0, 10.05, 10.2, 11.0, 20.0], [True, True, False, True]),
                      mode_runs("mean", [2.0, 0.2, 0.3, 0.4], [10.0, 10.05, 10.08, 10.5, 12.0], [True, False, False, False])])
    summary, correlations = compare_modes(runs, within=1.0)
    assert summary["significant_heads"].tolist() == [3, 1]
    # within 1% of perplexity 10 (10.1): zero keeps 25% (10.2 at 50% is over), mean 50% (10.5 at 75% is over)
    assert summary["prunable_percent"].tolist() == [25.0, 50.0]
    assert summary["score_all_pruned"].tolist() == [20.0, 12.0]
    assert summary["largest_delta_worse"].tolist() == [3.0, 2.0]  # worse is positive: a perplexity rise
    assert correlations.loc["zero", "mean"] == pytest.approx(spearmanr([3.0, 0.5, 0.1, 1.0], [2.0, 0.2, 0.3, 0.4]).statistic)
    figure = build_modes_figure(runs, summary)
    assert [line.get_label() for line in figure.axes[1].get_lines()] == ["zero", "mean"]
    # the scorecard judges C1 and C3 under each mode, a study per mode
    ablation, pruning = as_scorecard_tables(runs)
    card = scorecard.scorecard(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                               pd.DataFrame(), paper_models={}, modes_ablation=ablation, modes_pruning=pruning)
    c1 = card[card["claim"] == "C1"].set_index("study")["this_run"]
    assert c1["lm (zero masking)"].startswith("1/4 (25%)") and c1["lm (mean masking)"].startswith("3/4 (75%)")
    c3 = card[card["claim"] == "C3"].set_index("study")["this_run"]
    assert c3["lm (zero masking)"].startswith("25% prunable") and c3["lm (mean masking)"].startswith("50% prunable")


def test_the_demo_compares_its_language_model_under_four_modes():
    pipeline = demo_pipeline()
    study = pipeline.study("tiny_llama")
    assert study.masking_modes == ["zero", "mean", "optimal", "resample"]
    params = study.masking_mode_params("optimal")
    assert params["settings"]["constants"].endswith("tiny_llama/head_constants/optimal.safetensors")
    assert study.masking_mode_inputs("zero")["masking"] == []
    assert f"{pipeline.figures_dir}/tiny_llama/masking_modes_summary.csv" in pipeline.targets()
    assert len(pipeline.scorecard_inputs()["masking_modes"]) == 4
