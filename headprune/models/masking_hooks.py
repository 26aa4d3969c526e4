"""The hook machinery of the places a masking mode acts on (``headprune.models.places``: one installer each).

Kept apart from the mode classes so that those, their config words and their registry import without torch:
the output projection's pre-hook that gates (and captures) head outputs, the query change, the decoder positions
resample masking reads, the per-head attention mask, and the check that every gated layer was reached
(``check_reached``).

How they act. The output place (zero, mean, optimal, resample): the input of a layer's output projection is the
concatenation of the head outputs, head-major (..., heads * head_dim), so a forward pre-hook on that projection
sees each head's output o_h in every attention backend, inside generate() and beam search too.

The query place (uniform): the head's query, as the mode changes it, inside ``headprune_attention`` (after rotary
and any q/k norm) where the site runs through it, else a forward hook on the query projection. Keys, values and
their cache are untouched, only each step's new queries change. Uniform multiplies it by the 0/1 gate: a zero query
scores 0 against every key, the additive mask leaves 0 on allowed keys and a huge negative number on the others, and
the softmax of that is exactly 1/(allowed keys) on the allowed ones and 0 elsewhere, which needs scores that are
query . key plus the mask and nothing else (``HeadAdapter.query_problem``).

The attention place (streaming) changes which keys a head sees, so it cannot be a projection hook: a forward
pre-hook on each attention module that has a masked head replaces the ``attention_mask`` argument (batch, 1,
queries, keys) by a per-head one (batch, heads, queries, keys): the original mask (or, where sdpa got none and would
use ``is_causal``, the causal mask it stands for) and, for the heads with gate 0, the keys the mode keeps. A
decoder-only LM's attention takes it inside ``headprune_attention`` (the one attention function,
``portable/headprune_attention.py``), which hands it to the backend in place of the module's own mask; elsewhere the
module's ``attention_mask`` argument is replaced. The eager and sdpa backends take such a mask as it is
(grouped-query repetition and sdpa's decoding path included); others (flash, flex) are refused.
``HeadAdapter.attention_problem`` says which families hand their attention mask on this way.
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

from headprune.models.attention_types import DEC_SELF
from headprune.models.portable.headprune_attention import backend_of
from headprune.models.sites import AttentionSite, HeadCapture, _batch_major, _gate_per_row, _site_gate

# Attention backends that take a per-head (batch, heads, queries, keys) mask as it is.
MASK_BACKENDS = ("eager", "sdpa")


# --- Output modes: the output projection's pre-hook ---------------------------------------------------------

def install_output_hooks(handles: list, sites: list[AttentionSite], gates, capture: HeadCapture | None, state: dict,
                         replacement) -> None:
    """A pre-hook on each site's output projection: a head with gate g puts out g * o_h + (1 - g) * r_h,
    ``replacement(site, per_head, state)`` giving r_h (None: zeros); with ``capture``, o_h and its gradient."""
    for site in sites:
        handles.append(site.output.register_forward_pre_hook(_output_hook(site, gates, capture, state, replacement)))


def _output_hook(site: AttentionSite, gates, capture: HeadCapture | None, state: dict, replacement):
    def hook(module, args):
        (x, *rest) = args
        beside = None
        if site.extra_features:  # features that are no head's pass as they are
            x, beside = x[..., :site.num_heads * site.head_dim], x[..., site.num_heads * site.head_dim:]
        per_head = x.unflatten(-1, (site.num_heads, site.head_dim))
        gated_heads = per_head
        if gates is not None:
            gate = _site_gate(gates, site, x)[..., None]
            replaced = replacement(site, per_head, state)
            gated_heads = per_head * gate
            if replaced is not None:
                gated_heads = gated_heads + replaced * (1 - gate)
        if capture is not None:
            key = (site.attn_type, site.layer)
            capture.head_outputs[key] = _batch_major(per_head.detach(), site.time_major)
            if gated_heads.requires_grad:
                # dL/dg_h = sum over tokens of (o_h - r_h) . dL/d(gated output)
                def save_grad(grad, key=key, time_major=site.time_major):
                    capture.gradients[key] = _batch_major(grad.detach(), time_major)
                gated_heads.register_hook(save_grad)
        gated_input = gated_heads.flatten(-2)
        if beside is not None:
            gated_input = torch.cat([gated_input, beside], -1)
        return (gated_input, *rest)
    return hook


# --- Resample: each query's position ------------------------------------------------------------------------

def watch_target_positions(handles: list, model, sites: list[AttentionSite], state: dict) -> None:
    """Hooks that keep ``state["target"]``: the positions of the decoder forward under way (the target side)."""
    from headprune.models.attention_types import DEC_SELF, ENC_SELF

    attention_types = {site.attn_type for site in sites}
    if DEC_SELF in attention_types:  # the target side: its positions, per decoder forward
        decoder = _decoder_stack(model)
        decoder_only = ENC_SELF not in attention_types and decoder is model.base_model
        signature = inspect.signature(decoder.forward)

        def see_positions(module, args, kwargs):
            arguments = signature.bind_partial(*args, **kwargs).arguments
            state["target"] = _decoder_positions(arguments, decoder_only)

        def forget_positions(module, args, kwargs, output):
            state.pop("target", None)

        handles.append(decoder.register_forward_pre_hook(see_positions, with_kwargs=True))
        handles.append(decoder.register_forward_hook(forget_positions, with_kwargs=True))


def query_positions(site: AttentionSite, per_head: torch.Tensor, state: dict, stream: str) -> torch.Tensor:
    """(rows or 1, queries) long: the position of each query of ``per_head`` in its stream ("source": its index;
    "target": what ``watch_target_positions`` saw)."""
    rows_axis, time_axis = (1, 0) if site.time_major else (0, 1)
    queries = per_head.shape[time_axis]
    if stream == "source":
        return torch.arange(queries, device=per_head.device)[None]
    positions = state.get("target")
    if positions is None:
        raise RuntimeError(f"resample masking saw {site.attn_type} layer {site.layer} run outside its "
                           "decoder's forward: it has no positions for it")
    if positions.shape[-1] != queries:
        raise RuntimeError(f"{site.attn_type} layer {site.layer} has {queries} queries where its decoder "
                           f"had {positions.shape[-1]} positions")
    if positions.shape[0] not in (1, per_head.shape[rows_axis]):
        raise RuntimeError(f"positions for {positions.shape[0]} rows, a batch of {per_head.shape[rows_axis]}")
    return positions


def _decoder_stack(model) -> nn.Module:
    """The module whose forward runs the target side: a decoder-only LM's base model, a seq2seq's decoder."""
    get_decoder = getattr(model, "get_decoder", None)
    if hasattr(model, "get_encoder") and get_decoder is not None:
        decoder = get_decoder()
        if decoder is not None and decoder is not model:
            return decoder
    return model.base_model


def _decoder_positions(arguments: dict, decoder_only: bool) -> torch.Tensor:
    """(rows or 1, queries) long: each query's position in a decoder forward, from its arguments."""
    position_ids = arguments.get("position_ids") if decoder_only else None
    if isinstance(position_ids, torch.Tensor):
        return position_ids.long().reshape(-1, position_ids.shape[-1])
    tokens = arguments.get("input_ids")
    if tokens is None:
        tokens = arguments.get("inputs_embeds")
        if tokens is None:
            raise ValueError("resample masking needs the decoder's input_ids or inputs_embeds to count positions")
    queries = tokens.shape[1]
    past = arguments.get("past_key_values")
    offset = int(past.get_seq_length()) if past is not None else 0
    return (torch.arange(queries, device=tokens.device) + offset)[None]


