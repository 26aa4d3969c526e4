"""GGUF files for llama.cpp (#58 item 3): the paper's free layout as a ``deci`` GGUF, checked in llama.cpp itself.

The writer's arithmetic (the heads sorted and key/value heads repeated as ggml groups them, the rope layout) is
checked by hand here; the files are loaded in llama.cpp (llama-cpp-python, the ``gguf`` extra) and every
position's logits compared with the pruned PyTorch model's (f32 weights, f32 key/value cache) where it is
installed; those tests skip without it (fail, with HEADPRUNE_REQUIRE_LLAMA_CPP=1: .ci/run installs it).
"""
import json
import os
import subprocess
import sys

import gguf  # a dependency: the writer needs no llama.cpp
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from headprune.models.gguf_export import head_plan, rope_rows, save_gguf
from headprune.models.prune import prune_heads


TEXT = "the cat sat on the mat and the dog sat on the log . a bird sang in the tree by the house . " * 20
LAYERS, HEADS = 4, 8


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (GPT-2's kind: llama.cpp's gpt2 vocabulary) trained on TEXT."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([TEXT], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")


def tiny_llama(kv_heads=4, seed=0, vocab=320, tied=False) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=kv_heads, head_dim=8,
                         tie_word_embeddings=tied, rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # larger than the init's 0.02, so that attention patterns differ between heads
        for layer in model.model.layers:
            for projection in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                projection.weight.normal_(0, 0.3)
    return model


# Layouts: {layer: removed heads}; 8 heads on 4 key/value heads (pairs), or on 2 (fours)
LAYOUTS = {
    "unpruned": (4, {}),
    "uneven": (4, {0: [1], 1: [0, 3, 5], 2: [6], 3: [2, 4, 7]}),
    "uneven_fours": (2, {0: [0, 1], 1: [4], 2: [1, 2, 3], 3: [5, 6, 7]}),  # groups of 2 and 4: kv head repeated
    "whole_groups": (4, {0: [0, 1], 1: [2, 3, 4, 5], 2: [6, 7], 3: [0, 1, 6, 7]}),
    "layer_without_heads": (4, {1: [3], 2: list(range(HEADS))}),
    "layer_0_without_heads": (4, {0: list(range(HEADS)), 3: [0, 5]}),
    "half": (4, {0: [0, 2, 5, 7], 1: [1, 2, 3, 4], 2: [0, 4, 6, 7], 3: [3, 5, 6, 1]}),
}


def pruned(name: str, **kwargs) -> LlamaForCausalLM:
    kv_heads, removed = LAYOUTS[name]
    model = tiny_llama(kv_heads, **kwargs)
    if removed:
        prune_heads(model, {"dec_self": removed})
    return model


# --- The writer, without llama.cpp ------------------------------------------------------------------------

def test_head_plan_sorts_queries_and_repeats_kv_heads_as_worked_by_hand():
    # kept query heads read kv heads [1, 0, 1, 1, 0, 1]: kv 0 by 2 queries, kv 1 by 4: groups of gcd 2
    plan = head_plan([1, 0, 1, 1, 0, 1])
    assert plan.queries == [1, 4, 0, 2, 3, 5] and plan.kv == [0, 1, 1]
    group = len(plan.queries) // len(plan.kv)  # llama.cpp: query i reads kv[i // group]
    assert [plan.kv[i // group] for i in range(6)] == [[1, 0, 1, 1, 0, 1][q] for q in plan.queries]
    assert head_plan([0, 0, 1, 1]).kv == [0, 1]  # even groups: nothing repeated
    assert head_plan([0, 1, 1, 1]).kv == [0, 1, 1, 1]  # 1 and 3: gcd 1
    assert (head_plan([]).heads, head_plan([], zero_head=True).heads) == (0, 1)


def test_rope_rows_interleave_each_heads_halves():
    weight = torch.arange(16.0).reshape(8, 2)  # 2 heads of 4 rows; rows (0, 2) and (1, 3) rotate together
    assert rope_rows(weight, 4)[:, 0].tolist() == [0, 4, 2, 6, 8, 12, 10, 14]


def test_metadata_holds_per_layer_heads_and_layers_without_heads_have_no_attention(tmp_path):
    model = pruned("layer_without_heads")
    reader = gguf.GGUFReader(save_gguf(model, byte_level_tokenizer(), tmp_path / "m.gguf", outtype="f32"))
    fields = reader.fields
    assert fields["general.architecture"].contents() == "deci"
    assert fields["deci.attention.head_count"].contents() == [8, 7, 0, 8]
    assert fields["deci.attention.head_count_kv"].contents() == [4, 7, 0, 4]  # 7 heads on uneven pairs: 7 kv
    names = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}
    assert not any(n.startswith("blk.2.attn") for n in names)  # llama.cpp skips it and expects none
    assert names["blk.1.attn_q.weight"] == (64, 56) and names["blk.1.attn_k.weight"] == (64, 56)
    assert fields["tokenizer.ggml.model"].contents() == "gpt2"
    tokens, types = fields["tokenizer.ggml.tokens"].contents(), fields["tokenizer.ggml.token_type"].contents()
    assert len(tokens) == 320 and tokens[0] == "<s>" and types[0] == 3 and types[-1] == 5  # control, padding


def test_pre_tokenizers_are_named_as_llama_cpp_knows_them():
    from headprune.models.gguf_export import _pre_tokenizer

    llama3 = pre_tokenizers.Split(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}", "isolated")
    cases = {"gpt-2": pre_tokenizers.ByteLevel(add_prefix_space=False),
             "smollm": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False)]),
             "llama-bpe": pre_tokenizers.Sequence([llama3, pre_tokenizers.ByteLevel(use_regex=False)]),
             "default": pre_tokenizers.Whitespace()}
    for name, pre in cases.items():
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre
        assert _pre_tokenizer(json.loads(tokenizer.to_str())["pre_tokenizer"]) == name


