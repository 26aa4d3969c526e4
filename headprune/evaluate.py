"""Run a (gated or pruned) model over a test set: class predictions or translations."""
from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from .heads import gated


@torch.no_grad()
def predict_classes(model, batches: list[dict], gates=None, device=None, progress: bool = False) -> np.ndarray:
    """Predicted class index per example (argmax of the logits), with optional head gates."""
    device = device or next(model.parameters()).device
    model.eval()
    predictions = []
    with gated(model, gates):
        for batch in tqdm(batches, desc="classify", disable=not progress):
            logits = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                           token_type_ids=batch["token_type_ids"].to(device) if "token_type_ids" in batch else None).logits
            predictions.append(logits.argmax(-1).cpu().numpy())
    return np.concatenate(predictions) if predictions else np.zeros(0, dtype=int)


@torch.no_grad()
def translate(model, tokenizer, sources: list[str], gates=None, *, beam: int = 5, lenpen: float = 1.0,
              batch_size: int = 64, max_len_a: float = 1.2, max_len_b: int = 10, device=None,
              progress: bool = False) -> list[str]:
    """Detokenized translations with beam search (fairseq's defaults: beam 5, length penalty 1).

    Sentences are sorted by length so batches pad little; the output keeps the
    input order. The output length is capped at max_len_a * source length + max_len_b.
    """
    device = device or next(model.parameters()).device
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i].split()))
    out: list[str | None] = [None] * len(sources)
    with gated(model, gates):
        for start in tqdm(range(0, len(order), batch_size), desc="translate", disable=not progress):
            index = order[start:start + batch_size]
            encoded = tokenizer([sources[i] for i in index], padding=True, truncation=True, max_length=1024,
                                return_tensors="pt").to(device)
            max_new = int(max_len_a * encoded["input_ids"].shape[1] + max_len_b)
            generated = model.generate(**encoded, num_beams=beam, length_penalty=lenpen, early_stopping=True,
                                       max_new_tokens=max_new, max_length=None, do_sample=False)
            for i, text in zip(index, tokenizer.batch_decode(generated, skip_special_tokens=True)):
                out[i] = text
    return out  # type: ignore[return-value]
