"""Long-context retrieval (needle in a haystack): does the model, gated, still answer with the number that
one sentence deep in a long context holds?

The items (``headprune.data.retrieval``) are prompts of token ids, generated once. Each gate setting
answers each item greedily (``answer_variants``); an answer is right when the needle's value appears in
it as a whole number (``value_found``). The score is the share of right answers (higher is better); an
item is one unit of the paired bootstrap, as a window is for perplexity. ``rouge1_recall`` is there for
answers judged against a reference sentence.

Speed: a variant whose first masked head is in layer f computes, over the prompt, what the full model
computes in layers 0 .. f-1, and writes the same keys and values into their cache (its heads there are
the full model's; whatever the masking, zero, uniform or streaming, it acts from layer f on). So the
prompt (but its last token) is run once through the full model, recording each layer's output and
filling a ``DynamicCache``; each variant then replays the recorded outputs of layers 0 .. f-1
(``shared_layers``) and computes layers f.. only, and the cache entries of the replayed layers (which it
does not write) are the full model's. The variants' caches are written, variant-major, into one cache
with room for the answer's tokens, and ``generate()`` runs them all together: the prompt's last token, then
greedy steps, under batched gates (``headprune.models.masking.gated``). On a model without one stack of
layers holding every head, each variant runs its prompt whole.

Each variant's prompt is computed in a pass of its own (its batch's rows, whatever
``variant_batch_size``): on a CPU, a pass of several variants' prompts was twice as slow per variant (the
eager attention's (rows, heads, length, length) scores of one layer outgrow the caches, and past 1 GB each
are mapped anew), and its memory grows with their number. ``variant_batch_size`` bounds the rows that
decode together. The joined cache's keys and values are the first positions of buffers with room for the
answer (``_RoomyLayer``): a generated token's keys and values are written in place, not concatenated to
a copy of the whole cache (on a CPU, that copy was a fifth of a long-context variant's decoding). The
values every layer reads are the same.

Everything here runs in sdpa attention (``headprune.models.loading.attention_backend``), not the eager
attention the models are loaded with for their attention weights, which are not needed here: eager
attention copies each key/value head once per query head at every generated token, and on a CPU a
Llama-layout LM of 111M parameters decoded 32 rows of 1k-token contexts 2 to 6 times as fast in sdpa
(the same tokens).
"""
from __future__ import annotations

import copy
import logging
import re
from collections import Counter

import numpy as np
import torch

from transformers.cache_utils import DynamicLayer

from headprune.evaluation.shared_layers import (_recording, _replaying, first_masked_layer, head_output_modules,
                                                 layer_stack, replayed_modules, replays_head_outputs, variant_progress,
                                                 what_to_record)
from headprune.evaluation.stats import paired_bootstrap
from headprune.models.heads import stack_gates
from headprune.models.loading import attention_backend
from headprune.models.masking import gated

# End-of-turn tokens of chat models (Llama 3, ChatML/Qwen, Gemma, Phi-3): an answer ends there as at EOS.
END_OF_TURN_TOKENS = ("<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>")
_WORD = re.compile(r"\w+")
log = logging.getLogger(__name__)


# --- scoring -------------------------------------------------------------------------------------


def value_found(answer: str, value: str) -> bool:
    """Whether ``value``'s digits appear in the answer as a whole number: not inside a longer run of digits.

    "60494" is found in "It is 60494." and "(60494)", not in "604941" or "160494"; digits written with
    separators ("60,494", "60 494") or in words are not found.
    """
    if not value.isdigit():
        raise ValueError(f"the value must be digits, got {value!r}")
    return re.search(rf"(?<!\d){value}(?!\d)", answer) is not None


