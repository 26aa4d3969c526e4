"""Streaming masking (heads.gated(masking=Streaming(sink, recent))): a masked head attends only to the first
``sink`` and the last ``recent`` tokens up to its query (DuoAttention's streaming heads).

Checked against computations that do not go through the hooks: the model given an explicit 4-D window mask,
an attention layer recomputed by hand from its weights, step-by-step decoding without a cache.
"""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import TEST_DTYPE, needs_exact_decoding, on_test_device, repeated, tiny_bert, tolerance
from test_adapter_contract import PAD, _causal_config, _random_biases, _spread_weights, tiny_gpt2, tiny_qwen2
from test_adapter_contract import causal_batch as cpu_causal_batch
from headprune.evaluation.runs import EvalSettings, gates_without
from headprune.evaluation.shared_layers import forward_variants
from headprune.models.families.causal_lm import positions
from headprune.models.heads import HeadCapture, Streaming, adapter_for, full_gates, gated, stack_gates
from headprune.models.masking import masked_as
from headprune.models.prune import prune_heads

T = "dec_self"
WINDOW = Streaming(sink=2, recent=3)
LENGTH = 10  # longer than sink + recent: the window matters
BACKENDS = ("eager", "sdpa")


def tiny_llama_gqa6(seed=0):
    """Llama with 6 query heads on 2 key/value heads (groups of 3), attention biases on."""
    torch.manual_seed(seed)
    config = _causal_config(LlamaConfig, hidden_size=24, intermediate_size=32, num_hidden_layers=2,
                            num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                            attention_bias=True)
    return _random_biases(_spread_weights(LlamaForCausalLM(config).eval()))


FAMILIES = {"llama_gqa6": tiny_llama_gqa6, "gpt2": tiny_gpt2, "qwen2": tiny_qwen2}


def build(family, backend):
    model = on_test_device(FAMILIES[family]())
    model.set_attn_implementation(backend)
    return model


def causal_batch(**options):
    return on_test_device(cpu_causal_batch(**options))


def batch_for(padding, length=LENGTH):
    if padding == "none":  # sdpa then gets no mask at all (is_causal)
        return _unpadded(length)
    return causal_batch(length=length, padding_side=padding)


def _unpadded(length, rows=2, seed=3):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 40, (rows, length), generator=g)
    return on_test_device({"input_ids": ids, "attention_mask": torch.ones_like(ids)})


def logits(model, batch, **extra):
    mask = batch["attention_mask"]
    return model(input_ids=batch["input_ids"], attention_mask=extra.pop("attention_mask", mask),
                 position_ids=positions(mask), use_cache=False, **extra).logits


# --- an independent statement of the window -------------------------------------------------------------

def allowed_keys(attention_mask, window=None):
    """(rows, queries, keys) bool: causal and padding, and (with a window) the streaming window, with positions
    counted over each row's real tokens; padding queries keep their keys (their outputs mean nothing)."""
    valid = attention_mask.bool()
    n = valid.shape[1]
    allowed = torch.ones(n, n, dtype=torch.bool, device=valid.device).tril()[None] & valid[:, None, :]
    if window is not None:
        rank = valid.long().cumsum(-1) - 1
        near = rank[:, :, None] - rank[:, None, :] < window.recent
        allowed = allowed & ((rank[:, None, :] < window.sink) | near | ~valid[:, :, None])
    return allowed


def additive(allowed, dtype=TEST_DTYPE):
    return torch.where(allowed, 0.0, torch.finfo(dtype).min).to(dtype)


