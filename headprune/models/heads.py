"""Where a model's attention heads live, and per-head gates on them.

Every attention layer ends in an output projection whose input is the
concatenation of the head outputs, head-major: (..., heads * head_dim). A
forward pre-hook on that projection sees each head's output in every attention
backend (eager, sdpa, inside generate() with beam search), so multiplying it by
a per-head gate is the paper's xi_h. transformers 5 removed ``head_mask`` (and
silently ignores the argument), so this is the only reliable place to gate.

How a gated head is switched off is its masking mode (``headprune.models.masking``: one class per mode,
each its config word, its checks and its hooks): "zero" (the default: the output times the gate), "uniform"
(uniform attention), ``Streaming(sink, recent)`` (DuoAttention's streaming heads), ``Mean(constants)`` and
``Optimal(constants)`` (the output replaced by a constant vector per head), ``Resample(pool, seed, draw)``
(the output at another training item's token). ``gated`` finds the sites and hands the rest to the mode.

One ``HeadAdapter`` per model family says where the heads are (``headprune/models/families/``, one file
each); gating, scoring and pruning only talk to ``AttentionSite`` objects.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch import nn

from headprune.models.attention_types import ATTENTION_TYPES, DEC_SELF, ENC_DEC, ENC_SELF, TYPE_LABELS  # noqa: F401

# How a gate of 0 masks a head (headprune.models.masking, one class per mode): "zero" multiplies its output
# by the gate (the paper's xi_h, any real gate), "uniform" gives it uniform attention over its allowed keys;
# the other modes are objects that carry their data: Streaming(sink, recent), Mean(constants),
# Optimal(constants), Resample(pool, seed, draw).
ZERO, UNIFORM, STREAMING = "zero", "uniform", "streaming"
MASKINGS = (ZERO, UNIFORM)  # the plain-string maskings gated takes

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

    def beam_decoding(self, model):
        """A context in which the model's decoder runs beam search's steps (``beam_search``) its own faster
        way, yielding True, or as it always does, yielding False (the default). Under True the search hands the
        decoder ONE row of encoder states and source mask per sentence, its beams' rows following it
        (rows = sentences x beams): the beams of a sentence attend to their shared source together."""
        return contextlib.nullcontext(False)

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


# Moved to headprune.models.masking with the modes; still importable from here.
_MOVED = {"Streaming", "streaming_window", "check_binary_gates", "as_masking", "Masking", "Zero", "Uniform", "Mean",
          "Optimal", "Constant", "Resample"}


def __getattr__(name):
    if name in _MOVED:
        from headprune.models import masking

        return getattr(masking, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def gated(model, gates: dict[str, torch.Tensor] | None = None, capture: HeadCapture | None = None,
          masking="zero"):
    """Mask heads by their gates while the context is open.

    ``gates[attn_type]`` has shape (layers, original heads). Gates of heads that were physically
    pruned are ignored. How a gate switches a head off is ``masking``'s (``headprune.models.masking``:
    the strings "zero" and "uniform", or a mode object: ``Zero()``, ``Uniform()``,
    ``Streaming(sink, recent)``, ``Mean(constants)``, ``Optimal(constants)``, ``Resample(pool, seed, draw)``).

    ``masking="zero"`` (the default) multiplies every head's output by its gate, which may be 0/1
    or any real value (a leaf with requires_grad gives dL/dxi). With ``capture``, each head's output
    (batch, time, heads, head_dim) and its gradient are recorded for importance scores.

    ``Mean(constants)`` / ``Optimal(constants)`` give a head g * output + (1 - g) * its constant vector,
    any real gate, with ``capture`` as zero masking; ``Resample(pool, seed, draw)`` the same with a donor
    token's output in place of the constant.

    ``masking="uniform"`` takes gates 0 or 1 only: a head with gate 0 attends uniformly to the keys
    it may attend to (its query is zeroed, see ``headprune.models.masking``), a head with gate 1 is left
    as it is. It does not take ``capture``, and refuses models whose scores have terms besides
    query . key and the mask.

    ``masking=Streaming(sink, recent)`` takes gates 0 or 1 only: a head with gate 0 attends only to the
    first ``sink`` and the last ``recent`` tokens up to its query (a streaming head), a head with gate 1 is
    left as it is. It does not take ``capture``, runs on the decoder-only LMs under eager or sdpa attention,
    and counts positions over the real tokens of the 2-D ``attention_mask``. (The string "streaming" is
    refused: the window has no default.)

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
    from headprune.models.masking import as_masking

    mode = as_masking(masking)
    adapter = adapter_for(model)
    sites = adapter.sites(model)
    mode.check(model, adapter, sites, gates, capture)
    handles: list = []
    try:
        mode.install(handles, model, sites, gates, capture)
        yield sites
    finally:
        for handle in handles:
            handle.remove()
