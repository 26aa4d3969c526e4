"""What a masked head is replaced by, computed from data: mean and optimal constants, and resample donors (#32).

A head's output o_h is what it puts into its layer's output projection (head_dim values per token). The
masking modes ``Mean``, ``Optimal`` (``headprune.models.masking``) give a head with gate g the output
g * o_h + (1 - g) * c_h; ``Resample`` a donor token's output in place of c_h. This module computes them, on
the batches the caller passes: the study's TRAINING (or importance) data, never its evaluation data, so that
what an ablation replaces a head by has not seen the items it is scored on.

- ``mean_constants``: c_h = the mean of o_h over the real (non-padding) tokens of the batches, on the query
  side of each attention (``adapter.query_mask``): an encoder's heads over source tokens, a decoder's self-
  and cross-attention heads over target tokens (teacher-forced), a decoder-only LM's over its tokens. One
  forward pass over the batches.
- ``optimal_constants``: optimal ablation (Li and Janson, "Optimal ablation for interpretability", NeurIPS
  2024): for each head, c_h = argmin_c E_x[L(x; head h replaced by c)], the constant that minimises the
  expected loss with that head (alone) replaced. All heads are learned in one optimisation: each step takes
  the next batch (cycling), repeats it ``repeats`` times (variant-major), and replaces ONE head per row (row
  (j, b), copy j of example b, gets head perm[(j + b) mod H] of a fresh random permutation of the H heads,
  so the rows of one example get distinct heads and each head about repeats * B / H rows): a per-row gate
  setting (``gated``'s batched variants) with that head's gate 0 under ``Constant`` masking. A head's
  constant therefore gets gradient only from the rows where it is replaced, and that gradient is
  d/dc_h of the summed loss of those rows (``replacement_loss``; tests/test_constants.py checks it against
  finite differences). The loss is divided by its terms (target tokens; examples for classification,
  ``concrete.loss_terms``). Starting point: the mean constants. Parametrisation: c_h = mean_h + s_h z_h, z_h
  learned from 0, s_h the head's output spread (root mean square of o_h - mean_h over tokens and entries),
  so that the learning rate is in units of each head's own scale in every model. Optimiser: Adam
  (betas 0.9, 0.999, eps 1e-8) per head, "lazy": a step updates only the heads some row replaced, each
  with its own step count, so a head not drawn does not drift on its momentum. ``DEFAULT_LR`` = 0.05 (a
  step moves c_h by about 5% of its head's spread), ``DEFAULT_STEPS`` = 200 steps. On the tiny test models
  (tests/test_constants.py) these defaults bring every head's loss with its learned constant to or below
  its loss with the mean on the training data when every row replaces every head each step
  (``repeats`` = number of heads), and lower the heads' average loss with one head per row (``repeats``
  = 1). With repeats = 1 a head gets about steps * B / H updates: give ``repeats`` >= H / B (or more
  steps) for every head to converge.
  Cost: one statistics pass over the batches, then ``steps`` forward+backward passes of
  ``repeats`` * (batch size) rows (the model's weights frozen): with 200 steps of 32 rows, about the cost
  of scoring 6400 rows with gradients, a few evaluations of a typical eval set.
- ``resample_pool``: the heads' outputs at every real token of the first ``max_items`` items (whole items,
  with each token's position), the donors of ``Resample`` masking.

``head_replacement_losses`` evaluates each head replaced by its constant on its own (one gate variant per
head): the check that optimal constants beat the mean, and what single-head ablation under a constant is.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import pandas as pd
import torch

from headprune.io.progress import counted
from headprune.io.registry import Registry
from headprune.models.head_constants import HeadConstants, ResamplePool, STREAMS
from headprune.models.heads import HeadCapture, adapter_for, head_shape
from headprune.models.masking import MODES, Constant, gated

DEFAULT_STEPS = 200
DEFAULT_LR = 0.05

# A masking mode's word -> the function making its data file: each mode's ``data_maker`` ("module:function"),
# parsed here and nowhere else (the head_constants job and benchmarks/sweep_modes.py ask it).
DATA_MAKERS = Registry("data maker", check=callable)
for _word, _mode in MODES.items():
    if _mode.data_maker is not None:
        DATA_MAKERS.add(_word, _mode.data_maker)
log = logging.getLogger(__name__)


def _on(batch: dict, device) -> dict:
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


def _device_of(model, device):
    return torch.device(device) if device is not None else next(model.parameters()).device


def _captured_passes(model, batches, device, what: str, progress: bool):
    """Per batch: (the batch on the device, the adapter, the sites, the HeadCapture of one forward, no grad)."""
    adapter = adapter_for(model)
    device = _device_of(model, device)
    was_training = model.training
    model.eval()
    try:
        for batch in counted(batches, what, "batches", enabled=progress, log=log):
            batch = _on(batch, device)
            capture = HeadCapture()
            with torch.no_grad(), gated(model, None, capture, masking="zero") as sites:
                adapter.loss_and_outputs(model, batch)
            yield batch, adapter, sites, capture
    finally:
        model.train(was_training)


def head_output_statistics(model, batches: Iterable[dict], *, device=None, progress: bool = True
                           ) -> tuple[dict, dict, dict]:
    """One pass: per site (attn_type, layer), the mean of each head's output over the real query tokens
    ((original heads, head_dim), float64), its spread (the root mean square of output - mean over tokens and
    entries, (original heads,)), and the tokens counted per attention type."""
    sums, squares, tokens = {}, {}, {}
    for batch, adapter, sites, capture in _captured_passes(model, batches, device, "head output means", progress):
        masks = {t: adapter.query_mask(batch, t).bool() for t in {s.attn_type for s in sites}}
        for t, mask in masks.items():
            tokens[t] = tokens.get(t, 0) + int(mask.sum())
        for site in sites:
            key = (site.attn_type, site.layer)
            sums.setdefault(key, torch.zeros(site.original_num_heads, site.head_dim, dtype=torch.float64))
            squares.setdefault(key, torch.zeros(site.original_num_heads, dtype=torch.float64))
            if not site.num_heads:
                continue
            outputs = capture.head_outputs[key]  # (B, T, kept heads, head_dim), batch-major
            mask = masks[site.attn_type][..., None, None]
            real = torch.where(mask, outputs.double(), 0.0)
            sums[key][site.kept_heads] += real.sum((0, 1)).cpu()
            squares[key][site.kept_heads] += real.pow(2).sum((0, 1, 3)).cpu()
    if not sums:
        raise ValueError("no batches: head output statistics need data")
    means, spreads = {}, {}
    for (attn_type, layer), total in sums.items():
        count = tokens.get(attn_type, 0)
        if count == 0:
            raise ValueError(f"no real {attn_type} tokens in the batches")
        means[(attn_type, layer)] = total / count
        dim = total.shape[1]
        variance = squares[(attn_type, layer)] / (count * dim) - means[(attn_type, layer)].pow(2).mean(-1)
        spreads[(attn_type, layer)] = variance.clamp(min=0).sqrt()
    return means, spreads, tokens


def mean_constants(model, batches: Iterable[dict], *, data: str | None = None, device=None,
                   progress: bool = True) -> HeadConstants:
    """Each head's output averaged over the real tokens of ``batches`` (``kind`` "mean"; see the module
    docstring): pass the study's training or importance data, never its evaluation data. ``data`` (a few
    words: which split, how many items) goes into the constants' meta. Heads already pruned get zeros.

    >>> constants = mean_constants(model, importance_batches, data="wikitext-2 train, 64 windows")
    >>> with gated(model, gates, masking=Mean(constants)): ...
    """
    means, _, tokens = head_output_statistics(model, batches, device=device, progress=progress)
    meta = {"data": data or "unspecified", **{f"tokens_{t}": n for t, n in tokens.items()}}
    return HeadConstants({k: v.float() for k, v in means.items()}, "mean", meta)


# --- Optimal ablation ----------------------------------------------------------------------------------------

def all_heads(model) -> list[tuple[str, int, int]]:
    """(attn_type, layer, original head) of every head the model still has."""
    return [(site.attn_type, site.layer, h) for site in adapter_for(model).sites(model) for h in site.kept_heads]


def row_gates(model, heads: Sequence[tuple[str, int, int] | None]) -> dict[str, torch.Tensor]:
    """One gate setting per row, as ``gated`` takes them ((rows, layers, heads) per attention type): row i
    has head ``heads[i]`` at 0 (None: none) and every other head at 1."""
    shape = head_shape(model)
    gates = {t: torch.ones(len(heads), layers, count) for t, (layers, count) in shape.items()}
    for row, head in enumerate(heads):
        if head is not None:
            attn_type, layer, h = head
            gates[attn_type][row, layer, h] = 0.0
    return gates


def repeat_batch(batch: dict, times: int) -> dict:
    """A batch repeated ``times`` times, variant-major (its tensors' first axis)."""
    if times == 1:
        return batch
    return {k: v.repeat(times, *[1] * (v.dim() - 1)) if torch.is_tensor(v) else v for k, v in batch.items()}


def replacement_loss(model, batch: dict, constants: HeadConstants, heads: Sequence[tuple[str, int, int] | None]):
    """The summed loss of ``batch`` (``adapter.loss_and_outputs``) with, in row i, head ``heads[i]`` replaced by
    its constant (None: the full model): the objective ``optimal_constants`` differentiates. Differentiable
    in the constants' values where they require grad."""
    gates = row_gates(model, heads)
    device = next(model.parameters()).device
    gates = {t: g.to(device) for t, g in gates.items()}
    with gated(model, gates, masking=Constant(constants)):
        loss, _ = adapter_for(model).loss_and_outputs(model, batch)
    return loss


def _assignment(heads: list, rows: int, repeats: int, generator: torch.Generator) -> list:
    """Row (j, b) of ``repeats`` copies of ``rows`` examples gets heads[perm[(j + b) % H]] (see the module docstring)."""
    perm = torch.randperm(len(heads), generator=generator).tolist()
    return [heads[perm[(j + b) % len(heads)]] for j in range(repeats) for b in range(rows)]


def optimal_constants(model, batches: Sequence[dict], *, steps: int = DEFAULT_STEPS, lr: float = DEFAULT_LR,
                      repeats: int = 1, start: HeadConstants | None = None, seed: int = 0, data: str | None = None,
                      device=None, progress: bool = True, history: list | None = None) -> HeadConstants:
    """Optimal ablation's constants (``kind`` "optimal"), learned as the module docstring says: Adam for ``steps``
    steps at learning rate ``lr`` (in units of each head's output spread) over ``batches`` (cycled; the study's
    training or importance data, never its evaluation data), each row with one head replaced, ``repeats``
    copies of each batch per step, from ``start`` (default: the mean constants of ``batches``). Deterministic
    for a ``seed``. ``history``, if given, receives one dict per step (step, loss per term).

    >>> constants = optimal_constants(model, train_batches, data="sst-2 train, 1024 sentences")
    >>> with gated(model, gates, masking=Optimal(constants)): ...
    """
    from headprune.scoring.concrete import loss_terms

    batches = list(batches)
    if not batches:
        raise ValueError("optimal_constants needs at least one batch")
    if steps < 0 or repeats < 1 or not lr > 0:
        raise ValueError(f"optimal_constants needs steps >= 0, repeats >= 1 and lr > 0, got {steps}, {repeats}, {lr}")
    device = _device_of(model, device)
    adapter = adapter_for(model)
    means, spreads, _ = head_output_statistics(model, batches, device=device, progress=progress)
    if start is None:
        start = HeadConstants({k: v.float() for k, v in means.items()}, "mean", {"data": data or "unspecified"})
    start.check(adapter.sites(model))
    heads = all_heads(model)
    if not heads:
        raise ValueError("the model has no heads left")
    keys = list(start.values)
    base = {k: start.values[k].to(device) for k in keys}
    scale = {k: spreads[k].float().clamp(min=1e-8).to(device)[:, None] for k in keys}
    z = {k: torch.zeros_like(base[k], requires_grad=True) for k in keys}
    optimizer = _LazyAdam(z, lr)
    live = HeadConstants({k: v.detach() for k, v in base.items()}, "optimal")
    generator = torch.Generator().manual_seed(seed)

    was_training = model.training
    params_required = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)  # gradients for the constants only
    model.eval()
    first = last = None
    try:
        for step in counted(range(steps), "optimal ablation constants", "steps", enabled=progress, log=log):
            batch = _on(batches[step % len(batches)], device)
            rows = len(adapter.query_mask(batch, adapter.attention_types[0]))
            repeated = repeat_batch(batch, repeats)
            assignment = _assignment(heads, rows, repeats, generator)
            live.values = {k: base[k] + scale[k] * z[k] for k in keys}  # differentiable in z
            loss = replacement_loss(model, repeated, live, assignment) / loss_terms(adapter, repeated)
            for value in z.values():
                value.grad = None
            loss.backward()
            optimizer.step(_replaced(assignment, z))
            value = float(loss.detach())
            first = value if first is None else first
            last = value
            if history is not None:
                history.append({"step": step + 1, "loss": value})
    finally:
        for p, required in zip(model.parameters(), params_required):
            p.requires_grad_(required)
        model.train(was_training)
    values = {k: (base[k] + scale[k] * z[k]).detach().cpu() for k in keys}
    meta = {"data": data or start.meta.get("data", "unspecified"), "start": start.kind, "steps": steps, "lr": lr,
            "repeats": repeats, "seed": seed, "optimizer": "Adam per head (betas 0.9, 0.999), lr in units of the head's spread",
            "loss_first_step": first, "loss_last_step": last}
    return HeadConstants(values, "optimal", meta)