# --- The query place: a head's query, changed as the mode says (uniform: times its gate) ---------------------

def install_query_changes(handles: list, model, sites: list[AttentionSite], gates, change) -> None:
    """Each head's query as ``change(query, gate)`` gives it (query (..., heads, head_dim), its gate broadcast to
    it): inside ``headprune_attention`` where the site runs through it, else a forward hook on the query
    projection."""
    def make_query_hook(site: AttentionSite):
        def hook(module, args, query):
            # Before any scaling (FSMT scales the projection's output, BERT and M2M100 the scores)
            per_head = query.unflatten(-1, (site.num_heads, site.head_dim))
            return change(per_head, _site_gate(gates, site, query)[..., None]).flatten(-2)
        return hook

    for site in sites:
        if site.through_attention_function:
            _change_queries_in_attention(handles, model, site, gates, change)
        else:
            handles.append(site.query.register_forward_hook(make_query_hook(site)))


class _Restore:
    """A handle that puts an attribute back as it was (``gated`` removes handles when it closes)."""

    def __init__(self, owner, name: str, value):
        self.owner, self.name, self.missing = owner, name, not hasattr(owner, name)
        self.old = getattr(owner, name, None)
        setattr(owner, name, value)

    def remove(self):
        if self.owner is None:  # removed already
            return
        if self.missing:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.old)
        self.owner = None


