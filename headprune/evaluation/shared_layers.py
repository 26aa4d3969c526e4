"""Gate variants of a one-stack model share the layers below their first masked head.

A variant that masks heads of layer l only computes, in layers 0 .. l-1, what the full model
computes there, and in layer l the same head outputs until its gates act on them (at the output
projection). So a batch is run once through those layers with the outputs recorded, and each
variant's forward replays them (the modules return the recorded outputs, repeated once per
variant) and computes from layer l's output projection on. Ablating every head of a 12-layer BERT
this way does about half the layer work of running each variant whole. Whatever the model does between its layers
(DeBERTa's convolution after layer 0, the final norm) still runs on the same values, so the outputs
are the variants' own: tests/test_shared_layers.py checks them against running each variant whole.

Layer l's head outputs are replayed under every mode whose masked head puts out a constant (``constant_output``:
zero, mean, optimal; uniform and streaming masking act inside the attention, resample reads positions): where
the attention module puts them out before its output projection (BERT's ``BertSelfAttention``), its recorded
output; where the projection is inside the module (Llama, GPT-2,
DistilBERT), the projection's recorded input, projected anew (where the gates act) in place of the
module's output. That saves the layer's query, key and value projections and its attention: a quarter
of a Llama layer at 512 tokens in eager attention on a CPU (measured, docs/performance.md).

It applies to models with one stack of layers holding every attention head (encoders, decoder-only
LMs); an encoder-decoder runs each variant whole (its beam search shares the encoder instead).
"""
from __future__ import annotations

import contextlib
import logging
from typing import Callable

import torch
from torch import nn

from headprune.io.progress import Progress
from headprune.models.heads import adapter_for, stack_gates
from headprune.models.masking import gated, masking_of


class _Recorded(Exception):
    """Raised after the last layer whose outputs the variants need: the rest of the pass is not needed."""


def layer_stack(model) -> nn.ModuleList | None:
    """The ModuleList whose i-th module holds layer i's attention heads, when every head is in it."""
    sites = adapter_for(model).sites(model)
    if not sites or len({site.attn_type for site in sites}) != 1:
        return None
    layers = max(site.layer for site in sites) + 1
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == layers and all(
                any(m is site.attention for m in module[site.layer].modules()) for site in sites):
            return module
    return None


def first_masked_layer(gates, layers: int) -> int:
    """The lowest layer with a gate other than 1 (``layers`` when there is none)."""
    if gates is None:
        return layers
    masked = torch.stack([(torch.as_tensor(g) != 1).any(-1) for g in gates.values()]).any(0).nonzero()
    return int(masked[0]) if len(masked) else layers


def _repeat_rows(value, rows: int, times: int):
    """Every tensor in a layer's output with ``rows`` rows, repeated ``times`` times, variant-major."""
    if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == rows:
        return value.repeat(times, *[1] * (value.dim() - 1))
    if isinstance(value, (tuple, list)):
        return type(value)(_repeat_rows(v, rows, times) for v in value)
    return value


def attention_modules(model) -> list[nn.Module] | None:
    """Per layer, the module that computes the heads' outputs before the output projection (BERT's
    ``BertSelfAttention``), when the projection (where a gate acts) is outside it; None for families whose
    attention module holds its output projection (GPT-2, Llama, DistilBERT)."""
    sites = sorted(adapter_for(model).sites(model), key=lambda site: site.layer)
    if any(any(m is site.output for m in site.attention.modules()) for site in sites):
        return None
    return [site.attention for site in sites]


def head_output_modules(model) -> list[tuple[nn.Module, nn.Module | None]]:
    """Per layer, (the attention module, the output projection inside it or None): what replays the layer's
    head outputs with the gates still to act (module docstring)."""
    apart = attention_modules(model)
    if apart is not None:
        return [(module, None) for module in apart]
    sites = sorted(adapter_for(model).sites(model), key=lambda site: site.layer)
    return [(site.attention, site.output) for site in sites]


class _Projected:
    """A recorded attention module whose output projection is inside it: the projection's input (the heads'
    outputs) and the module's output. Replayed, the module returns its recorded output with the first
    element projected anew from the heads' outputs, so the gates (a hook on the projection) act on them."""

    def __init__(self, projection: nn.Module, heads: torch.Tensor, output):
        self.projection, self.heads, self.output = projection, heads, output

    def replayer(self, rows: int, times: int) -> Callable:
        heads = _repeat_rows(self.heads, rows, times)
        if isinstance(self.output, torch.Tensor):
            return lambda *args, **kwargs: self.projection(heads)
        rest = _repeat_rows(tuple(self.output[1:]), rows, times)
        return lambda *args, **kwargs: type(self.output)((self.projection(heads), *rest))


@contextlib.contextmanager
def _recording(modules: list[nn.Module], outputs: dict, stop_after: nn.Module | None,
               projections: dict[nn.Module, nn.Module] | None = None):
    """Record each module's output (by module) during one pass; with ``stop_after``, end the pass there.
    A module in ``projections`` (module: its output projection) is recorded as a ``_Projected``, or as None
    when its output is not the projection's output as it is (something acts after the projection)."""
    projections = {module: projections[module] for module in modules if module in (projections or {})}
    seen: dict = {}

    def projection_hook(module, args, output):
        seen[module] = (args[0], output)

    def hook(module, args, output):
        projection = projections.get(module)
        if projection is None:
            outputs[module] = output
        else:
            heads, projected = seen.pop(projection, (None, None))
            first = output[0] if isinstance(output, (tuple, list)) else output
            outputs[module] = _Projected(projection, heads, output) if heads is not None and first is projected else None
        if module is stop_after:
            raise _Recorded

    handles = [projection.register_forward_hook(projection_hook) for projection in projections.values()]
    handles += [module.register_forward_hook(hook) for module in modules]
    try:
        yield
    except _Recorded:
        pass
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _replaying(outputs: dict, rows: int, times: int):
    """Each module returns its recorded output, its rows repeated ``times`` times, instead of computing it
    (a ``_Projected`` module: its output projection of its recorded head outputs)."""
    # accelerate wraps a dispatched module's forward in an instance attribute: put it back afterwards
    own = {module: module.__dict__.get("forward") for module in outputs}
    try:
        for module, output in outputs.items():
            if isinstance(output, _Projected):
                module.forward = output.replayer(rows, times)
            else:
                # repeated when called: one replayed layer's rows at a time, not every layer's at once (#57)
                module.forward = lambda *args, _output=output, **kwargs: _repeat_rows(_output, rows, times)
        yield
    finally:
        for module, forward in own.items():
            if forward is None:
                module.__dict__.pop("forward", None)
            else:
                module.forward = forward


