"""What attention heads of decoder-only LMs do: previous-token, induction, sink and retrieval heads.

Notation. A = A[l, h] is the attention probabilities of head h of layer l on one sequence; A[i, j] is
the weight query position i puts on key position j (causal: j <= i; each row sums to 1). Heads are
QUERY heads, as everywhere in headprune: under grouped-query attention a layer has
``num_attention_heads`` of them and query head h reads key/value head h // (heads / kv_heads). A map
is computed by the model itself (eager attention, ``output_attentions=True``), one sequence per row
of a batch, no padding. Every score is a mean of attention weights or counts as defined here, with
no threshold inside; the roles are thresholds on the scores (below).

previous-token  (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"; Olsson et
                al. 2022: the heads induction heads compose with.) On W natural-text windows of T
                tokens each (token id lists, all of one length):
                    previous_token = 1 / (W (T - 1)) * sum_w sum_{i=1}^{T-1} A_w[i, i - 1]
                Query 0 is not a case (it has no previous token). A head putting all its weight on
                the previous token scores 1; a head attending uniformly (A[i, j] = 1 / (i + 1))
                scores the mean of 1 / (i + 1) over i = 1..T-1.
sink            (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks", ICLR
                2024.) On the same windows, the weight on the FIRST position, whatever token is
                there:
                    sink = 1 / (W (T - 1)) * sum_w sum_{i=1}^{T-1} A_w[i, 0]
                Query 0 is not a case (its only key is position 0). A window that starts with BOS
                has the BOS at position 0, so query 1's previous token is also position 0: it
                counts for both scores.
induction       (Olsson et al. 2022, "In-context Learning and Induction Heads".) On S sequences
                    x = [bos] + R + R,   R = n token ids drawn without replacement (distinct, so each
                    token of the second copy has exactly one earlier occurrence) from [low, high)
                    minus the special ids, a fresh R per sequence (``induction_sequences``).
                With o = 1 when a BOS precedes the copies and o = 0 otherwise, x[o + k] = R[k] (first
                copy) and x[o + n + k] = R[k] (second copy), k = 0..n-1. The query at the second
                copy's R[k], position t = o + n + k, should attend to the first copy's token AFTER
                R[k], R[k + 1] at position o + k + 1 = t - n + 1:
                    induction = 1 / (S (n - 1)) * sum_s sum_{k=0}^{n-2} A_s[o + n + k, o + k + 1]
                k = n - 1 is not a case: the token after R[n-1]'s first occurrence is the second
                copy's R[0], not a first-copy token. Example, n = 3, o = 1: x = [B, a, b, c, a, b, c]
                at positions 0..6; the cases are (query 4, the second a -> key 2, the first b) and
                (query 5, the second b -> key 3, the first c). A head attending to the same token's
                first occurrence (key t - n) is a duplicate-token head, and scores 0 here.
retrieval       (Wu et al., "Retrieval Head Mechanistically Explains Long-Context Factuality", ICLR
                2025; code: github.com/nightdessert/Retrieval_Head.) An item is a prompt p of P
                tokens holding a needle at token span [s, e), m = e - s tokens. Greedy decoding
                runs steps tau = 0, 1, ...: step tau's query is position P - 1 + tau (the prompt's
                last token at tau = 0, then the token emitted at step tau - 1); it emits
                w_tau = argmax of its logits. Head (l, h)'s most-attended key at that step is
                    j_tau = argmax_j A[l, h][P - 1 + tau, j]   over the P + tau keys (ties: the first)
                and step tau is a COPY-PASTE EVENT of the head when s <= j_tau < e and p[j_tau] ==
                w_tau. Every emitted token is a step, the first one included (emitted from the
                prompt's last query). Per item, two definitions:
                  code      (the authors' code)  (number of events) / m. The same needle position
                            copied at two steps counts twice, so the score can exceed 1.
                  distinct  (the paper)  |{j_tau : tau an event}| / m, the share of needle positions
                            copied at least once (<= 1).
                A head's retrieval score is the mean of its per-item score over the items answered
                correctly, NaN when none was. Wu et al. call an answer correct when its ROUGE-1
                recall against the needle sentence exceeds 0.5; here the caller decides
                (``is_correct(answer_text, item)``, the answer decoded with the special tokens
                skipped and stripped, as the authors do). Decoding stops after ``max_new_tokens``
                steps or after emitting a stop token (EOS, or the newline the authors stop at):
                the stop token is emitted and its step is scored, as in the authors' loop (scored,
                then break). The prompt but its last token is prefilled in the model's own
                attention backend (the authors use flash attention there), and each step runs in
                eager attention (their "torch" mode), the only backend that returns weights.
                A RETRIEVAL HEAD has score > 0.1 (``RETRIEVAL_THRESHOLD``; strictly greater, as
                Wu et al. write), by the "code" definition (the scores the authors released).

Roles. One role per head, by priority, the first whose criterion holds, else "other":
    "retrieval"       retrieval > 0.1            (RETRIEVAL_THRESHOLD)
    "induction"       induction >= 0.3           (INDUCTION_THRESHOLD)
    "previous-token"  previous_token >= 0.5      (PREVIOUS_TOKEN_THRESHOLD)
    "sink"            sink >= 0.5                (SINK_THRESHOLD)
Retrieval and induction come first because they are measured on inputs built to elicit them (a
needle to copy, a sequence to continue), and heads that do them park most of their weight on the
first token when given nothing to do: a retrieval or induction head often is a sink on natural text
as well. Previous-token comes before sink because it is a positional pattern a head shows on any
text, while the sink is the default no-op. ``functions`` lists every criterion met (joined by "+").
A NaN score (no windows, no correct item) meets no criterion.

KV heads. KV-cache methods (eviction, compression) act on key/value heads, each read by
heads / kv_heads consecutive query heads. ``lm_kv_head_table`` has one row per (layer, kv head):
each score is the MAX over the query heads that read it (NaNs skipped; NaN if all are), so a KV head
serves a role when any of its query heads does; its role is the highest-priority role among its
query heads' (the same as the rule above on the maxed scores).

Memory. Full maps (``attention_maps_lm`` without ``pairs``) are windows x layers x heads x T x T
float32 on the host; with ``pairs`` only the listed (query, key) entries leave the device, which is
what the scores need (``model_lm_head_roles`` does that). On the device, output_attentions keeps
every layer's (batch, heads, T, T) weights of a batch alive until the forward returns.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from headprune.io.progress import counted
from headprune.models.heads import DEC_SELF, adapter_for
from headprune.models.loading import attention_backend

RETRIEVAL_THRESHOLD = 0.1  # Wu et al.: a retrieval head scores > 0.1
INDUCTION_THRESHOLD = 0.3
PREVIOUS_TOKEN_THRESHOLD = 0.5
SINK_THRESHOLD = 0.5
ROLE_PRIORITY = ("retrieval", "induction", "previous-token", "sink")
DEFINITIONS = ("code", "distinct")
SCORE_COLUMNS = ("previous_token", "induction", "sink", "retrieval", "retrieval_distinct")
log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------
# Which (query, key) entries each score reads


def previous_token_pairs(length: int) -> tuple[np.ndarray, np.ndarray]:
    """(queries, keys) of the previous-token score on windows of ``length`` tokens: (i, i - 1), i >= 1."""
    queries = np.arange(1, length)
    return queries, queries - 1


def sink_pairs(length: int) -> tuple[np.ndarray, np.ndarray]:
    """(queries, keys) of the sink score on windows of ``length`` tokens: (i, 0), i >= 1."""
    queries = np.arange(1, length)
    return queries, np.zeros_like(queries)


def induction_pairs(period: int, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(queries, keys) of the induction score on [bos] * offset + R + R, R of ``period`` tokens:
    (offset + period + k, offset + k + 1) for k = 0..period-2 (see the module doc)."""
    if period < 2:
        raise ValueError(f"an induction sequence needs a period of at least 2 tokens, got {period}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    k = np.arange(period - 1)
    return offset + period + k, offset + k + 1


def _pick(maps, queries, keys):
    """maps[..., queries[j], keys[j]] for every j: (..., pairs), numpy or torch alike."""
    if torch.is_tensor(maps):
        return maps[..., torch.as_tensor(queries, device=maps.device), torch.as_tensor(keys, device=maps.device)]
    return np.asarray(maps)[..., np.asarray(queries), np.asarray(keys)]


def _pair_mean(picked) -> np.ndarray:
    """Mean over sequences (first axis) and pairs (last axis) of picked entries: the heads' shape."""
    picked = np.asarray(picked, dtype=np.float64)
    if picked.ndim < 2 or picked.shape[0] == 0 or picked.shape[-1] == 0:
        raise ValueError(f"need (sequences, ..., pairs) with at least one of each, got {picked.shape}")
    return picked.mean(axis=(0, picked.ndim - 1))


def _maps(maps) -> np.ndarray:
    a = np.asarray(maps)
    if a.ndim < 3 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"maps must be (sequences, ..., q, k) with q == k, got shape {a.shape}")
    return a


