"""How a gate of 0 switches a head off: one class per masking mode, the six side by side (issue #32).

``headprune.models.heads.gated(model, gates, capture, masking)`` finds the model's attention sites, asks the
mode to check the gates and the model (``Masking.check``), and to put its hooks on the model
(``Masking.install``); the hooks come off when the context closes. A mode is one class here: its config
word (``word``), its checks, its hooks. ``gated`` takes a mode object, or the strings "zero" and "uniform"
(``as_masking``); ``masking_for(word, ...)`` builds one from a config word and the data it needs.

Modes that act on a head's OUTPUT: the input of the layer's output projection is the concatenation of the
head outputs, head-major (..., heads * head_dim), so a forward pre-hook on that projection sees each head's
output o_h in every attention backend, inside generate() and beam search too. A head with gate g gets

- ``Zero()`` ("zero"): g * o_h, the paper's xi_h (gate 0: the head is zeroed, as physical removal does);
- ``Mean(constants)`` ("mean"), ``Optimal(constants)`` ("optimal"), both ``Constant``: g * o_h + (1 - g) * c_h,
  c_h a constant vector per head (``headprune.models.head_constants.HeadConstants``): gate 1 is the head as
  it is, gate 0 the constant. Mean: c_h is the head's output averaged over the real tokens of training data;
  optimal: c_h minimises the expected loss with the head replaced by it (Li and Janson 2024), learned from
  the mean (``headprune.scoring.constants``). Pruning keeps it as a bias (``prune_heads(..., constants=)``);
- ``Resample(pool, seed, draw)`` ("resample"): g * o_h + (1 - g) * r_h(p), r_h(p) the head's output at a
  token of another item of the training data (below).

These take any real gate (a leaf with requires_grad gives dL/dg, e.g. ``headprune.scoring.importance``, and
Voita's Hard Concrete gates interpolate), take a ``HeadCapture`` (each head's output o_h and the gradient at
the projection's input), and leave everything below the projection as it is (``acts_on_outputs``: a layer's
attention is unchanged, so callers may replay what is below a layer's first masked head).

Modes that act on a head's ATTENTION (gates 0 or 1 only, no capture):

- ``Uniform()`` ("uniform"): a head with gate 0 attends uniformly to the keys it may attend to (padding and
  causality respected), so it outputs the mean of its value vectors. A forward hook on the query projection
  multiplies the head's query slice by its 0/1 gate: a zero query scores 0 against every key, the additive
  mask leaves 0 on allowed keys and a huge negative number on the others, and the softmax of that is exactly
  1/(allowed keys) on the allowed ones and 0 elsewhere. This holds in every attention backend and inside
  generate(): keys, values and their cache are untouched, only each step's new queries are masked. It needs
  scores that are query . key plus the mask and nothing else (no relative-position terms), which
  ``HeadAdapter.uniform_masking_problem`` checks.
- ``Streaming(sink, recent)`` ("streaming"): a head with gate 0 attends as DuoAttention's streaming heads
  (Xiao et al. 2024): only to the first ``sink`` tokens and the last ``recent`` ones up to and including its
  query, within what it could attend to before: allowed(i, j) = allowed_before(i, j) and (j < sink or
  i - j < recent). Positions i, j count the real tokens of the row (the 2-D ``attention_mask``), so a row
  scores the same whichever side it is padded on; without padding they are the absolute positions, and
  inside generate() the query's is the keys so far minus this step's queries plus its index (the cache's
  ``get_query_offset`` and ``get_mask_sizes``, as transformers' masks take them). This changes which keys a
  head sees, so it cannot be a projection hook: a forward pre-hook on each attention module that has a
  masked head replaces the ``attention_mask`` argument (batch, 1, queries, keys) by a per-head one (batch,
  heads, queries, keys): the original mask (or, where sdpa got none and would use ``is_causal``, the causal
  mask it stands for) and, for the heads with gate 0, the window. A decoder-only LM's attention takes it
  inside ``headprune_attention`` (the one attention function, ``remote/headprune_decoder.py``), which hands it
  to the backend in place of the module's own mask; an attention that does not call transformers' attention
  interface is refused. The eager and sdpa backends take such a mask as it is (grouped-query repetition and
  sdpa's decoding path included); others (flash, flex) are refused. ``HeadAdapter.streaming_masking_problem`` says which families pass their attention mask through
  this way (the decoder-only LMs).

Resample ablation, defined so that it works for every kind of study and does not depend on how rows are
batched or grouped into gate variants. A ``ResamplePool`` (``headprune.models.head_constants``; recorded by
``headprune.scoring.constants.resample_pool`` on training data, never eval data) holds every head's outputs
at the real tokens of some training items, each token with its position (its rank among its item's real
tokens), per stream: "source" (encoder self-attention: source tokens) and "target" (decoder self- and
cross-attention: target tokens; a decoder-only LM's tokens). For draw k with seed s, each position p of a
stream gets ONE donor token: a token of the pool at position min(p, P) (P the longest item's last
position), picked by a generator seeded with (s, k, stream) (``ResamplePool.donors``). Every masked head of
every layer at position p of every row then outputs what it output at that donor token: the donor is the
same for all heads (they see one other input, as in activation patching) and for all rows, and depends on
nothing but (s, k, p), so batching, gate variants, beams and padding change nothing. A query's position p
is the one the model gives it: in a decoder-only LM its position id (``position_ids`` as passed, which the
adapters and generate() count over real tokens; else the cache's length plus its index); in an encoder (any
family), its index (batches are right-padded there); in a seq2seq decoder, the cache's length plus its index
(teacher forcing, greedy and beam search alike: a generated token at step t has position t, the position
the donor's reference token had). Generation needs nothing the donors lack: the pool holds target tokens of
references, and positions past the longest one take its last. Several draws (k = 0 .. K - 1) are K masking
objects whose scores ``headprune.experiments.runs.scored_variants`` averages for every experiment (a draw cannot
ride along as a gate variant: beam search gives every row its own gate setting).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from headprune.models import masking_words
from headprune.models.attention_types import DEC_SELF, ENC_SELF
from headprune.models.remote.headprune_decoder import backend_of
from headprune.models.sites import (AttentionSite, HeadAdapter, HeadCapture, _batch_major, _gate_per_row,
                                    _site_gate)

# Attention backends that take a per-head (batch, heads, queries, keys) mask as it is.
STREAMING_BACKENDS = ("eager", "sdpa")


class Masking:
    """A masking mode: its config word, its checks, its hooks (see the module docstring)."""

    word: ClassVar[str]
    real_gates: ClassVar[bool] = True  # takes any real gate (else 0 or 1 only)
    takes_capture: ClassVar[bool] = True  # gated(..., capture=HeadCapture()) records head outputs and gradients
    acts_on_outputs: ClassVar[bool] = True  # only the output projection's input changes (see the module docstring)

    def check(self, model, adapter: HeadAdapter, sites: list[AttentionSite], gates, capture) -> None:
        """A ValueError if this mode cannot mask ``model`` with ``gates`` (and ``capture``)."""
        if capture is not None and not self.takes_capture:
            raise ValueError("importance capture works on output gates: use masking='zero' with a HeadCapture")
        if not self.real_gates:
            check_binary_gates(self.word, gates)

    def install(self, handles: list, model, sites: list[AttentionSite], gates, capture) -> None:
        """Put this mode's hooks on ``model``, their handles into ``handles`` (removed when ``gated`` closes)."""
        raise NotImplementedError

    summary: ClassVar[str] = ""  # what a masked head becomes, without this object's data (model cards by word)

    def describe(self) -> str:
        """One line saying what a masked head becomes (model cards, logs)."""
        return self.summary


