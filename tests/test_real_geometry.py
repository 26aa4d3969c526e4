"""Gating, masking and pruning at the head geometry of the checkpoints users run (issue #44, items 7 and 8).

The other tests build tiny models of one geometry (6 query heads on 2 kv heads, head_dim 12). Here each published
checkpoint of tests/geometry_zoo.py is built with its real attention geometry (two layers, small vocabulary and
feed-forward) and run through headprune's public API:

1. the heads found are the config's (query heads, kv heads, head_dim per layer) and they are the LANGUAGE model's
   attention modules (a multimodal wrapper's vision tower has attention layers too);
2. gating equals an independent reference: this file's own pre-hook on each layer's output projection, zeroing the
   head's input features, on layers found by this file (``get_decoder()`` to its fixed point, the layer list its
   config's ``base_model_pp_plan`` names), not by headprune; and the gates change the logits;
3. uniform masking is accepted and changes the logits (and, where the entry says so, equals a uniform attention
   computed here from the value projection's output), or is refused naming why (gpt-oss's sinks);
4. streaming masking (sink 1, recent 2) runs under eager attention and changes the logits;
5. pruning (one query head of a kv group: uneven groups; a whole kv group; gpt-oss's sinks with their heads) gives
   the gated logits, or is refused in one line (OLMo 2); generate() on the pruned model equals it under the gates.

Entries whose real hidden size is too large for the CPU (``numeric_hidden``) have their layout, their per-head
parameters and their refusals checked on the meta device at the real size (``test_layout_at_real_size``) and the
numbers on a variant with the same heads, kv heads and head_dim at a smaller hidden size. One entry runs in bfloat16.

Each entry's model is built once (a module-scoped fixture) and the tests of an entry run in the order below, the
pruning test last: it prunes that model in place.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

import geometry_zoo as zoo
from conftest import threads_for_tests
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.masking import Streaming, Uniform
from headprune.models.prune import prune_heads

pytestmark = pytest.mark.filterwarnings("ignore")  # transformers' warnings about generation flags and the like

CASES = zoo.CHECKPOINTS + [zoo.bfloat16(zoo.checkpoint("qwen3-8b"))]
DEC_SELF = "dec_self"
FP32_TOLERANCE = 1e-4


# --- The language model's layers, found here (not by headprune) -----------------------------------------------

def language_layers(model) -> list[nn.Module]:
    """The decoder layers of the language model: ``get_decoder()`` down to its fixed point (a multimodal wrapper
    hands over its language model), then the module list that model's ``base_model_pp_plan`` names."""
    decoder = model
    while (inner := decoder.get_decoder()) is not decoder:
        decoder = inner
    for name in decoder.config.base_model_pp_plan:
        layers = getattr(decoder, name, None)
        if isinstance(layers, nn.ModuleList):
            return list(layers)
    raise AssertionError(f"{type(decoder).__name__}'s base_model_pp_plan names no layer list")


def attention_of(layer: nn.Module) -> nn.Module:
    return layer.self_attn  # every family in the zoo names it so


def heads_projection_widths(attention: nn.Module) -> tuple[int, int]:
    """(query features, key features) of the module as transformers built it."""
    if hasattr(attention, "qkv_proj"):  # Phi-3: [queries | keys | values]
        q = attention.o_proj.in_features
        return q, (attention.qkv_proj.out_features - q) // 2
    return attention.q_proj.out_features, attention.k_proj.out_features


def kv_heads_of(site) -> int:
    """How many key/value heads the adapter found for the site."""
    layout = getattr(site, "layout", None)
    for owner, name in ((site, "original_num_kv_heads"), (site, "original_kv_heads"), (layout, "original_kv_heads")):
        value = getattr(owner, name, None)
        if isinstance(value, int):
            return value
    raise AssertionError(f"the site of layer {site.layer} does not say how many key/value heads it found")


# --- What is masked and removed ------------------------------------------------------------------------------

def removed_heads(entry) -> dict[int, list[int]]:
    """Layer 0 loses one query head of kv group 0 (its groups become uneven; with one query head per kv head, that
    kv head goes too), layer 1 a whole kv group (group 1); gpt-oss's sinks go with their heads in both."""
    groups = entry.heads // entry.kv_heads
    return {0: [1], 1: list(range(groups, 2 * groups))}


