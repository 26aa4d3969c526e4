"""A uniformly pruned model saved with ``headprune.models.stock.save_stock`` is a stock checkpoint (issue #46 item 2).

Tiny random models of transformers' own config classes (a Llama with grouped-query attention and
heads * head_dim != hidden_size, Qwen3 with its q/k norms and 6 heads on a hidden size of 64, Gemma 3 text with
sliding windows and an explicit head_dim) lose whole key/value groups, different ones in each layer, are saved, and
are loaded in a child Python that cannot import headprune with ``AutoModelForCausalLM.from_pretrained(folder)`` (no
remote code). The reference is the test's own: the unpruned model with the removed heads' outputs zeroed by a
forward pre-hook on each layer's output projection, which must change the logits. The logits agree within 1e-5
(relative to the largest) and greedy ``generate()`` token for token. What a stock class cannot hold is refused in
one line, nothing written: GPT-2, BERT and Marian (their attention derives a head's size from hidden_size / heads),
layers keeping different head counts, a partial key/value group, a head count LlamaConfig refuses, output biases
added by bias compensation.

The same-size export (``save_stock(..., zeroed=True)``) of those: a uniformly pruned GPT-2 (tied embeddings, Conv1D
weights), BERT classifier and Marian (enc_self, dec_self and enc_dec heads), a free-layout BERT and a Llama with a
partial key/value group and a layer left headless, each loaded the same way, against the test's own reference: the
stock model of the original weights with a forward pre-hook on each output projection (found through the model's
own modules) zeroing the removed heads' slices of its input. Logits within 1e-5, greedy ``generate()`` equal for
GPT-2, Marian and Llama; the config keeps every head, the removed heads' weights are zero, and its card says it is
as large as the original.
"""
from __future__ import annotations

import copy
import json
import textwrap

from safetensors.torch import load_file

import pytest
import torch
from transformers import (AutoConfig, BertConfig, BertForSequenceClassification, Gemma3ForCausalLM, Gemma3TextConfig,
                          GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MarianConfig, MarianMTModel,
                          Qwen3Config, Qwen3ForCausalLM)

import registry_checks
from headprune.models.prune import prune_heads
from headprune.models.stock import NoSmallerStock, save_stock

VOCAB = 64
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, max_position_embeddings=64,
              pad_token_id=0, bos_token_id=1, eos_token_id=2, attention_dropout=0.0)
# Two key/value groups removed from each layer (8 query heads on 4 kv heads: groups of 2), different in every layer
TWO_GROUPS = {0: [0, 1, 2, 3], 1: [2, 3, 6, 7], 2: [0, 1, 6, 7], 3: [4, 5, 2, 3]}


