"""Perplexity of a causal LM, gated or pruned, by the usual protocol (e.g. GPTQ's and Hugging Face's
fixed-length evaluation without overlap):

the evaluation text is tokenized ONCE (the tokenizer's defaults, so a BOS token when the tokenizer
adds one, once at the start), cut into consecutive non-overlapping windows of ``window`` tokens
(the last, shorter remainder is dropped, so every window has the same context length), and each
window is scored alone: every token but its first is predicted from the tokens before it in the
window. PPL = exp(total NLL / number of predicted tokens) over all windows. Every table that
reports it states the window.

A window is one item: its outputs are (summed NLL, predicted tokens), so the paired bootstrap
resamples windows and recomputes the corpus perplexity of each resample.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import torch

from headprune.experiments.stats import paired_bootstrap

log = logging.getLogger(__name__)


def windows(tokenizer, text: str, window: int, max_windows: int | None = None) -> list[list[int]]:
    """Token ids of the text, tokenized once, in consecutive windows of ``window`` tokens."""
    if window < 2:
        raise ValueError(f"a perplexity window needs at least 2 tokens, got {window}")
    ids = tokenizer(text, return_attention_mask=False)["input_ids"]
    chunks = [ids[start:start + window] for start in range(0, len(ids) - window + 1, window)]
    if not chunks:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than one window of {window}")
    return chunks[:max_windows]


def save_windows(tokenizer, text: str, window: int, path) -> int:
    """The text's windows (``windows``) saved as a (windows, window) integer array; returns their number."""
    from pathlib import Path

    from headprune.io.atomic import save_numpy

    ids = np.asarray(windows(tokenizer, text, window), dtype=np.int64)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_numpy(path, ids)
    return len(ids)


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
                        device=None, progress: bool = False, masking: str = "zero") -> list[list[tuple[float, int]]]:
    """Per gate setting (None: all heads), per window: (summed next-token NLL, predicted tokens).

    Several settings share a forward pass (batched gate variants, ``headprune.models.heads.gated``), and
    the layers below their first masked head (``shared_layers.forward_variants``)."""
    from headprune.experiments.shared_layers import forward_variants, variant_progress

    device = device or model.get_input_embeddings().weight.device  # the first GPU of a model spread over several
    model.eval()
    out: list[list] = [[] for _ in gates_list]
    n_windows = sum(len(batch["input_ids"]) for batch in batches)
    with variant_progress("perplexity", len(gates_list), n_windows, "windows", enabled=progress, log=log) as counter:
        for batch in batches:
            ids = batch["input_ids"].to(device)
            per_variant = forward_variants(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                                           gates_list, _window_nll, variant_batch_size=variant_batch_size,
                                           masking=masking, done=counter.update)
            for k, nll in enumerate(per_variant):
                out[k] += [[float(v), ids.shape[1] - 1] for v in nll.tolist()]
    return out


def _window_nll(model, inputs):
    """Summed next-token NLL of each row."""
    ids = inputs["input_ids"]
    logits = model(**inputs).logits[:, :-1].float()
    targets = ids[:, 1:].to(logits.device)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             reduction="none").view(targets.shape).sum(-1)


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