def gates_for(model, remove) -> dict[str, torch.Tensor]:
    gates = full_gates(model)
    for layer, heads in remove.items():
        gates[DEC_SELF][layer, heads] = 0.0
    return gates


def sliding_window(entry, layer: int) -> int | None:
    types = entry.text.get("layer_types")
    window = entry.text.get("sliding_window")
    if not window or (types is not None and types[layer] != "sliding_attention"):
        return None
    return window


def batch(length: int = 10, rows: int = 2, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, zoo.VOCAB, (rows, length), generator=generator)
    mask = torch.ones_like(ids)
    if rows > 1:
        mask[1, :3] = 0  # left padding
        ids[1, :3] = 0
    return ids, mask


def logits(model, ids, mask) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


def gap(a, b, mask) -> float:
    """Largest difference at the real tokens (a padded query's row means nothing)."""
    real = mask.bool()
    return float((a[real] - b[real]).abs().max())


def tolerance(entry, reference) -> float:
    if entry.dtype == torch.float32:
        return FP32_TOLERANCE
    # bfloat16 keeps 8 bits of mantissa: two computations of one result that round differently (a sliced matrix
    # multiply against the full one) differ by a share of the values' size
    return 0.05 * max(1.0, float(reference.abs().max()))


def changed(entry, a, b, mask) -> bool:
    """Whether masking moved the logits by more than rounding could. A mode that silently changes nothing leaves
    float32 logits as they were to the last bits; a masked head moves them by 7e-3 (Granite's uniform masking: its
    scores are scaled by 1/128, its attention output by 0.22, its logits by 1/16) to 1."""
    return gap(a, b, mask) > (1e-4 if entry.dtype == torch.float32 else tolerance(entry, b))


# --- The model of each entry, built once -----------------------------------------------------------------------

@dataclass
class Case:
    entry: zoo.Checkpoint
    model: nn.Module
    ids: torch.Tensor
    mask: torch.Tensor
    plain: torch.Tensor
    remove: dict[int, list[int]]
    pruned: bool = False

    def __repr__(self):  # pytest prints it with every failing assertion
        return f"Case({self.entry.name})"

    def unpruned(self):
        assert not self.pruned, "the model of this entry was pruned by an earlier test"
        return self.model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(threads_for_tests(1))  # small matrices: a second thread only waits
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=CASES, ids=[c.name for c in CASES])
def case(request, one_thread):
    entry = request.param
    model = zoo.numeric_model(entry)
    ids, mask = batch()
    yield Case(entry, model, ids, mask, logits(model, ids, mask), removed_heads(entry))


# --- 1. Where the heads are ---------------------------------------------------------------------------------------

def check_heads_found(entry, model):
    layers = language_layers(model)
    assert len(layers) == zoo.LAYERS
    geometry = entry.geometry()
    for i, layer in enumerate(layers):  # the zoo builds what it says
        heads, kv, head_dim = geometry[i]
        assert heads_projection_widths(attention_of(layer)) == (heads * head_dim, kv * head_dim), f"zoo, layer {i}"
    sites = adapter_for(model).sites(model)
    assert len(sites) == len(layers), f"{len(sites)} attention sites for {len(layers)} language-model layers"
    for site, layer in zip(sites, layers):  # first: a wrong module explains wrong numbers
        assert site.attention is attention_of(layer), (
            f"layer {site.layer}: headprune's site is {type(site.attention).__name__} "
            f"({_path(model, site.attention)}), not the language model's {_path(model, attention_of(layer))}")
        assert site.output is attention_of(layer).o_proj
    found = [(s.original_num_heads, kv_heads_of(s), s.head_dim) for s in sites]
    assert found == geometry, f"heads found {found}, the config's {geometry}"


def _path(model, module) -> str:
    return next((name for name, m in model.named_modules() if m is module), "?")


def test_layout_at_real_size(case):
    """At the checkpoint's real hidden size, on the meta device: the heads, the per-head parameters (pruning shrinks
    them with the heads) and what is refused."""
    entry = case.entry
    model = zoo.meta_model(entry)
    text = model.config.get_text_config(decoder=True)
    assert (text.hidden_size, text.num_attention_heads) == (entry.hidden, entry.heads), "the zoo's config"
    check_heads_found(entry, model)
    remove = removed_heads(entry)
    gates = gates_for(model, remove)
    _uniform_accepted_or_refused(entry, model, gates)
    layers = language_layers(model)
    if entry.pruning_refused:
        _check_pruning_refused(entry, model, remove)
        return
    prune_heads(model, {DEC_SELF: remove})
    _check_pruned_shapes(entry, layers, remove)


