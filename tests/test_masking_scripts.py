"""The jobs that mask heads, run as Snakemake runs them (the script with a ``snakemake`` object), on a saved tiny
Llama, under a mode that puts something in a head's place (#32): their numbers against perplexities computed here
by hand under ``headprune.gated``. One child process runs every job (torch imported once)."""
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

from headprune.evaluation.runs import gates_without
from headprune.models.head_constants import HeadConstants, ResamplePool
from headprune.models.heads import gated
from headprune.models.masking import Mean, Resample

ROOT = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(30)]
HEADS = [("dec_self", layer, head) for layer in range(2) for head in range(4)]

# Each job: the script with a snakemake object as Snakemake's script directive gives it (named inputs, outputs and
# params; a log; wildcards).
RUNNER = """
import json, runpy, sys, types

class Named(list):
    def __init__(self, items):
        super().__init__(items.values())
        self.__dict__.update(items)
        self._names = list(items)

    def keys(self):
        return self._names

    def get(self, key, default=None):
        return self.__dict__.get(key, default)

for job in json.loads(open(sys.argv[1]).read()):
    snakemake = types.SimpleNamespace(input=Named(job["input"]), output=Named(job["output"]), log=[job["log"]],
                                      params=Named(job["params"]), wildcards=Named(job.get("wildcards", {})),
                                      rule=job["rule"], config={}, threads=1)
    runpy.run_path(job["script"], init_globals={"snakemake": snakemake}, run_name="__main__")
"""


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A tiny Llama (2 layers of 4 query heads on 2 key/value heads) saved with its tokenizer, its windows, and the
    mean constants and resample donors of its "training" windows."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from headprune.evaluation.perplexity import window_batches
    from headprune.scoring.constants import mean_constants, resample_pool

    folder = tmp_path_factory.mktemp("masking_jobs")
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<unk>", *WORDS])}, "<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>").save_pretrained(folder / "model")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(WORDS) + 1, hidden_size=32, intermediate_size=48,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         initializer_range=0.3, attn_implementation="eager")).eval()
    model.save_pretrained(folder / "model")
    rng = np.random.default_rng(0)
    for name, n in (("train", 12), ("eval", 6), ("selection", 5), ("test", 5)):
        np.save(folder / f"{name}.npy", rng.integers(1, len(WORDS) + 1, (n, 12)).astype(np.int64))
    train = window_batches(np.load(folder / "train.npy").tolist(), 4)
    mean_constants(model, train, data="train", progress=False).save(folder / "mean.safetensors")
    resample_pool(model, train, data="train", progress=False).save(folder / "resample.safetensors")
    pd.DataFrame([{"attn_type": t, "layer": layer, "head": h, "importance": float(i)}
                  for i, (t, layer, h) in enumerate(HEADS[::-1])]).to_csv(folder / "importance.csv", index=False)
    # retrieval scores: heads 1-2, 0-0, 1-3 first (the top-K heads Wu et al.'s experiment masks)
    pd.DataFrame([{"attn_type": t, "layer": layer, "head": h,
                   "retrieval": {(1, 2): 0.9, (0, 0): 0.8, (1, 3): 0.7}.get((layer, h), 0.1)}
                  for t, layer, h in HEADS]).to_csv(folder / "head_roles.csv", index=False)
    return folder


def evalset(folder, name):
    return {"kind": "language_modeling", "windows": str(folder / f"{name}.npy"), "name": name, "window": 12,
            "max_items": None}


def ppl(model, folder, name, gates, masking):
    """Perplexity of a window file by hand: exp(summed next-token NLL / tokens) under gated()."""
    ids = torch.tensor(np.load(folder / f"{name}.npy"))
    with torch.no_grad(), gated(model, gates, masking=masking):
        logits = model(input_ids=ids).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum")
    return math.exp(float(nll) / ids[:, 1:].numel())


@pytest.fixture(scope="module")
def jobs(place):
    """Every job run once: an ablation job under resample with 2 draws, Voita's gates under mean masking, Wu et al.'s
    experiment under mean masking, and the mode sweep of mean masking with one head per layer."""
    folder = place
    study = {"name": "lm", "kind": "language_modeling", "model": str(folder / "model"), "layers": 2, "heads": 4,
             "device": "cpu"}
    mean = {"masking": {"word": "mean", "constants": str(folder / "mean.safetensors")}, "batch_size": 4,
            "progress": False}
    resample = {"masking": {"word": "resample", "pool": str(folder / "resample.safetensors"), "seed": 1, "draws": 2},
                "batch_size": 4, "progress": False}
    test = {"resamples": 50, "seed": 0, "alpha": 0.01}
    out = folder / "out"
    specs = [
        {"rule": "ablate_head", "script": "evaluate.py", "input": {}, "output": {"json": str(out / "ablation.json")},
         "wildcards": {"head": "dec_self-0-1..dec_self-1-2"},
         "params": {"study": study, "evaluation": {"heads": ["dec_self-0-1", "dec_self-1-2"],
                                                   "roles": {"eval": evalset(folder, "eval")}, "settings": resample}}},
        {"rule": "concrete_gates", "script": "concrete_gates.py", "input": {"importance": str(folder / "importance.csv")},
         "output": {"row": str(out / "concrete.csv"), "heads": str(out / "concrete.heads.csv"),
                    "training": str(out / "concrete.training.csv")},
         "params": {"study": study, "concrete": {
             "penalty": 0.5, "train": {"kind": "language_modeling", "windows": str(folder / "train.npy"),
                                       "max_items": None, "batch_size": 4},
             "train_model": False, "steps": 30, "lr": 0.2, "model_lr": 1e-5, "temperature": 0.33, "seed": 0,
             "compare": ["importance", "random"], "eval": evalset(folder, "eval"), "settings": mean, "random_seed": 0,
             "significance": test}}},
        {"rule": "retrieval_heads", "script": "retrieval_heads.py", "input": {"roles": str(folder / "head_roles.csv")},
         "output": {"csv": str(out / "retrieval_heads.csv")},
         "params": {"study": study, "experiment": {
             "k": [1, 3], "random_sets": 2, "heads_from": "lm", "significance": test,
             "scores": [{"name": "perplexity", "eval": evalset(folder, "eval"), "settings": mean}]}}},
        {"rule": "masking_mode", "script": "masking_mode.py", "input": {"importance": str(folder / "importance.csv")},
         "output": {"csv": str(out / "mean.csv")},
         "params": {"study": study, "sweep": {
             "mode": "mean", "eval": evalset(folder, "eval"), "settings": mean, "step_percent": 50,
             "importance": {"estimator": "token", "normalize": True}, "significance": test,
             "one_head": {"selection": evalset(folder, "selection"), "test": evalset(folder, "test")}}}},
    ]
    for spec in specs:
        spec["script"] = str(ROOT / "scripts" / spec["script"])
        spec["log"] = str(out / f"{spec['rule']}.log")
    (folder / "jobs.json").write_text(json.dumps(specs))
    result = subprocess.run([sys.executable, "-c", RUNNER, str(folder / "jobs.json")], capture_output=True, text=True,
                            cwd=ROOT, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1",
                                                        "HF_HUB_OFFLINE": "1"})
    logs = "\n".join(p.read_text()[-3000:] for p in out.glob("*.log")) if out.exists() else ""
    assert result.returncode == 0, result.stderr[-3000:] + logs
    return out


