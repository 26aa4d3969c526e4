"""A pruned model saved with ``headprune.models.export.save_pruned`` loads with plain transformers (issues #24, #33).

A tiny random model of every family headprune prunes has heads removed (each attention type of an
encoder-decoder on its own, layers left with different head counts and one with none; unevenly under
grouped-query attention), is saved, and is loaded back in a child Python where headprune cannot be imported
(``-I -S``: no environment, no site hooks, so not the editable install's finder; the venv's site-packages put
on sys.path by hand; an import hook that refuses headprune on top) with ``AutoModelFor...from_pretrained(folder,
trust_remote_code=True)``. What it computes there is compared with an independent computation in headprune: the
unpruned model with those heads masked (``gated``, gate 0): the logits of a fixed input within 1e-5, and
``generate()`` with the generation config saved in the folder (beam search, several steps) token for token.
Its parameter count equals the physically pruned model's. One child loads every folder (importing torch and
transformers once). ``load_pruned_weights`` still reads the same folders; the model card says what was pruned.
"""
import ast
import copy
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
import yaml
from transformers import DebertaConfig, DebertaForSequenceClassification, LlamaConfig, LlamaForCausalLM

from conftest import _spread_weights, bert_batch, fsmt_batch, tiny_bert, tiny_fsmt, tiny_m2m100
from test_adapter_contract import (BOS, VOCAB, _causal_config, _random_biases, marian_batch, roberta_batch, tiny_bart,
                                   tiny_deberta_v2, tiny_deberta_v2_separate, tiny_distilbert, tiny_electra, tiny_gpt2,
                                   tiny_marian, tiny_mbart, tiny_mistral, tiny_nllb, tiny_qwen2, tiny_roberta,
                                   tiny_xlm_roberta)
from tolerances import within_rounding
from headprune.models.export import PORTABLE, REMOTE_FILES, save_pruned
from headprune.models.portable.headprune_attention import query_kv_index
from headprune.models.heads import full_gates, gated
from headprune.models.prune import count_heads, load_pruned_weights, prune_heads, pruned_heads

ROOT = Path(__file__).resolve().parents[1]


def tiny_llama_6_on_2(seed=0):
    """6 query heads on 2 kv heads (groups of 3), 4 layers, attention biases (q/k/v/o)."""
    torch.manual_seed(seed)
    config = _causal_config(LlamaConfig, hidden_size=24, intermediate_size=32, num_hidden_layers=4,
                            num_attention_heads=6, num_key_value_heads=2, head_dim=4, max_position_embeddings=64,
                            attention_bias=True)
    return _random_biases(_spread_weights(LlamaForCausalLM(config).eval()))


def tiny_llama_classifier(seed=0):
    """A decoder-only classifier (its head reads the last token): exported as AutoModelForSequenceClassification."""
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(seed)
    config = _causal_config(LlamaConfig, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, num_labels=3)
    return _random_biases(_spread_weights(LlamaForSequenceClassification(config).eval()))


def tiny_fsmt_as_converted():
    """As headprune's fairseq reader leaves FSMT: plain forward passes without the cache (FSMT builds its causal
    decoder mask only then), generate() with it."""
    model = _random_biases(tiny_fsmt())
    model.config.use_cache = False
    model.generation_config.use_cache = True
    return model


def tiny_prenorm_shared_all():
    """fairseq's --share-all-embeddings: one vocabulary, one matrix (M2M100's own tying)."""
    from conftest import EOS, PAD
    from headprune.models.prenorm import PreNormTransformer, prenorm_config

    torch.manual_seed(0)
    config = prenorm_config(source_vocab_size=40, target_vocab_size=40, share_all_embeddings=True,
                            share_decoder_input_output_embed=True, d_model=16, encoder_layers=2, decoder_layers=2,
                            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                            decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=PAD, bos_token_id=0,
                            eos_token_id=EOS, decoder_start_token_id=EOS, dropout=0.0, attention_dropout=0.0,
                            activation_dropout=0.0)
    model = _random_biases(_spread_weights(PreNormTransformer(config).eval()))
    with torch.no_grad():  # the output matrix is the embeddings: make </s> unlikely in both
        model.lm_head.weight[EOS] *= -1
    return model