def replays_head_outputs(model) -> bool:
    """Whether a variant may replay its first masked layer's head outputs from the full model's pass: the model's
    masking (``masking_of``: its ``masked_as`` block's, else the paper's) changes the output projection's input
    alone and by the gates alone (zero, mean, optimal: a constant); a masking inside the attention (uniform,
    streaming) or one that reads positions (resample) runs that layer."""
    return masking_of(model).constant_output


def what_to_record(stack: nn.ModuleList, heads: list | None, masked: list[int]):
    """(modules, last, projections) the full model's pass records for variants first masked in layers
    ``masked`` (sorted): the layers below the deepest of them and, with ``heads`` (``head_output_modules``),
    each one's head outputs; the last module the pass needs (where it may stop); and the output projections
    of the attention modules recorded as ``_Projected`` (for ``_recording``)."""
    modules = [stack[j] for j in range(max(masked, default=0))] + ([heads[f][0] for f in masked] if heads else [])
    last = (heads[masked[-1]][0] if heads else stack[masked[-1] - 1]) if modules else None
    projections = {module: projection for module, projection in heads or [] if projection is not None}
    return modules, last, projections


def replayed_modules(stack: nn.ModuleList, heads: list | None, first: int, recorded: dict) -> dict:
    """What a variant first masked in layer ``first`` replays, by module: layers 0 .. first-1, and layer
    ``first``'s head outputs when they were recorded (``heads``: ``head_output_modules``, or None when the
    masking acts inside the attention). One that masks nothing (``first`` past the last layer) runs whole."""
    if first >= len(stack):
        return {}
    replay = {stack[j]: recorded[stack[j]] for j in range(first)}
    if heads is not None and recorded.get(heads[first][0]) is not None:
        replay[heads[first][0]] = recorded[heads[first][0]]
    return replay


def forward_variants(model, inputs: dict, gates_list: list, forward: Callable, *, variant_batch_size: int,
                     done: Callable[[int], None] | None = None) -> list:
    """``forward(model, inputs)`` (rows first) for every gate setting (None: the full model), its rows
    repeated once per variant of a group, groups of up to ``variant_batch_size`` rows. ``done(rows)`` is
    told the (setting, item) rows each pass finished (a ``Progress``'s update).

    On a one-stack model a variant whose first masked head is in layer f replays the full model's
    layers below f, and (a mode that puts out a constant: zero, mean, optimal) layer f's head outputs before the
    gates act: one recording pass
    computes them for all variants."""
    rows = next(iter(inputs.values())).shape[0]
    per_group = max(1, variant_batch_size // rows)
    stack = layer_stack(model)
    layers = len(stack) if stack is not None else 0
    heads = head_output_modules(model) if stack is not None and replays_head_outputs(model) else None
    firsts = [first_masked_layer(gates, layers) if stack is not None else 0 for gates in gates_list]
    wanted, last, projections = what_to_record(stack, heads, sorted({f for f in firsts if f < layers}))
    results: list = [None] * len(gates_list)
    recorded: dict = {}
    if wanted:
        full = [i for i, f in enumerate(firsts) if f == layers]  # variants that mask nothing: this very pass
        output = None
        with torch.no_grad(), _recording(wanted, recorded, None if full else last, projections):
            output = forward(model, inputs)
        for i in full:
            results[i] = output
        if done is not None and full:
            done(len(full) * rows)
    for first in sorted(set(firsts)):
        todo = [i for i, f in enumerate(firsts) if f == first and results[i] is None]
        replay = replayed_modules(stack, heads, first, recorded) if stack is not None and todo else {}
        for start in range(0, len(todo), per_group):
            chunk = todo[start:start + per_group]
            repeated = {k: v.repeat(len(chunk), *[1] * (v.dim() - 1)) for k, v in inputs.items()}
            with _replaying(replay, rows, len(chunk)), \
                    gated(model, stack_gates(model, [gates_list[i] for i in chunk])):
                output = forward(model, repeated)
            for k, i in enumerate(chunk):
                results[i] = output[k * rows:(k + 1) * rows]
            if done is not None:
                done(len(chunk) * rows)
    return results


def variant_progress(what: str, variants: int, items: int, item_name: str, *, enabled: bool = True,
                     log: logging.Logger | None = None) -> Progress:
    """One ``Progress`` over an evaluation's (gate setting, item) rows: ``variants`` settings x ``items`` items,
    counted in rows and in settings' worth of rows (how many heads of an ablation job are done)."""
    if variants == 1:
        return Progress(items, f"{what} of {items} {item_name}", item_name, log=log, enabled=enabled)
    return Progress(variants * items, f"{what}, {variants} gate settings x {items} {item_name}", "rows",
                    per=(items, "settings"), log=log, enabled=enabled)