def test_layer_0_without_heads_gets_one_zero_head(tmp_path):
    reader = gguf.GGUFReader(save_gguf(pruned("layer_0_without_heads"), None, tmp_path / "m.gguf", "f16"))
    assert reader.fields["deci.attention.head_count"].contents()[0] == 1
    weights = {t.name: t for t in reader.tensors}
    assert weights["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert not np.asarray(weights["blk.0.attn_output.weight"].data).any()


@pytest.mark.parametrize("model_type", ["gpt2", "qwen3"])
def test_other_families_are_refused_in_one_line(tmp_path, model_type):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, vocab_size=32, hidden_size=32, n_embd=32, n_layer=2, n_head=4,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  intermediate_size=64, head_dim=8)
    model = AutoModelForCausalLM.from_config(config).eval()
    prune_heads(model, {"dec_self": {0: [1], 1: [0, 2]}})  # the free layout
    with pytest.raises(ValueError, match="cannot be written as a GGUF") as error:
        save_gguf(model, None, tmp_path / "m.gguf")
    assert "\n" not in str(error.value) and "deci" in str(error.value)
    assert not list(tmp_path.iterdir())


def test_word_level_tokenizer_and_bad_outtype_are_refused(tmp_path):
    words = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, "<unk>"))
    with pytest.raises(ValueError, match="WordLevel, for which llama.cpp has no vocabulary type"):
        save_gguf(tiny_llama(), PreTrainedTokenizerFast(tokenizer_object=words), tmp_path / "m.gguf")
    with pytest.raises(ValueError, match="outtype 'q8'"):
        save_gguf(tiny_llama(), None, tmp_path / "m.gguf", outtype="q8")
    assert not list(tmp_path.iterdir())


# --- In llama.cpp ---------------------------------------------------------------------------------------

def llama_cpp_module():
    """llama_cpp, or a skip (a failure where HEADPRUNE_REQUIRE_LLAMA_CPP=1: CI has installed it)."""
    if os.environ.get("HEADPRUNE_REQUIRE_LLAMA_CPP") == "1":
        import llama_cpp

        return llama_cpp
    return pytest.importorskip("llama_cpp")


def llama_cpp_logits(path, tokens: list[int]) -> np.ndarray:
    """Every position's logits of the GGUF at ``path`` in llama.cpp, f32 key/value cache."""
    llm = llama_cpp_module().Llama(str(path), n_ctx=64, n_batch=64, logits_all=True, n_threads=2, type_k=0,
                                   type_v=0, verbose=False)
    llm.eval(tokens)
    scores = np.array(llm.scores[:len(tokens)], dtype=np.float64)
    llm.close()
    return scores


def assert_logits_equal(model, path, tokens: list[int]):
    with torch.no_grad():
        want = model(torch.tensor([tokens])).logits[0].double().numpy()
    got = llama_cpp_logits(path, tokens)
    gap = np.abs(got - want).max()
    assert gap <= 2e-4 * max(1.0, np.abs(want).max()), gap
    assert (got.argmax(-1) == want.argmax(-1)).all()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_llama_cpp_gives_the_pruned_models_logits(tmp_path, layout):
    llama_cpp_module()
    tokenizer = byte_level_tokenizer()
    model = pruned(layout)
    path = save_gguf(model, tokenizer, tmp_path / "m.gguf", outtype="f32")
    tokens = tokenizer(TEXT[:150])["input_ids"][:40]
    assert_logits_equal(model, path, tokens)