def causal_inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.cat([torch.full((2, 1), BOS), torch.randint(3, VOCAB, (2, 6), generator=g)], dim=1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def encoder_inputs(batch, token_types=True):
    keys = ("input_ids", "attention_mask", "token_type_ids") if token_types else ("input_ids", "attention_mask")
    return {k: batch[k] for k in keys if k in batch}


def seq2seq_inputs(batch):
    return {k: batch[k] for k in ("input_ids", "attention_mask", "decoder_input_ids")}


LLAMA_6_REMOVAL = {0: [1], 1: [0, 1, 2, 3, 4, 5], 2: [3, 4, 5], 3: [0, 1, 5]}
FOUR_HEADS = {0: [1], 1: [0, 1, 2, 3]}
# Each attention type pruned on its own: layers with 3, 2, 1 and no heads left.
ENCODER_DECODER = {"enc_self": {0: [1], 1: [0, 1, 2, 3]}, "dec_self": {0: [0, 3], 1: [2]},
                   "enc_dec": {0: [0, 1, 2, 3], 1: [1, 2, 3]}}
CAUSAL_LM, CLASSIFIER, SEQ2SEQ = "AutoModelForCausalLM", "AutoModelForSequenceClassification", "AutoModelForSeq2SeqLM"
# family -> (builder, inputs, heads removed, Auto class)
CASES = {
    "llama_6_on_2": (tiny_llama_6_on_2, causal_inputs, {"dec_self": LLAMA_6_REMOVAL}, CAUSAL_LM),
    "mistral": (tiny_mistral, causal_inputs, {"dec_self": FOUR_HEADS}, CAUSAL_LM),
    "qwen2": (tiny_qwen2, causal_inputs, {"dec_self": FOUR_HEADS}, CAUSAL_LM),
    "gpt2": (tiny_gpt2, causal_inputs, {"dec_self": FOUR_HEADS}, CAUSAL_LM),
    "llama_classifier": (tiny_llama_classifier, causal_inputs, {"dec_self": FOUR_HEADS}, CLASSIFIER),
    "bert": (tiny_bert, lambda: encoder_inputs(bert_batch()), {"enc_self": FOUR_HEADS}, CLASSIFIER),
    "roberta": (tiny_roberta, lambda: encoder_inputs(roberta_batch()), {"enc_self": FOUR_HEADS}, CLASSIFIER),
    "xlm_roberta": (tiny_xlm_roberta, lambda: encoder_inputs(roberta_batch()), {"enc_self": FOUR_HEADS}, CLASSIFIER),
    "electra": (tiny_electra, lambda: encoder_inputs(bert_batch()), {"enc_self": FOUR_HEADS}, CLASSIFIER),
    "distilbert": (tiny_distilbert, lambda: encoder_inputs(bert_batch(), token_types=False), {"enc_self": FOUR_HEADS},
                   CLASSIFIER),
    "deberta_v3": (tiny_deberta_v2, lambda: encoder_inputs(bert_batch()), {"enc_self": FOUR_HEADS}, CLASSIFIER),
    "deberta_v2": (tiny_deberta_v2_separate, lambda: encoder_inputs(bert_batch()), {"enc_self": FOUR_HEADS},
                   CLASSIFIER),
    "fsmt": (tiny_fsmt_as_converted, lambda: seq2seq_inputs(fsmt_batch()), ENCODER_DECODER, SEQ2SEQ),
    "prenorm": (lambda: _random_biases(tiny_m2m100()), lambda: seq2seq_inputs(fsmt_batch()), ENCODER_DECODER,
                SEQ2SEQ),
    "prenorm_untied": (lambda: _random_biases(tiny_m2m100(share_decoder_input_output_embed=False)),
                       lambda: seq2seq_inputs(fsmt_batch()), ENCODER_DECODER, SEQ2SEQ),
    "prenorm_shared_all": (tiny_prenorm_shared_all, lambda: seq2seq_inputs(fsmt_batch()), ENCODER_DECODER, SEQ2SEQ),
    "bart": (tiny_bart, lambda: seq2seq_inputs(fsmt_batch()), ENCODER_DECODER, SEQ2SEQ),
    "mbart": (tiny_mbart, lambda: seq2seq_inputs(fsmt_batch()), ENCODER_DECODER, SEQ2SEQ),
    "marian": (tiny_marian, lambda: seq2seq_inputs(marian_batch()), ENCODER_DECODER, SEQ2SEQ),
    "nllb": (tiny_nllb, lambda: seq2seq_inputs(fsmt_batch()), ENCODER_DECODER, SEQ2SEQ),
}
# also loaded with AutoModel: the base model's (the decoder's) hidden states
BASE_MODEL_TOO = {"llama_6_on_2", "bert", "fsmt", "bart", "marian"}
GENERATE_KEYS = {CAUSAL_LM: ["input_ids", "attention_mask"], SEQ2SEQ: ["input_ids", "attention_mask"]}
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
            if job["generate"]:  # with the generation config saved in the folder, nothing else
                tokens = model.generate(**{k: inputs[k] for k in job["generate"]})
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


def child_job(root: Path, name: str, auto: str, folder: Path, inputs: dict, generate: list | None = None,
              tokenize: str | None = None) -> tuple[dict, Path]:
    """One model for the child to load: (its job, the folder it writes its results to)."""
    out = root / f"{name}-out"
    out.mkdir()
    for k, v in inputs.items():
        np.save(out / f"input_{k}.npy", v.numpy())
    return {"auto": auto, "folder": str(folder), "out": str(out), "inputs": list(inputs), "generate": generate,
            "tokenize": tokenize}, out


def run_child(root: Path, jobs: list[dict]):
    """Load every job's folder in one Python that cannot import headprune."""
    (root / "jobs.json").write_text(json.dumps(jobs))
    (root / "child.py").write_text(CHILD)
    home = root / "home"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "HF_HOME": str(home / "hf"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, "-I", "-S", str(root / "child.py"), sysconfig.get_paths()["purelib"],
                           str(root / "jobs.json")], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "child ok" in done.stdout


def masking(model, removal: dict) -> dict:
    """Gates that switch off the heads of ``removal`` ({attn_type: {layer: [heads]}})."""
    gates = full_gates(model)
    for attn_type, layers in removal.items():
        for layer, heads in layers.items():
            gates[attn_type][int(layer), heads] = 0.0
    return gates


def masked_outputs(model, removal, inputs, base=False):
    with torch.no_grad(), gated(model, masking(model, removal)):
        if base:
            outputs = model.base_model(**inputs)
            return outputs.last_hidden_state
        return model(**inputs).logits


def masked_generate(model, removal, inputs, keys):
    with torch.no_grad(), gated(model, masking(model, removal)):
        return model.generate(**{k: inputs[k] for k in keys})


def beam_search_config(model):
    """Beam search over several cached steps, in the generation config that save_pruned writes."""
    model.generation_config.num_beams = 3
    model.generation_config.max_new_tokens = 6
    model.generation_config.min_new_tokens = 4
    model.generation_config.max_length = None
    return model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """family -> (masked model, pruned model, inputs, folder, {job name: what the child wrote}); one child for all."""
    root = tmp_path_factory.mktemp("export")
    cases, jobs = {}, []
    for family, (builder, make_inputs, removal, auto) in CASES.items():
        model = builder()
        if auto in GENERATE_KEYS:
            beam_search_config(model)
        pruned = prune_heads(copy.deepcopy(model), removal)
        inputs = make_inputs()
        tokenizer = tiny_bert_tokenizer() if family == "bert" else None
        folder = save_pruned(pruned, tokenizer, root / family)
        results = {}
        job, results["auto"] = child_job(root, family, auto, folder, inputs, GENERATE_KEYS.get(auto),
                                         TEXT if tokenizer is not None else None)
        jobs.append(job)
        if family in BASE_MODEL_TOO:
            job, results["base"] = child_job(root, f"{family}-base", "AutoModel", folder, inputs)
            jobs.append(job)
        cases[family] = (model, pruned, inputs, folder, results)
    run_child(root, jobs)
    return cases


@pytest.mark.parametrize("family", list(CASES))
def test_plain_transformers_loads_the_pruned_model(exported, family):
    model, pruned, inputs, folder, results = exported[family]
    removal, auto = CASES[family][2], CASES[family][3]
    out = results["auto"]
    assert sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".ckpt", ".pkl")) == []
    got = np.load(out / "output.npy")
    assert np.abs(got - masked_outputs(model, removal, inputs).numpy()).max() <= 1e-5
    with torch.no_grad():
        assert np.abs(got - model(**inputs).logits.numpy()).max() > 1e-2  # the heads removed mattered
    parameters = json.loads((out / "parameters.json").read_text())
    assert parameters["parameters"] == sum(p.numel() for p in pruned.parameters())
    assert parameters["parameters"] < sum(p.numel() for p in model.parameters())
    assert parameters["num_parameters"] == pruned.num_parameters()
    if auto in GENERATE_KEYS:
        expected = masked_generate(model, removal, inputs, GENERATE_KEYS[auto])
        assert np.array_equal(np.load(out / "generated.npy"), expected.numpy())
        prompt = inputs["input_ids"].shape[1] if auto == CAUSAL_LM else 1
        assert expected.shape[1] >= prompt + 4  # several cached decoding steps
    if family == "bert":  # saved with its tokenizer
        assert np.load(out / "tokens.npy").tolist() == tiny_bert_tokenizer()(TEXT)["input_ids"]
    if "base" in results:
        got = np.load(results["base"] / "output.npy")
        assert np.abs(got - masked_outputs(model, removal, inputs, base=True).numpy()).max() <= 1e-5


