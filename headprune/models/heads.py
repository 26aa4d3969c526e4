"""Where a model's attention heads live, and per-head gates on them.

Every attention layer ends in an output projection whose input is the
concatenation of the head outputs, head-major: (..., heads * head_dim). A
forward pre-hook on that projection sees each head's output in every attention
backend (eager, sdpa, inside generate() with beam search), so multiplying it by
a per-head gate is the paper's xi_h. transformers 5 removed ``head_mask`` (and
silently ignores the argument), so this is the only reliable place to gate.

Gate 0 zeroes a head's output. ``gated(..., masking="uniform")`` masks a head the other way
the literature does: its attention becomes uniform over the keys it may attend to (padding and
causality respected), so it outputs the mean of its value vectors. A forward hook on the query
projection multiplies the head's query slice by its 0/1 gate: a zero query scores 0 against every
key, the additive mask leaves 0 on allowed keys and a huge negative number on the others, and the
softmax of that is exactly 1/(allowed keys) on the allowed ones and 0 elsewhere. This holds in every
attention backend and inside generate(): keys, values and their cache are untouched, only each
step's new queries are masked. It needs scores that are query . key plus the mask and nothing
else (no relative-position terms), which ``HeadAdapter.uniform_masking_problem`` checks.

``gated(..., masking=Streaming(sink, recent))`` masks a head as DuoAttention's streaming heads (Xiao et
al. 2024): it attends only to the first ``sink`` tokens and the last ``recent`` ones up to and including
its query, within what it could attend to before: allowed(i, j) = allowed_before(i, j) and (j < sink or
i - j < recent). Positions i, j count the real tokens of the row (the 2-D ``attention_mask``), so a row
scores the same whichever side it is padded on; without padding they are the absolute positions, and
inside generate() the query's is the keys so far minus this step's queries plus its index (the cache's
``get_query_offset`` and ``get_mask_sizes``, as transformers' masks take them). This changes which keys a
head sees, so it cannot be a projection hook: a forward pre-hook on each attention module that has a
masked head replaces the ``attention_mask`` argument (batch, 1, queries, keys) by a per-head one (batch,
heads, queries, keys): the original mask (or, where sdpa got none and would use ``is_causal``, the
causal mask it stands for) and, for the heads with gate 0, the window. The eager and sdpa backends take
such a mask as it is (grouped-query repetition and sdpa's decoding path included); others (flash, flex)
are refused. ``HeadAdapter.streaming_masking_problem`` says which families pass their attention mask
through this way (the decoder-only LMs).

One ``HeadAdapter`` per model family says where the heads are (``headprune/models/families/``, one file
each); gating, scoring and pruning only talk to ``AttentionSite`` objects.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field

import torch
from torch import nn

from headprune.models.attention_types import ATTENTION_TYPES, DEC_SELF, ENC_DEC, ENC_SELF, TYPE_LABELS  # noqa: F401

# How a gate of 0 masks a head: "zero" multiplies its output by the gate (the paper's xi_h, any real
# gate); "uniform" gives it uniform attention over its allowed keys (gates 0 or 1 only); a ``Streaming``
# window (below; gates 0 or 1 only) keeps it the first ``sink`` and the last ``recent`` tokens.
ZERO, UNIFORM, STREAMING = "zero", "uniform", "streaming"
MASKINGS = (ZERO, UNIFORM)  # the plain-string maskings; streaming is a Streaming(sink, recent)

# Attention backends that take a per-head (batch, heads, queries, keys) mask as it is.
_STREAMING_BACKENDS = ("eager", "sdpa")


@dataclass(frozen=True)
class Streaming:
    """``gated``'s masking for DuoAttention's streaming heads: a head with gate 0 attends only to the first
    ``sink`` tokens (attention sinks) and the last ``recent`` tokens up to and including its query."""

    sink: int
    recent: int

    def __post_init__(self):
        for name in ("sink", "recent"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"Streaming.{name} must be an int, got {value!r}")
        if self.sink < 0:
            raise ValueError(f"Streaming.sink must be >= 0, got {self.sink}")
        if self.recent < 1:
            raise ValueError(f"Streaming.recent must be >= 1 (a query always sees itself), got {self.recent}")

# Attention-module attributes that add terms to the scores (relative positions, learned biases):
# a zero query would then not give uniform attention.
# (transformers 4's BERT relative_key(_query), T5's bucketed bias.)
_SCORE_TERMS = ("distance_embedding", "relative_attention_bias")


@dataclass
class AttentionSite:
    """One multi-head attention layer: its projections and which heads it still has."""

    attn_type: str
    layer: int
    attention: nn.Module  # the module that owns the q/k/v projections
    query: nn.Linear
    key: nn.Linear
    value: nn.Linear
    output: nn.Linear  # input is the concatenated head outputs
    head_dim: int
    original_num_heads: int
    time_major: bool  # FSMT works in (time, batch, dim); BERT in (batch, time, dim)

    @property
    def kept_heads(self) -> list[int]:
        """Original indices of the heads this layer still has (all, unless pruned)."""
        return list(getattr(self.attention, "headprune_kept_heads", range(self.original_num_heads)))

    @property
    def num_heads(self) -> int:
        return len(self.kept_heads)


class HeadAdapter:
    """Says where a model family's attention heads live and how a batch flows through it."""

    family: str
    attention_types: tuple[str, ...]

    def sites(self, model) -> list[AttentionSite]:
        raise NotImplementedError

    def loss_and_outputs(self, model, batch, output_attentions: bool = False):
        """Summed loss over the batch (so per-example gradients add up) and model outputs."""
        raise NotImplementedError

    def query_mask(self, batch, attn_type: str) -> torch.Tensor:
        """(batch, queries) bool: positions that are real tokens on the query side."""
        raise NotImplementedError

    def key_mask(self, batch, attn_type: str) -> torch.Tensor:
        """(batch, queries, keys) bool: keys each query may attend to (padding, causality)."""
        raise NotImplementedError

    def eos_keys(self, model, batch, attn_type: str) -> torch.Tensor:
        """(batch, keys) bool: EOS/SEP keys, excluded from Voita's confidence."""
        raise NotImplementedError

    def attention_weights(self, outputs, attn_type: str) -> list[torch.Tensor]:
        """Per layer, (batch, heads, queries, keys) attention probabilities."""
        raise NotImplementedError

    def num_tokens(self, batch) -> int:
        """Non-pad tokens the importance sums are divided by."""
        raise NotImplementedError

    def uniform_masking_problem(self, model, sites: list[AttentionSite]) -> str | None:
        """Why a zero query would not give this model uniform attention (None: it does).

        Uniform masking zeroes a head's query, which is exact when the scores are query . key (scaled)
        plus the additive mask and nothing else; the query projection must also be the query's alone.
        """
        for site in sites:
            where = f"{site.attn_type} layer {site.layer} ({type(site.attention).__name__})"
            if site.query is site.key or site.query is site.value:
                return f"{where} shares its query projection with its keys or values"
            terms = [name for name in _SCORE_TERMS if getattr(site.attention, name, None) is not None]
            if terms:
                return f"{where} adds {', '.join(terms)} to its attention scores"
        return None

    def streaming_masking_problem(self, model, sites: list[AttentionSite]) -> str | None:
        """Why streaming masking cannot run on this model (None: it can).

        Streaming masking replaces the ``attention_mask`` argument of each attention module by a per-head
        mask, which needs a family whose attention modules take the model's causal mask that way and
        hand it to the backend as it is; only the decoder-only LMs are known to (``CausalLMAdapter``).
        """
        return (f"the {self.family} family is not supported (streaming masking runs on the decoder-only LMs: "
                "gpt2, llama, mistral, qwen2)")