# --- Output modes: zero, mean, optimal, resample ----------------------------------------------------------

class _OutputMasking(Masking):
    """A mode that replaces a head's output at the output projection's input: g * o_h + (1 - g) * r_h."""

    def replacement(self, site: AttentionSite, per_head: torch.Tensor, state: dict) -> torch.Tensor | None:
        """What a head with gate 0 puts out, broadcastable to ``per_head`` (..., kept heads, head_dim) in the
        projection's own layout (FSMT: time first); None: zeros."""
        return None

    def prepare(self, handles: list, model, sites: list[AttentionSite], gates, state: dict) -> None:
        """Hooks the replacement needs besides the output hooks (e.g. positions); ``state`` is shared with them."""

    def install(self, handles, model, sites, gates, capture):
        state: dict = {}
        if gates is not None:
            self.prepare(handles, model, sites, gates, state)
        for site in sites:
            handles.append(site.output.register_forward_pre_hook(self._output_hook(site, gates, capture, state)))

    def _output_hook(self, site: AttentionSite, gates, capture: HeadCapture | None, state: dict):
        def hook(module, args):
            (x, *rest) = args
            per_head = x.unflatten(-1, (site.num_heads, site.head_dim))
            gated_heads = per_head
            if gates is not None:
                gate = _site_gate(gates, site, x)[..., None]
                replacement = self.replacement(site, per_head, state)
                gated_heads = per_head * gate
                if replacement is not None:
                    gated_heads = gated_heads + replacement * (1 - gate)
            if capture is not None:
                key = (site.attn_type, site.layer)
                capture.head_outputs[key] = _batch_major(per_head.detach(), site.time_major)
                if gated_heads.requires_grad:
                    # dL/dg_h = sum over tokens of (o_h - r_h) . dL/d(gated output)
                    def save_grad(grad, key=key, time_major=site.time_major):
                        capture.gradients[key] = _batch_major(grad.detach(), time_major)
                    gated_heads.register_hook(save_grad)
            return (gated_heads.flatten(-2), *rest)
        return hook