def test_every_family_headprune_prunes_is_exported():
    from headprune.models.export import DECODER_FILE, ENCODER_FILE, SEQ2SEQ_FILE, remote_file
    from headprune.models.families import families

    served = {t for module in families().values() for t in getattr(module, "MODEL_TYPES", ())}
    assert served == set(REMOTE_FILES) == {"fsmt"}  # the one family with an adapter of its own
    built = {CASES[f][0]().config.model_type: CASES[f][0]() for f in CASES}
    assert served <= set(built)
    # every other family through the generic adapter's file (tests/test_decoder_families.py,
    # test_encoder_families.py and test_seq2seq_families.py export every family of the registries that passes)
    files = {t: remote_file(model).name for t, model in built.items() if t not in served}
    assert {t for t, name in files.items() if name == DECODER_FILE} == {"llama", "mistral", "qwen2", "gpt2"}
    assert {t for t, name in files.items() if name == ENCODER_FILE} == {"bert", "roberta", "xlm-roberta", "electra",
                                                                        "distilbert", "deberta-v2"}
    assert {t for t, name in files.items() if name == SEQ2SEQ_FILE} == {"m2m_100", "bart", "mbart", "marian"}


@pytest.mark.parametrize("family", list(CASES))
def test_load_pruned_weights_reads_the_exported_folder(exported, family):
    _, pruned, inputs, folder, _ = exported[family]
    auto = getattr(transformers, CASES[family][3])  # as headprune.models.loading calls it
    # headprune's own PreNormTransformer is loaded by its class (headprune.models.fairseq.model_class_for)
    classes = (type(pruned),) if family.startswith("prenorm") else (type(pruned), auto)
    for model_class in classes:
        reloaded = load_pruned_weights(model_class, folder, attn_implementation="eager")
        assert type(reloaded) is type(pruned)  # transformers' class, not the remote code: no trust_remote_code
        with torch.no_grad():
            assert within_rounding(reloaded(**inputs).logits, pruned(**inputs).logits)
        assert pruned_heads(reloaded) == pruned_heads(pruned)
        assert count_heads(reloaded) == count_heads(pruned)
    if family == "llama_6_on_2":
        layers = reloaded.model.layers
        assert query_kv_index(layers[0].self_attn) == [0, 0, 1, 1, 1]  # kv head 0 keeps 2 of 3
        assert layers[1].self_attn.q_proj.out_features == 0
        assert query_kv_index(layers[3].self_attn) == [0, 1, 1]


