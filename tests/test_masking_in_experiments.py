"""The masking modes through the experiments' batched evaluations (#32): a study's EvalSettings name a mode by its
config word and the file of its data, and a job's gate settings evaluated together (the layers below each
setting's first masked head replayed from the full model's pass where the mode allows it) give what each setting
gives alone under headprune.gated."""
import ast

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from headprune.evaluation.perplexity import window_batches, window_nll_variants
from headprune.evaluation.runs import EvalSettings, gates_without
from headprune.evaluation.shared_layers import replays_head_outputs
from headprune.models.heads import gated
from headprune.models.masking import MODES, Mean, Resample, Uniform, masked_as
from headprune.scoring.constants import mean_constants, resample_pool
from headprune import stages


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
                                                                               "seed": 3, "draw": 1}}
    settings = EvalSettings(masking={"word": word, **files.get(word, {})})
    masking = settings.masking
    assert isinstance(masking, {"mean": Mean, "resample": Resample, "uniform": Uniform}[word])
    with masked_as(llama, masking):
        assert replays_head_outputs(llama) == (word == "mean")  # resample reads positions: its layer runs
    batches = window_batches(windows(2), 3)
    gates_list = [None] + [gates_without(llama, [("dec_self", layer, head)]) for layer, head in
                           [(0, 1), (1, 4), (2, 0), (2, 5)]] + [gates_without(llama, [("dec_self", 1, h) for h in range(3)])]
    with masked_as(llama, masking):
        batched = window_nll_variants(llama, batches, gates_list, variant_batch_size=9)
    for gates, got in zip(gates_list, batched):
        expected = nll_alone(llama, batches, gates, masking)
        assert [n for _, n in got] == [n for _, n in expected]
        assert [s for s, _ in got] == pytest.approx([s for s, _ in expected], rel=1e-5, abs=1e-5)
    assert len({round(sum(s for s, _ in got), 4) for got in batched}) == len(gates_list)  # the settings differ


def test_a_mode_that_needs_data_says_which_file(llama, data):
    with pytest.raises(ValueError, match="optimal masking needs its constants file"):
        EvalSettings(masking="optimal")
    with pytest.raises(ValueError, match="resample masking needs its pool file"):
        EvalSettings(masking={"word": "resample", "seed": 0})
    with pytest.raises(ValueError, match=r"resample masking takes \['pool', 'seed', 'draw', 'draws'\], not \['constants'\]"):
        EvalSettings(masking={"word": "resample", "pool": str(data / "resample.safetensors"),
                              "constants": str(data / "mean.safetensors")})
    # the file is read once per process, whichever job's settings name it
    a = EvalSettings(masking={"word": "mean", "constants": str(data / "mean.safetensors")}).masking
    b = EvalSettings(masking={"word": "mean", "constants": str(data / "mean.safetensors")}, batch_size=3).masking
    assert isinstance(a, Mean) and a.head_constants is b.head_constants
    with pytest.raises(ValueError, match="Optimal masking takes optimal constants; these are 'mean'"):
        EvalSettings(masking={"word": "optimal", "constants": str(data / "mean.safetensors")}).masking.head_constants
    with masked_as(llama, Uniform()):
        assert not replays_head_outputs(llama)
    assert replays_head_outputs(llama)  # outside a block: the paper's zero masking


# --- resample's draws: K masking objects, every experiment's score their mean ------------------------------------

def ppl_alone(model, batches, gates, masking):
    """Perplexity of the setting alone under gated(), by hand: exp(summed NLL / tokens)."""
    import math

    nll = nll_alone(model, batches, gates, masking)
    return math.exp(sum(s for s, _ in nll) / sum(n for _, n in nll))


