"""Where a model's attention heads live: ``AttentionSite`` (one multi-head attention layer), ``HeadAdapter`` (one
per model family, ``headprune/models/families/``), and how a site's gates and captured outputs are laid out.

The bottom of the head machinery: ``headprune.models.masking`` (the masking modes) and ``headprune.models.heads``
(``gated``, gates, the adapter of a model) build on it. Everything here is importable from ``heads`` as well.
"""
from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field

import torch
from torch import nn

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
    # The generic decoder adapter's sites: the attention calls transformers' attention interface, through which
    # headprune_attention changes a head's query (uniform masking); layout: its headprune_decoder.DecoderLayout.
    through_attention_function: bool = False
    layout: object = None
    # Features the output projection reads after the heads' and that are no head's (ConvBERT's convolution heads)
    extra_features: int = 0

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

    # --- The places where a head can be changed (``headprune.models.places``): None where the family has one, else
    # one line why not, which a mode acting there is refused with.

    def output_problem(self, model, sites: list[AttentionSite]) -> str | None:
        """A head's slice of its output projection's input: every family's heads end there."""
        return None

    def query_problem(self, model, sites: list[AttentionSite]) -> str | None:
        """A head's query as the scores' own: they are query . key (scaled) plus the additive mask and nothing else,
        and the query projection is the query's alone (so that a zero query attends uniformly, say)."""
        for site in sites:
            where = f"{site.attn_type} layer {site.layer} ({type(site.attention).__name__})"
            if site.query is site.key or site.query is site.value:
                return f"{where} shares its query projection with its keys or values"
            terms = [name for name in _SCORE_TERMS if getattr(site.attention, name, None) is not None]
            if terms:
                return f"{where} adds {', '.join(terms)} to its attention scores"
        return None

    def finish_pruning(self, model) -> None:
        """What the model needs once its sites were pruned (the generic decoder adapter: the attention function
        that reads key/value heads unevenly)."""

    def beam_decoding(self, model):
        """A context in which the model's decoder runs beam search's steps (``beam_search``) its own faster
        way, yielding True, or as it always does, yielding False (the default). Under True the search hands the
        decoder ONE row of encoder states and source mask per sentence, its beams' rows following it
        (rows = sentences x beams): the beams of a sentence attend to their shared source together."""
        return contextlib.nullcontext(False)

    def attention_problem(self, model, sites: list[AttentionSite], causal_lm: bool = False) -> str | None:
        """Which keys a head attends to, as a per-head mask in place of each attention module's ``attention_mask``,
        which needs attention modules that hand it to the backend as it is (the generic adapters'); ``causal_lm``:
        a causal LM's self-attention, its positions over the past (the decoder-only LMs')."""
        return (f"the {self.family} family's attention takes no per-head mask (the generic adapters' attention "
                "modules do)")


def mask_argument_problem(site: AttentionSite) -> str | None:
    """Why ``site``'s module would not hand a per-head ``attention_mask`` argument to transformers' attention
    interface as it is (None: it would)."""
    from headprune.models.portable.headprune_attention import uses_attention_interface  # transformers: when asked

    where = f"{site.attn_type} layer {site.layer} ({type(site.attention).__name__})"
    if not uses_attention_interface(site.attention):
        return f"{where} does not call transformers' attention interface with its attention_mask argument"
    missing = {"hidden_states", "attention_mask"} - set(inspect.signature(site.attention.forward).parameters)
    if missing:
        return f"{where} takes no {' or '.join(sorted(missing))} argument"
    return None


def _causal(mask_2d: torch.Tensor) -> torch.Tensor:
    length = mask_2d.shape[1]
    lower = torch.ones(length, length, dtype=torch.bool, device=mask_2d.device).tril()
    return mask_2d[:, None, :] & lower[None]


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