def test_load_classifier_reads_the_exported_folder(exported):
    from headprune.models.loading import load_classifier

    _, pruned, inputs, folder, _ = exported["bert"]
    reloaded, tokenizer = load_classifier(folder)
    assert type(reloaded) is type(pruned)
    with torch.no_grad():
        assert within_rounding(reloaded(**inputs).logits, pruned(**inputs).logits)
    assert tokenizer(TEXT)["input_ids"] == tiny_bert_tokenizer()(TEXT)["input_ids"]


def test_the_exported_config_and_modeling_files(exported):
    folder = exported["llama_6_on_2"][3]
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {"AutoModelForCausalLM": "modeling_headprune_decoder.PrunedLlamaForCausalLM",
                                  "AutoModel": "modeling_headprune_decoder.PrunedLlamaModel"}
    assert config["headprune_pruned_heads"] == {"dec_self": {str(k): v for k, v in LLAMA_6_REMOVAL.items()}}
    assert "AutoConfig" not in config["auto_map"]
    for name in ("modeling_headprune_decoder.py", "headprune_decoder.py", "headprune_attention.py", "headprune_common.py"):
        assert (folder / name).read_text() == (PORTABLE / name).read_text()
    assert (folder / "model.safetensors").exists()

    fsmt = json.loads((exported["fsmt"][3] / "config.json").read_text())
    assert fsmt["auto_map"] == {"AutoModelForSeq2SeqLM": "modeling_headprune_fsmt.PrunedFSMTForConditionalGeneration",
                                "AutoModel": "modeling_headprune_fsmt.PrunedFSMTModel"}
    assert fsmt["headprune_pruned_heads"] == {t: {str(k): v for k, v in layers.items()}
                                              for t, layers in ENCODER_DECODER.items()}
    # headprune's pre-norm transformer: its own class, no base model (its source vocabulary sits above it)
    prenorm = json.loads((exported["prenorm"][3] / "config.json").read_text())
    assert prenorm["auto_map"] == {"AutoModelForSeq2SeqLM": "modeling_headprune_seq2seq.PrunedPreNormTransformer"}
    assert prenorm["architectures"] == ["PreNormTransformer"]