def test_resample_draws_average_every_experiments_score_and_test_the_first_draw(llama, data):
    from headprune.evaluation.runs import EvalSet, draw_settings, scored_variants
    from headprune.analyses.sweeps import pruning_tables, single_head_sweep
    from headprune.models.head_constants import ResamplePool

    chunks = windows(4)
    evalset = EvalSet("language_modeling", chunks, chunks, "perplexity")
    pool_file = str(data / "resample.safetensors")
    settings = EvalSettings(masking={"word": "resample", "pool": pool_file, "seed": 3, "draws": 2}, batch_size=4,
                            progress=False)
    assert [(s.masking.draw, s.masking.draws) for s in draw_settings(settings)] == [(0, 1), (1, 1)]
    pool = ResamplePool.load(pool_file)
    batches = window_batches(chunks, 4)
    off = [("dec_self", 1, 4), ("dec_self", 2, 0)]
    gates_list = [None, gates_without(llama, off[:1]), gates_without(llama, off)]
    by_hand = [[ppl_alone(llama, batches, gates, Resample(pool, 3, draw)) for draw in (0, 1)] for gates in gates_list]
    assert by_hand[1][0] != pytest.approx(by_hand[1][1], rel=1e-4)  # the two draws differ: the mean is not one of them
    scored = scored_variants(llama, None, evalset, gates_list, settings)
    for gates, result, (first, second) in zip(gates_list, scored, by_hand):
        assert result["draw_scores"] == pytest.approx([first, second], rel=1e-5)
        assert result["score"] == pytest.approx((first + second) / 2, rel=1e-5)
        # the paired tests compare the first draw's per-item outputs
        assert [s for s, _ in result["outputs"]] == pytest.approx(
            [s for s, _ in nll_alone(llama, batches, gates, Resample(pool, 3, 0))], rel=1e-5)
    # one draw: the first draw's score, as before
    single = scored_variants(llama, None, evalset, gates_list, EvalSettings(masking=Resample(pool_file, 3),
                                                                          batch_size=4, progress=False))
    assert [r["score"] for r in single] == pytest.approx([first for first, _ in by_hand], rel=1e-5)
    # the experiments reach it: single-head ablation (delta from the mean) and a pruning curve
    table = single_head_sweep(llama, None, evalset, settings, heads=off[:1], resamples=50)
    assert table["score"].iloc[0] == pytest.approx(sum(by_hand[1]) / 2, rel=1e-5)
    assert table["delta"].iloc[0] == pytest.approx(sum(by_hand[1]) / 2 - sum(by_hand[0]) / 2, rel=1e-4)
    curve, _ = pruning_tables(llama, None, evalset, {"order": off}, step_percent=50, settings=settings)
    assert curve["score"].tolist() == pytest.approx([sum(pair) / 2 for pair in by_hand], rel=1e-5)
    with pytest.raises(ValueError, match="Resample.draws must be an int >= 1"):
        Resample(pool_file, draws=0)


def test_a_configs_resample_draws_reach_the_experiments_settings_not_the_donors_job():
    import yaml

    pipeline = demo_pipeline(tiny_llama="resample")
    lm = pipeline.study("tiny_llama")
    assert "draws" not in stages.ablation.job_params(lm, stages.ablation.jobs(lm)[0])["settings"]["masking"]  # one draw: settings as they were
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    config = yaml.safe_load((root / "demo/config.yaml").read_text())
    config["models"]["tiny_llama"]["masking"] = "resample"
    config["constants"]["resample"] = {"draws": 3}
    pipeline = validated_pipeline(config)
    lm = pipeline.study("tiny_llama")
    for settings in (stages.ablation.job_params(lm, stages.ablation.jobs(lm)[0])["settings"], stages.pruning.params(lm, "importance")["settings"],
                     stages.ablation.one_head_params(lm, stages.ablation.one_head_jobs(lm)[0])["settings"], stages.masking_modes.params(lm, "resample")["settings"]):
        assert settings["masking"]["draws"] == 3 and EvalSettings(**settings).masking.draws == 3
    assert stages.constants.params(lm, "resample") == {"mode": "resample", "items": 64, "seed": 0}


