"""A pruned model saved with ``headprune.models.export.save_pruned`` loads with plain transformers (issue #24).

Each tiny random model is pruned (unevenly under grouped-query attention, and with a layer left with no
head), saved, and loaded back in a child Python where headprune cannot be imported (``-I -S``: no
environment, no site hooks, so not the editable install's finder; the venv's site-packages put on
sys.path by hand; an import hook that refuses headprune on top) with ``AutoModelFor...from_pretrained(
folder, trust_remote_code=True)``: its outputs on a fixed input, greedy generation for the causal LMs,
and its parameter count equal the pruned model's in memory. One child loads every folder (importing
torch and transformers once). ``load_pruned_weights`` still reads the same folders.
"""
import ast
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import _spread_weights, bert_batch, tiny_bert, tiny_fsmt
from test_adapter_contract import (BOS, VOCAB, _causal_config, _random_biases, roberta_batch, tiny_deberta_v2,
                                   tiny_deberta_v2_separate, tiny_distilbert, tiny_electra, tiny_gpt2,
                                   tiny_mistral, tiny_qwen2, tiny_roberta, tiny_xlm_roberta)
from headprune.models.export import REMOTE, REMOTE_FILES, save_pruned
from headprune.models.families.llama import query_kv_index
from headprune.models.prune import count_heads, load_pruned_weights, prune_heads, pruned_heads


ROOT = Path(__file__).resolve().parents[1]


def tiny_llama_6_on_2(seed=0):
    """6 query heads on 2 kv heads (groups of 3), 4 layers, attention biases (q/k/v/o)."""
    torch.manual_seed(seed)
    config = _causal_config(LlamaConfig, hidden_size=24, intermediate_size=32, num_hidden_layers=4,
                            num_attention_heads=6, num_key_value_heads=2, head_dim=4, max_position_embeddings=64,
                            attention_bias=True)
    return _random_biases(_spread_weights(LlamaForCausalLM(config).eval()))