@dataclass(frozen=True)
class Zero(_OutputMasking):
    """The paper's masking: a head's output times its gate (gate 0: zeroed, as physical removal does)."""

    word: ClassVar[str] = "zero"

    summary: ClassVar[str] = "zero (a masked head's output multiplied by 0, as the paper masks, and as removing it does)"


@dataclass(frozen=True, eq=False)
class Constant(_OutputMasking):
    """A head with gate g puts out g * o_h + (1 - g) * c_h, c_h its vector in ``constants`` (a ``HeadConstants``).

    ``Mean`` and ``Optimal`` are this with the config word of their constants' kind; ``Constant`` itself takes
    constants of any kind (hand-made ones, say)."""

    constants: object  # headprune.models.head_constants.HeadConstants
    word: ClassVar[str] = "constant"

    def __post_init__(self):
        from headprune.models.head_constants import HeadConstants

        if not isinstance(self.constants, HeadConstants):
            raise TypeError(f"{type(self).__name__} takes a HeadConstants (headprune.models.head_constants), got "
                            f"{type(self.constants).__name__}")
        if type(self) is not Constant and self.constants.kind != self.word:
            raise ValueError(f"{type(self).__name__} masking takes {self.word} constants; these are "
                             f"{self.constants.kind!r} (Constant(constants) uses them as they are)")

    @classmethod
    def of(cls, constants) -> Constant:
        """The mode of the constants' kind: Mean, Optimal, or Constant for another kind."""
        return {"mean": Mean, "optimal": Optimal}.get(constants.kind, Constant)(constants)

    def check(self, model, adapter, sites, gates, capture):
        super().check(model, adapter, sites, gates, capture)
        self.constants.check(sites)

    def replacement(self, site, per_head, state):
        return self.constants.for_site(site, per_head)

    def describe(self):
        return self.summary or f"{self.word} (a masked head's output replaced by a constant vector: {self.constants.kind})"


@dataclass(frozen=True, eq=False)
class Mean(Constant):
    """Mean ablation: a head with gate 0 puts out its mean output over training tokens."""

    word: ClassVar[str] = "mean"

    summary: ClassVar[str] = "mean (a masked head's output replaced by its mean over the real tokens of training data)"


@dataclass(frozen=True, eq=False)
class Optimal(Constant):
    """Optimal ablation (Li and Janson 2024): a head with gate 0 puts out the constant that minimises the loss
    with it replaced, learned on training data."""

    word: ClassVar[str] = "optimal"

    summary: ClassVar[str] = ("optimal (a masked head's output replaced by the constant that minimises the expected loss, "
                              "learned on training data)")