# ----------------------------------------------------------------------------------------------
# Scores on maps: (sequences, layers, heads, q, k) -> (layers, heads); any head dims work


def previous_token_scores(maps) -> np.ndarray:
    """Mean weight of query i on key i - 1, over i >= 1 and the sequences (see the module doc)."""
    a = _maps(maps)
    return _pair_mean(_pick(a, *previous_token_pairs(a.shape[-1])))


def sink_scores(maps) -> np.ndarray:
    """Mean weight of query i on key 0, over i >= 1 and the sequences (see the module doc)."""
    a = _maps(maps)
    return _pair_mean(_pick(a, *sink_pairs(a.shape[-1])))


def induction_scores(maps, period: int, offset: int = 0) -> np.ndarray:
    """Mean weight of the second copy's R[k] on the first copy's R[k + 1], k = 0..period-2, over the
    sequences; maps of [bos] * offset + R + R sequences (offset + 2 period tokens)."""
    a = _maps(maps)
    if a.shape[-1] != offset + 2 * period:
        raise ValueError(f"maps over {a.shape[-1]} tokens, but [bos] * {offset} + R + R with |R| = {period} "
                         f"has {offset + 2 * period}")
    return _pair_mean(_pick(a, *induction_pairs(period, offset)))


def induction_sequences(n: int, count: int, low: int, high: int, seed: int = 0, bos: int | None = None,
                        exclude: Iterable[int] = ()) -> list[list[int]]:
    """``count`` sequences [bos] + R + R (no bos when None), each R ``n`` distinct ids drawn without
    replacement from [low, high) minus ``exclude`` and ``bos``, from numpy's default_rng(seed)."""
    if n < 2 or count < 1:
        raise ValueError(f"need n >= 2 and count >= 1, got n={n}, count={count}")
    banned = {int(i) for i in exclude} | ({int(bos)} if bos is not None else set())
    pool = np.array([i for i in range(int(low), int(high)) if i not in banned], dtype=np.int64)
    if len(pool) < n:
        raise ValueError(f"only {len(pool)} ids in [{low}, {high}) besides the special ones, {n} needed")
    rng = np.random.default_rng(seed)
    head = [int(bos)] if bos is not None else []
    sequences = []
    for _ in range(count):
        r = rng.choice(pool, size=n, replace=False).tolist()
        sequences.append(head + r + r)
    return sequences