def imports_of(name: str) -> tuple[set[str], set[str]]:
    """(top-level packages, sibling modules) that a modeling file imports."""
    tree = ast.parse((PORTABLE / name).read_text())
    packages = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    packages |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 0}
    siblings = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0}
    return packages, siblings


@pytest.mark.parametrize("name", sorted(set(REMOTE_FILES.values())) + ["headprune_common.py"])
def test_modeling_files_import_only_torch_transformers_and_the_common_module(name):
    packages, siblings = imports_of(name)
    assert packages <= {"__future__", "functools", "torch", "transformers"}
    assert siblings == (set() if name == "headprune_common.py" else {"headprune_common"})


@pytest.mark.parametrize("name, siblings", [
    ("modeling_headprune_decoder.py", {"headprune_common", "headprune_decoder", "headprune_attention"}),
    ("headprune_decoder.py", set()), ("headprune_attention.py", {"headprune_common", "headprune_decoder"}),
    ("modeling_headprune_encoder.py", {"headprune_common", "headprune_attention", "headprune_decoder",
                                       "headprune_encoder"}),
    ("headprune_encoder.py", {"headprune_attention", "headprune_decoder"}),
    ("modeling_headprune_seq2seq.py", {"headprune_common", "headprune_attention", "headprune_decoder",
                                       "modeling_headprune_fsmt"})])