@dataclass(frozen=True, eq=False)
class Resample(_OutputMasking):
    """Resample ablation: a head with gate 0 puts out its output at the donor token of its position (see the
    module docstring): draw ``draw`` of the donors seeded by ``seed`` from ``pool`` (a ``ResamplePool``)."""

    pool: object  # headprune.models.head_constants.ResamplePool
    seed: int = 0
    draw: int = 0
    word: ClassVar[str] = "resample"

    def __post_init__(self):
        from headprune.models.head_constants import ResamplePool

        if not isinstance(self.pool, ResamplePool):
            raise TypeError(f"Resample takes a ResamplePool (headprune.models.head_constants), got "
                            f"{type(self.pool).__name__}")
        for name in ("seed", "draw"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"Resample.{name} must be an int >= 0, got {value!r}")

    def check(self, model, adapter, sites, gates, capture):
        super().check(model, adapter, sites, gates, capture)
        self.pool.check(sites)

    def prepare(self, handles, model, sites, gates, state):
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

    def replacement(self, site, per_head, state):
        stream = self.pool.stream_of(site.attn_type)
        rows_axis, time_axis = (1, 0) if site.time_major else (0, 1)
        queries = per_head.shape[time_axis]
        if stream == "source":
            positions = torch.arange(queries, device=per_head.device)[None]
        else:
            positions = state.get("target")
            if positions is None:
                raise RuntimeError(f"resample masking saw {site.attn_type} layer {site.layer} run outside its "
                                   "decoder's forward: it has no positions for it")
            if positions.shape[-1] != queries:
                raise RuntimeError(f"{site.attn_type} layer {site.layer} has {queries} queries where its decoder "
                                   f"had {positions.shape[-1]} positions")
        donors = self.pool.donor_outputs(site, positions, self.seed, self.draw, like=per_head)  # (1|rows, T, H, d)
        if positions.shape[0] not in (1, per_head.shape[rows_axis]):
            raise RuntimeError(f"positions for {positions.shape[0]} rows, a batch of {per_head.shape[rows_axis]}")
        return donors.transpose(0, 1) if site.time_major else donors

    summary: ClassVar[str] = ("resample (a masked head's output replaced by its output at another training item's token "
                              "of the same position)")

    def describe(self):
        return f"{self.summary.removesuffix(')')}: seed {self.seed}, draw {self.draw})"


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


# --- Attention modes: uniform and streaming ---------------------------------------------------------------

@dataclass(frozen=True)
class Uniform(Masking):
    """A head with gate 0 attends uniformly to the keys it may attend to (its query is zeroed)."""

    word: ClassVar[str] = "uniform"
    real_gates: ClassVar[bool] = False
    takes_capture: ClassVar[bool] = False
    acts_on_outputs: ClassVar[bool] = False

    def check(self, model, adapter, sites, gates, capture):
        if capture is not None:
            raise ValueError("importance capture works on output gates: use masking='zero' with a HeadCapture")
        problem = adapter.uniform_masking_problem(model, sites)
        if problem is not None:
            raise ValueError(f"uniform masking zeroes a head's query, which gives uniform attention only when the "
                             f"scores are query . key plus the mask: {problem}")
        check_binary_gates("uniform", gates)

    def install(self, handles, model, sites, gates, capture):
        if gates is None:
            return

        def make_query_hook(site: AttentionSite):
            def hook(module, args, query):
                # Before any scaling (FSMT scales the projection's output, BERT and M2M100 the scores):
                # a zero query stays zero either way.
                per_head = query.unflatten(-1, (site.num_heads, site.head_dim))
                return (per_head * _site_gate(gates, site, query)[..., None]).flatten(-2)
            return hook

        for site in sites:
            if site.through_attention_function:
                _gate_queries_in_attention(handles, model, site, gates)
            else:
                handles.append(site.query.register_forward_hook(make_query_hook(site)))

    summary: ClassVar[str] = "uniform (a masked head attends uniformly to the keys it may attend to)"