def test_the_mode_sweep_reduces_each_layer_to_its_best_head_under_the_mode(llama, data):
    """C2 per mode: each layer keeps one head (the others at their mean), the best on the selection set by hand,
    scored on the test set by hand against the full model."""
    from headprune.analyses.masking_modes import ONE_HEAD, mode_sweep
    from headprune.evaluation.runs import EvalSet, all_heads, gates_keeping_one
    from headprune.models.head_constants import HeadConstants

    selection, test = (EvalSet("language_modeling", chunks, chunks, "perplexity") for chunks in (windows(5), windows(6)))
    settings = EvalSettings(masking=Mean(str(data / "mean.safetensors")), batch_size=3, progress=False)
    mean = Mean(HeadConstants.load(data / "mean.safetensors"))
    table = mode_sweep(llama, None, test, settings, all_heads(llama), mode="mean", study="lm", step_percent=50,
                       resamples=50, seed=0, alpha=0.01, one_head=(selection, test))
    layers = table[table["experiment"] == ONE_HEAD].reset_index(drop=True)
    assert len(layers) == 3 and set(table["experiment"]) == {"single head", "pruning", ONE_HEAD}
    selection_batches, test_batches = window_batches(selection.sources, 3), window_batches(test.sources, 3)
    full = ppl_alone(llama, test_batches, None, mean)
    bests = []
    for layer, row in layers.iterrows():
        by_head = [ppl_alone(llama, selection_batches, gates_keeping_one(llama, "dec_self", layer, h), mean)
                   for h in range(6)]
        best = min(range(6), key=lambda h: by_head[h])  # perplexity: the lowest
        kept = ppl_alone(llama, test_batches, gates_keeping_one(llama, "dec_self", layer, best), mean)
        assert (row["attn_type"], row["layer"], row["head"]) == ("dec_self", layer, best)
        assert row["score_full"] == pytest.approx(full, rel=1e-5) and row["score"] == pytest.approx(kept, rel=1e-5)
        assert row["delta"] == pytest.approx(kept - full, rel=1e-4, abs=1e-6)
        assert 0 <= row["p_bootstrap"] <= 1
        bests.append(best)
    # under zeroing the other heads, a layer's change is another number: the mode reached the experiment
    zeroed = mode_sweep(llama, None, test, EvalSettings(batch_size=3, progress=False), all_heads(llama), mode="zero",
                        study="lm", step_percent=50, resamples=50, seed=0, alpha=0.01, one_head=(selection, test))
    assert zeroed[zeroed["experiment"] == ONE_HEAD]["score"].tolist() != pytest.approx(layers["score"].tolist(), rel=1e-3)


# --- the pipeline: a study's masking word, its data job, the jobs that read it ---------------------------------

def demo_pipeline(**maskings):
    import yaml

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    config = yaml.safe_load((root / "demo/config.yaml").read_text())
    for study, word in maskings.items():
        config["models"][study]["masking"] = word
    return validated_pipeline(config)


def validated_pipeline(config):
    from headprune.config_schema import validate

    from headprune.studies import Pipeline

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    validate(config)
    return Pipeline(config)


def test_a_study_masked_by_a_constant_reads_its_importance_datas_file():
    pipeline = demo_pipeline(tiny_llama="mean", roberta_mnli="optimal", tiny_llama_niah="resample")
    results = pipeline.results_dir
    lm, roberta, niah = (pipeline.study(name) for name in ("tiny_llama", "roberta_mnli", "tiny_llama_niah"))
    settings = stages.ablation.job_params(lm, stages.ablation.jobs(lm)[0])["settings"]
    assert settings["masking"] == {"word": "mean", "constants": f"{results}/tiny_llama/head_constants/mean.safetensors"}
    built = EvalSettings(**settings).masking  # what the job builds its settings from (the file read when used)
    assert isinstance(built, Mean) and built.constants == settings["masking"]["constants"]
    assert stages.pruning.params(roberta, "importance")["settings"]["masking"]["constants"] == \
        f"{results}/roberta_mnli/head_constants/optimal.safetensors"
    # a retrieval study's I_h is its language model's: so are its donors (from the model's importance windows)
    niah_settings = stages.ablation.one_head_params(niah, stages.ablation.one_head_jobs(niah)[0])["settings"]
    assert niah_settings["masking"] == {"word": "resample", "pool": f"{results}/tiny_llama/head_constants/resample.safetensors",
                                        "seed": 0}
    assert stages.constants.params(lm, "optimal") == {"mode": "optimal", "steps": 50, "lr": 0.05, "repeats": 1, "seed": 0}
    # a mode without settings in the config has none: its data job reruns for nothing else (no other config key)
    assert stages.constants.params(lm, "mean") == {"mode": "mean"}
    assert [MODES[word].section(pipeline.config) for word in ("zero", "uniform", "mean")] == [{}, {}, {}]
    assert MODES["streaming"].section(pipeline.config) is pipeline.config["streaming"]
    assert stages.constants.masking_data(pipeline.study("mnli"), "zero") == []


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
    assert stages.importance.settings(pipeline.study("tiny_llama")) == {
        "estimator": "token", "normalize": True,
        "constants": f"{pipeline.results_dir}/tiny_llama/head_constants/optimal.safetensors"}
    assert stages.importance.settings(pipeline.study("mnli")) == {"estimator": "token", "normalize": True}