def spread(model):
    """Weights large enough that heads matter (random init's are tiny), and float32, eval."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:  # Marian's sinusoids: computed, not saved
                continue
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
            elif "norm" in name:
                p.uniform_(0.5, 1.5)
    return model.float().eval()


def tiny_llama():
    torch.manual_seed(0)  # heads * head_dim = 128, twice the hidden size
    config = LlamaConfig(num_attention_heads=8, num_key_value_heads=4, head_dim=16, **COMMON)
    return spread(LlamaForCausalLM(config)), {"dec_self": TWO_GROUPS}


def tiny_qwen3():
    torch.manual_seed(0)  # one group off each layer: 6 heads, a count hidden_size 64 is no multiple of
    config = Qwen3Config(num_attention_heads=8, num_key_value_heads=4, head_dim=16, **COMMON)
    return spread(Qwen3ForCausalLM(config)), {"dec_self": {0: [0, 1], 1: [6, 7], 2: [2, 3], 3: [4, 5]}}


def tiny_gemma3():
    torch.manual_seed(0)  # sliding windows of 4 tokens in 3 of 4 layers, head_dim explicit (8 x 32 = 4 x hidden)
    config = Gemma3TextConfig(num_attention_heads=8, num_key_value_heads=4, head_dim=32, query_pre_attn_scalar=32,
                              sliding_window=4, layer_types=["sliding_attention"] * 3 + ["full_attention"], **COMMON)
    return spread(Gemma3ForCausalLM(config)), {"dec_self": TWO_GROUPS}


STOCK = {"llama": tiny_llama, "qwen3": tiny_qwen3, "gemma3_text": tiny_gemma3}
IDS = torch.tensor([[1, 5, 9, 14, 3, 22, 40, 7, 31, 12, 60, 18], [1, 44, 2, 19, 8, 8, 50, 27, 33, 6, 11, 29]])


def reference(model, removed: dict[int, list[int]]):
    """The unpruned model with the removed heads' outputs zeroed on their way into each layer's o_proj."""
    def zero(heads, head_dim):
        def hook(module, args):
            x = args[0].clone()
            for h in heads:
                x[..., h * head_dim:(h + 1) * head_dim] = 0
            return (x,)
        return hook

    handles = []
    for layer, heads in removed.items():
        attention = model.model.layers[layer].self_attn
        handles.append(attention.o_proj.register_forward_pre_hook(zero(heads, attention.head_dim)))
    return handles


def outputs(model):
    with torch.no_grad():
        logits = model(input_ids=IDS).logits
        tokens = model.generate(IDS, max_new_tokens=6, do_sample=False, pad_token_id=0)
    return logits, tokens


LOAD_CHECK = textwrap.dedent("""
    import json, os, sys, torch, warnings
    warnings.simplefilter("ignore")
    sys.modules["headprune"] = None  # headprune blocked from import: only transformers' own classes run
    try:
        import headprune
        raise SystemExit("headprune imported")
    except ImportError:
        pass
    import transformers
    for folder in sys.argv[1:]:
        try:
            expected = torch.load(folder + ".expected.pt")
            config = json.load(open(folder + "/config.json"))
            leftovers = [k for k in config if k.startswith("headprune") or k == "auto_map"]
            leftovers += [f for f in os.listdir(folder) if f.endswith(".py")]
            auto = getattr(transformers, expected.get("auto", "AutoModelForCausalLM"))
            model = auto.from_pretrained(folder, trust_remote_code=False).eval()
            with torch.no_grad():
                logits = model(**expected.get("inputs", {"input_ids": expected["ids"]})).logits
                tokens = (None if expected["tokens"] is None else
                          model.generate(expected["ids"], max_new_tokens=6, do_sample=False, pad_token_id=0))
            gap = float((logits - expected["logits"]).abs().max())
            if leftovers:
                verdict = f"remote-code leftovers {leftovers}"
            elif type(model).__name__ != expected["class"] or type(model).__module__.split(".")[0] != "transformers":
                verdict = f"loaded as {type(model).__module__}.{type(model).__name__}"
            elif gap > 1e-5 * max(1.0, float(expected["logits"].abs().max())):  # float32, summed in another order
                verdict = f"logits differ by {gap:.1e}"
            elif tokens is not None and not torch.equal(tokens, expected["tokens"]):
                verdict = "generate() differs"
            else:
                verdict = "ok"
            print("EXPORT", folder, verdict, flush=True)
        except Exception as error:
            print("EXPORT", folder, f"{type(error).__name__}: {error}".splitlines()[0][:150], flush=True)
""")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{model type: (folder, the pruned model, its reference logits)}, each folder written by save_stock."""
    where = tmp_path_factory.mktemp("stock")
    done = {}
    for model_type, build in STOCK.items():
        model, removed = build()
        full = copy.deepcopy(model)
        before = full(input_ids=IDS).logits.detach()
        handles = reference(full, removed["dec_self"])
        logits, tokens = outputs(full)
        for handle in handles:
            handle.remove()
        assert (logits - before).abs().max() > 1e-2, f"{model_type}: zeroing the heads changed nothing"
        prune_heads(model, removed)
        folder = save_stock(model, None, where / model_type)
        torch.save({"ids": IDS, "logits": logits, "tokens": tokens, "class": type(model).__name__},
                   f"{folder}.expected.pt")
        done[model_type] = (folder, model, logits)
    return done


def test_stock_folders_load_without_headprune_and_compute_the_reference(exported, same_size):
    folders = [folder for folder, _, _ in exported.values()] + [case["folder"] for case in same_size.values()]
    verdicts = registry_checks.export_verdicts(LOAD_CHECK, folders, folders[0].parent)
    assert verdicts == {folder: "ok" for folder in folders}