def rouge1_recall(reference: str, hypothesis: str) -> float:
    """ROUGE-1 recall: of the reference's word unigrams (lowercased ``\\w+``), the share the hypothesis has,
    counts clipped (a word twice in the reference counts twice only if the hypothesis has it twice).
    An empty hypothesis scores 0; an empty reference is an error."""
    ref = Counter(_WORD.findall(reference.lower()))
    if not ref:
        raise ValueError(f"the reference has no words: {reference!r}")
    hyp = Counter(_WORD.findall(hypothesis.lower()))
    return sum(min(count, hyp[word]) for word, count in ref.items()) / sum(ref.values())


def _found(answers, values) -> np.ndarray:
    if len(answers) != len(values):
        raise ValueError(f"{len(answers)} answers but {len(values)} values")
    return np.array([value_found(a, v) for a, v in zip(answers, values)], dtype=np.float64)


def retrieval_accuracy(answers: list[str], values: list[str]) -> float:
    """The share of answers that hold their item's value (``value_found``).

    >>> retrieval_accuracy(["The pass key is 4711.", "I do not know."], ["4711", "8123"])
    0.5
    """
    found = _found(answers, values)
    if not found.size:
        raise ValueError("cannot score an empty set of answers")
    return float(found.mean())


def paired_bootstrap_retrieval(answers_a, answers_b, values, n_resamples: int = 1000, seed: int = 0):
    """Paired bootstrap of the retrieval accuracy over items (``stats.paired_bootstrap``)."""
    return paired_bootstrap(lambda found, _: float(np.mean(found)), _found(answers_a, values),
                            _found(answers_b, values), np.zeros(len(values)), n_resamples=n_resamples, seed=seed)


# --- answering -----------------------------------------------------------------------------------


def stop_token_ids(model, tokenizer) -> list[int]:
    """Where an answer ends: the model's and the tokenizer's EOS, and the tokenizer's end-of-turn token."""
    stops = []
    eos = getattr(model.generation_config, "eos_token_id", None)
    stops += list(eos) if isinstance(eos, (list, tuple)) else [eos]
    stops.append(getattr(tokenizer, "eos_token_id", None))
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    stops += [vocab.get(token) for token in END_OF_TURN_TOKENS]
    return list(dict.fromkeys(int(t) for t in stops if t is not None))


def answer_variants(model, tokenizer, items: list[dict], gates_list: list, *, max_new_tokens: int = 32,
                    batch_size: int = 8, variant_batch_size: int = 64,
                    progress: bool = False) -> list[list[str]]:
    """Per gate setting (None: all heads), per item: the greedy answer, its new tokens decoded without
    special tokens (``generate_variants``)."""
    tokens = generate_variants(model, tokenizer, items, gates_list, max_new_tokens=max_new_tokens,
                               batch_size=batch_size, variant_batch_size=variant_batch_size, progress=progress)
    return [[tokenizer.decode(answer, skip_special_tokens=True) for answer in per_item] for per_item in tokens]


@torch.no_grad()
def generate_variants(model, tokenizer, items: list[dict], gates_list: list, *, max_new_tokens: int = 32,
                      batch_size: int = 8, variant_batch_size: int = 64,
                      progress: bool = False) -> list[list[list[int]]]:
    """Per gate setting, per item: the greedy answer's new token ids, up to (not including) the first stop
    token (``stop_token_ids``) or ``max_new_tokens`` of them.

    Items of one prompt length share batches of up to ``batch_size`` items; up to ``variant_batch_size``
    rows (a batch repeated once per gate setting) are generated together, their prompt computed from the
    full model's where it is the same (module docstring)."""
    device = model.get_input_embeddings().weight.device
    model.eval()
    stops = stop_token_ids(model, tokenizer)
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = pad if pad is not None else (stops[0] if stops else 0)
    stack = layer_stack(model)
    layers = len(stack) if stack is not None else 0
    firsts = [first_masked_layer(gates, layers) if stack is not None else 0 for gates in gates_list]
    by_length: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        by_length.setdefault(len(item["prompt_ids"]), []).append(i)
    batches = [indices[start:start + batch_size] for _, indices in sorted(by_length.items())
               for start in range(0, len(indices), batch_size)]
    out: list[list] = [[None] * len(items) for _ in gates_list]
    with variant_progress("retrieval", len(gates_list), len(items), "items", enabled=progress, log=log) as counter, \
            attention_backend(model, "sdpa"):
        for batch in batches:
            ids = torch.tensor([items[i]["prompt_ids"] for i in batch], dtype=torch.long, device=device)
            generated = _greedy_variants(model, ids, gates_list, firsts, stack, max_new_tokens=max_new_tokens,
                                         stops=stops, pad=pad, variant_batch_size=variant_batch_size,
                                         done=counter.update)
            for k, per_item in enumerate(generated):
                for i, answer in zip(batch, per_item):
                    out[k][i] = answer
    return out