def demo_config():
    import yaml

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    return yaml.safe_load((root / "demo/config.yaml").read_text())


def test_voitas_gates_take_the_studys_masking_and_refuse_the_0_1_modes():
    from headprune.io.config_error import ConfigError

    results = demo_pipeline().results_dir
    config = demo_config()
    assert stages.concrete.params(validated_pipeline(config).study("mnli"), 0.05)["settings"]["masking"] == "zero"  # as before
    config["concrete"]["masking"] = "mean"
    pipeline = validated_pipeline(config)
    settings = stages.concrete.params(pipeline.study("demo_en_fr"), 0.05)["settings"]
    assert settings["masking"]["word"] == "mean"
    assert settings["masking"]["constants"] == f"{results}/demo_en_fr/head_constants/mean.safetensors"
    assert stages.concrete.masking_data(pipeline.study("demo_en_fr")) == [settings["masking"]["constants"]]
    for key, change in (("concrete.masking", lambda c: c["concrete"].update(masking="uniform")),
                        ("models.tiny_llama.masking", lambda c: (c["experiments"]["concrete"].append("tiny_llama"),
                                                                 c["models"]["tiny_llama"].update(masking="streaming")))):
        config = demo_config()
        change(config)
        with pytest.raises(ConfigError, match=rf"config: {key} is \w+, which takes gates 0 or 1 only, and "
                                              "experiments.concrete names"):
            validated_pipeline(config)


def test_wu_et_als_experiment_masks_as_the_config_says():
    config = demo_config()
    niah = validated_pipeline(config).study("tiny_llama_niah")
    params = stages.retrieval.heads_params(niah)
    assert [score["settings"]["masking"] for score in params["scores"]] == ["zero", "zero"]  # Wu et al.'s, as before
    assert stages.retrieval.heads_inputs(niah)["masking"] == []
    config["retrieval_heads"]["masking"] = "resample"
    config["constants"]["resample"] = {"draws": 2}
    pipeline = validated_pipeline(config)
    for name in ("tiny_llama_niah", "tiny_llama_passkey"):
        study = pipeline.study(name)
        for score in stages.retrieval.heads_params(study)["scores"]:
            assert score["settings"]["masking"]["word"] == "resample" and score["settings"]["masking"]["draws"] == 2
            assert score["settings"]["masking"]["pool"] in stages.retrieval.heads_inputs(study)["masking"]
    pool = f"{pipeline.results_dir}/tiny_llama/head_constants/resample.safetensors"
    assert stages.retrieval.heads_inputs(pipeline.study("tiny_llama_niah"))["masking"] == [pool]
    # a study's own masking comes first, as in its ablation and pruning
    config["models"]["tiny_llama_niah"]["masking"] = "mean"
    niah = validated_pipeline(config).study("tiny_llama_niah")
    scores = stages.retrieval.heads_params(niah)["scores"]
    assert [score["settings"]["masking"]["word"] for score in scores] == ["mean", "mean"]
    assert stages.retrieval.heads_inputs(niah)["masking"] == [f"{pipeline.results_dir}/tiny_llama/head_constants/mean.safetensors"]