@pytest.mark.parametrize("model_type", list(STOCK))
def test_the_stock_config_has_the_kept_heads(exported, model_type):
    folder, model, logits = exported[model_type]
    config = json.loads((folder / "config.json").read_text())
    heads = {"qwen3": (6, 3)}.get(model_type, (4, 2))
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == heads
    assert config["head_dim"] == model.config.head_dim and "auto_map" not in config
    assert not [k for k in config if k.startswith("headprune")]
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "generation_config.json",
                                                        "model.safetensors"]
    card = (folder / "README.md").read_text()
    assert "trust_remote_code" not in card and "custom_code" not in card
    assert "layout: every layer keeps as many heads" in card  # no pruning layout named: the model's shape
    assert "| decoder self-attention (dec_self) | 1 |" in card
    with torch.no_grad():  # the pruned model itself computes the reference (as the stock one, checked above)
        assert (model(input_ids=IDS).logits - logits).abs().max() <= 1e-5 * max(1.0, float(logits.abs().max()))


def test_an_unpruned_model_is_a_normal_save(tmp_path):
    from transformers import AutoModelForCausalLM

    model, _ = tiny_llama()
    save_stock(model, None, tmp_path / "plain")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "plain").eval()
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=IDS).logits, model(input_ids=IDS).logits)


def refusal(model, folder, kind=ValueError) -> str:
    """The one-line refusal; ``kind``: NoSmallerStock where the same-size export holds the model."""
    with pytest.raises(ValueError) as error:
        save_stock(model, None, folder)
    assert not folder.exists() and type(error.value) is kind
    message = str(error.value)
    assert "\n" not in message and type(model).__name__ in message
    return message


def tiny_gpt2():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=1,
                                      eos_token_id=2)).eval()


def tiny_bert():
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                                                    num_attention_heads=4, intermediate_size=96)).eval()


def tiny_marian():
    torch.manual_seed(0)
    config = MarianConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96, max_position_embeddings=64,
                          pad_token_id=0, eos_token_id=2, decoder_start_token_id=0)
    return MarianMTModel(config).eval()


@pytest.mark.parametrize("build, heads, words", [
    (tiny_gpt2, {"dec_self": {0: [0, 1], 1: [2, 3]}}, ": GPT2Attention derives its head size from hidden_size / heads"),
    (tiny_bert, {"enc_self": {0: [0, 1], 1: [2, 3]}},
     ": BertSelfAttention derives its head size from hidden_size / heads"),
    (tiny_marian, {t: {0: [0, 1], 1: [2, 3]} for t in ("enc_self", "dec_self", "enc_dec")},
     ": MarianAttention derives its head size from hidden_size / heads"),
], ids=["gpt2", "bert", "marian"])
def test_classes_that_derive_the_head_size_are_refused(build, heads, words, tmp_path):
    model = prune_heads(build(), heads)
    message = refusal(model, tmp_path / "out", NoSmallerStock)
    assert words in message and repr(model.config.model_type) in message, message


def test_a_free_layout_is_refused_naming_the_layers(tmp_path):
    model, _ = tiny_llama()
    prune_heads(model, {"dec_self": {0: [0, 1], 2: [2, 3, 4, 5]}})
    message = refusal(model, tmp_path / "out")
    assert "layer 0: 6 on 3 kv, layer 1: 8 on 4 kv, layer 2: 4 on 2 kv, layer 3: 8 on 4 kv" in message, message


def test_a_partial_key_value_group_is_refused(tmp_path):
    model, _ = tiny_llama()
    prune_heads(model, {"dec_self": {layer: [2] for layer in range(4)}})
    message = refusal(model, tmp_path / "out")
    assert "layer 0 keeps 7 query heads on 4 key/value heads unevenly" in message, message


def test_a_head_count_the_config_class_refuses(tmp_path):
    model, _ = tiny_llama()  # 6 heads: LlamaConfig wants hidden_size (64) a multiple of the heads
    prune_heads(model, {"dec_self": {layer: [2 * layer, 2 * layer + 1] for layer in range(4)}})
    message = refusal(model, tmp_path / "out", NoSmallerStock)
    assert "LlamaConfig refuses the heads kept: The hidden size (64) is not a multiple" in message, message
    from transformers import AutoModelForCausalLM  # the same-size export holds it, at 8 heads

    same = AutoModelForCausalLM.from_pretrained(save_stock(model, None, tmp_path / "same", zeroed=True)).eval()
    assert same.config.num_attention_heads == 8
    with torch.no_grad():
        want = model(input_ids=IDS).logits
        assert (same(input_ids=IDS).logits - want).abs().max() <= 1e-5 * max(1.0, float(want.abs().max()))


