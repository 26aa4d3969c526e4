"""Perplexity of a causal LM, gated or pruned, by the usual protocol (e.g. GPTQ's and Hugging Face's
fixed-length evaluation without overlap), each window starting as the model expects a text to start:

the evaluation text is tokenized ONCE with the tokenizer's defaults and cut into consecutive
non-overlapping windows of ``window`` tokens (the last, shorter remainder is dropped, so every window has
the same context length). When the tokenizer puts a BOS before a text (Gemma's ``<bos>``, Llama 3's
``<|begin_of_text|>``, Llama 2's ``<s>``), EVERY window starts with it, as llama.cpp's perplexity tool
starts every chunk (2026-11-28, issue #44): a window is ``[BOS] + text[k*(window-1):(k+1)*(window-1)]``,
still ``window`` tokens (the model's context), the BOS only context, never a target, and every text token a
target exactly once. The first window is the one the protocol always had; the later ones used to start in
the middle of the text without the BOS, and Gemma without its BOS is out of its regime (issue #44: a real
Gemma 3 270M on English prose, 4 windows of 128 tokens, perplexity 104 without, 26 with it). A tokenizer
that adds no BOS (GPT-2's, Qwen's: GPT-2 names <|endoftext|> its bos_token but does not add it) gets the
windows it always got, byte for byte.

What the tokenizer puts before a text (``added_prefix``) is read from the tokenizer itself: a sample of
the text tokenized with and without its special tokens, the prefix being what the first has before the
second (so whatever adds it: a post-processor, ``add_bos_token``, a template). A tokenizer that cannot
tokenize without them (a callable of one's own) counts as adding its ``bos_token_id`` when the text's ids
start with it. More than one token before the text would all be prepended; the targets are every token
after a window's first, as always, so only a one-token prefix (every tokenizer we know) is wholly context.

An EOS that a tokenizer appends by default (``add_eos_token``) stays where it put it: once, after the
last text token, since the text is one long document and a window cut from its middle does not end it.
It is a target of the last window only if that window reaches it (it usually falls in the dropped
remainder), never appended to every window.

``save_windows`` writes the windows as a (windows, window) int64 .npy and beside it, ``<name>.json``, what
every window starts with (``{"window": .., "prepended": [ids], "prepended_tokens": [...]}``; ``prepended``
empty when nothing is); ``load_prepended`` reads it back. ``load_windows`` reads the .npy alone, as before.

Each window is scored alone: every token but its first is predicted from the tokens before it in the
window. PPL = exp(total NLL / number of predicted tokens) over all windows. Every table that reports it
states the window.

A window is one item: its outputs are (summed NLL, predicted tokens), so the paired bootstrap
resamples windows and recomputes the corpus perplexity of each resample.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import torch

from headprune.evaluation.stats import paired_bootstrap

log = logging.getLogger(__name__)


# Characters of the text's beginning tokenized twice to find what the tokenizer puts before a text: enough
# for a few tokens of any tokenizer, few enough to cost nothing beside the text's own tokenization.
PREFIX_SAMPLE_CHARS = 256


def added_prefix(tokenizer, sample: str) -> list[int]:
    """The ids the tokenizer puts before a text by default (its BOS; [] for one that adds none), found by
    tokenizing ``sample`` (a non-empty text) with and without its special tokens."""
    ids = list(tokenizer(sample, return_attention_mask=False)["input_ids"])
    try:
        bare = list(tokenizer(sample, add_special_tokens=False, return_attention_mask=False)["input_ids"])
    except TypeError:  # a callable of one's own, without the option
        bare = None
    if bare:
        for start in range(len(ids) - len(bare) + 1):
            if ids[start:start + len(bare)] == bare:
                return ids[:start]
    # the text tokenized otherwise with its special tokens (or no way to leave them out): only the BOS
    # can tell, and a BOS the tokenizer merely names (GPT-2's) does not start the text
    bos = getattr(tokenizer, "bos_token_id", None)
    starts = bos is not None and ids[:1] == [bos] and (bare is None or bare[:1] != [bos])
    return [bos] if starts else []


def windows_and_prefix(tokenizer, text: str, window: int,
                       max_windows: int | None = None) -> tuple[list[list[int]], list[int]]:
    """(``windows``' windows, the ids each of them starts with: ``added_prefix``, [] when none)."""
    if window < 2:
        raise ValueError(f"a perplexity window needs at least 2 tokens, got {window}")
    ids = tokenizer(text, return_attention_mask=False)["input_ids"]
    if len(ids) < window:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than one window of {window}")
    prefix = added_prefix(tokenizer, text[:PREFIX_SAMPLE_CHARS])
    if not prefix:
        return [ids[start:start + window] for start in range(0, len(ids) - window + 1, window)][:max_windows], []
    if list(ids[:len(prefix)]) != prefix:
        raise ValueError(f"the tokenizer puts {prefix} before a sample of the text but the text's ids start "
                         f"with {list(ids[:len(prefix)])}")
    if window <= len(prefix):
        raise ValueError(f"a window of {window} tokens leaves no text after the {len(prefix)} tokens "
                         f"{prefix} the tokenizer puts before a text")
    text_ids, step = list(ids[len(prefix):]), window - len(prefix)
    chunks = [prefix + text_ids[start:start + step] for start in range(0, len(text_ids) - step + 1, step)]
    return chunks[:max_windows], prefix


def windows(tokenizer, text: str, window: int, max_windows: int | None = None) -> list[list[int]]:
    """Token ids of the text, tokenized once, in consecutive windows of ``window`` tokens, each starting
    with the BOS the tokenizer puts before a text (the module's doc), if it puts one."""
    return windows_and_prefix(tokenizer, text, window, max_windows)[0]


def prefix_record_path(path):
    """Where ``save_windows`` records what the windows of ``path`` start with: ``<name>.json`` beside it."""
    from pathlib import Path

    return Path(path).with_suffix(".json")


def save_windows(tokenizer, text: str, window: int, path) -> int:
    """The text's windows (``windows``) saved as a (windows, window) integer array, and beside it (its
    ``prefix_record_path``) the ids each window starts with; returns their number."""
    from pathlib import Path

    from headprune.io.atomic import save_numpy, write_json

    chunks, prefix = windows_and_prefix(tokenizer, text, window)
    ids = np.asarray(chunks, dtype=np.int64)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_numpy(path, ids)
    # after the array: a write that fails on it (a full disk) leaves no record of windows not written
    convert = getattr(tokenizer, "convert_ids_to_tokens", None)
    record = {"window": window, "prepended": [int(i) for i in prefix],
              "prepended_tokens": list(convert(prefix)) if convert is not None and prefix else []}
    write_json(prefix_record_path(path), record, end="\n")
    return len(ids)


def load_prepended(path) -> list[int] | None:
    """The ids every window of a ``save_windows`` file starts with ([] when none), None for a file saved
    without the record (before 2026-11-28, when only the first window had the BOS)."""
    import json

    record = prefix_record_path(path)
    if not record.exists():
        return None
    return [int(i) for i in json.loads(record.read_text(encoding="utf-8"))["prepended"]]


def load_windows(path, max_windows: int | None = None) -> list[list[int]]:
    """The first ``max_windows`` windows of a ``save_windows`` file (never unpickled)."""
    ids = np.load(path, allow_pickle=False)
    if ids.ndim != 2:
        raise ValueError(f"{path}: expected a (windows, window) array, got shape {ids.shape}")
    return ids[:max_windows].tolist()


def window_batches(chunks: list[list[int]], batch_size: int) -> list[dict]:
    """Batches of equal-length windows (no padding): input_ids, attention_mask, labels."""
    batches = []
    for start in range(0, len(chunks), batch_size):
        ids = torch.tensor(chunks[start:start + batch_size], dtype=torch.long)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})
    return batches