# ----------------------------------------------------------------------------------------------
# Attention maps of a model


def _dec_sites(model):
    sites = [site for site in adapter_for(model).sites(model) if site.attn_type == DEC_SELF]
    if not sites:
        raise ValueError(f"{type(model).__name__} has no decoder self-attention: not a decoder-only LM")
    return sites


def _spread(weights, sites, shape_tail, dtype, fill):
    """Per-layer weights of the layers with heads -> (batch, layers, original heads, *shape_tail)."""
    with_heads = [site for site in sites if site.num_heads]
    weights = [w for w in (weights or ()) if w is not None]
    if len(weights) != len(with_heads):
        raise RuntimeError(f"{len(weights)} attention maps for {len(with_heads)} layers with heads "
                           "(is the model in eager attention?)")
    layers, heads = len(sites), max(site.original_num_heads for site in sites)
    batch = weights[0].shape[0] if weights else 0
    out = np.full((batch, layers, heads, *shape_tail), fill, dtype=dtype)
    for site, w in zip(with_heads, weights):
        if w.shape[1] != site.num_heads:
            raise RuntimeError(f"layer {site.layer} returns {w.shape[1]} heads' weights, it has {site.num_heads} "
                               "query heads")
        out[:, site.layer, site.kept_heads] = w.cpu().numpy()
    return out