@pytest.fixture(scope="module")
def model(place):
    from headprune.models.loading import load_causal_lm

    return load_causal_lm(place / "model")[0]


def test_an_ablation_job_averages_its_score_over_resample_draws(place, jobs, model):
    pool = ResamplePool.load(place / "resample.safetensors")
    heads = json.loads((jobs / "ablation.json").read_text())["heads"]
    for name, head in (("dec_self-0-1", ("dec_self", 0, 1)), ("dec_self-1-2", ("dec_self", 1, 2))):
        draws = [ppl(model, place, "eval", gates_without(model, [head]), Resample(pool, 1, draw)) for draw in (0, 1)]
        got = heads[name]["eval"]
        assert got["draw_scores"] == pytest.approx(draws, rel=1e-5)
        assert got["score"] == pytest.approx(sum(draws) / 2, rel=1e-5)
        assert len(got["outputs"]) == 6  # the first draw's per-window outputs, for the paired test


def test_hard_concrete_gates_are_trained_and_compared_under_the_studys_masking(place, jobs, model):
    mean = Mean(HeadConstants.load(place / "mean.safetensors"))
    row = pd.read_csv(jobs / "concrete.csv").iloc[0]
    heads = pd.read_csv(jobs / "concrete.heads.csv")
    training = pd.read_csv(jobs / "concrete.training.csv")
    assert row["masking"] == "mean" and 0 < row["heads_kept"] < 8  # the penalty closed some gates, not all
    assert training["loss"].tail(5).mean() < training["loss"].head(5).mean()
    closed = [(r.attn_type, r.layer, r.head) for r in heads.itertuples() if not r.kept]
    assert row["score_full"] == pytest.approx(ppl(model, place, "eval", None, mean), rel=1e-5)
    assert row["score_concrete"] == pytest.approx(ppl(model, place, "eval", gates_without(model, closed), mean),
                                                  rel=1e-5)
    least_important = HEADS[::-1][:len(closed)]  # importance.csv's order, the lowest I_h first
    assert row["score_importance"] == pytest.approx(
        ppl(model, place, "eval", gates_without(model, least_important), mean), rel=1e-5)


def test_wu_et_al_masks_the_retrieval_heads_by_the_configured_masking(place, jobs, model):
    mean = Mean(HeadConstants.load(place / "mean.safetensors"))
    table = pd.read_csv(jobs / "retrieval_heads.csv")
    assert set(table["masking"]) == {"mean"}
    top = table[table["selection"] == "top"].set_index("k")
    top_heads = [("dec_self", 1, 2), ("dec_self", 0, 0), ("dec_self", 1, 3)]
    for k in (1, 3):
        assert top.loc[k, "heads"] == " ".join(f"{t}-{layer}-{h}" for t, layer, h in top_heads[:k])
        assert top.loc[k, "perplexity"] == pytest.approx(
            ppl(model, place, "eval", gates_without(model, top_heads[:k]), mean), rel=1e-5)
        zeroed = ppl(model, place, "eval", gates_without(model, top_heads[:k]), "zero")
        assert top.loc[k, "perplexity"] != pytest.approx(zeroed, rel=1e-4)  # not the paper's zeroing
    full = ppl(model, place, "eval", None, "zero")
    assert table["perplexity_full"].tolist() == pytest.approx([full] * len(table), rel=1e-5)


def test_the_mode_sweep_job_writes_one_head_per_layer_rows(place, jobs, model):
    from headprune.analyses.masking_modes import ONE_HEAD
    from headprune.evaluation.runs import gates_keeping_one

    mean = Mean(HeadConstants.load(place / "mean.safetensors"))
    table = pd.read_csv(jobs / "mean.csv")
    layers = table[table["experiment"] == ONE_HEAD].set_index("layer")
    assert list(layers.index) == [0, 1]
    for layer in (0, 1):
        kept = ppl(model, place, "test", gates_keeping_one(model, "dec_self", layer, int(layers.loc[layer, "head"])),
                   mean)
        assert layers.loc[layer, "score"] == pytest.approx(kept, rel=1e-5)