def test_a_mode_sweep_of_a_study_in_one_head_per_layer_reads_its_selection_and_test_sets():
    pipeline = demo_pipeline()
    lm = pipeline.study("tiny_llama")
    params = stages.masking_modes.params(lm, "mean")
    assert params["one_head"] == {"selection": lm.evalset_spec("selection"), "test": lm.evalset_spec("test")}
    assert set(lm.eval_data(["eval", "selection", "test"])) <= set(stages.masking_modes.inputs(lm, "mean")["data"])
    config = demo_config()
    config["experiments"]["one_head_per_layer"].remove("tiny_llama")
    lm = validated_pipeline(config).study("tiny_llama")
    assert "one_head" not in stages.masking_modes.params(lm, "mean") and stages.masking_modes.roles(lm) == ["eval"]


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

    from headprune.analyses.masking_modes import as_scorecard_tables, compare_modes
    from headprune.report.figures.modes import build_modes_figure
    from headprune.report import scorecard

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
    ablation, pruning, one_head = as_scorecard_tables(runs)
    assert one_head.empty  # no one-head-per-layer rows: C2 is not judged per mode
    card = scorecard.scorecard({}, {}, masking_modes=(ablation, pruning, one_head))
    c1 = card[card["claim"] == "C1"].set_index("study")["this_run"]
    assert c1["lm (zero masking)"].startswith("1/4 (25%)") and c1["lm (mean masking)"].startswith("3/4 (75%)")
    c3 = card[card["claim"] == "C3"].set_index("study")["this_run"]
    assert c3["lm (zero masking)"].startswith("25% prunable") and c3["lm (mean masking)"].startswith("50% prunable")


def test_the_demo_compares_its_language_model_under_four_modes():
    pipeline = demo_pipeline()
    study = pipeline.study("tiny_llama")
    assert stages.masking_modes.modes(study) == ["zero", "mean", "optimal", "resample"]
    params = stages.masking_modes.params(study, "optimal")
    assert params["settings"]["masking"]["constants"].endswith("tiny_llama/head_constants/optimal.safetensors")
    assert stages.masking_modes.inputs(study, "zero")["masking"] == []
    assert f"{pipeline.figures_dir}/tiny_llama/masking_modes_summary.csv" in pipeline.targets()
    assert len(stages.report.scorecard_inputs(pipeline)["masking_modes"]) == 4


def test_a_studys_masking_is_resolved_in_the_constants_stage_alone():
    """The config side of masking's path (#47 item 4): the override models.<study>.masking over each experiment's
    word, the paper's when neither is written, resolved by stages.constants.masking alone, which every stage's
    jobs get their settings from (a study and the other stages never read a masking key)."""
    from pathlib import Path

    from headprune.stages import constants

    config = demo_config()
    config["ablation"]["masking"] = "uniform"
    config["pruning"]["masking"] = "mean"
    config["concrete"].pop("masking", None)
    config["models"]["tiny_llama"]["masking"] = "optimal"
    config["models"]["roberta_mnli"].pop("masking", None)
    pipeline = validated_pipeline(config)
    lm, roberta = pipeline.study("tiny_llama"), pipeline.study("roberta_mnli")
    assert [constants.masking(lm, key) for key in ("ablation", "pruning", "concrete")] == ["optimal"] * 3
    assert [constants.masking(roberta, key) for key in ("ablation", "pruning", "concrete")] == ["uniform", "mean", "zero"]
    assert constants.masking_key(lm, "pruning") == "models.tiny_llama.masking"
    assert constants.masking_key(roberta, "pruning") == "pruning.masking"
    # what the jobs get: the stages' settings are the constants stage's, by experiment
    assert stages.ablation.settings(roberta)["masking"] == "uniform"
    assert stages.pruning.settings(roberta)["masking"] == {
        "word": "mean", "constants": f"{pipeline.results_dir}/roberta_mnli/head_constants/mean.safetensors"}
    assert stages.pruning.settings(lm)["masking"]["word"] == "optimal"
    assert constants.eval_settings(roberta, "detokenized")["masking"] == "zero"  # a full model: no head off

    root = Path(__file__).resolve().parents[1]
    readers = []
    for path in [root / "headprune/studies.py", *sorted((root / "headprune/stages").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            # config["masking"], entry.get("masking"), "masking" in entry: a masking key read from the config
            read = (isinstance(node, ast.Subscript) and _is_masking(node.slice)
                    or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get" and node.args and _is_masking(node.args[0])
                    or isinstance(node, ast.Compare) and _is_masking(node.left))
            if read and path.name != "constants.py":
                readers.append(f"{path.relative_to(root)}:{node.lineno}")
    assert readers == [], readers


def _is_masking(node):
    return isinstance(node, ast.Constant) and node.value == "masking"