def test_output_biases_are_written_a_headless_layers_too(tmp_path):
    """Bias compensation gives output projections a bias (prune.py): llama.cpp adds it after attention, so a layer
    without heads but with a bias keeps one zero head to carry it."""
    llama_cpp_module()
    tokenizer = byte_level_tokenizer()
    model = pruned("layer_without_heads")
    torch.manual_seed(1)
    for layer in model.model.layers:
        old = layer.self_attn.o_proj
        new = torch.nn.Linear(old.in_features, old.out_features, bias=True)
        with torch.no_grad():
            new.weight.copy_(old.weight), new.bias.normal_(0, 0.5)
        layer.self_attn.o_proj = new
    path = save_gguf(model, tokenizer, tmp_path / "m.gguf", outtype="f32")
    assert gguf.GGUFReader(path).fields["deci.attention.head_count"].contents()[2] == 1
    assert_logits_equal(model, path, tokenizer(TEXT[:150])["input_ids"][:40])


def sentencepiece_style_tokenizer() -> PreTrainedTokenizerFast:
    """BPE with byte fallback over "▁"-marked words (Llama 2's, TinyLlama's, Mistral's kind: llama.cpp's llama
    vocabulary)."""
    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>",
                                                                  *[f"<0x{b:02X}>" for b in range(256)]])
    tokenizer.train_from_iterator([TEXT], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def test_sentencepiece_style_vocabulary_and_llama3_rope_in_llama_cpp(tmp_path):
    llama_cpp = llama_cpp_module()
    tokenizer = sentencepiece_style_tokenizer()
    kv_heads, removed = LAYOUTS["uneven"]
    torch.manual_seed(0)
    # wavelengths 6.3, 30, 140, 660 at 8 dims against 128 / 8 and 128 / 1: kept, between, divided, divided
    rope = {"rope_type": "llama3", "rope_theta": 500.0, "factor": 4.0, "low_freq_factor": 1.0,
            "high_freq_factor": 8.0, "original_max_position_embeddings": 128}
    model = LlamaForCausalLM(LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                                         num_attention_heads=8, num_key_value_heads=4, head_dim=8,
                                         rope_parameters=rope)).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.normal_(0, 0.3), layer.self_attn.k_proj.weight.normal_(0, 0.3)
    prune_heads(model, {"dec_self": removed})
    path = save_gguf(model, tokenizer, tmp_path / "m.gguf", outtype="f32")
    reader = gguf.GGUFReader(path)
    assert reader.fields["tokenizer.ggml.model"].contents() == "llama"
    factors = next(t for t in reader.tensors if t.name == "rope_freqs.weight").data.tolist()
    assert factors[0] == 1.0 and 1 < factors[1] < 4 and factors[2:] == [4.0, 4.0]
    assert_logits_equal(model, path, tokenizer(TEXT[:150])["input_ids"][:40])
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    assert llm.token_bos() == tokenizer.bos_token_id and llm.token_eos() == tokenizer.eos_token_id


