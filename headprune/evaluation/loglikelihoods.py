"""Log-likelihoods of (context, continuation) token pairs under many gate settings at once, as lm-eval's HFLM
computes them for one model (``headprune.evaluation.lm_tasks`` turns a task's requests into such pairs).

Pairs that read the same tokens share one row; the rows of one question share its context (each setting
computes it once, from the layer of its first masked head, and every choice goes on from its keys and
values); the settings share the full model's layers below their first masked head
(``headprune.evaluation.shared_layers``); only the positions a pair scores reach the output layer.
"""
from __future__ import annotations

import copy
import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


log = logging.getLogger(__name__)


@torch.no_grad()
def loglikelihood_variants(model, pairs: list[tuple[list[int], list[int]]], gates_list: list, *, max_length: int,
                           batch_size: int, variant_batch_size: int, progress: bool = False,
                           share_contexts: bool = True) -> list[list[tuple[float, bool]]]:
    """Per gate setting, per (context tokens, continuation tokens) pair: (the continuation's summed log-probability,
    whether it is the greedy continuation), as HFLM's ``_loglikelihood_tokens`` computes them: the model reads
    (context + continuation) cut to its last ``max_length`` + 1 tokens, less the last token, and the
    continuation is scored on the last len(continuation) positions.

    Pairs that read the same tokens share one input row (the choices of a one-token answer). Rows that read
    the same context before their first scored position (the choices of one question: a family) share it:
    the context is computed once per gate setting and each row goes on from its keys and values
    (``_shared_context_scores``). Rows go in batches of ``batch_size``, longest first (a family's rows
    together), right-padded (causal: padding after a row changes none of its positions). Either way the
    gate settings share the layers below their first masked head (``shared_layers``).
    ``share_contexts=False`` reads every row whole (to measure what the sharing saves)."""
    from headprune.evaluation.shared_layers import forward_variants, layer_stack, variant_progress
    from headprune.models.loading import attention_backend

    device = model.get_input_embeddings().weight.device
    reads: dict[tuple, int] = {}
    pair_row = []
    for context, continuation in pairs:
        if not context or not continuation or len(continuation) > max_length:
            raise ValueError(f"cannot score a continuation of {len(continuation)} tokens after {len(context)} "
                             f"context tokens (at most {max_length} tokens)")
        read = tuple((context + continuation)[-(max_length + 1):][:-1])
        pair_row.append(reads.setdefault(read, len(reads)))
    rows = _Rows(list(reads), pairs, pair_row)
    # rows that agree up to their first scored position share that context (a family); a row alone reads whole
    families: dict[tuple, list[int]] = {}
    for row in range(len(rows.reads)):
        families.setdefault(rows.reads[row][:rows.first_scored(row)], []).append(row)
    # sharing a context needs one stack of layers (replayed below the first masked one) and explicit positions
    # (a shorter context is padded, and its rows go on from its own length)
    can_share = share_contexts and layer_stack(model) is not None and \
        "position_ids" in inspect.signature(model.forward).parameters
    shared, alone = [], []  # families sharing their context; rows read whole
    for context, family in families.items():
        if can_share and len(family) > 1 and len(context) > 0:
            shared.append(family)
        else:
            alone += [[row] for row in family]
    batches = []  # (shares contexts, rows), longest first
    for sharing, units in ((True, shared), (False, alone)):
        units.sort(key=lambda unit: (-len(rows.reads[unit[0]]), rows.reads[unit[0]]))
        batch: list[int] = []
        for unit in units:
            if batch and len(batch) + len(unit) > batch_size:
                batches.append((sharing, batch))
                batch = []
            batch = batch + unit
        if batch:
            batches.append((sharing, batch))
    keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
    forward = functools.partial(_scored_tokens, keeps_logits=keeps_logits)
    results: list[list] = [[None] * len(pairs) for _ in gates_list]
    with variant_progress("lm-eval log-likelihoods", len(gates_list), len(rows.reads), "rows", enabled=progress,
                          log=log) as counter, attention_backend(model, "sdpa"):
        for sharing, batch in batches:
            starts = [rows.first_scored(row) if sharing else 0 for row in batch]
            ids, targets, keep = rows.tensors(batch, starts)
            inputs = {"input_ids": ids.to(device), "targets": targets.to(device)}
            if sharing:
                per_variant = _shared_context_scores(model, [rows.reads[row] for row in batch], starts, inputs,
                                                     gates_list, forward, variant_batch_size=variant_batch_size,
                                                     done=counter.update)
            else:
                per_variant = forward_variants(model, inputs, gates_list, forward,
                                               variant_batch_size=variant_batch_size, done=counter.update)
            for v, scores in enumerate(per_variant):
                rows.collect(results[v], scores, batch, starts, keep)
    return results