def _replaced(assignment, z) -> dict:
    """Per site, (heads,) bool: the heads some row of this step replaced."""
    replaced = {k: torch.zeros(v.shape[0], dtype=torch.bool) for k, v in z.items()}
    for head in assignment:
        if head is not None:
            replaced[head[:2]][head[2]] = True
    return replaced


class _LazyAdam:
    """Adam (betas 0.9, 0.999, eps 1e-8) per head, stepping only the heads replaced in a step: each head's
    constant follows Adam on its own sequence of gradients, as if it were learned alone (a head no row
    replaced has no gradient, and plain Adam would move it on its momentum)."""

    def __init__(self, params: dict, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.m = {k: torch.zeros_like(v) for k, v in params.items()}
        self.v = {k: torch.zeros_like(v) for k, v in params.items()}
        self.t = {k: torch.zeros(v.shape[0], device=v.device) for k, v in params.items()}

    @torch.no_grad()
    def step(self, replaced: dict):
        b1, b2 = self.betas
        for k, param in self.params.items():
            rows = replaced[k].to(param.device)
            if param.grad is None or not bool(rows.any()):
                continue
            grad = param.grad[rows]
            t = self.t[k][rows] + 1
            self.t[k][rows] = t
            m = self.m[k][rows] * b1 + (1 - b1) * grad
            v = self.v[k][rows] * b2 + (1 - b2) * grad * grad
            self.m[k][rows], self.v[k][rows] = m, v
            m_hat = m / (1 - b1 ** t)[:, None]
            v_hat = v / (1 - b2 ** t)[:, None]
            param[rows] -= self.lr * m_hat / (v_hat.sqrt() + self.eps)


def head_replacement_losses(model, batches: Iterable[dict], constants: HeadConstants, *, heads=None,
                            device=None, progress: bool = True) -> pd.DataFrame:
    """Per head: the loss per term over ``batches`` with that head alone replaced by its constant (one gate
    variant per head, the batch repeated once per head), and with none (``full``, the same in every row).
    Columns attn_type, layer, head, loss, full."""
    from headprune.scoring.concrete import loss_terms

    adapter = adapter_for(model)
    device = _device_of(model, device)
    heads = list(heads) if heads is not None else all_heads(model)
    totals = torch.zeros(len(heads), dtype=torch.float64)
    full = 0.0
    terms = 0
    model.eval()
    for batch in counted(batches, "head replacement losses", "batches", enabled=progress, log=log):
        batch = _on(batch, device)
        rows = len(adapter.query_mask(batch, adapter.attention_types[0]))
        with torch.no_grad():
            full += float(replacement_loss(model, batch, constants, [None] * rows))
            terms += loss_terms(adapter, batch)
            for i, head in enumerate(heads):
                totals[i] += float(replacement_loss(model, batch, constants, [head] * rows))
    return pd.DataFrame([{"attn_type": t, "layer": layer, "head": h, "loss": float(totals[i]) / terms,
                          "full": full / terms} for i, (t, layer, h) in enumerate(heads)])


# --- Resample ablation's donors ------------------------------------------------------------------------------

def resample_pool(model, batches: Iterable[dict], *, max_items: int = 64, data: str | None = None, device=None,
                  progress: bool = True) -> ResamplePool:
    """The heads' outputs at every real token of the first ``max_items`` items of ``batches`` (the study's
    training or importance data, never its evaluation data), each token with its position (its rank among its
    item's real tokens): the donors of ``headprune.models.masking.Resample``. Heads already pruned get zeros."""
    outputs: dict = {}
    positions: dict = {}
    items = 0
    for batch, adapter, sites, capture in _captured_passes(model, batches, device, "resample pool", progress):
        rows = len(adapter.query_mask(batch, adapter.attention_types[0]))
        take = min(rows, max_items - items)
        if take <= 0:
            break
        masks = {t: adapter.query_mask(batch, t).bool()[:take] for t in {s.attn_type for s in sites}}
        seen = set()
        for t, mask in masks.items():
            stream = STREAMS[t]
            if stream in seen:
                continue
            seen.add(stream)
            rank = mask.long().cumsum(-1) - 1
            positions.setdefault(stream, []).append(rank[mask].cpu())
        for site in sites:
            key = (site.attn_type, site.layer)
            mask = masks[site.attn_type]
            chosen = torch.zeros(int(mask.sum()), site.original_num_heads, site.head_dim)
            if site.num_heads:
                chosen[:, site.kept_heads] = capture.head_outputs[key][:take][mask].float().cpu()
            outputs.setdefault(key, []).append(chosen)
        items += take
    if not outputs:
        raise ValueError("no batches: a resample pool needs data")
    return ResamplePool({k: torch.cat(v) for k, v in outputs.items()}, {s: torch.cat(p) for s, p in positions.items()},
                        {"data": data or "unspecified", "items": items})