def attention_maps_lm(model, windows: Sequence[Sequence[int]], batch_size: int = 8, *,
                      pairs: tuple[Sequence[int], Sequence[int]] | None = None, device=None,
                      progress: bool = False) -> np.ndarray:
    """Attention probabilities of a decoder-only LM on equal-length token id windows, float32.

    Without ``pairs``: (windows, layers, heads, T, T), heads the query heads (GQA included). With
    ``pairs = (queries, keys)`` (equal-length index lists): only the entries [query_j, key_j],
    (windows, layers, heads, len(queries)), gathered on the device (see the module doc on memory).
    One forward of the base model (no LM head) per ``batch_size`` windows, no padding, eval mode, no
    gradients, eager attention (switched for the call and switched back). Physically pruned heads
    get NaN.
    """
    windows = [list(map(int, w)) for w in windows]
    if not windows:
        raise ValueError("no windows")
    length = len(windows[0])
    if length < 1 or any(len(w) != length for w in windows):
        lengths = sorted({len(w) for w in windows})
        raise ValueError(f"windows must be non-empty and of one length, got lengths {lengths}")
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and length > limit:
        raise ValueError(f"windows of {length} tokens, more than the model's {limit} positions")
    if pairs is not None:
        queries, keys = (np.asarray(p, dtype=np.int64) for p in pairs)
        if queries.shape != keys.shape or queries.ndim != 1:
            raise ValueError("pairs must be two equal-length index lists")
        if len(queries) and (queries.min() < 0 or queries.max() >= length or keys.min() < 0 or keys.max() >= length):
            raise ValueError(f"pairs index outside windows of {length} tokens")
        tail = (len(queries),)
    else:
        tail = (length, length)
    sites = _dec_sites(model)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    chunks = []
    was_training = model.training
    model.eval()
    try:
        with attention_backend(model, "eager"), torch.no_grad():
            for start in counted(range(0, len(windows), batch_size),
                                 f"attention maps of {len(windows)} windows of {length} tokens", "batches",
                                 enabled=progress, log=log):
                ids = torch.tensor(windows[start:start + batch_size], dtype=torch.long, device=device)
                outputs = model.base_model(input_ids=ids, output_attentions=True, use_cache=False)
                weights = [w if pairs is None else _pick(w, queries, keys) for w in outputs.attentions if w is not None]
                weights = [w.float() for w in weights]
                chunks.append(_spread(weights, sites, tail, np.float32, np.nan))
                del outputs, weights
    finally:
        model.train(was_training)
    return np.concatenate(chunks)


# ----------------------------------------------------------------------------------------------
# Greedy decoding with each step's most-attended key


@dataclass
class Trace:
    """One greedy decoding: ``tokens[tau]`` is the id emitted at step tau; ``argmax[tau, l, h]`` the key
    position head (l, h) attended to most at that step (query position len(prompt) - 1 + tau), -1 for a
    physically pruned head."""

    tokens: list[int]
    argmax: np.ndarray  # (steps, layers, heads) int64


def _ids(token_ids) -> set[int]:
    if token_ids is None:
        return set()
    if isinstance(token_ids, (int, np.integer)):
        return {int(token_ids)}
    return {int(i) for i in token_ids}


