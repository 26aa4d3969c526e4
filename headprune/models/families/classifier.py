"""What every encoder for classification shares (the generic ``encoder`` adapter's):
the batch, the classification loss and the masks. Every attention is encoder self-attention (``ENC_SELF``):
bidirectional, over the real tokens.

A batch is a dict of (batch, time) tensors: ``input_ids``, ``attention_mask`` (1 on real tokens), optionally
``token_type_ids`` (passed only to a model whose forward takes them: DistilBERT's and ModernBERT's do not), and
``labels`` ((batch,): classes, or scores for a regression head such as STS-B's).
"""
from __future__ import annotations

import functools
import inspect

from torch import nn

from headprune.models.sites import HeadAdapter


class ClassifierAdapter(HeadAdapter):
    """The batch, loss and masks of an encoder classifier; subclasses say where the heads are and how to slice them."""

    def loss_and_outputs(self, model, batch, output_attentions=False):
        inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      output_attentions=output_attentions)
        if _takes_token_types(type(model)):
            inputs["token_type_ids"] = batch.get("token_type_ids")
        outputs = model(**inputs)
        return classification_loss(outputs, batch), outputs

    def query_mask(self, batch, attn_type):
        return batch["attention_mask"].bool()

    def key_mask(self, batch, attn_type):
        mask = batch["attention_mask"].bool()
        return mask[:, None, :].expand(-1, mask.shape[1], -1)

    def eos_keys(self, model, batch, attn_type):
        sep = getattr(model.config, "sep_token_id", None)
        if sep is None:  # transformers 5 configs do not carry it; models.load_classifier sets it
            raise ValueError("model.config.sep_token_id is not set: take it from the tokenizer")
        return batch["input_ids"] == sep

    def attention_weights(self, outputs, attn_type):
        return list(outputs.attentions)

    def num_tokens(self, batch):
        return int(batch["attention_mask"].sum())


@functools.cache
def _takes_token_types(cls) -> bool:
    return "token_type_ids" in inspect.signature(cls.forward).parameters


def classification_loss(outputs, batch):
    """Summed over the batch: squared error for a regression head (STS-B), cross entropy otherwise."""
    logits = outputs.logits
    if logits.shape[-1] == 1:
        return nn.functional.mse_loss(logits.squeeze(-1), batch["labels"].float(), reduction="sum")
    return nn.functional.cross_entropy(logits, batch["labels"], reduction="sum")