def test_added_output_biases_are_refused(tmp_path):
    from headprune.models.head_constants import HeadConstants

    model, removed = tiny_llama()
    constants = HeadConstants({("dec_self", layer): torch.randn(8, 16) for layer in range(4)})
    prune_heads(model, removed, constants=constants)
    message = refusal(model, tmp_path / "out")
    assert "bias compensation gave output projections a bias" in message, message


# --- Same-size exports: every head in place, the removed heads' weights zeroed --------------------------------

def gpt2_outputs(model, layer):  # GPT-2's output projection (Conv1D) reads the heads' outputs side by side
    return model.transformer.h[layer].attn.c_proj


def bert_outputs(model, layer):
    return model.bert.encoder.layer[layer].attention.output.dense


def marian_outputs(model, attn_type, layer):
    stack = model.model.encoder if attn_type == "enc_self" else model.model.decoder
    return getattr(stack.layers[layer], "encoder_attn" if attn_type == "enc_dec" else "self_attn").out_proj


def llama_outputs(model, layer):
    return model.model.layers[layer].self_attn.o_proj


MARIAN_HEADS = {"enc_self": {0: [0, 1], 1: [2, 3]}, "dec_self": {0: [1, 3], 1: [0, 2]},
                "enc_dec": {0: [3, 2], 1: [1, 0]}}
# name: (build, removed heads, output projection of (model, attn_type, layer), Auto class, generate()?)
SAME_SIZE = {
    "gpt2": (lambda: spread(tiny_gpt2()), {"dec_self": {0: [0, 1], 1: [2, 3]}},
             lambda m, t, layer: gpt2_outputs(m, layer), "AutoModelForCausalLM", True),
    "bert": (lambda: spread(tiny_bert()), {"enc_self": {0: [0, 1], 1: [2, 3]}},
             lambda m, t, layer: bert_outputs(m, layer), "AutoModelForSequenceClassification", False),
    "bert_free": (lambda: spread(tiny_bert()), {"enc_self": {0: [1], 1: [0, 2, 3]}},
                  lambda m, t, layer: bert_outputs(m, layer), "AutoModelForSequenceClassification", False),
    "marian": (lambda: spread(tiny_marian()), MARIAN_HEADS, marian_outputs, "AutoModelForSeq2SeqLM", True),
    # a partial key/value group (layer 0), a layer with no head left (layer 2)
    "llama_free": (lambda: tiny_llama()[0], {"dec_self": {0: [1], 2: list(range(8)), 3: [4, 5]}},
                   lambda m, t, layer: llama_outputs(m, layer), "AutoModelForCausalLM", True),
}


def head_dim_of(config, attn_type: str) -> int:
    if getattr(config, "head_dim", None):
        return config.head_dim
    heads = getattr(config, "encoder_attention_heads" if attn_type == "enc_self" else "decoder_attention_heads", None)
    return (getattr(config, "d_model", None) or config.hidden_size) // (heads or config.num_attention_heads)


def zero_head_inputs(model, removed, output_of):
    """The test's own reference: a forward pre-hook on each output projection zeroing the removed heads' slices of
    its input (head h: features h * head_dim to (h + 1) * head_dim, head_dim as the config gives it)."""
    def zero(gone, head_dim):
        def hook(module, args):
            x = args[0].clone()
            for h in gone:
                x[..., h * head_dim:(h + 1) * head_dim] = 0
            return (x,)
        return hook

    return [output_of(model, attn_type, layer).register_forward_pre_hook(zero(gone, head_dim_of(model.config,
                                                                                                 attn_type)))
            for attn_type, layers in removed.items() for layer, gone in layers.items()]


def inputs_of(model) -> dict:
    if model.config.is_encoder_decoder:  # Marian: a source and a decoder prefix starting at its start token
        return {"input_ids": IDS, "decoder_input_ids": torch.cat([torch.zeros_like(IDS[:, :1]), IDS[:, 1:7]], 1)}
    return {"input_ids": IDS}