# --- 2. Gating against an independent reference ----------------------------------------------------------------

def zero_heads_by_hand(head_dim: int, heads: list[int]):
    def hook(module, args):
        x = args[0].clone()
        for h in heads:
            x[..., h * head_dim:(h + 1) * head_dim] = 0
        return (x, *args[1:])
    return hook


def test_heads_found(case):
    check_heads_found(case.entry, case.unpruned())


def test_gating_equals_zeroing_heads_by_hand(case):
    model, entry = case.unpruned(), case.entry
    layers = language_layers(model)
    dtypes = []
    with gated(model, gates_for(model, case.remove)):
        handle = attention_of(layers[0]).o_proj.register_forward_pre_hook(lambda m, args: dtypes.append(args[0].dtype))
        try:
            masked = logits(model, case.ids, case.mask)
        finally:
            handle.remove()
    assert dtypes == [entry.dtype], f"the gated heads reach the output projection in {dtypes}"
    dims = entry.head_dims()
    handles = [attention_of(layers[i]).o_proj.register_forward_pre_hook(zero_heads_by_hand(dims[i], heads))
               for i, heads in case.remove.items()]
    try:
        by_hand = logits(model, case.ids, case.mask)
    finally:
        for handle in handles:
            handle.remove()
    assert changed(entry, by_hand, case.plain, case.mask), "zeroing heads by hand changed nothing: a test bug"
    moved, difference = changed(entry, masked, case.plain, case.mask), gap(masked, by_hand, case.mask)
    assert moved, "the gates changed nothing"
    assert difference <= tolerance(entry, by_hand), f"gated != heads zeroed by hand ({difference:.1e})"


# --- 3. Uniform masking ------------------------------------------------------------------------------------------

def _uniform_accepted_or_refused(entry, model, gates) -> bool:
    """True where uniform masking is accepted (as the entry expects); a refusal must name the entry's reason."""
    if entry.uniform_refused:
        with pytest.raises(ValueError, match=entry.uniform_refused):
            with gated(model, gates, masking=Uniform()):
                pass
        return False
    with gated(model, gates, masking=Uniform()):
        pass
    return True


def test_uniform_masking(case):
    model, entry = case.unpruned(), case.entry
    gates = gates_for(model, case.remove)
    if not _uniform_accepted_or_refused(entry, model, gates):
        return
    layers = language_layers(model)
    seen: dict = {}
    handles = []
    if entry.uniform_by_hand:
        for i in case.remove:
            attention = attention_of(layers[i])
            handles.append(attention.v_proj.register_forward_hook(
                lambda m, args, out, i=i: seen.__setitem__(("v", i), out.detach().float())))
            handles.append(attention.o_proj.register_forward_pre_hook(
                lambda m, args, i=i: seen.__setitem__(("o", i), args[0].detach().float())))
    try:
        with gated(model, gates, masking=Uniform()):
            uniform = logits(model, case.ids, case.mask)
    finally:
        for handle in handles:
            handle.remove()
    assert torch.isfinite(uniform[case.mask.bool()]).all()
    moved = changed(entry, uniform, case.plain, case.mask)
    assert moved, "uniform masking changed nothing"
    if entry.uniform_by_hand:
        for i, heads in case.remove.items():
            _check_uniform_by_hand(entry, i, heads, seen[("v", i)], seen[("o", i)], case.mask)