def _causal(mask_2d: torch.Tensor) -> torch.Tensor:
    length = mask_2d.shape[1]
    lower = torch.ones(length, length, dtype=torch.bool, device=mask_2d.device).tril()
    return mask_2d[:, None, :] & lower[None]


def adapter_for(model) -> HeadAdapter:
    """The head adapter of the model's family (``headprune.models.families``: one file per family)."""
    from headprune.models.families import adapter_for_model  # the families import this module

    return adapter_for_model(model)


def head_shape(model) -> dict[str, tuple[int, int]]:
    """(layers, original heads) per attention type.

    >>> head_shape(model)  # the README's tiny Llama
    {'dec_self': (2, 4)}
    """
    shape: dict[str, tuple[int, int]] = {}
    for site in adapter_for(model).sites(model):
        layers, heads = shape.get(site.attn_type, (0, site.original_num_heads))
        shape[site.attn_type] = (max(layers, site.layer + 1), heads)
    return shape


def full_gates(model, value: float = 1.0) -> dict[str, torch.Tensor]:
    """One (layers, heads) gate tensor per attention type, every entry ``value``.

    >>> gates = full_gates(model)
    >>> gates["dec_self"].shape
    torch.Size([2, 4])
    """
    return {t: torch.full((layers, heads), float(value)) for t, (layers, heads) in head_shape(model).items()}