def _greedy_variants(model, ids, gates_list, firsts, stack, *, max_new_tokens, stops, pad, variant_batch_size,
                     done=None, stopping_criteria=None) -> list[list[list[int]]]:
    """Per gate setting, per row of ``ids`` (prompts of one length): the answer's new token ids; ``done(rows)``
    is told the (setting, item) rows each generate() answered. ``stopping_criteria`` (generate()'s, per row;
    rows are variant-major) end rows early besides the stop tokens (a row ended so is padded after)."""
    from transformers import DynamicCache

    rows, length = ids.shape
    layers = len(stack) if stack is not None else 0
    share = stack is not None and length > 1
    if not share:
        firsts = [0] * len(firsts)
    prefix = ids[:, :-1]
    heads = head_output_modules(model) if share and replays_head_outputs(model) else None
    # the full model's prefix: its cache, and what the variants replay (layers below their first masked one,
    # that layer's head outputs); a variant that masks nothing takes the whole cache
    wanted, last, projections = what_to_record(stack, heads, sorted({f for f in firsts if f < layers}))
    full_cache, recorded = None, {}
    if wanted or layers in firsts:
        full_cache = DynamicCache(config=model.config)
        with _recording(wanted, recorded, None if layers in firsts else last, projections):
            _prefill(model, prefix, full_cache)
    per_group = max(1, variant_batch_size // rows)
    results: list = [None] * len(gates_list)
    for start in range(0, len(gates_list), per_group):
        chunk = list(range(start, min(start + per_group, len(gates_list))))
        cache = None
        if share:
            cache = _joined_cache(model, prefix, [gates_list[i] for i in chunk], [firsts[i] for i in chunk], stack,
                                  heads, recorded, full_cache, room=max_new_tokens)
        repeated = ids.repeat(len(chunk), 1)
        with gated(model, stack_gates(model, [gates_list[i] for i in chunk])):
            generated = model.generate(input_ids=repeated, attention_mask=torch.ones_like(repeated),
                                       past_key_values=cache, do_sample=False, num_beams=1,
                                       max_new_tokens=max_new_tokens, eos_token_id=stops or None, pad_token_id=pad,
                                       stopping_criteria=stopping_criteria)
        new = generated[:, length:].tolist()
        for k, i in enumerate(chunk):
            results[i] = [_until_stop(answer, stops) for answer in new[k * rows:(k + 1) * rows]]
        if done is not None:
            done(len(chunk) * rows)
    return results


def _prefill(model, prefix, cache):
    model.base_model(input_ids=prefix, attention_mask=torch.ones_like(prefix), past_key_values=cache, use_cache=True)


def _variant_cache(model, prefix, gates, first, stack, heads, recorded):
    """(the prefix's cache for one gate setting first masked in layer ``first``, the first layer it wrote):
    computed under its gates on the replayed outputs of the layers below and, when recorded, of layer
    ``first``'s head outputs (``shared_layers.replayed_modules``); the replayed layers' entries stay empty.
    Layer ``first``'s keys and values are the full model's either way: the gates act after the attention."""
    from transformers import DynamicCache

    rows = prefix.shape[0]
    cache = DynamicCache(config=model.config)
    replay = replayed_modules(stack, heads, first, recorded)
    with _replaying(replay, rows, 1), gated(model, stack_gates(model, [gates])):
        _prefill(model, prefix, cache)
    return cache, first + 1 if heads is not None and heads[first][0] in replay else first


def _joined_cache(model, prefix, gates_list, firsts, stack, heads, recorded, full_cache, room: int):
    """One cache for the gate settings ``gates_list`` (first masked in layers ``firsts``), variant-major: in
    the layers below a variant's first masked layer (in every layer, for one that masks nothing; and in
    that layer, when its head outputs were replayed) its rows are the full model's, from there its own
    (``_variant_cache``, one variant at a time, written in as each is computed). Plain dynamic layers get
    ``room`` positions more (``_RoomyLayer``)."""
    from transformers import DynamicCache

    rows, layers = prefix.shape[0], len(stack)
    total = rows * len(gates_list)
    joined = DynamicCache(config=model.config)
    buffers: list = [None] * layers  # per layer: (template layer, keys, values, room)
    for k, (gates, first) in enumerate(zip(gates_list, firsts)):
        own, own_from = _variant_cache(model, prefix, gates, first, stack, heads, recorded) \
            if first < layers else (None, layers)
        for j in range(layers):
            layer = own.layers[j] if j >= own_from else full_cache.layers[j]
            if buffers[j] is None:
                extra = room if type(layer) is DynamicLayer else 0  # noqa: E721 (not a subclass's own update)
                shape = list(layer.keys.shape)
                shape[0], shape[-2] = total, shape[-2] + extra
                buffers[j] = (layer, layer.keys.new_empty(shape), layer.values.new_empty(shape), extra)
            _, keys, values, _ = buffers[j]
            positions = layer.keys.shape[-2]
            keys[k * rows:(k + 1) * rows, ..., :positions, :] = layer.keys
            values[k * rows:(k + 1) * rows, ..., :positions, :] = layer.values
        del own
    for j, (template, keys, values, extra) in enumerate(buffers):
        if extra:
            joined.layers[j] = _RoomyLayer(template, keys, values, keys.shape[-2] - extra)
        else:
            joined_layer = copy.copy(template)
            joined_layer.keys, joined_layer.values = keys, values
            joined.layers[j] = joined_layer
    if len(joined.layers) != layers:
        raise ValueError(f"the cache has {len(joined.layers)} layers, the model {layers}")
    return joined


class _RoomyLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are the first ``positions`` of buffers with room for more:
    ``update`` writes new positions into the room and returns views of the filled part, the same values as
    concatenating them (which copies the whole layer at every generated token). Once the room is full, or
    the keys are no longer a view of the buffer from its start (batch selection, offloading), it
    concatenates as ``DynamicLayer`` does."""

    def __init__(self, template, keys, values, positions: int):
        super().__init__()
        self.__dict__.update({key: value for key, value in vars(template).items() if key not in ("keys", "values")})
        self._buffers = (keys, values)
        self.keys, self.values = keys[..., :positions, :], values[..., :positions, :]
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True

    def update(self, key_states, value_states, *args, **kwargs):
        keys, values = self._buffers
        if self.is_initialized and self._in_place(self.keys, keys) and self._in_place(self.values, values):
            start, end = self.keys.shape[-2], self.keys.shape[-2] + key_states.shape[-2]
            if end <= keys.shape[-2] and key_states.shape[:-2] == keys.shape[:-2]:
                keys[..., start:end, :] = key_states
                values[..., start:end, :] = value_states
                self.keys, self.values = keys[..., :end, :], values[..., :end, :]
                return self.keys, self.values
        return super().update(key_states, value_states, *args, **kwargs)

    @staticmethod
    def _in_place(view, buffer) -> bool:
        return (view is not None and view._base is buffer and view.storage_offset() == 0
                and view.shape[:-2] == buffer.shape[:-2] and view.stride() == buffer.stride())


def _until_stop(tokens: list[int], stops: list[int]) -> list[int]:
    for k, token in enumerate(tokens):
        if token in stops:
            return tokens[:k]
    return tokens