def _check_uniform_by_hand(entry, layer, heads, values, head_outputs, mask):
    """A head attending uniformly puts out the mean of its kv head's values over the keys it may see (real tokens,
    not after it, within its sliding window)."""
    _, kv, head_dim = entry.geometry()[layer]
    groups = entry.heads // kv
    rows, length = mask.shape
    values = values.unflatten(-1, (kv, head_dim))  # (rows, keys, kv heads, head_dim)
    outputs = head_outputs.unflatten(-1, (entry.heads, head_dim))
    position = torch.arange(length)
    allowed = mask.bool()[:, None, :] & (position[None, :, None] >= position[None, None, :])  # (rows, q, k)
    window = sliding_window(entry, layer)
    if window is not None:
        allowed &= (position[:, None] - position[None, :] < window)[None]
    weights = allowed.float() / allowed.sum(-1, keepdim=True).clamp(min=1)
    real = mask.bool()
    for h in heads:
        expected = torch.einsum("rqk,rkd->rqd", weights, values[:, :, h // groups])
        difference = float((outputs[:, :, h][real] - expected[real]).abs().max())
        assert difference <= FP32_TOLERANCE, f"layer {layer} head {h}: uniform masking != uniform attention by hand"


# --- 4. Streaming masking ----------------------------------------------------------------------------------------

def test_streaming_masking(case):
    model = case.unpruned()
    assert model.config._attn_implementation == "eager"
    with gated(model, gates_for(model, case.remove), masking=Streaming(sink=1, recent=2)):
        streaming = logits(model, case.ids, case.mask)
    assert torch.isfinite(streaming[case.mask.bool()]).all()
    moved = changed(case.entry, streaming, case.plain, case.mask)
    assert moved, "streaming masking changed nothing"


# --- 5. Pruning --------------------------------------------------------------------------------------------------

def _check_pruning_refused(entry, model, remove):
    before = [attention_of(layer).o_proj.weight.shape for layer in language_layers(model)]
    with pytest.raises(ValueError) as refusal:
        prune_heads(model, {DEC_SELF: remove})
    message = str(refusal.value)
    assert entry.pruning_refused in message and "\n" not in message.strip(), message
    assert [attention_of(layer).o_proj.weight.shape for layer in language_layers(model)] == before


def _check_pruned_shapes(entry, layers, remove):
    for i, layer in enumerate(layers):
        heads, kv, head_dim = entry.geometry()[i]
        kept = [h for h in range(heads) if h not in remove.get(i, [])]
        kept_kv = sorted({h // (heads // kv) for h in kept})
        attention = attention_of(layer)
        widths, expected = heads_projection_widths(attention), (len(kept) * head_dim, len(kept_kv) * head_dim)
        assert widths == expected, f"layer {i}: query/key features {widths} after pruning, not {expected}"
        for name in entry.per_head:
            shape = tuple(getattr(attention, name).shape)
            assert shape == (len(kept),), f"layer {i}: {name} of shape {shape}: not pruned with its heads"


def test_pruning_equals_gating(case):
    model, entry = case.unpruned(), case.entry
    gates = gates_for(model, case.remove)
    with gated(model, gates):
        expected = logits(model, case.ids, case.mask)
    long = None
    windows = [w for w in (sliding_window(entry, i) for i in range(zoo.LAYERS)) if w]
    if windows and min(windows) <= 256:  # rows longer than the window, where it is short enough to afford
        long_ids, long_mask = batch(min(windows) + 8, rows=1, seed=1)
        with gated(model, gates):
            long = (long_ids, long_mask, logits(model, long_ids, long_mask))
    if entry.generate:
        with gated(model, gates), torch.no_grad():
            generated = model.generate(case.ids, attention_mask=case.mask, max_new_tokens=3, do_sample=False,
                                       pad_token_id=0)
    if entry.pruning_refused:
        _check_pruning_refused(entry, model, case.remove)
        return
    case.pruned = True
    prune_heads(model, {DEC_SELF: case.remove})
    _check_pruned_shapes(entry, language_layers(model), case.remove)
    assert all(p.dtype == entry.dtype for p in model.parameters()), "pruning changed a parameter's dtype"
    difference = gap(logits(model, case.ids, case.mask), expected, case.mask)
    assert difference <= tolerance(entry, expected), f"pruned != gated ({difference:.1e})"
    if long is not None:
        long_ids, long_mask, long_expected = long
        difference = gap(logits(model, long_ids, long_mask), long_expected, long_mask)
        assert difference <= tolerance(entry, long_expected), (
            f"past the sliding window: pruned != gated ({difference:.1e})")
    if entry.generate:
        with torch.no_grad():
            got = model.generate(case.ids, attention_mask=case.mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
        assert torch.equal(got, generated), "generate() on the pruned model != generate() under the gates"