def stack_gates(model, group: list):
    """Several gate settings as ``gated`` takes them: (variants, layers, heads) per attention type (None:
    all on); a single setting as it is."""
    if len(group) == 1:
        return group[0]
    group = [gates if gates is not None else full_gates(model) for gates in group]
    return {t: torch.stack([gates[t] for gates in group]) for t in group[0]}


@dataclass
class HeadCapture:
    """What the gate hook saw in one forward pass, for importance scores."""

    head_outputs: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    gradients: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)


def _batch_major(t: torch.Tensor, time_major: bool) -> torch.Tensor:
    return t.transpose(0, 1) if time_major else t


def _gate_per_row(gate: torch.Tensor, x: torch.Tensor, time_major: bool) -> torch.Tensor:
    """(variants, heads) gates as one row per example of ``x``, shaped to broadcast over (..., heads).

    The batch is variant-major (every variant's rows together, in variant order), so a row's variant
    is row // (rows / variants) whatever the batch size is at this call: this holds for the
    num_beams * batch rows that generate() makes out of each example, as beams stay next to their
    example.
    """
    variants, rows = gate.shape[0], x.shape[1 if time_major else 0]
    if rows % variants:
        raise ValueError(f"a batch of {rows} rows cannot hold {variants} gate variants: repeat the batch once "
                         "per variant, variant-major")
    gate = gate.repeat_interleave(rows // variants, dim=0)
    return gate[None] if time_major else gate[:, None]


def _site_gate(gates: dict[str, torch.Tensor], site: AttentionSite, x: torch.Tensor) -> torch.Tensor:
    """The site's gates, shaped to broadcast over ``x`` unflattened to (..., heads, head_dim) minus head_dim.

    ``x`` is what a projection of the site puts out or takes in: (..., heads * head_dim), rows first
    or (FSMT) time first. Gates of physically pruned heads are dropped.
    """
    gate = gates[site.attn_type][..., site.layer, :]
    gate = gate[..., site.kept_heads] if site.num_heads != gate.shape[-1] else gate
    gate = gate.to(dtype=x.dtype, device=x.device)
    if gate.dim() == 2:
        gate = _gate_per_row(gate, x, site.time_major)
    return gate


def _check_binary_gates(name: str, gates):
    for attn_type, gate in (gates or {}).items():
        gate = torch.as_tensor(gate).detach()
        odd = gate[(gate != 0) & (gate != 1)]  # NaN included
        if odd.numel():
            raise ValueError(f"{name} masking takes gates 0 (masked) or 1 (kept) only; {attn_type} has "
                             f"{odd.flatten()[0].item()!r}")


def _check_uniform_masking(model, adapter: HeadAdapter, sites: list[AttentionSite], gates, capture):
    if capture is not None:
        raise ValueError("importance capture works on output gates: use masking='zero' with a HeadCapture")
    problem = adapter.uniform_masking_problem(model, sites)
    if problem is not None:
        raise ValueError(f"uniform masking zeroes a head's query, which gives uniform attention only when the "
                         f"scores are query . key plus the mask: {problem}")
    _check_binary_gates("uniform", gates)


def _check_streaming_masking(model, adapter: HeadAdapter, sites: list[AttentionSite], gates, capture):
    if capture is not None:
        raise ValueError("importance capture works on output gates: use masking='zero' with a HeadCapture")
    problem = adapter.streaming_masking_problem(model, sites)
    if problem is not None:
        raise ValueError(f"streaming masking gives a masked head a per-head attention mask: {problem}")
    backend = getattr(model.config, "_attn_implementation", None)
    if backend not in _STREAMING_BACKENDS:
        raise ValueError(f"streaming masking gives a masked head a per-head attention mask, which the "
                         f"{' and '.join(_STREAMING_BACKENDS)} attention backends take; this model runs "
                         f"{backend!r}: load it with attn_implementation='sdpa' (or model.set_attn_implementation)")
    _check_binary_gates("streaming", gates)


def _masking_spec(masking):
    """Check ``gated``'s masking argument: "zero", "uniform" or a Streaming(sink, recent)."""
    if isinstance(masking, Streaming):
        return masking
    if isinstance(masking, str) and masking == STREAMING:
        raise ValueError("masking='streaming' needs its window: pass masking=Streaming(sink, recent) "
                         "(headprune.models.heads.Streaming), e.g. Streaming(sink=4, recent=64)")
    if not isinstance(masking, str) or masking not in MASKINGS:
        raise ValueError(f"masking must be one of {MASKINGS} or a Streaming(sink, recent), got {masking!r}")
    return masking


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
    backend = model.config._attn_implementation
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


@contextlib.contextmanager
def gated(model, gates: dict[str, torch.Tensor] | None = None, capture: HeadCapture | None = None,
          masking: str | Streaming = ZERO):
    """Mask heads by their gates while the context is open.

    ``gates[attn_type]`` has shape (layers, original heads). Gates of heads that were physically
    pruned are ignored.

    ``masking="zero"`` (the default) multiplies every head's output by its gate, which may be 0/1
    or any real value (a leaf with requires_grad gives dL/dxi). With ``capture``, each head's output
    (batch, time, heads, head_dim) and its gradient are recorded for importance scores.

    ``masking="uniform"`` takes gates 0 or 1 only: a head with gate 0 attends uniformly to the keys
    it may attend to (its query is zeroed, see the module docstring), a head with gate 1 is left
    as it is. It does not take ``capture``, and refuses models whose scores have terms besides
    query . key and the mask.

    ``masking=Streaming(sink, recent)`` takes gates 0 or 1 only: a head with gate 0 attends only to the
    first ``sink`` and the last ``recent`` tokens up to its query (a streaming head, see the module
    docstring), a head with gate 1 is left as it is. It does not take ``capture``, runs on the decoder-only
    LMs under eager or sdpa attention, and counts positions over the real tokens of the 2-D
    ``attention_mask``. (The string "streaming" is refused: the window has no default.)

    Gates of shape (variants, layers, heads) evaluate several gate settings in one pass: the batch
    must then be the evaluation batch repeated once per variant, variant-major (rows [0, B) get
    variant 0, [B, 2B) variant 1, ...). ``generate()`` keeps that order when it expands each
    example into its beams, so the same input works there too.

    >>> import torch
    >>> gates = full_gates(model)
    >>> gates["dec_self"][1, 2] = 0.0  # switch off head 2 of layer 1
    >>> batch = evalset_batches(tokenizer, evalset, 2)[0]
    >>> with torch.no_grad(), gated(model, gates):
    ...     loss = model(**batch).loss
    >>> bool(torch.isfinite(loss))
    True
    """
    masking = _masking_spec(masking)
    adapter = adapter_for(model)
    sites = adapter.sites(model)
    if masking == UNIFORM:
        _check_uniform_masking(model, adapter, sites, gates, capture)
    elif isinstance(masking, Streaming):
        _check_streaming_masking(model, adapter, sites, gates, capture)
    handles = []

    def make_output_hook(site: AttentionSite):
        def hook(module, args):
            (x, *rest) = args
            per_head = x.unflatten(-1, (site.num_heads, site.head_dim))
            gated_heads = per_head
            if gates is not None:
                gated_heads = per_head * _site_gate(gates, site, x)[..., None]
            if capture is not None:
                key = (site.attn_type, site.layer)
                capture.head_outputs[key] = _batch_major(per_head.detach(), site.time_major)
                if gated_heads.requires_grad:
                    # dL/dxi_h = sum over tokens of head output . dL/d(gated output)
                    def save_grad(grad, key=key, time_major=site.time_major):
                        capture.gradients[key] = _batch_major(grad.detach(), time_major)
                    gated_heads.register_hook(save_grad)
            return (gated_heads.flatten(-2), *rest)
        return hook

    def make_query_hook(site: AttentionSite):
        def hook(module, args, query):
            # Before any scaling (FSMT scales the projection's output, BERT and M2M100 the scores):
            # a zero query stays zero either way.
            per_head = query.unflatten(-1, (site.num_heads, site.head_dim))
            return (per_head * _site_gate(gates, site, query)[..., None]).flatten(-2)
        return hook

    try:
        if masking == ZERO:
            for site in sites:
                handles.append(site.output.register_forward_pre_hook(make_output_hook(site)))
        elif isinstance(masking, Streaming):
            if gates is not None:
                _add_streaming_hooks(handles, model, sites, gates, masking)
        elif gates is not None:
            for site in sites:
                handles.append(site.query.register_forward_hook(make_query_hook(site)))
        yield sites
    finally:
        for handle in handles:
            handle.remove()
