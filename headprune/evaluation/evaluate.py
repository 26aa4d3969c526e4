"""Run a (gated or pruned) model over a test set: class predictions or translations.

The ``*_variants`` functions evaluate several gate settings at once: each batch is repeated once
per variant (variant-major, as ``masking.gated`` reads stacked gates), so one forward or
generate() serves them all. The batches themselves stay as a single variant's run makes them, so
each variant's outputs equal its run alone (the translation length cap depends on a batch's
padded length, so a sentence must not change batches with the number of variants). A gate of 0
masks a head as the ``masked_as`` block open on the model says (``headprune.models.masking``; the
paper's masking outside one).
"""
from __future__ import annotations

import logging

import numpy as np
import torch

from headprune.evaluation.beam_search import beam_search
from headprune.evaluation.beam_search import supports as beam_search_supports
from headprune.evaluation.shared_layers import forward_variants, variant_progress
from headprune.models.beam_cache import SourceSharingCache
from headprune.models.heads import stack_gates
from headprune.models.masking import gated

log = logging.getLogger(__name__)


def variant_groups(gates_list: list, batch_size: int, variant_batch_size: int) -> list[list]:
    """Gate settings in groups small enough that group size x batch_size <= variant_batch_size (>= 1 each)."""
    size = max(1, variant_batch_size // batch_size)
    return [gates_list[start:start + size] for start in range(0, len(gates_list), size)]


def _repeated(tensor: torch.Tensor, times: int) -> torch.Tensor:
    return tensor.repeat(times, *[1] * (tensor.dim() - 1))


def _logits(model, inputs):
    return model(**inputs).logits


@torch.no_grad()
def predict_classes_variants(model, batches: list[dict], gates_list: list, *, variant_batch_size: int = 256,
                             device=None, progress: bool = False) -> np.ndarray:
    """(variants, examples) predicted class indices (argmax of the logits), one row per gate setting.

    Variants share the layers below their first masked head (``shared_layers.forward_variants``).
    """
    device = device or next(model.parameters()).device
    model.eval()
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if batches and k in batches[0]]
    predictions = []
    examples = sum(len(batch[keys[0]]) for batch in batches) if keys else 0
    with variant_progress("classify", len(gates_list), examples, "examples", enabled=progress, log=log) as counter:
        for batch in batches:
            inputs = {k: batch[k].to(device) for k in keys}
            logits = forward_variants(model, inputs, gates_list, _logits, variant_batch_size=variant_batch_size,
                                      done=counter.update)
            predictions.append(torch.stack(logits).argmax(-1).cpu().numpy())
    if not predictions:
        return np.zeros((len(gates_list), 0), dtype=int)
    return np.concatenate(predictions, axis=1)


def predict_classes(model, batches: list[dict], gates=None, device=None, progress: bool = False) -> np.ndarray:
    """Predicted class index per example (argmax of the logits), with optional head gates."""
    return predict_classes_variants(model, batches, [gates], device=device, progress=progress)[0]


@torch.no_grad()
def translate_variants(model, tokenizer, sources: list[str], gates_list: list, *, beam: int = 5,
                       lenpen: float = 1.0, batch_size: int = 64, variant_batch_size: int = 256,
                       max_len_a: float = 1.2, max_len_b: int = 10, device=None,
                       progress: bool = False) -> list[list[str]]:
    """Detokenized translations per gate setting, with beam search (fairseq's defaults: beam 5, length penalty 1).

    Sentences are sorted by length and cut into batches of ``batch_size`` so batches pad little;
    the output keeps the input order. The output length is capped at max_len_a * the batch's
    padded source length + max_len_b. Each beam search runs one batch for as many variants as fit
    in ``variant_batch_size`` sentences: ``beam_search.beam_search`` (finished sentences leave the
    batch) where it computes what generate() does, else generate().
    """
    device = device or next(model.parameters()).device
    model.eval()
    fast = beam_search_supports(model) is None
    order = sorted(range(len(sources)), key=lambda i: len(sources[i].split()))
    out: list[list[str | None]] = [[None] * len(sources) for _ in gates_list]
    counter = variant_progress("translate", len(gates_list), len(sources), "sentences", enabled=progress, log=log)
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        encoded = tokenizer([sources[i] for i in index], padding=True, truncation=True, max_length=1024,
                            return_tensors="pt").to(device)
        max_new = int(max_len_a * encoded["input_ids"].shape[1] + max_len_b)
        first = 0
        for group in variant_groups(gates_list, batch_size, variant_batch_size):
            if fast:  # finished sentences leave the batch; the same translations as generate()
                best = beam_search(model, encoded, group, beam=beam, lenpen=lenpen, max_new=max_new)
                generated = torch.stack([tokens for variant in best for tokens in variant])
            else:
                with gated(model, stack_gates(model, group)):
                    generated = model.generate(**{k: _repeated(v, len(group)) for k, v in encoded.items()},
                                               num_beams=beam, length_penalty=lenpen, early_stopping=True,
                                               max_new_tokens=max_new, max_length=None, do_sample=False,
                                               past_key_values=SourceSharingCache.for_model(model))
            texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
            for row, text in enumerate(texts):
                out[first + row // len(index)][index[row % len(index)]] = text
            first += len(group)
            counter.update(len(group) * len(index))
    counter.close()
    return out  # type: ignore[return-value]


def translate(model, tokenizer, sources: list[str], gates=None, **options) -> list[str]:
    """Detokenized translations of one gate setting (``translate_variants`` with one variant)."""
    return translate_variants(model, tokenizer, sources, [gates], **options)[0]
