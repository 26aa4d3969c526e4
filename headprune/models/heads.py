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
(the output at another training item's token). ``gated`` (in ``headprune.models.masking``, importable from here)
finds the sites and hands the rest to the mode.

One ``HeadAdapter`` per model family says where the heads are (``headprune/models/families/``, one file
each); gating, scoring and pruning only talk to ``AttentionSite`` objects (both in ``headprune.models.sites``).
"""
from __future__ import annotations

import torch

from headprune.models.attention_types import ATTENTION_TYPES, DEC_SELF, ENC_DEC, ENC_SELF, TYPE_LABELS  # noqa: F401
# The sites and adapters live in headprune.models.sites (below the masking modes); importable from here.
from headprune.models.sites import (AttentionSite, HeadAdapter, HeadCapture, _batch_major, _causal,  # noqa: F401
                                    _gate_per_row, _site_gate)


def adapter_for(model) -> HeadAdapter:
    """The head adapter of the model's family (``headprune.models.families``: one file per family)."""
    from headprune.models.families import adapter_for_model  # imported when first asked: the families load transformers code

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


# Moved to headprune.models.masking with the modes (gated: how a gate switches a head off is the mode's); still
# importable from here.
_MOVED = {"gated", "Streaming", "check_binary_gates", "as_masking", "Masking", "Zero", "Uniform",
          "Mean", "Optimal", "Constant", "Resample"}


def __getattr__(name):
    if name in _MOVED:
        from headprune.models import masking

        return getattr(masking, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