def _change_queries_in_attention(handles: list, model, site: AttentionSite, gates, change):
    """The query place inside ``headprune_attention``: each head's query (rows, heads, queries, head_dim), after
    rotary and any q/k norm, so that a normalisation over all heads (OLMo 2) sees them all as they were."""
    def modify(query):
        gate = _site_gate(gates, site, query)  # (heads,) or (rows, 1, heads): rows first, as query
        gate = gate.reshape(-1, query.shape[1], 1, 1) if gate.dim() > 1 else gate[None, :, None, None]
        return change(query, gate)

    _run_through_headprune_attention(handles, model)
    handles.append(_Restore(site.attention, "headprune_modify_query", modify))


class _Backends:
    """A handle that puts the attention backends ``run_through_headprune`` switched back as they were."""

    def __init__(self, switched: list):
        self.switched = switched

    def remove(self):
        from headprune.models.portable.headprune_attention import restore_backends

        restore_backends(self.switched)


def _run_through_headprune_attention(handles: list, model):
    """The model's decoder attention runs ``headprune_attention`` over its backend while ``gated`` is open (once per
    context): every config its attention modules read is switched, a wrapper's text config included."""
    from headprune.models.portable.headprune_attention import run_through_headprune

    if not any(isinstance(handle, _Backends) for handle in handles):
        handles.append(_Backends(run_through_headprune(model)))


def check_binary_gates(name: str, gates):
    for attn_type, gate in (gates or {}).items():
        gate = torch.as_tensor(gate).detach()
        odd = gate[(gate != 0) & (gate != 1)]  # NaN included
        if odd.numel():
            raise ValueError(f"{name} masking takes gates 0 (masked) or 1 (kept) only; {attn_type} has "
                             f"{odd.flatten()[0].item()!r}")


# --- The attention place: a masked head's per-head attention mask (streaming: its window) --------------------

def mask_backend_problem(model) -> str | None:
    """Why this model's attention backend takes no per-head attention mask, or None."""
    backend = backend_of(model)  # under headprune_attention too (a pruned decoder)
    if backend in MASK_BACKENDS:
        return None
    return (f"the {' and '.join(MASK_BACKENDS)} attention backends take one; this model runs {backend!r}: load it "
            "with attn_implementation='sdpa' (or model.set_attn_implementation)")


def _signature(module: nn.Module) -> inspect.Signature:
    return inspect.signature(module.forward)


def _cache_geometry(past, layer_idx: int, queries: int) -> tuple:
    """(first query's position, keys the attention will see, first key's position) for one attention call,
    as transformers' masks take them: before this step's keys enter the cache."""
    if past is None:
        return 0, queries, 0
    if hasattr(past, "self_attention_cache"):  # an encoder-decoder cache: the self-attention half
        past = past.self_attention_cache
    keys, key_offset = past.get_mask_sizes(queries, layer_idx)
    return past.get_query_offset(layer_idx), keys, key_offset


def _call_geometry(module: nn.Module, arguments: dict, queries: int) -> tuple:
    """``_cache_geometry`` of one call; a cross-attention's keys are its source's, from 0, and its queries follow
    the decoder's cache (which this step's self-attention has entered already)."""
    past, layer_idx = arguments.get("past_key_values"), getattr(module, "layer_idx", None)
    source = arguments.get("key_value_states")
    if source is None:
        return _cache_geometry(past, layer_idx, queries)
    past = getattr(past, "self_attention_cache", past)
    return (int(past.get_seq_length(layer_idx)) - queries if past is not None else 0), source.shape[1], 0


def positions(padding: torch.Tensor | None, queries: int, query_offset, keys: int, key_offset, device) -> tuple:
    """(query positions (rows or 1, queries), key positions (rows or 1, keys), real queries (rows, queries) or None).

    Query i sits at slot ``query_offset + i``, key j at ``key_offset + j``; ``padding`` (rows, slots so far) marks
    real tokens. With it, positions count the real tokens of a row (a row's first real token is 0), so a row reads
    the same whichever side it is padded on; without it they are the slots.
    """
    query_slots = torch.arange(queries, device=device) + query_offset
    key_slots = torch.arange(keys, device=device) + key_offset
    if padding is None:
        return query_slots[None], key_slots[None], None
    valid = padding.to(device=device, dtype=torch.bool)
    total = max(valid.shape[-1], int(key_offset) + keys, int(query_offset) + queries)
    valid = nn.functional.pad(valid, (0, total - valid.shape[-1]))  # a static cache's unfilled slots
    rank = valid.long().cumsum(-1) - 1
    return rank[:, query_slots], rank[:, key_slots], valid[:, query_slots]