def test_the_cli_writes_a_saved_pruned_folder_llama_cpp_runs(tmp_path):
    llama_cpp = llama_cpp_module()
    from headprune.models.export import save_pruned

    tokenizer = byte_level_tokenizer()
    model = pruned("uneven", tied=True)
    save_pruned(model, tokenizer, tmp_path / "pruned")
    run = subprocess.run([sys.executable, "-m", "headprune.cli", "gguf", str(tmp_path / "pruned"),
                          str(tmp_path / "m.gguf"), "--outtype", "f32"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    tokens = tokenizer(TEXT[:120])["input_ids"][:32]
    assert_logits_equal(model, tmp_path / "m.gguf", tokens)
    # the vocabulary as written: llama.cpp tokenizes as the tokenizer does
    llm = llama_cpp.Llama(str(tmp_path / "m.gguf"), vocab_only=True, verbose=False)
    text = "the dog sat on the log by the tree ."
    assert llm.tokenize(text.encode(), add_bos=False) == tokenizer(text)["input_ids"]


def test_the_cli_refuses_a_family_in_one_line(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(vocab_size=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)).save_pretrained(tmp_path / "g")
    run = subprocess.run([sys.executable, "-m", "headprune.cli", "gguf", str(tmp_path / "g"),
                          str(tmp_path / "m.gguf")], capture_output=True, text=True)
    last = run.stderr.strip().splitlines()[-1]  # after transformers' loading bar
    assert run.returncode == 2 and last.startswith("headprune: error: MODEL_DIR ") and "deci" in last
    assert "GPT2LMHeadModel" in last and not (tmp_path / "m.gguf").exists()


# --- Table 4 in llama.cpp (speed.engines) -------------------------------------------------------------------

def speed_inputs(model):
    import pandas as pd

    from headprune.evaluation.runs import EvalSet, all_heads

    heads = all_heads(model)
    importance = pd.DataFrame([{"attn_type": t, "layer": layer, "head": h, "importance": float((7 * i) % 11)}
                               for i, (t, layer, h) in enumerate(heads)])  # half removed unevenly per layer
    windows = torch.randint(3, 300, (4, 40), generator=torch.Generator().manual_seed(0)).tolist()
    return importance, EvalSet("language_modeling", windows, windows, "perplexity")


def test_table4_times_the_variants_in_llama_cpp_beside_pytorch():
    llama_cpp_module()
    from headprune.report import scorecard
    from headprune.analyses import speed, table4

    model = tiny_llama()
    importance, evalset = speed_inputs(model)
    settings = speed.SpeedSettings(batch_sizes=[4], repeats=3, warmup_batches=1, decode_tokens=6,
                                   engines=["transformers", "llama.cpp"])
    runs, facts = speed.speed_study("lm", model, None, evalset, importance, settings, "cpu")
    engine = runs[runs["unit"].str.startswith("llama.cpp")]
    assert set(engine["unit"]) == {"llama.cpp prompt tokens", "llama.cpp generated tokens"}
    assert (engine["batch_size"] == 1).all() and len(engine) == 2 * 2 * 3  # 2 units x 2 models x 3 runs
    assert set(engine[engine["unit"] == "llama.cpp prompt tokens"]["items"]) == {4 * 40}
    assert set(engine[engine["unit"] == "llama.cpp generated tokens"]["items"]) == {4 * 6}
    assert set(engine["heads"]) == {32, 16} and list(runs.columns) == speed.RUN_COLUMNS
    # ABBA, as PyTorch's: run 0 original first, run 1 pruned first
    prompt = engine[engine["unit"] == "llama.cpp prompt tokens"]
    assert prompt.sort_values(["run", "position"])["variant"].tolist()[:4] == ["original", "pruned"] * 1 + \
        ["pruned", "original"]
    summary = table4.summarize(runs, facts)
    row = summary[summary["unit"] == "llama.cpp prompt tokens"].iloc[0]
    ratios = table4.paired_ratios(prompt, "pruned")
    assert row["speedup_low"] < 100 * (np.exp(np.mean(np.log(ratios))) - 1) < row["speedup_high"]
    markdown = table4.table4_markdown(summary)
    assert "| 1 (llama.cpp prompt tokens) |" in markdown and "llama.cpp's deci architecture" in markdown
    verdicts = scorecard.judged("C6", {}, speed=summary)
    assert any("llama.cpp" in v["study"] and "against 0" in v["this_run"] for v in verdicts)


def test_without_llama_cpp_table4_is_pytorchs_and_one_line_says_how(monkeypatch, caplog):
    import logging

    from headprune.analyses import engines, speed

    monkeypatch.setattr(engines, "llama_cpp_missing", lambda: f"llama.cpp is not installed: {engines.HOW_TO_GET}")
    monkeypatch.setattr(speed, "llama_cpp_missing", engines.llama_cpp_missing)
    model = tiny_llama()
    importance, evalset = speed_inputs(model)
    settings = speed.SpeedSettings(batch_sizes=[4], repeats=2, warmup_batches=0, decode_tokens=2,
                                   engines=["transformers", "llama.cpp"])
    with caplog.at_level(logging.INFO):
        runs, facts = speed.speed_study("lm", model, None, evalset, importance, settings, "cpu")
    assert set(runs["unit"]) == {"prefill tokens", "decode tokens"} and not facts["skipped"]
    said = [r.message for r in caplog.records if "llama.cpp" in r.message]
    assert len(said) == 1 and 'pip install -e ".[gguf]"' in said[0]


def test_a_family_llama_cpp_cannot_take_is_recorded_not_timed():
    llama_cpp_module()
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from headprune.analyses import speed

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=8)).eval()
    importance, evalset = speed_inputs(model)
    settings = speed.SpeedSettings(batch_sizes=[4], repeats=2, warmup_batches=0, decode_tokens=2,
                                   engines=["transformers", "llama.cpp"])
    runs, facts = speed.speed_study("lm", model, None, evalset, importance, settings, "cpu")
    assert not runs["unit"].str.startswith("llama.cpp").any()
    assert "deci" in facts["skipped"]["llama.cpp"]