@pytest.fixture(scope="module")
def same_size(tmp_path_factory):
    """{name: what the test needs} of each same-size export written by save_stock(zeroed=True)."""
    where = tmp_path_factory.mktemp("same_size")
    done = {}
    for name, (build, removed, output_of, auto, generates) in SAME_SIZE.items():
        model = build()
        full = copy.deepcopy(model)
        inputs = inputs_of(model)
        with torch.no_grad():
            before = full(**inputs).logits
        handles = zero_head_inputs(full, removed, output_of)
        with torch.no_grad():
            logits = full(**inputs).logits
            tokens = full.generate(IDS, max_new_tokens=6, do_sample=False, pad_token_id=0) if generates else None
        for handle in handles:
            handle.remove()
        assert (logits - before).abs().max() > 1e-2, f"{name}: zeroing the heads changed nothing"
        prune_heads(model, removed)
        folder = save_stock(model, None, where / name, zeroed=True)
        torch.save({"ids": IDS, "inputs": inputs, "logits": logits, "tokens": tokens, "class": type(model).__name__,
                    "auto": auto}, f"{folder}.expected.pt")
        done[name] = {"folder": folder, "full": full, "removed": removed, "output_of": output_of, "logits": logits,
                      "before": before}
    return done


@pytest.mark.parametrize("name", list(SAME_SIZE))
def test_a_same_size_export_keeps_every_head_and_zeroes_the_removed_ones(same_size, name):
    case = same_size[name]
    folder, full = case["folder"], case["full"]
    config = json.loads((folder / "config.json").read_text())
    saved = AutoConfig.from_pretrained(folder)
    for key in ("num_attention_heads", "encoder_attention_heads", "decoder_attention_heads", "num_key_value_heads",
                "head_dim"):
        assert getattr(saved, key, None) == getattr(full.config, key, None), key
    assert "auto_map" not in config and not [k for k in config if k.startswith("headprune")]
    assert not list(folder.glob("*.py"))
    weights = load_file(str(folder / "model.safetensors"))
    names = {id(module): key for key, module in full.named_modules()}
    for attn_type, layers in case["removed"].items():
        for layer, gone in layers.items():
            projection = case["output_of"](full, attn_type, layer)
            weight = weights[names[id(projection)] + ".weight"]
            columns = weight if type(projection).__name__ == "Conv1D" else weight.T  # (input feature, output)
            width = head_dim_of(full.config, attn_type)
            for h in range(columns.shape[0] // width):
                block = columns[h * width:(h + 1) * width]
                assert bool((block == 0).all()) == (h in gone), (attn_type, layer, h)
    # the same size: every tensor of the original model, in its shape
    assert {k: tuple(t.shape) for k, t in weights.items()} == {
        k: tuple(t.shape) for k, t in full.state_dict().items() if k in weights}
    card = (folder / "README.md").read_text()
    removed = sum(len(gone) for layers in case["removed"].values() for gone in layers.values())
    assert "trust_remote_code" not in card and "custom_code" not in card
    assert f"{removed} of" in card and "heads' weights zeroed" in card and "no speed or memory gain" in card
    assert "same-size stock checkpoint" in card
    # no pruning layout named: the card reads the layout off the model's shape
    shape = "each layer keeps its own heads" if name.endswith("_free") else "every layer keeps as many heads"
    assert f"- layout: {shape}" in card
    if name in ("gpt2", "bert", "marian"):
        assert "a smaller stock export needs a family whose config holds head_dim" in card
    # the export computes something else than the unpruned model (the reference): zeroing did something
    assert (case["logits"] - case["before"]).abs().max() > 1e-2


def test_no_stock_export_holds_an_added_output_bias(tmp_path):
    from headprune.models.head_constants import HeadConstants

    model, removed = tiny_llama()
    constants = HeadConstants({("dec_self", layer): torch.randn(8, 16) for layer in range(4)})
    prune_heads(model, removed, constants=constants)
    with pytest.raises(ValueError) as error:
        save_stock(model, None, tmp_path / "out", zeroed=True)
    assert not (tmp_path / "out").exists()
    assert "\n" not in str(error.value) and "bias compensation gave output projections a bias" in str(error.value)