def decoding_trace(model, prompt_ids: Sequence[int], max_new_tokens: int, eos_token_id=None, *,
                   device=None) -> Trace:
    """Greedy decoding of ``prompt_ids`` with a KV cache, recording each step's most-attended keys.

    ``eos_token_id``: an id or ids that end decoding (EOS; Wu et al. stop at a newline too); the stop
    token is emitted and its step recorded. None: decode ``max_new_tokens`` steps. The prompt but its
    last token is prefilled in the model's own backend; then each step feeds one token (the prompt's
    last first) in eager attention with output_attentions (see the module doc), as the authors do.
    Emits what ``model.generate(do_sample=False)`` emits (up to floating-point ties).
    """
    prompt = [int(i) for i in prompt_ids]
    if not prompt:
        raise ValueError("an empty prompt")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    stop = _ids(eos_token_id)
    sites = _dec_sites(model)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    tokens: list[int] = []
    argmaxes: list[np.ndarray] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            past = None
            if len(prompt) > 1:  # the base model: a cache, no logits over the whole prompt
                past = model.base_model(input_ids=torch.tensor([prompt[:-1]], device=device),
                                        use_cache=True).past_key_values
            token = torch.tensor([[prompt[-1]]], device=device)
            with attention_backend(model, "eager"):
                for _ in range(max_new_tokens):
                    outputs = model(input_ids=token, past_key_values=past, use_cache=True, output_attentions=True)
                    past = outputs.past_key_values
                    emitted = int(outputs.logits[0, -1].argmax())
                    rows = [w[:, :, -1].argmax(-1) for w in outputs.attentions if w is not None]
                    argmaxes.append(_spread(rows, sites, (), np.int64, -1)[0])
                    tokens.append(emitted)
                    if emitted in stop:
                        break
                    token = torch.tensor([[emitted]], device=device)
    finally:
        model.train(was_training)
    return Trace(tokens, np.stack(argmaxes))


def copy_paste_scores(trace: Trace, prompt_ids: Sequence[int], needle_span: tuple[int, int],
                      definition: str = "code") -> np.ndarray:
    """One item's retrieval score per head, (layers, heads): copy-paste events / needle length
    ("code") or distinct needle positions copied / needle length ("distinct"); see the module doc."""
    if definition not in DEFINITIONS:
        raise ValueError(f"definition must be one of {DEFINITIONS}, got {definition!r}")
    start, end = (int(x) for x in needle_span)
    prompt = np.asarray(list(prompt_ids), dtype=np.int64)
    if not 0 <= start < end <= len(prompt):
        raise ValueError(f"needle span [{start}, {end}) is not a non-empty span of the {len(prompt)}-token prompt")
    argmax = np.asarray(trace.argmax, dtype=np.int64)
    tokens = np.asarray(trace.tokens, dtype=np.int64)
    if argmax.ndim != 3 or argmax.shape[0] != len(tokens):
        raise ValueError(f"a trace needs (steps, layers, heads) argmaxes for its {len(tokens)} tokens, "
                         f"got shape {argmax.shape}")
    inside = (argmax >= start) & (argmax < end)
    copied = np.where(inside, prompt[np.clip(argmax, start, end - 1)], -1)
    events = inside & (copied == tokens[:, None, None])
    length = end - start
    if definition == "code":
        return events.sum(0) / length
    hit = np.zeros((*argmax.shape[1:], length), dtype=bool)
    steps, layers, heads = np.nonzero(events)
    hit[layers, heads, argmax[steps, layers, heads] - start] = True
    return hit.sum(-1) / length


def retrieval_scores(per_item_scores: Sequence[np.ndarray], correct: Sequence[bool]) -> np.ndarray:
    """Per head, the mean of the per-item scores over the items answered correctly; NaN if none was."""
    per_item = [np.asarray(s, dtype=np.float64) for s in per_item_scores]
    correct = [bool(c) for c in correct]
    if not per_item:
        raise ValueError("no items")
    if len(per_item) != len(correct):
        raise ValueError(f"{len(per_item)} items' scores but {len(correct)} correctness flags")
    chosen = [s for s, c in zip(per_item, correct) if c]
    if not chosen:
        return np.full(per_item[0].shape, np.nan)
    return np.mean(np.stack(chosen), axis=0)


# ----------------------------------------------------------------------------------------------
# Tables


def _met(row: Mapping[str, float], thresholds: Mapping[str, float]) -> list[str]:
    met = {  # NaN compares False: an unmeasured score decides nothing
        "retrieval": row["retrieval"] > thresholds["retrieval"],
        "induction": row["induction"] >= thresholds["induction"],
        "previous-token": row["previous_token"] >= thresholds["previous-token"],
        "sink": row["sink"] >= thresholds["sink"],
    }
    return [role for role in ROLE_PRIORITY if met[role]]