class _Rows:
    """The distinct input rows of a set of (context, continuation) pairs and which pairs each row scores."""

    def __init__(self, reads: list[tuple], pairs: list, pair_row: list[int]):
        self.reads, self.pairs = reads, pairs
        self.scored_on: list[list[int]] = [[] for _ in reads]
        for k, row in enumerate(pair_row):
            self.scored_on[row].append(k)

    def first_scored(self, row: int) -> int:
        """The row's first position whose next-token prediction a pair scores."""
        return len(self.reads[row]) - max(len(self.pairs[k][1]) for k in self.scored_on[row])

    def tensors(self, batch: list[int], starts: list[int]):
        """(each row's ids from its position ``starts[b]`` on, right-padded; targets (rows, keep, pairs per row):
        each pair's continuation tokens at the positions that predict them, among the last ``keep`` of the
        padded width; keep)."""
        lengths = [len(self.reads[row]) - start for row, start in zip(batch, starts)]
        width = max(lengths)
        keep = width - min(self.first_scored(row) - start for row, start in zip(batch, starts))
        per_row = max(len(self.scored_on[row]) for row in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)
        targets = torch.zeros(len(batch), keep, per_row, dtype=torch.long)
        for b, (row, start, length) in enumerate(zip(batch, starts, lengths)):
            ids[b, :length] = torch.tensor(self.reads[row][start:])
            end = length - (width - keep)
            for j, k in enumerate(self.scored_on[row]):
                continuation = self.pairs[k][1]
                targets[b, end - len(continuation):end, j] = torch.tensor(continuation)
        return ids, targets, keep

    def collect(self, results: list, scores: torch.Tensor, batch: list[int], starts: list[int], keep: int) -> None:
        """Each pair's (summed log-probability, greedy) from the ``_scored_tokens`` of ``tensors(batch, starts)``."""
        scores = scores.double().cpu()
        lengths = [len(self.reads[row]) - start for row, start in zip(batch, starts)]
        for b, (row, length) in enumerate(zip(batch, lengths)):
            end = length - (max(lengths) - keep)
            for j, k in enumerate(self.scored_on[row]):
                continuation = self.pairs[k][1]
                span = slice(end - len(continuation), end)
                greedy = bool((scores[b, span, -1].long() == torch.tensor(continuation)).all())
                results[k] = (float(scores[b, span, j].sum()), greedy)