@dataclass(frozen=True)
class Streaming(Masking):
    """``gated``'s masking for DuoAttention's streaming heads: a head with gate 0 attends only to the first
    ``sink`` tokens (attention sinks) and the last ``recent`` tokens up to and including its query."""

    sink: int
    recent: int
    word: ClassVar[str] = "streaming"
    real_gates: ClassVar[bool] = False
    takes_capture: ClassVar[bool] = False
    acts_on_outputs: ClassVar[bool] = False

    def __post_init__(self):
        for name in ("sink", "recent"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"Streaming.{name} must be an int, got {value!r}")
        if self.sink < 0:
            raise ValueError(f"Streaming.sink must be >= 0, got {self.sink}")
        if self.recent < 1:
            raise ValueError(f"Streaming.recent must be >= 1 (a query always sees itself), got {self.recent}")

    def check(self, model, adapter, sites, gates, capture):
        if capture is not None:
            raise ValueError("importance capture works on output gates: use masking='zero' with a HeadCapture")
        problem = adapter.streaming_masking_problem(model, sites)
        if problem is not None:
            raise ValueError(f"streaming masking gives a masked head a per-head attention mask: {problem}")
        backend = backend_of(model.config)  # under headprune_attention too (a pruned decoder)
        if backend not in STREAMING_BACKENDS:
            raise ValueError(f"streaming masking gives a masked head a per-head attention mask, which the "
                             f"{' and '.join(STREAMING_BACKENDS)} attention backends take; this model runs "
                             f"{backend!r}: load it with attn_implementation='sdpa' (or model.set_attn_implementation)")
        check_binary_gates("streaming", gates)

    def install(self, handles, model, sites, gates, capture):
        if gates is not None:
            _add_streaming_hooks(handles, model, sites, gates, self)

    summary: ClassVar[str] = "streaming (a masked head sees only the first and the last tokens of its context)"

    def describe(self):
        return (f"streaming (a masked head sees only the first {self.sink} and the last {self.recent} tokens of its "
                "context)")


class _Restore:
    """A handle that puts an attribute back as it was (``gated`` removes handles when it closes)."""

    def __init__(self, owner, name: str, value):
        self.owner, self.name, self.missing = owner, name, not hasattr(owner, name)
        self.old = getattr(owner, name, None)
        setattr(owner, name, value)

    def remove(self):
        if self.missing:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.old)


def _gate_queries_in_attention(handles: list, model, site: AttentionSite, gates):
    """Uniform masking inside ``headprune_attention``: each head's query (rows, heads, queries, head_dim), after
    rotary and any q/k norm, times its 0/1 gate, so that a normalisation over all heads (OLMo 2) sees them all."""
    def modify(query):
        gate = _site_gate(gates, site, query)  # (heads,) or (rows, 1, heads): rows first, as query
        gate = gate.reshape(-1, query.shape[1], 1, 1) if gate.dim() > 1 else gate[None, :, None, None]
        return query * gate

    _run_through_headprune_attention(handles, model)
    handles.append(_Restore(site.attention, "headprune_modify_query", modify))


def _run_through_headprune_attention(handles: list, model):
    """The model runs ``headprune_attention`` over its backend while ``gated`` is open (once per context)."""
    from headprune.models.remote import headprune_decoder

    config = model.config
    if not (config._attn_implementation or "").startswith(headprune_decoder.PREFIX):
        handles.append(_Restore(config, "_attn_implementation_internal",
                                headprune_decoder.register(config._attn_implementation or "eager")))


def check_binary_gates(name: str, gates):
    for attn_type, gate in (gates or {}).items():
        gate = torch.as_tensor(gate).detach()
        odd = gate[(gate != 0) & (gate != 1)]  # NaN included
        if odd.numel():
            raise ValueError(f"{name} masking takes gates 0 (masked) or 1 (kept) only; {attn_type} has "
                             f"{odd.flatten()[0].item()!r}")


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


def streaming_window(window: Streaming, padding: torch.Tensor | None, queries: int, query_offset, keys: int,
                     key_offset, device) -> torch.Tensor:
    """(rows or 1, 1, queries, keys) bool: which keys the window lets each query see.

    Query i sits at position ``query_offset + i``, key j at ``key_offset + j``; ``padding`` (rows,
    positions so far) marks real tokens. Positions count the real tokens of a row (a row's first real
    token is 0), so a row sees the same window whichever side it is padded on. A padding query keeps
    every key (its output means nothing; the original mask still applies).
    """
    query_slots = torch.arange(queries, device=device) + query_offset
    key_slots = torch.arange(keys, device=device) + key_offset
    if padding is None:
        query_rank, key_rank, real = query_slots[None], key_slots[None], None
    else:
        valid = padding.to(device=device, dtype=torch.bool)
        total = max(valid.shape[-1], int(key_offset) + keys, int(query_offset) + queries)
        valid = nn.functional.pad(valid, (0, total - valid.shape[-1]))  # a static cache's unfilled slots
        rank = valid.long().cumsum(-1) - 1
        query_rank, key_rank, real = rank[:, query_slots], rank[:, key_slots], valid[:, query_slots]
    allowed = (key_rank[:, None, None, :] < window.sink) | (
        query_rank[:, None, :, None] - key_rank[:, None, None, :] < window.recent)
    if real is not None:
        allowed = allowed | ~real[:, None, :, None]
    return allowed