@torch.no_grad()
def window_nll_variants(model, batches: list[dict], gates_list: list, *, variant_batch_size: int = 64,
                        device=None, progress: bool = False) -> list[list[tuple[float, int]]]:
    """Per gate setting (None: all heads), per window: (summed next-token NLL, predicted tokens).

    Several settings share a forward pass (batched gate variants, ``headprune.models.masking.gated``), and
    the layers below their first masked head (``shared_layers.forward_variants``). A masked head is masked as
    the ``masked_as`` block open on the model says (the paper's outside one)."""
    from headprune.evaluation.shared_layers import forward_variants, variant_progress

    device = device or model.get_input_embeddings().weight.device  # the first GPU of a model spread over several
    model.eval()
    out: list[list] = [[] for _ in gates_list]
    n_windows = sum(len(batch["input_ids"]) for batch in batches)
    with variant_progress("perplexity", len(gates_list), n_windows, "windows", enabled=progress, log=log) as counter:
        for batch in batches:
            ids = batch["input_ids"].to(device)
            per_variant = forward_variants(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                           gates_list, _window_nll, variant_batch_size=variant_batch_size,
                                           done=counter.update)
            for k, nll in enumerate(per_variant):
                out[k] += [[float(v), ids.shape[1] - 1] for v in nll.tolist()]
    return out


def _window_nll(model, inputs):
    """Summed next-token NLL of each row; its logits reduced in chunks of positions where they would not fit
    whole (``headprune.models.lm_head``)."""
    from headprune.models.lm_head import hidden_and_outputs, logits_fit, per_position

    ids = inputs["input_ids"]
    if not logits_fit(model, ids.shape[0] * (ids.shape[1] - 1)):
        hidden = hidden_and_outputs(model, **inputs)[0][:, :-1]
        targets = ids[:, 1:].to(hidden.device)
        return per_position(model, hidden, targets, _token_nll).sum(-1)
    logits = model(**inputs).logits[:, :-1].float()
    targets = ids[:, 1:].to(logits.device)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             reduction="none").view(targets.shape).sum(-1)


def _token_nll(logits, targets):
    """Each position's next-token NLL, from its (positions, vocabulary) logits."""
    return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")


def perplexity(outputs) -> float:
    """Corpus perplexity from per-window (summed NLL, tokens): ``run``'s outputs on a language-modelling set.

    >>> round(perplexity([(2.0, 1), (0.0, 1)]), 4)  # exp(2 / 2)
    2.7183
    """
    nll = np.asarray(outputs, dtype=np.float64).reshape(-1, 2)
    return math.exp(nll[:, 0].sum() / nll[:, 1].sum())


def paired_bootstrap_perplexity(outputs_a, outputs_b, n_resamples: int = 1000, seed: int = 0):
    """Paired bootstrap over windows. Lower perplexity is better, so a 'win' is the lower one:
    the score compared is the negative perplexity (score_a/score_b are -PPL)."""
    a, b = np.asarray(outputs_a, dtype=np.float64), np.asarray(outputs_b, dtype=np.float64)
    return paired_bootstrap(lambda outputs, _: -perplexity(outputs), a, b, np.zeros(len(a)),
                            n_resamples=n_resamples, seed=seed)