def _shared_context_scores(model, reads: list[tuple], starts: list[int], inputs: dict, gates_list: list, forward,
                           *, variant_batch_size: int, done=None) -> list[torch.Tensor]:
    """``forward(model, inputs, past_key_values=...)`` per gate setting, where row r of ``inputs`` (the tokens
    ``reads[r][starts[r]:]``, right-padded) goes on from the keys and values of its context
    ``reads[r][:starts[r]]`` under the setting's gates.

    The distinct contexts, right-padded to the longest, are computed once by the full model, recording what
    the settings replay below their first masked layer (as ``shared_layers.forward_variants`` does); then,
    for the settings first masked in one layer f, in one pass per group of them, from layer f on: in layers
    0 .. f-1 (and in layer f, where its head outputs are replayed: the gates act after its attention) their
    keys and values are the full model's. Each setting's context keys and values are repeated for the rows
    that read them; a row reads its own context's positions only (an attention mask over the padding) and
    goes on from its length (explicit positions). The rows, too, go through the full model once, recorded
    (the settings that mask nothing take its scores); the rows of a group of settings then go through the
    model together under their gates, replaying the rows' full-model outputs below their first masked layer
    (and its head outputs, as for the contexts): a choice's own tokens are not recomputed there either."""
    from headprune.evaluation.shared_layers import (first_masked_layer, head_output_modules, layer_stack,
                                                     replays_head_outputs, what_to_record)
    from headprune.models.heads import stack_gates

    context, context_of_row = _distinct_contexts(reads, starts, inputs["input_ids"].device)
    stack = layer_stack(model)
    layers, rows = len(stack), inputs["input_ids"].shape[0]
    firsts = [first_masked_layer(gates, layers) for gates in gates_list]
    heads = head_output_modules(model) if replays_head_outputs(model) else None
    masked = sorted({f for f in firsts if f < layers})
    batch = _ContextBatch(model, forward, stack, heads, *what_to_record(stack, heads, masked), context,
                          context_of_row, _going_on_from_contexts(inputs, reads, starts, context.shape[1]))
    batch.prefill_contexts(record_last=layers not in firsts)

    results: list = [None] * len(gates_list)
    # the rows themselves, once under the full model, recording what the settings replay below their first
    # masked layer (a choice's tokens too are the full model's there); the settings that mask nothing get
    # this pass's scores. It reads the full model's cache as far as the contexts' pass went.
    if batch.wanted:
        full = [i for i, f in enumerate(firsts) if f == layers]
        output = batch.full_model_rows(reach=layers if full else masked[-1] + (1 if heads is not None else 0),
                                       record_last=not full)
        for i in full:
            results[i] = output
        if done is not None and full:
            done(len(full) * rows)
    per_group = max(1, variant_batch_size // rows)
    for first in sorted(set(firsts)):
        todo = [i for i, f in enumerate(firsts) if f == first and results[i] is None]
        replays = batch.replays(first)
        for start in range(0, len(todo), per_group):
            chunk = todo[start:start + per_group]
            output = batch.masked_rows(first, replays, stack_gates(model, [gates_list[i] for i in chunk]), len(chunk))
            for k, i in enumerate(chunk):
                results[i] = output[k * rows:(k + 1) * rows]
            if done is not None:
                done(len(chunk) * rows)
    return results


def _distinct_contexts(reads: list[tuple], starts: list[int], device) -> tuple[torch.Tensor, torch.Tensor]:
    """(the distinct contexts ``reads[r][:starts[r]]``, right-padded to the longest; each row's context)."""
    distinct: dict[tuple, int] = {}
    context_of_row = torch.tensor([distinct.setdefault(read[:start], len(distinct))
                                   for read, start in zip(reads, starts)], device=device)
    longest = max(len(c) for c in distinct)
    context = torch.zeros(len(distinct), longest, dtype=torch.long, device=device)
    for k, c in enumerate(distinct):
        context[k, :len(c)] = torch.tensor(c)
    return context, context_of_row


def _going_on_from_contexts(inputs: dict, reads: list[tuple], starts: list[int], longest: int) -> dict:
    """``inputs`` with the attention mask and positions of rows that go on from their padded contexts."""
    device = inputs["input_ids"].device
    # a row reads its context's positions and its own tokens (its padding comes after what it scores), at
    # positions that go on from its context's length (its padding's are its first: any within the model's)
    width = inputs["input_ids"].shape[1]
    context_length = torch.tensor(starts, device=device)[:, None]
    own_length = torch.tensor([len(read) - start for read, start in zip(reads, starts)], device=device)[:, None]
    step = torch.arange(width, device=device)[None]
    own_context = torch.arange(longest, device=device)[None] < context_length
    own_tokens = torch.ones_like(inputs["input_ids"], dtype=torch.bool)
    return {**inputs, "attention_mask": torch.cat([own_context, own_tokens], 1).long(),
            "position_ids": context_length + torch.where(step < own_length, step, 0)}


@dataclass
class _ContextBatch:
    """A batch of rows that go on from their contexts, and what the full model's passes over the contexts and
    the rows recorded for the gate settings to replay below their first masked layer."""

    model: object
    forward: Callable
    stack: list
    heads: list | None  # the head output modules, where the masking lets a setting replay them
    wanted: object  # what_to_record's: the modules to record, the last layer's, the projections
    last: object
    projections: object
    context: torch.Tensor  # (distinct contexts, longest)
    context_of_row: torch.Tensor
    inputs: dict
    full_cache: object = None
    recorded: dict = field(default_factory=dict)
    recorded_rows: dict = field(default_factory=dict)

    def prefill_contexts(self, record_last: bool) -> None:
        """The contexts through the full model, into ``full_cache``, recorded."""
        from transformers import DynamicCache

        from headprune.evaluation.retrieval import _prefill
        from headprune.evaluation.shared_layers import _recording

        self.full_cache = DynamicCache(config=self.model.config)
        with _recording(self.wanted, self.recorded, self.last if record_last else None, self.projections):
            _prefill(self.model, self.context, self.full_cache)

    def full_model_rows(self, reach: int, record_last: bool):
        """The rows through the full model, on the contexts' cache as far as ``reach``, recorded."""
        from headprune.evaluation.shared_layers import _recording

        with _recording(self.wanted, self.recorded_rows, self.last if record_last else None, self.projections):
            return self.forward(self.model, self.inputs,
                                past_key_values=self.joined(len(self.stack), None, None, self.context_of_row, reach))

    def replays(self, first: int) -> tuple[dict, dict, int]:
        """For the settings first masked in layer ``first``: (what they replay of the contexts' pass, of the rows'
        pass; the first layer whose keys and values are their own)."""
        from headprune.evaluation.shared_layers import replayed_modules

        layers, heads = len(self.stack), self.heads
        replay = replayed_modules(self.stack, heads, first, self.recorded)
        replay_rows = replayed_modules(self.stack, heads, first, self.recorded_rows)
        own_from = first + 1 if heads is not None and first < layers and heads[first][0] in replay else first
        return replay, replay_rows, own_from

    def masked_rows(self, first: int, replays: tuple, gates: dict, variants: int):
        """The rows under ``variants`` gate settings first masked in layer ``first`` (variant-major): their contexts
        from that layer on, then the rows."""
        from transformers import DynamicCache

        from headprune.evaluation.retrieval import _prefill
        from headprune.evaluation.shared_layers import _replaying
        from headprune.models.masking import gated

        replay, replay_rows, own_from = replays
        contexts, rows = len(self.context), self.inputs["input_ids"].shape[0]
        own = DynamicCache(config=self.model.config)
        if first < len(self.stack):
            with _replaying(replay, contexts, variants), gated(self.model, gates):
                _prefill(self.model, self.context.repeat(variants, 1), own)
        # per row of the chunk (variant-major), its context row: in the settings' own cache, and in the full one
        own_rows = torch.cat([k * contexts + self.context_of_row for k in range(variants)])
        cache = self.joined(own_from, own, own_rows, self.context_of_row.repeat(variants))
        repeated = {name: value.repeat(variants, *[1] * (value.dim() - 1)) for name, value in self.inputs.items()}
        with _replaying(replay_rows, rows, variants), gated(self.model, gates):
            return self.forward(self.model, repeated, past_key_values=cache)

    def joined(self, own_from: int, own, own_rows, full_rows, reach: int | None = None):
        """A cache for the rows (variant-major): below ``own_from`` their contexts' keys and values in the full
        model's cache, from there in the settings' own; layers from ``reach`` on are left empty."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        for j in range(len(self.stack) if reach is None else reach):
            source, picked = (self.full_cache.layers[j], full_rows) if j < own_from else (own.layers[j], own_rows)
            layer = copy.copy(source)
            layer.keys, layer.values = source.keys.index_select(0, picked), source.values.index_select(0, picked)
            cache.layers[j] = layer
        return cache


def _scored_tokens(model, inputs, keeps_logits: bool = True, past_key_values=None):
    """Per row, at each of the last ``targets.shape[1]`` positions: the log-probabilities of the target
    tokens there, and (last) the greedy token: (rows, positions, targets per row + 1). Only those positions
    go through the output layer, where the model takes ``logits_to_keep``. With ``past_key_values`` the
    rows go on from a context's keys and values (``inputs``' attention mask and positions say which and where)."""
    from headprune.models.lm_head import hidden_and_outputs, logits_fit, per_position

    targets = inputs["targets"]
    keep = targets.shape[1]
    extra = {"logits_to_keep": keep} if keeps_logits else {}
    if past_key_values is not None:  # (it holds the context; the rows' own keys and values are appended)
        extra.update(past_key_values=past_key_values, use_cache=True, attention_mask=inputs["attention_mask"],
                     position_ids=inputs["position_ids"])
    kwargs = {"input_ids": inputs["input_ids"], "use_cache": False, **extra}
    if not logits_fit(model, targets.shape[0] * keep):  # a chunk of positions at a time (models.lm_head)
        hidden = hidden_and_outputs(model, **kwargs)[0][:, -keep:]
        return per_position(model, hidden, targets.to(hidden.device), _target_scores)
    return _target_scores(model(**kwargs).logits[:, -keep:], targets)


def _target_scores(logits, targets):
    """The log-probabilities of ``targets`` (..., targets) at each position of ``logits`` (..., vocabulary),
    and (last) the greedy token: (..., targets + 1)."""
    logprobs = logits.float().log_softmax(-1)
    greedy = logprobs.argmax(-1, keepdim=True).to(logprobs.dtype)  # token ids up to 2^24, exact in float32
    return torch.cat([logprobs.gather(-1, targets), greedy], -1)
