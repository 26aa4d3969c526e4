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
each); gating, scoring and pruning only talk to ``AttentionSite`` objects (both in ``headprune.models.sites``).
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

from headprune.models.attention_types import ATTENTION_TYPES, DEC_SELF, ENC_DEC, ENC_SELF, TYPE_LABELS  # noqa: F401
# The sites and adapters live in headprune.models.sites (below the masking modes); importable from here.
from headprune.models.sites import (AttentionSite, HeadAdapter, HeadCapture, _batch_major, _causal,  # noqa: F401
                                    _gate_per_row, _site_gate)

if TYPE_CHECKING:  # the modes import heads' machinery when put on a model: gated imports them when called
    from headprune.models.masking import Masking

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
          masking: Masking | str | None = None):
    """Mask heads by their gates while the context is open.

    ``gates[attn_type]`` has shape (layers, original heads). Gates of heads that were physically
    pruned are ignored. How a gate switches a head off is ``masking``'s (``headprune.models.masking``:
    a mode object: ``Zero()``, ``Uniform()``, ``Streaming(sink, recent)``, ``Mean(constants)``,
    ``Optimal(constants)``, ``Resample(pool, seed, draw)``, or the strings "zero" and "uniform"; None is the
    paper's, ``masking.DEFAULT``).

    ``Zero()`` (the default) multiplies every head's output by its gate, which may be 0/1
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
        if isinstance(model, torch.nn.Module):
            from headprune.models.masking_hooks import check_reached

            check_reached(handles, model, sites, gates, capture, mode)
        yield sites
    finally:
        for handle in handles:
            handle.remove()