def lm_head_roles_table(scores: Mapping[str, np.ndarray], kv_heads: int | None = None, *,
                        retrieval_threshold: float = RETRIEVAL_THRESHOLD,
                        induction_threshold: float = INDUCTION_THRESHOLD,
                        previous_token_threshold: float = PREVIOUS_TOKEN_THRESHOLD,
                        sink_threshold: float = SINK_THRESHOLD) -> pd.DataFrame:
    """One row per query head: attn_type ("dec_self"), layer, head, kv_head, the scores of
    SCORE_COLUMNS (a missing one is NaN), functions (every criterion met, "+"-joined) and role.

    ``scores`` maps SCORE_COLUMNS names to (layers, heads) arrays. ``kv_heads``: the model's
    key/value heads per layer (None: as many as query heads, no GQA); query head h reads kv head
    h // (heads // kv_heads).
    """
    unknown = set(scores) - set(SCORE_COLUMNS)
    if unknown:
        raise ValueError(f"unknown scores {sorted(unknown)}; expected some of {SCORE_COLUMNS}")
    arrays = {name: np.asarray(value, dtype=np.float64) for name, value in scores.items()}
    if not arrays:
        raise ValueError("no scores")
    shapes = {a.shape for a in arrays.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"every score must be one (layers, heads) array, got shapes {sorted(shapes)}")
    layers, heads = next(iter(shapes))
    kv_heads = heads if kv_heads is None else int(kv_heads)
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} kv heads evenly")
    group = heads // kv_heads
    thresholds = {"retrieval": retrieval_threshold, "induction": induction_threshold,
                  "previous-token": previous_token_threshold, "sink": sink_threshold}
    rows = []
    for layer in range(layers):
        for head in range(heads):
            row = {"attn_type": DEC_SELF, "layer": layer, "head": head, "kv_head": head // group}
            for name in SCORE_COLUMNS:
                row[name] = float(arrays[name][layer, head]) if name in arrays else math.nan
            functions = _met(row, thresholds)
            row["functions"] = "+".join(functions)
            row["role"] = functions[0] if functions else "other"
            rows.append(row)
    return pd.DataFrame(rows)


def lm_kv_head_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (attn_type, layer, kv_head) of ``lm_head_roles_table``: each score the max over the
    query heads reading it (NaNs skipped), query_heads ("0,1"), functions (union, in priority order)
    and role (the highest-priority role among its query heads')."""
    rank = {role: i for i, role in enumerate(ROLE_PRIORITY)}
    rows = []
    for (attn_type, layer, kv_head), group in table.groupby(["attn_type", "layer", "kv_head"], sort=True):
        row = {"attn_type": attn_type, "layer": int(layer), "kv_head": int(kv_head),
               "query_heads": ",".join(str(h) for h in sorted(group["head"].astype(int)))}
        for name in SCORE_COLUMNS:
            values = group[name].to_numpy(dtype=np.float64)
            row[name] = float(np.nanmax(values)) if not np.isnan(values).all() else math.nan
        met = {f for functions in group["functions"] for f in functions.split("+") if f}
        row["functions"] = "+".join(sorted(met, key=rank.__getitem__))
        roles = [r for r in group["role"] if r in rank]
        row["role"] = min(roles, key=rank.__getitem__) if roles else "other"
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------
# A model end to end


@dataclass
class RetrievalRun:
    """Retrieval scores of a model on needle items, and what it answered."""

    code: np.ndarray  # (layers, heads)
    distinct: np.ndarray  # (layers, heads)
    answers: list[str]
    correct: list[bool]


def model_retrieval_scores(model, tokenizer, items: Sequence[Mapping], is_correct: Callable[[str, Mapping], bool], *,
                           max_new_tokens: int = 50, eos_token_id=None, device=None,
                           progress: bool = True) -> RetrievalRun:
    """Wu et al.'s retrieval scores (both definitions) on needle items.

    ``items``: mappings with ``prompt_ids`` (token ids) and ``needle_span`` ((start, end) token
    positions of the needle in them), plus whatever ``is_correct`` reads (e.g. ``needle``, the needle
    sentence, and ``value``). ``is_correct(answer, item)`` says whether the decoded answer (special
    tokens skipped, stripped) is right (Wu et al.: ROUGE-1 recall against the needle sentence > 0.5).
    ``eos_token_id``: the stop ids (default: the model's generation config's eos_token_id).
    """
    items = list(items)
    if not items:
        raise ValueError("no items")
    if eos_token_id is None:
        eos_token_id = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    code, distinct, answers, correct = [], [], [], []
    for item in counted(items, f"retrieval scores, decoding up to {max_new_tokens} tokens", "items",
                        enabled=progress, log=log):
        trace = decoding_trace(model, item["prompt_ids"], max_new_tokens, eos_token_id, device=device)
        code.append(copy_paste_scores(trace, item["prompt_ids"], item["needle_span"], "code"))
        distinct.append(copy_paste_scores(trace, item["prompt_ids"], item["needle_span"], "distinct"))
        answer = tokenizer.decode(trace.tokens, skip_special_tokens=True).strip()
        answers.append(answer)
        correct.append(bool(is_correct(answer, item)))
    return RetrievalRun(retrieval_scores(code, correct), retrieval_scores(distinct, correct), answers, correct)


def _head_counts(model) -> tuple[int, int, int]:
    sites = _dec_sites(model)
    heads = max(site.original_num_heads for site in sites)
    kv_heads = getattr(model.config, "num_key_value_heads", None) or heads
    return len(sites), heads, int(kv_heads)


def model_lm_head_roles(model, tokenizer, windows: Sequence[Sequence[int]] = (), items: Sequence[Mapping] = (), *,
                        is_correct: Callable[[str, Mapping], bool] | None = None, induction_length: int = 50,
                        induction_count: int = 20, induction_seed: int = 0,
                        induction_ids: tuple[int, int] | None = None, max_new_tokens: int = 50,
                        eos_token_id=None, batch_size: int = 8, device=None, progress: bool = True,
                        **thresholds) -> pd.DataFrame:
    """``lm_head_roles_table`` of a decoder-only LM: every score measured on the model.

    ``windows``: equal-length natural-text token id windows, for previous_token and sink (none:
    NaN). Induction: ``induction_count`` sequences of ``induction_length`` ids (``induction_sequences``
    with the tokenizer's BOS when it has one, ids from ``induction_ids`` = (low, high), default
    [0, min(len(tokenizer), vocab size)), minus the tokenizer's special ids; ``induction_count`` 0:
    NaN). ``items`` and ``is_correct``: ``model_retrieval_scores`` (no items: NaN). The table's
    attrs hold the retrieval answers and their correctness. ``thresholds``: lm_head_roles_table's.
    """
    layers, heads, kv_heads = _head_counts(model)
    nan = np.full((layers, heads), np.nan)
    scores = {name: nan for name in SCORE_COLUMNS}
    windows = list(windows)
    if windows:
        length = len(windows[0])
        previous, sink = previous_token_pairs(length), sink_pairs(length)
        pairs = (np.concatenate([previous[0], sink[0]]), np.concatenate([previous[1], sink[1]]))
        picked = attention_maps_lm(model, windows, batch_size, pairs=pairs, device=device, progress=progress)
        scores["previous_token"] = _pair_mean(picked[..., :length - 1])
        scores["sink"] = _pair_mean(picked[..., length - 1:])
    if induction_count:
        bos = getattr(tokenizer, "bos_token_id", None)
        low, high = induction_ids if induction_ids is not None else \
            (0, min(len(tokenizer), getattr(model.config, "vocab_size", None) or len(tokenizer)))
        sequences = induction_sequences(induction_length, induction_count, low, high, induction_seed, bos=bos,
                                        exclude=getattr(tokenizer, "all_special_ids", ()))
        offset = 0 if bos is None else 1
        picked = attention_maps_lm(model, sequences, batch_size, pairs=induction_pairs(induction_length, offset),
                                   device=device, progress=progress)
        scores["induction"] = _pair_mean(picked)
    attrs = {}
    items = list(items)
    if items:
        if is_correct is None:
            raise ValueError("retrieval items need is_correct(answer, item)")
        run = model_retrieval_scores(model, tokenizer, items, is_correct, max_new_tokens=max_new_tokens,
                                     eos_token_id=eos_token_id, device=device, progress=progress)
        scores["retrieval"], scores["retrieval_distinct"] = run.code, run.distinct
        attrs = {"answers": run.answers, "correct": run.correct}
    table = lm_head_roles_table(scores, kv_heads, **thresholds)
    table.attrs.update(attrs)
    return table