def test_the_generic_files_import_only_torch_and_transformers(name, siblings):
    packages, found = imports_of(name)
    assert packages <= {"__future__", "functools", "inspect", "sys", "types", "weakref", "torch", "transformers"}
    assert found == siblings


def test_modeling_files_ship_as_package_data():
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["headprune.models"]
    assert "portable/*.py" in patterns


def test_a_family_not_exported_is_refused(tmp_path):
    torch.manual_seed(0)
    config = DebertaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32)
    with pytest.raises(ValueError, match="cannot be exported"):
        save_pruned(DebertaForSequenceClassification(config), None, tmp_path / "deberta")
    assert not (tmp_path / "deberta").exists()


def test_save_pruned_keeps_the_model_in_memory_unchanged(tmp_path):
    model = prune_heads(tiny_bert(), {"enc_self": {0: [0, 2]}})
    before = pruned_heads(model)
    save_pruned(model, None, tmp_path / "bert")
    assert pruned_heads(model) == before
    assert not hasattr(model.config, "auto_map")  # written into config.json only
    assert not list(tmp_path.glob(".*partial"))


# --- The model card ---------------------------------------------------------------------------------------

def read_card(folder: Path) -> tuple[dict, str]:
    """(the YAML front matter, the markdown after it) of folder/README.md."""
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(front), body


def test_the_model_card_says_what_was_pruned_and_how_to_load_it(exported):
    front, body = read_card(exported["fsmt"][3])
    assert front["library_name"] == "transformers"
    assert {"headprune", "pruned", "fsmt", "custom_code"} <= set(front["tags"])
    assert front["pipeline_tag"] == "translation"
    assert "base_model" not in front  # built here: no hub id
    assert "AutoModelForSeq2SeqLM.from_pretrained(\"fsmt\", trust_remote_code=True)" in body
    assert "15 of its 24 attention heads" in body
    # one row per attention type and layer: heads kept, heads removed
    assert "| encoder self-attention (enc_self) | 1 | 0 of 4 | 0, 1, 2, 3 |" in body
    assert "| cross-attention (enc_dec) | 1 | 1 of 4 | 1, 2, 3 |" in body
    assert "| decoder self-attention (dec_self) | 0 | 2 of 4 | 0, 3 |" in body
    assert "- criterion: none recorded (the heads were named by hand)" in body


def test_the_model_card_names_the_criterion_the_masking_and_the_curve_point(tmp_path):
    model = prune_heads(tiny_gpt2(), {"dec_self": FOUR_HEADS})
    point = {"percent_pruned": 62.5, "heads_pruned": 5, "heads_left": 3, "score": 12.3456, "metric": "perplexity",
             "unpruned_score": 10.5, "data": "wiki.test.raw (64-token windows)"}
    folder = save_pruned(model, None, tmp_path / "gpt2-pruned", base_model="openai-community/gpt2",
                         criterion="importance", masking="zero", curve_point=point)
    front, body = read_card(folder)
    assert front["base_model"] == "openai-community/gpt2"
    assert front["pipeline_tag"] == "text-generation"
    assert "`openai-community/gpt2` (GPT2LMHeadModel) with 5 of its 8 attention heads" in body
    assert "- criterion: `importance`" in body
    assert "- masking while scoring: zero (a masked head's output multiplied by 0" in body
    assert ("- pruning curve: cut at 62.5% of the heads (5 of 8): perplexity 12.35 (unpruned: 10.5), scored on "
            "wiki.test.raw (64-token windows).") in body
    # a local path is named, but is no base_model for the hub
    folder = save_pruned(model, None, tmp_path / "again", base_model=str(tmp_path))
    front, body = read_card(folder)
    assert "base_model" not in front and f"`{tmp_path}`" in body