def install_attention_masks(handles: list, model, sites: list[AttentionSite], gates: dict, keys_seen):
    """The attention place, into ``handles``: one pre-hook per attention module with a head gated 0 giving it its
    per-head mask, where such a head sees the keys ``keys_seen(query positions, key positions)`` keeps; in a
    decoder-only LM one on the base model too, to count positions over the 2-D padding mask."""
    backend = backend_of(model)
    state: dict = {}  # one forward's 2-D padding mask, and the keys seen made from it
    if {site.attn_type for site in sites} == {DEC_SELF}:
        _watch_padding(handles, model.base_model, state)
    for site in sites:
        gate = torch.as_tensor(gates[site.attn_type]).detach()[..., site.layer, :]
        gate = gate[..., site.kept_heads] if site.num_heads != gate.shape[-1] else gate
        masked = gate == 0
        if site.num_heads and bool(masked.any()):
            hook = _attention_mask_hook(site, {"source": masked}, state, keys_seen, backend)
            handles.append(site.attention.register_forward_pre_hook(hook, with_kwargs=True))
            if site.through_attention_function:
                _run_through_headprune_attention(handles, model)
                handles.append(_Restore(site.attention, "headprune_attention_mask", None))


def _watch_padding(handles: list, base: nn.Module, state: dict) -> None:
    """Hooks that keep ``state["padding"]``: the 2-D attention_mask of the forward under way of ``base``."""
    base_signature = _signature(base)

    def see_padding(module, args, kwargs):
        padding = base_signature.bind_partial(*args, **kwargs).arguments.get("attention_mask")
        if padding is not None and (not isinstance(padding, torch.Tensor) or padding.dim() != 2):
            raise ValueError("a per-head attention mask counts positions over the real tokens of a 2-D attention_mask "
                             f"(batch, tokens); the model got {type(padding).__name__} of shape "
                             f"{tuple(getattr(padding, 'shape', ()))} (generate() makes a 4-D one for a static "
                             "cache: use the default dynamic cache)")
        state.clear()
        state["padding"] = padding

    def forget_padding(module, args, kwargs, output):
        state.clear()

    handles.append(base.register_forward_pre_hook(see_padding, with_kwargs=True))
    handles.append(base.register_forward_hook(forget_padding, with_kwargs=True))


def _attention_mask_hook(site: AttentionSite, masked: dict, state: dict, keys_seen, backend: str):
    """The forward pre-hook that gives one attention module its per-head mask: the keys seen for the heads
    ``masked`` (device -> (heads,) or (variants, heads) bool), the module's own mask for the others."""
    signature = _signature(site.attention)

    def hook(module, args, kwargs):
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        hidden = arguments["hidden_states"]
        original = arguments.get("attention_mask")
        rows, queries = hidden.shape[:2]
        device = hidden.device
        query_offset, keys, key_offset = _call_geometry(module, arguments, queries)
        padding = state.get("padding")
        _check_mask_call(site, original, keys, padding, rows)
        key = (queries, keys, int(query_offset), int(key_offset), device)
        if state.get("seen", (None,))[0] != key:  # the same in every layer of one forward
            query_positions, key_positions, real = positions(padding, queries, query_offset, keys, key_offset, device)
            allowed = keys_seen(query_positions, key_positions)
            if real is not None:  # a padding query keeps every key (its output means nothing; the mask still applies)
                allowed = allowed | ~real[:, None, :, None]
            state["seen"] = (key, allowed)
        allowed = state["seen"][1]
        head_masked = masked.get(device)
        if head_masked is None:
            head_masked = masked[device] = masked["source"].to(device)
        if head_masked.dim() == 2:  # (variants, heads): one row per example, variant-major
            head_masked = _gate_per_row(head_masked, hidden, False)[:, 0]
        allowed = allowed | ~head_masked[..., None, None]  # (rows or 1, heads, queries, keys)
        causal = getattr(module, "is_causal", True)
        mask = _with_module_mask(allowed, original, causal, queries, query_offset, keys, key_offset, hidden, backend)
        if site.through_attention_function:  # headprune_attention applies it, whatever the forward does
            module.headprune_attention_mask = mask
            return None
        arguments["attention_mask"] = mask
        return bound.args, bound.kwargs
    return hook