def _add_streaming_hooks(handles: list, model, sites: list[AttentionSite], gates: dict, window: Streaming):
    """The hooks of ``gated(..., masking=window)``, into ``handles``: one on the base model to see the 2-D
    padding mask, one per attention module with a head gated 0 to give it its per-head mask."""
    backend = backend_of(model.config)
    state: dict = {}

    base = model.base_model
    base_signature = _signature(base)

    def see_padding(module, args, kwargs):
        padding = base_signature.bind_partial(*args, **kwargs).arguments.get("attention_mask")
        if padding is not None and (not isinstance(padding, torch.Tensor) or padding.dim() != 2):
            raise ValueError("streaming masking counts positions over the real tokens of a 2-D attention_mask "
                             f"(batch, tokens); the model got {type(padding).__name__} of shape "
                             f"{tuple(getattr(padding, 'shape', ()))} (generate() makes a 4-D one for a static "
                             "cache: use the default dynamic cache)")
        state.clear()
        state["padding"] = padding

    def forget_padding(module, args, kwargs, output):
        state.clear()

    def make_mask_hook(site: AttentionSite, masked: dict):  # device -> (heads,) or (variants, heads) bool
        signature = _signature(site.attention)

        def hook(module, args, kwargs):
            bound = signature.bind(*args, **kwargs)
            arguments = bound.arguments
            hidden = arguments["hidden_states"]
            original = arguments.get("attention_mask")
            rows, queries = hidden.shape[:2]
            device = hidden.device
            query_offset, keys, key_offset = _cache_geometry(arguments.get("past_key_values"), module.layer_idx,
                                                             queries)
            if original is not None and (not isinstance(original, torch.Tensor) or original.dim() != 4):
                raise ValueError(f"streaming masking needs a 4-D attention mask in {site.attn_type} layer "
                                 f"{site.layer}, got {type(original).__name__}")
            if original is not None and original.shape[-1] != keys:
                raise ValueError(f"{site.attn_type} layer {site.layer}'s attention mask has {original.shape[-1]} "
                                 f"keys where its cache gives {keys}")
            padding = state.get("padding")
            if padding is not None and padding.shape[0] not in (1, rows):
                raise ValueError(f"a 2-D attention_mask of {padding.shape[0]} rows for a batch of {rows}")
            key = (queries, keys, int(query_offset), int(key_offset))
            if state.get("window", (None,))[0] != key:  # the same in every layer of one forward
                state["window"] = (key, streaming_window(window, padding, queries, query_offset, keys, key_offset,
                                                         device))
            allowed = state["window"][1]
            head_masked = masked.get(device)
            if head_masked is None:
                head_masked = masked[device] = masked["source"].to(device)
            if head_masked.dim() == 2:  # (variants, heads): one row per example, variant-major
                head_masked = _gate_per_row(head_masked, hidden, False)[:, 0]
            allowed = allowed | ~head_masked[..., None, None]  # (rows or 1, heads, queries, keys)
            if original is None:  # sdpa's is_causal (no padding): the causal mask it stands for
                query_slots = torch.arange(queries, device=device) + query_offset
                causal = torch.arange(keys, device=device)[None] + key_offset <= query_slots[:, None]
                mask = allowed & causal
                if backend == "eager":  # additive, as transformers makes it for eager
                    mask = torch.where(mask, 0.0, torch.finfo(hidden.dtype).min).to(hidden.dtype)
            elif original.dtype == torch.bool:
                mask = original & allowed
            else:  # additive: 0 where allowed, the dtype's minimum elsewhere
                mask = torch.where(allowed, original, torch.finfo(original.dtype).min)
            if site.through_attention_function:  # headprune_attention applies it, whatever the forward does
                module.headprune_attention_mask = mask
                return None
            arguments["attention_mask"] = mask
            return bound.args, bound.kwargs
        return hook

    handles.append(base.register_forward_pre_hook(see_padding, with_kwargs=True))
    handles.append(base.register_forward_hook(forget_padding, with_kwargs=True))
    for site in sites:
        gate = torch.as_tensor(gates[site.attn_type]).detach()[..., site.layer, :]
        gate = gate[..., site.kept_heads] if site.num_heads != gate.shape[-1] else gate
        masked = gate == 0
        if site.num_heads and bool(masked.any()):
            hook = make_mask_hook(site, {"source": masked})
            handles.append(site.attention.register_forward_pre_hook(hook, with_kwargs=True))
            if site.through_attention_function:
                _run_through_headprune_attention(handles, model)
                handles.append(_Restore(site.attention, "headprune_attention_mask", None))