def site_of(model, layer):
    return next(s for s in adapter_for(model).sites(model) if s.layer == layer)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def layer_by_hand(model, site, hidden, position_embeddings, allowed):
    """The attention module's output recomputed from its weights: softmax(Q K^T / sqrt(d) + mask) V per head,
    ``allowed`` (rows, heads, queries, keys), then the output projection."""
    attn, d = site.attention, site.head_dim

    def split(x):
        return x.unflatten(-1, (-1, d)).transpose(1, 2)  # (rows, heads, time, d)

    if model.config.model_type == "gpt2":
        q, k, v = (split(x) for x in attn.c_attn(hidden).split(attn.split_size, dim=-1))
    else:
        q, k, v = split(attn.q_proj(hidden)), split(attn.k_proj(hidden)), split(attn.v_proj(hidden))
        cos, sin = (t[:, None] for t in position_embeddings)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        groups = model.config.num_attention_heads // model.config.num_key_value_heads
        kept_kv = sorted({h // groups for h in site.kept_heads})
        index = torch.tensor([kept_kv.index(h // groups) for h in site.kept_heads], device=k.device)
        k, v = k[:, index], v[:, index]
    scores = (q @ k.transpose(-1, -2)) * d ** -0.5
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    heads = (probs @ v).transpose(1, 2).flatten(-2)
    return site.output(heads)


def layer_io(model, site, run):
    """(inputs, output) of the site's attention module during ``run()``."""
    seen = {}

    def before(module, args, kwargs):
        seen["hidden"] = kwargs.get("hidden_states", args[0] if args else None)
        seen["position_embeddings"] = kwargs.get("position_embeddings")

    def after(module, args, output):
        seen["output"] = output[0]

    handles = [site.attention.register_forward_pre_hook(before, with_kwargs=True),
               site.attention.register_forward_hook(after)]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return seen


# --- equal to independent computations ---------------------------------------------------------------------

@pytest.mark.parametrize("padding", ["left", "right", "none"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_head_streaming_equals_an_explicit_window_mask(family, backend, padding):
    model, batch = build(family, backend), batch_for(padding)
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        window_mask = additive(allowed_keys(batch["attention_mask"], WINDOW))[:, None]  # (rows, 1, queries, keys)
        reference = logits(model, batch, attention_mask=window_mask)
        full = logits(model, batch)
        with gated(model, full_gates(model, 0.0), masking=WINDOW):
            streamed = logits(model, batch)
    assert (streamed - reference)[real].abs().max() <= tolerance(1e-5, reference)
    assert (streamed - full)[real].abs().max() > 1e-2  # the window matters


@pytest.mark.parametrize("pruned", [False, True], ids=["full", "pruned"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", ["llama_gqa6", "gpt2"])
def test_one_streaming_head_equals_its_layer_by_hand(family, backend, pruned):
    """Head 4 of layer 1 sees its window, the others all their keys; under pruning (Llama: head 0 gone, so kv
    head 0 is read by two query heads and kv head 1 by three) the remaining heads are recomputed by hand."""
    model, batch = build(family, backend), causal_batch(length=LENGTH)
    head = 3 if family == "gpt2" else 4
    if pruned:
        prune_heads(model, {T: {1: [0]}})
    site = site_of(model, 1)
    gates = full_gates(model)
    gates[T][1, head] = 0.0
    gates[T][1, 0] = 0.0 if pruned else 1.0  # a pruned head's gate is ignored
    with torch.no_grad():
        seen = layer_io(model, site, lambda: _gated_forward(model, batch, gates))
        base = allowed_keys(batch["attention_mask"])
        windowed = allowed_keys(batch["attention_mask"], WINDOW)
        per_head = torch.stack([windowed if h == head else base for h in site.kept_heads], dim=1)
        by_hand = layer_by_hand(model, site, seen["hidden"], seen["position_embeddings"], per_head)
        unmasked = layer_by_hand(model, site, seen["hidden"], seen["position_embeddings"],
                                 base[:, None].expand_as(per_head))
    real = batch["attention_mask"].bool()
    assert (seen["output"] - by_hand)[real].abs().max() <= tolerance(1e-5, by_hand)
    assert (seen["output"] - unmasked)[real].abs().max() > 1e-3


def _gated_forward(model, batch, gates, window=WINDOW):
    with gated(model, gates, masking=window):
        return logits(model, batch)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", ["llama_gqa6", "gpt2"])
def test_a_window_covering_the_sequence_changes_nothing(family, backend):
    model, batch = build(family, backend), causal_batch(length=LENGTH)
    with torch.no_grad():
        full = logits(model, batch)
        for window in (Streaming(0, LENGTH), Streaming(LENGTH, 1), Streaming(4, LENGTH - 4)):
            streamed = _gated_forward(model, batch, full_gates(model, 0.0), window)
            assert (streamed - full).abs().max() <= tolerance(1e-5, full), window
        assert (_gated_forward(model, batch, full_gates(model, 0.0), Streaming(4, LENGTH - 5))
                - full).abs().max() > 1e-3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", ["llama_gqa6", "gpt2"])
def test_a_window_of_one_recent_token_gives_a_head_its_own_value(family, backend):
    model, batch = build(family, backend), causal_batch(length=LENGTH)
    site = site_of(model, 0)
    gates = full_gates(model)
    gates[T][0, 1] = 0.0
    seen = {}
    handles = [site.value.register_forward_hook(lambda m, a, out: seen.__setitem__("values", out)),
               site.output.register_forward_pre_hook(lambda m, a: seen.__setitem__("heads", a[0]))]
    try:
        with torch.no_grad():
            _gated_forward(model, batch, gates, Streaming(sink=0, recent=1))
    finally:
        for handle in handles:
            handle.remove()
    d = site.head_dim
    own, values = seen["heads"][..., d:2 * d], seen["values"][..., d:2 * d]
    real = batch["attention_mask"].bool()
    assert (own - values)[real].abs().max() <= tolerance(1e-5, values)
    assert (seen["heads"][..., :d] - seen["values"][..., :d])[real].abs().max() > 1e-2  # head 0 is not masked


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_row_sees_the_same_window_whichever_side_it_is_padded_on(backend):
    """Positions count real tokens: the sinks are a row's first real tokens, not its padding."""
    model = build("llama_gqa6", backend)
    gates = gates_without(model, [(T, 0, 1), (T, 1, 4), (T, 1, 5)])
    with torch.no_grad():
        out = {side: _gated_forward(model, causal_batch(length=LENGTH, padding_side=side), gates)
               for side in ("left", "right")}
    for row in range(3):
        left_mask = causal_batch(length=LENGTH, padding_side="left")["attention_mask"][row].bool()
        right_mask = causal_batch(length=LENGTH, padding_side="right")["attention_mask"][row].bool()
        assert (out["left"][row][left_mask] - out["right"][row][right_mask]).abs().max() <= tolerance(
            1e-5, out["right"][row][right_mask])


# --- decoding with a cache ------------------------------------------------------------------------------------

GREEDY = dict(max_new_tokens=8, do_sample=False, pad_token_id=PAD)


def _greedy_without_cache(model, batch, steps):
    """Each next token recomputed on the whole prefix, no cache."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    for _ in range(steps):
        step = logits(model, {"input_ids": ids, "attention_mask": mask})[:, -1]
        ids = torch.cat([ids, step.argmax(-1, keepdim=True)], dim=1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return ids


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", ["llama_gqa6", "gpt2"])
def test_generate_with_a_cache_equals_recomputing_every_step(family, backend):
    """Inside generate() a step's query sits at (keys so far - this step's queries + its index): the cached
    decoding equals decoding without a cache, token for token; batched gate variants equal each alone."""
    needs_exact_decoding()
    model, batch = build(family, backend), causal_batch(length=6)
    model.generation_config.eos_token_id = None  # decode every step
    settings = [gates_without(model, [(T, 0, 1)] + [(T, 1, h) for h in range(3)]), full_gates(model, 0.0)]
    window = Streaming(sink=1, recent=3)
    alone = []
    with torch.no_grad():
        plain = model.generate(**batch_inputs(batch), **GREEDY)
        for gates in settings:
            with gated(model, gates, masking=window):
                cached = model.generate(**batch_inputs(batch), **GREEDY)
                recomputed = _greedy_without_cache(model, batch, GREEDY["max_new_tokens"])
            assert torch.equal(cached, recomputed)
            assert not torch.equal(cached, plain)  # the window matters
            alone.append(cached)
        with gated(model, stack_gates(model, settings), masking=window):
            together = model.generate(**batch_inputs(repeated(batch, len(settings))), **GREEDY)
    assert torch.equal(together, torch.cat(alone))


def batch_inputs(batch):
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


# --- batched gate variants --------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", ["llama_gqa6", "gpt2"])
def test_batched_variants_equal_each_alone(family, backend):
    model, batch = build(family, backend), causal_batch(length=LENGTH)
    settings = [gates_without(model, [(T, 1, 1)]), gates_without(model, [(T, 0, h) for h in range(3)]),
                full_gates(model, 0.0)]
    with torch.no_grad():
        alone = [_gated_forward(model, batch, gates) for gates in settings]
        with gated(model, stack_gates(model, settings), masking=WINDOW):
            together = logits(model, repeated(batch, len(settings)))
        # shared_layers replays the layers below a variant's first masked layer, not the attention module
        with masked_as(model, WINDOW):
            shared = forward_variants(model, batch_inputs(batch), settings + [None],
                                      lambda m, inputs: logits(m, inputs), variant_batch_size=1000)
        full = logits(model, batch)
    rows = batch["input_ids"].shape[0]
    for k, single in enumerate(alone):
        assert (together[k * rows:(k + 1) * rows] - single).abs().max() <= tolerance(1e-5, single)
        assert (shared[k] - single).abs().max() <= tolerance(1e-5, single)
    assert (shared[-1] - full).abs().max() <= tolerance(1e-6, full)


# --- errors ------------------------------------------------------------------------------------------------------

def test_streaming_needs_its_window_and_binary_gates():
    model = tiny_llama_gqa6()
    with pytest.raises(ValueError, match=r"Streaming\(sink, recent\)"):
        with gated(model, full_gates(model), masking="streaming"):
            pass
    with pytest.raises(ValueError, match="masking must be one of"):
        with gated(model, full_gates(model), masking="sliding"):
            pass
    gates = full_gates(model)
    gates[T][0, 0] = 0.5
    with pytest.raises(ValueError, match="streaming masking takes gates 0"):
        with gated(model, gates, masking=WINDOW):
            pass
    with pytest.raises(ValueError, match="importance capture"):
        with gated(model, full_gates(model), capture=HeadCapture(), masking=WINDOW):
            pass
    for bad, error in (((-1, 4), ValueError), ((0, 0), ValueError), ((1.0, 4), TypeError), ((True, 4), TypeError)):
        with pytest.raises(error):
            Streaming(*bad)


def test_streaming_refused_for_encoders_and_other_backends():
    bert = tiny_bert()
    with pytest.raises(ValueError, match="bert is an encoder: its self-attention is bidirectional"):
        with gated(bert, full_gates(bert, 0.0), masking=WINDOW):
            pass
    model = tiny_llama_gqa6()
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(ValueError, match="runs 'flex_attention'.*attn_implementation='sdpa'"):
        with gated(model, full_gates(model, 0.0), masking=WINDOW):
            pass
    model = build("llama_gqa6", "eager")
    batch = causal_batch(length=LENGTH)
    with pytest.raises(ValueError, match="2-D attention_mask"):  # a custom 4-D mask has no positions to count
        with torch.no_grad(), gated(model, full_gates(model, 0.0), masking=WINDOW):
            logits(model, batch, attention_mask=additive(allowed_keys(batch["attention_mask"]))[:, None])


def test_static_cache_is_refused_clearly():
    model = build("llama_gqa6", "sdpa")
    batch = causal_batch(length=6)
    with pytest.raises(ValueError, match="dynamic cache"):
        with torch.no_grad(), gated(model, full_gates(model, 0.0), masking=WINDOW):
            model.generate(**batch_inputs(batch), cache_implementation="static", **GREEDY)


def test_all_gates_on_adds_no_hook_and_masking_strings_are_unchanged():
    model = build("llama_gqa6", "sdpa")
    batch = causal_batch(length=LENGTH)
    with torch.no_grad():
        full = logits(model, batch)
        for gates in (None, full_gates(model)):
            with gated(model, gates, masking=WINDOW):
                assert not any(site.attention._forward_pre_hooks for site in adapter_for(model).sites(model))
                assert torch.equal(logits(model, batch), full)


# --- EvalSettings -------------------------------------------------------------------------------------------------

def test_run_variants_passes_the_streaming_window():
    """Perplexity windows scored through run_variants with masking="streaming" equal the model's own summed
    next-token NLL under gated(..., Streaming(sink, recent)), and differ from zero masking."""
    from headprune.evaluation.runs import EvalSet, run_variants

    model = build("llama_gqa6", "sdpa")
    g = torch.Generator().manual_seed(5)
    chunks = torch.randint(3, 40, (3, LENGTH), generator=g).tolist()
    evalset = EvalSet(kind="language_modeling", references=chunks, sources=chunks, metric="perplexity")
    gates_list = [gates_without(model, [(T, 0, 1), (T, 1, 3)]), full_gates(model, 0.0)]
    settings = EvalSettings(batch_size=2, masking={"word": "streaming", "sink": 1, "recent": 4})
    streamed = run_variants(model, None, evalset, gates_list, settings)
    zeroed = run_variants(model, None, evalset, gates_list, EvalSettings(batch_size=2))
    ids = on_test_device(torch.tensor(chunks))
    for gates, outputs, zero in zip(gates_list, streamed, zeroed):
        with torch.no_grad():
            out = _gated_forward(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, gates,
                                 Streaming(1, 4))
        nll = torch.nn.functional.cross_entropy(out[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")
        assert [o[0] for o in outputs] == pytest.approx(nll.sum(-1).tolist(), rel=tolerance(1e-5))
        assert [o[1] for o in outputs] == [LENGTH - 1] * len(chunks)
        assert [o[0] for o in outputs] != pytest.approx([z[0] for z in zero], rel=1e-3)


def test_eval_settings_streaming():
    from headprune.models.masking import Uniform, Zero

    assert EvalSettings().masking == Zero()
    assert EvalSettings(masking="uniform").masking == Uniform()
    assert EvalSettings(masking=Streaming(4, 64)).masking == Streaming(4, 64)
    assert EvalSettings(masking={"word": "streaming", "sink": 0, "recent": 8}).masking == Streaming(0, 8)
    with pytest.raises(ValueError, match="streaming masking needs its sink and recent"):
        EvalSettings(masking="streaming")  # the window has no default outside the config
    with pytest.raises(ValueError, match="zero masking takes no settings, not \\['sink'\\]"):
        EvalSettings(masking={"word": "zero", "sink": 3})
    with pytest.raises(ValueError, match="masking must be one of"):
        EvalSettings(masking="sliding")
    with pytest.raises(ValueError, match="recent must be >= 1"):
        EvalSettings(masking={"word": "streaming", "sink": 4, "recent": 0})
    with pytest.raises(ValueError, match="sink must be >= 0"):
        EvalSettings(masking={"word": "streaming", "sink": -1, "recent": 4})