def causal_inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.cat([torch.full((2, 1), BOS), torch.randint(3, VOCAB, (2, 6), generator=g)], dim=1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def encoder_inputs(batch, token_types=True):
    keys = ("input_ids", "attention_mask", "token_type_ids") if token_types else ("input_ids", "attention_mask")
    return {k: batch[k] for k in keys if k in batch}


# family -> (builder, inputs, heads removed, Auto class, kind: causal / encoder)
LLAMA_6_REMOVAL = {0: [1], 1: [0, 1, 2, 3, 4, 5], 2: [3, 4, 5], 3: [0, 1, 5]}
FOUR_HEADS = {0: [1], 1: [0, 1, 2, 3]}
CASES = {
    "llama_6_on_2": (tiny_llama_6_on_2, causal_inputs, {"dec_self": LLAMA_6_REMOVAL}, "AutoModelForCausalLM"),
    "mistral": (tiny_mistral, causal_inputs, {"dec_self": FOUR_HEADS}, "AutoModelForCausalLM"),
    "qwen2": (tiny_qwen2, causal_inputs, {"dec_self": FOUR_HEADS}, "AutoModelForCausalLM"),
    "gpt2": (tiny_gpt2, causal_inputs, {"dec_self": FOUR_HEADS}, "AutoModelForCausalLM"),
    "bert": (tiny_bert, lambda: encoder_inputs(bert_batch()), {"enc_self": FOUR_HEADS},
             "AutoModelForSequenceClassification"),
    "roberta": (tiny_roberta, lambda: encoder_inputs(roberta_batch()), {"enc_self": FOUR_HEADS},
                "AutoModelForSequenceClassification"),
    "xlm_roberta": (tiny_xlm_roberta, lambda: encoder_inputs(roberta_batch()), {"enc_self": FOUR_HEADS},
                    "AutoModelForSequenceClassification"),
    "electra": (tiny_electra, lambda: encoder_inputs(bert_batch()), {"enc_self": FOUR_HEADS},
                "AutoModelForSequenceClassification"),
    "distilbert": (tiny_distilbert, lambda: encoder_inputs(bert_batch(), token_types=False),
                   {"enc_self": FOUR_HEADS}, "AutoModelForSequenceClassification"),
    "deberta_v3": (tiny_deberta_v2, lambda: encoder_inputs(bert_batch()), {"enc_self": FOUR_HEADS},
                   "AutoModelForSequenceClassification"),
    "deberta_v2": (tiny_deberta_v2_separate, lambda: encoder_inputs(bert_batch()), {"enc_self": FOUR_HEADS},
                   "AutoModelForSequenceClassification"),
}
CAUSAL = {"llama_6_on_2", "mistral", "qwen2", "gpt2"}
BASE_MODEL_TOO = {"llama_6_on_2", "bert"}  # also loaded with AutoModel: the base model's hidden states
NEW_TOKENS = 6
TEXT = "the cat sat"


def tiny_bert_tokenizer():
    from transformers import BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz", "the", "cat", "sat"]
    return BertTokenizer(vocab={w: i for i, w in enumerate(words)})

# Runs in the child: python -I -S CHILD site-packages jobs.json
CHILD = textwrap.dedent('''
    import importlib.abc, importlib.util, json, sys

    site_packages, jobs_file = sys.argv[1:3]
    sys.path.append(site_packages)  # without its .pth files: not the editable install's finder
    assert importlib.util.find_spec("headprune") is None, "headprune is importable in the child"

    class NoHeadprune(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "headprune":
                raise ImportError("headprune may not be imported here")

    sys.meta_path.insert(0, NoHeadprune())

    import numpy as np
    import torch
    import transformers

    for job in json.load(open(jobs_file)):
        auto = getattr(transformers, job["auto"])
        model = auto.from_pretrained(job["folder"], trust_remote_code=True, use_safetensors=True).eval()
        assert type(model).__name__.startswith("Pruned"), type(model)
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        inputs = {k: torch.from_numpy(np.load(f"{job['out']}/input_{k}.npy")) for k in job["inputs"]}
        with torch.no_grad():
            outputs = model(**inputs)
            result = outputs.logits if hasattr(outputs, "logits") else outputs.last_hidden_state
            np.save(f"{job['out']}/output.npy", result.numpy())
            if job["generate"]:
                tokens = model.generate(**inputs, max_new_tokens=job["generate"], do_sample=False)
                np.save(f"{job['out']}/generated.npy", tokens.numpy())
        if job["tokenize"]:
            ids = transformers.AutoTokenizer.from_pretrained(job["folder"])(job["tokenize"])["input_ids"]
            np.save(f"{job['out']}/tokens.npy", np.array(ids))
        with open(f"{job['out']}/parameters.json", "w") as f:
            json.dump({"parameters": sum(p.numel() for p in model.parameters()),
                       "num_parameters": model.num_parameters()}, f)
    assert not [m for m in sys.modules if m.split(".")[0] == "headprune"]
    print("child ok")
''')


def expected_outputs(model, inputs, base=False):
    with torch.no_grad():
        if base:
            return model.base_model(**inputs).last_hidden_state
        return model(**inputs).logits


def greedy(model, inputs):
    with torch.no_grad():
        return model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """family -> (pruned model, inputs, folder, {job name: what the child wrote}); one child for them all."""
    root = tmp_path_factory.mktemp("export")
    cases, jobs = {}, []
    for family, (builder, make_inputs, removal, auto) in CASES.items():
        model = prune_heads(builder(), removal)
        inputs = make_inputs()
        tokenizer = tiny_bert_tokenizer() if family == "bert" else None
        folder = save_pruned(model, tokenizer, root / family)
        results = {}
        for name, auto_class in [("auto", auto)] + ([("base", "AutoModel")] if family in BASE_MODEL_TOO else []):
            out = root / f"{family}-{name}-out"
            out.mkdir()
            for k, v in inputs.items():
                np.save(out / f"input_{k}.npy", v.numpy())
            jobs.append({"auto": auto_class, "folder": str(folder), "out": str(out), "inputs": list(inputs),
                         "generate": NEW_TOKENS if family in CAUSAL and name == "auto" else 0,
                         "tokenize": TEXT if tokenizer is not None else None})
            results[name] = out
        cases[family] = (model, inputs, folder, results)
    (root / "jobs.json").write_text(json.dumps(jobs))
    (root / "child.py").write_text(CHILD)
    home = root / "home"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "HF_HOME": str(home / "hf"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-I", "-S", str(root / "child.py"), sysconfig.get_paths()["purelib"],
                           str(root / "jobs.json")], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "child ok" in done.stdout
    return cases


@pytest.mark.parametrize("family", list(CASES))
def test_plain_transformers_loads_the_pruned_model(exported, family):
    model, inputs, folder, results = exported[family]
    out = results["auto"]
    assert sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl")) == []
    got = np.load(out / "output.npy")
    assert np.abs(got - expected_outputs(model, inputs).numpy()).max() <= 1e-5
    parameters = json.loads((out / "parameters.json").read_text())
    assert parameters["parameters"] == sum(p.numel() for p in model.parameters())
    assert parameters["num_parameters"] == model.num_parameters()
    if family in CAUSAL:
        assert np.array_equal(np.load(out / "generated.npy"), greedy(model, inputs).numpy())
    if family == "bert":  # saved with its tokenizer
        assert np.load(out / "tokens.npy").tolist() == tiny_bert_tokenizer()(TEXT)["input_ids"]
    if "base" in results:
        got = np.load(results["base"] / "output.npy")
        assert np.abs(got - expected_outputs(model, inputs, base=True).numpy()).max() <= 1e-5


@pytest.mark.parametrize("family", list(CASES))
def test_load_pruned_weights_reads_the_exported_folder(exported, family):
    model, inputs, folder, _ = exported[family]
    auto = getattr(transformers, CASES[family][3])  # as headprune.models.loading calls it
    for model_class in (type(model), auto):
        reloaded = load_pruned_weights(model_class, folder, attn_implementation="eager")
        assert type(reloaded) is type(model)  # transformers' class, not the remote code: no trust_remote_code
        assert (expected_outputs(reloaded, inputs) - expected_outputs(model, inputs)).abs().max() <= 1e-5
        assert pruned_heads(reloaded) == pruned_heads(model)
        assert count_heads(reloaded) == count_heads(model)
    if family == "llama_6_on_2":
        layers = reloaded.model.layers
        assert query_kv_index(layers[0].self_attn).tolist() == [0, 0, 1, 1, 1]  # kv head 0 keeps 2 of 3
        assert layers[1].self_attn.q_proj.out_features == 0
        assert query_kv_index(layers[3].self_attn).tolist() == [0, 1, 1]


def test_load_classifier_reads_the_exported_folder(exported):
    from headprune.models.loading import load_classifier

    model, inputs, folder, _ = exported["bert"]
    reloaded, tokenizer = load_classifier(folder)
    assert type(reloaded) is type(model)
    assert (expected_outputs(reloaded, inputs) - expected_outputs(model, inputs)).abs().max() <= 1e-5
    assert tokenizer(TEXT)["input_ids"] == tiny_bert_tokenizer()(TEXT)["input_ids"]


def test_the_exported_config_and_modeling_file(exported):
    model, _, folder, _ = exported["llama_6_on_2"]
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {"AutoModelForCausalLM": "modeling_headprune_llama.PrunedLlamaForCausalLM",
                                  "AutoModel": "modeling_headprune_llama.PrunedLlamaModel"}
    assert config["headprune_pruned_heads"] == {"dec_self": {str(k): v for k, v in LLAMA_6_REMOVAL.items()}}
    assert "AutoConfig" not in config["auto_map"]
    assert (folder / "modeling_headprune_llama.py").read_text() == (REMOTE / "modeling_headprune_llama.py").read_text()
    assert (folder / "model.safetensors").exists()


@pytest.mark.parametrize("name", sorted(set(REMOTE_FILES.values())))
def test_modeling_files_import_only_torch_and_transformers(name):
    tree = ast.parse((REMOTE / name).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 0}
    assert imported <= {"__future__", "torch", "transformers"}
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0]


def test_modeling_files_ship_as_package_data():
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["headprune.models"]
    assert "remote/*.py" in patterns


def test_families_left_out_are_refused(tmp_path):
    model = prune_heads(tiny_fsmt(), {"enc_self": {0: [1]}})
    with pytest.raises(ValueError, match="cannot be exported"):
        save_pruned(model, None, tmp_path / "fsmt")
    assert not (tmp_path / "fsmt").exists()


def test_save_pruned_keeps_the_model_in_memory_unchanged(tmp_path):
    model = prune_heads(tiny_bert(), {"enc_self": {0: [0, 2]}})
    before = pruned_heads(model)
    save_pruned(model, None, tmp_path / "bert")
    assert pruned_heads(model) == before
    assert not hasattr(model.config, "auto_map")  # written into config.json only
    assert not list(tmp_path.glob(".*partial"))