# --- The config words --------------------------------------------------------------------------------------

# Every mode, by its config word, in the order they are reported.
MODES: dict[str, type[Masking]] = {cls.word: cls for cls in (Zero, Uniform, Streaming, Mean, Optimal, Resample)}
MASKING_WORDS = tuple(MODES)
assert MASKING_WORDS == masking_words.MASKING_WORDS, "headprune/models/masking_words.py lists the same words"
assert masking_words.BINARY_WORDS == tuple(w for w, cls in MODES.items() if not cls.real_gates), "and the 0/1 ones"
# What each word needs beside it ("data": a file computed per study).
NEEDS = {"zero": (), "uniform": (), "streaming": ("sink", "recent"), "mean": ("constants",),
         "optimal": ("constants",), "resample": ("pool", "seed", "draw")}
_PLAIN = {"zero": Zero(), "uniform": Uniform()}  # the words gated takes as strings


def as_masking(masking) -> Masking:
    """``gated``'s masking argument as a mode: a ``Masking`` as it is, "zero" or "uniform" as ``Zero()`` or
    ``Uniform()``; a word that needs data is refused with what to pass instead."""
    if isinstance(masking, Masking):
        return masking
    if isinstance(masking, str) and masking == "streaming":
        raise ValueError("masking='streaming' needs its window: pass masking=Streaming(sink, recent) "
                         "(headprune.models.heads.Streaming), e.g. Streaming(sink=4, recent=64)")
    if isinstance(masking, str) and masking in ("mean", "optimal"):
        raise ValueError(f"masking must be one of {tuple(_PLAIN)} or a masking object: masking={masking!r} needs its "
                         f"constants: pass masking={masking.capitalize()}(constants) (headprune.models.masking; "
                         "constants from headprune.scoring.constants or HeadConstants.load)")
    if isinstance(masking, str) and masking == "resample":
        raise ValueError(f"masking must be one of {tuple(_PLAIN)} or a masking object: masking='resample' needs its "
                         "donors: pass masking=Resample(pool, seed, draw) (headprune.models.masking; the pool from "
                         "headprune.scoring.constants.resample_pool or ResamplePool.load)")
    if not isinstance(masking, str) or masking not in _PLAIN:
        raise ValueError(f"masking must be one of {tuple(_PLAIN)} or a Streaming(sink, recent) (or another "
                         f"masking object: Mean, Optimal, Resample), got {masking!r}")
    return _PLAIN[masking]


def masking_for(word: str, *, sink: int | None = None, recent: int | None = None, constants=None, pool=None,
                seed: int = 0, draw: int = 0) -> Masking:
    """The mode of a config word (``MASKING_WORDS``), given the data it needs (``NEEDS``): ``sink`` and
    ``recent`` for streaming, ``constants`` (a HeadConstants, or the path of its file) for mean and optimal,
    ``pool`` (a ResamplePool or its file), ``seed`` and ``draw`` for resample.

    >>> masking_for("streaming", sink=4, recent=64)
    Streaming(sink=4, recent=64)
    """
    from pathlib import Path

    from headprune.models.head_constants import HeadConstants, ResamplePool

    if word not in MODES:
        raise ValueError(f"masking must be one of {MASKING_WORDS}, got {word!r}")
    if word == "streaming":
        if sink is None or recent is None:
            raise ValueError("streaming masking needs its window: sink and recent")
        return Streaming(sink, recent)
    if word in ("mean", "optimal"):
        if constants is None:
            raise ValueError(f"{word} masking needs its constants (a HeadConstants or its file)")
        if isinstance(constants, (str, Path)):
            constants = HeadConstants.load(constants)
        return MODES[word](constants)
    if word == "resample":
        if pool is None:
            raise ValueError("resample masking needs its pool (a ResamplePool or its file)")
        if isinstance(pool, (str, Path)):
            pool = ResamplePool.load(pool)
        return Resample(pool, seed, draw)
    return _PLAIN[word]
