"""Fine-tune a pretrained BERT into a sequence classifier, as the authors did.

BERT's run_classifier.py settings (which the authors ran): AdamW, weight decay 0.01
(none on biases and LayerNorm), linear warmup over the first 10% of steps then
linear decay to zero, gradient norm clipped at 1. The paper's hyper-parameters are
the defaults: 3 epochs, lr 2e-5, batch 32, max length 128. The demo uses the same
code with its own settings.
"""
from __future__ import annotations

import functools
import inspect
import logging
import math
import time

import numpy as np
import torch

from headprune.data.batching import EncodedPairs, classification_batches
from headprune.data.glue import read_glue_split
from headprune.evaluation.evaluate import predict_classes
from headprune.io import atomic
from headprune.io.progress import Progress


log = logging.getLogger(__name__)


def restores_torch_threads(function):
    """Run ``function`` with torch.set_num_threads(num_threads) when its keyword ``num_threads``
    is set, and restore the previous count afterwards: the setting is process-wide."""
    default = inspect.signature(function).parameters["num_threads"].default

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        num_threads = kwargs.get("num_threads", default)
        previous = torch.get_num_threads()
        if num_threads:
            torch.set_num_threads(num_threads)
        try:
            return function(*args, **kwargs)
        finally:
            torch.set_num_threads(previous)

    return wrapper


def warmup_linear_decay(optimizer, warmup_steps: int, total_steps: int):
    """Linear warmup to the peak learning rate, then linear decay to zero (BERT's schedule)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@restores_torch_threads
def finetune_bert_classifier(model_dir, train_tsv, dev_tsv, out_dir, num_labels: int, *, epochs: float = 3,
                             lr: float = 2e-5, batch_size: int = 32, max_length: int = 128, seed: int = 42,
                             warmup_fraction: float = 0.1, weight_decay: float = 0.01, device=None,
                             num_threads: int | None = None, progress: bool = True) -> dict:
    """Fine-tune the encoder folder ``model_dir`` (BERT, RoBERTa, ELECTRA, ...: any transformers model with a
    sequence-classification head) on ``train_tsv``; save to ``out_dir``; report dev accuracy.

    TSVs are the normalized text_a/text_b/label files of headprune.data.glue. Fractional
    epochs are allowed. Attention is the "eager" implementation so that attention
    weights can be read later. Returns dev_accuracy, train_loss (mean of the last
    epoch), train_seconds, sizes, steps and device.
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    device = torch.device(device) if device is not None else \
        torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=num_labels, use_safetensors=True,
                                                               attn_implementation="eager").to(device)
    train_pairs, train_labels = read_glue_split(train_tsv)
    dev_pairs, dev_labels = read_glue_split(dev_tsv)
    if max(train_labels + dev_labels) >= num_labels:
        raise ValueError(f"{train_tsv}: labels go up to {max(train_labels + dev_labels)}, but num_labels is {num_labels}")

    no_decay = ("bias", "LayerNorm.weight")
    optimizer = torch.optim.AdamW([
        {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
         "weight_decay": weight_decay},
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ], lr=lr, fused=True)  # one kernel for all parameters: the per-tensor loop cost small models a tenth a step
    total_steps = max(1, round(epochs * math.ceil(len(train_pairs) / batch_size)))
    schedule = warmup_linear_decay(optimizer, max(1, int(warmup_fraction * total_steps)), total_steps)

    shuffle = torch.Generator().manual_seed(seed)
    started = time.time()
    step, epoch_losses = 0, []
    model.train()
    counter = Progress(total_steps, f"fine-tune {type(model).__name__}", "steps", enabled=progress, log=log)
    counter.note = lambda: f"loss {epoch_losses[-1]:.3f}" if epoch_losses else ""
    encoded = EncodedPairs(tokenizer, train_pairs, train_labels, max_length)
    while step < total_steps:
        order = torch.randperm(len(train_pairs), generator=shuffle).tolist()
        batches = encoded.batches(order, batch_size)
        epoch_losses = []
        for batch in batches[:total_steps - step]:
            loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            epoch_losses.append(loss.item())
            step += 1
            counter.update()
    counter.close()
    train_seconds = time.time() - started

    model.eval()
    dev_batches = classification_batches(tokenizer, dev_pairs, None, max(batch_size, 64), max_length)
    dev_accuracy = float(np.mean(predict_classes(model, dev_batches, progress=progress) == np.asarray(dev_labels)))
    with atomic.atomic_dir(out_dir) as staging:  # a killed job leaves no half-written model folder
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return {"dev_accuracy": dev_accuracy, "train_loss": sum(epoch_losses) / max(1, len(epoch_losses)),
            "train_seconds": train_seconds, "num_train_examples": len(train_pairs),
            "num_dev_examples": len(dev_pairs), "epochs": epochs, "steps": total_steps, "device": str(device)}