def _check_mask_call(site: AttentionSite, original, keys: int, padding, rows: int) -> None:
    """Refuse an attention call whose masks a per-head one cannot be combined with."""
    if original is not None and (not isinstance(original, torch.Tensor) or original.dim() != 4):
        raise ValueError(f"a per-head attention mask needs a 4-D attention mask in {site.attn_type} layer "
                         f"{site.layer}, got {type(original).__name__}")
    if original is not None and original.shape[-1] != keys:
        raise ValueError(f"{site.attn_type} layer {site.layer}'s attention mask has {original.shape[-1]} "
                         f"keys where its cache gives {keys}")
    if padding is not None and padding.shape[0] not in (1, rows):
        raise ValueError(f"a 2-D attention_mask of {padding.shape[0]} rows for a batch of {rows}")


def _with_module_mask(allowed: torch.Tensor, original, causal: bool, queries: int, query_offset, keys: int,
                      key_offset, hidden: torch.Tensor, backend: str) -> torch.Tensor:
    """``allowed`` (bool) combined with the mask the module was called with, in that mask's form (without one,
    the causal mask sdpa's is_causal stands for, or none where the module is not causal; additive, in
    ``hidden``'s dtype, for eager)."""
    if original is None:
        mask = allowed
        if causal:  # sdpa's is_causal (no padding): the causal mask it stands for
            query_slots = torch.arange(queries, device=hidden.device) + query_offset
            mask = mask & (torch.arange(keys, device=hidden.device)[None] + key_offset <= query_slots[:, None])
        if backend == "eager":  # additive, as transformers makes it for eager
            mask = torch.where(mask, 0.0, torch.finfo(hidden.dtype).min).to(hidden.dtype)
        return mask
    if original.dtype == torch.bool:
        return original & allowed
    # additive: 0 where allowed, the dtype's minimum elsewhere
    return torch.where(allowed, original, torch.finfo(original.dtype).min)


# --- No silent no-op: every gated layer must be reached -----------------------------------------------------

def _masks(gates, site: AttentionSite) -> bool:
    """Whether a gate of one of the site's kept heads is not 1 (in some variant)."""
    if gates is None or site.attn_type not in gates:
        return False
    gate = torch.as_tensor(gates[site.attn_type]).detach()[..., site.layer, :]
    gate = gate[..., site.kept_heads] if site.num_heads != gate.shape[-1] else gate
    return bool((gate != 1).any())


class ReachCheck:
    """Counts, during the first forward of the model under ``gated``, the calls that reach each gated layer: its
    output projection (every mode's heads end there) and, for a mode that acts inside the attention (uniform,
    streaming), the attention function it changes (``headprune_attention``) or the query projection it hooks.
    After that forward it raises, naming the layer and the mode, where a count is 0: a gate there would change
    nothing, and a head that is never reached must not read as a head without effect. Then its hooks come off."""

    def __init__(self, model, sites: list[AttentionSite], gates, capture, mode):
        self.mode, self.handles = mode, []
        required = [site for site in sites if site.num_heads and (capture is not None or _masks(gates, site))]
        self.counts = {id(site): [0, 0] for site in required}
        self.sites = required
        inside = not mode.acts_on_outputs
        for site in required:
            count = self.counts[id(site)]
            self.handles.append(site.output.register_forward_pre_hook(_counter(count, 0)))
            if not inside:
                count[1] = None
            elif site.through_attention_function:
                self.handles.append(_Restore(site.attention, "headprune_reached", _counter(count, 1)))
            else:
                self.handles.append(site.query.register_forward_hook(_counter(count, 1)))
        self.handles.append(model.register_forward_hook(self.check))

    def remove(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def check(self, module, args, output):
        self.remove()
        for site in self.sites:
            output_calls, inside_calls = self.counts[id(site)]
            where = f"{site.attn_type} layer {site.layer} ({type(site.attention).__name__})"
            if not output_calls:
                raise RuntimeError(f"{self.mode.word} masking: {where} never ran in the model's forward, so its gates "
                                   "change nothing: the heads found are not in the stack that runs (a vision or "
                                   "audio tower?)")
            if inside_calls == 0:
                raise RuntimeError(f"{self.mode.word} masking never reached the attention of {where}: the layer ran "
                                   "but its heads were not changed (its attention did not run through headprune's "
                                   "attention function)")


def _counter(count: list, index: int):
    def add(*args):
        count[index] += 1
    return add


def check_reached(handles: list, model, sites: list[AttentionSite], gates, capture, mode) -> None:
    """Install a ``ReachCheck`` (its handle into ``handles``) where some layer is gated or captured."""
    check = ReachCheck(model, sites, gates, capture, mode)
    if check.sites:
        handles.append(check)
    else:
        check.remove()
