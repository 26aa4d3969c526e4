"""BERT (transformers' BertForSequenceClassification and its base): encoder self-attention only.

Encoders laid out as BERT is (RoBERTa and XLM-R, ELECTRA: ``roberta.py``, ``electra.py``) subclass
``BertAdapter`` and name their own ``prunable`` attention classes: a pruned attention module must stay
an instance of its family's attention class, as transformers 5 records attention maps
(``output_attentions``) from modules of that class (``_can_record_outputs``) and would silently leave
out a layer whose module had become a ``BertSelfAttention``.
"""
from __future__ import annotations

from torch import nn
from transformers.models.bert.modeling_bert import BertSelfAttention

from headprune.models.attention_types import ENC_SELF
from headprune.models.sites import AttentionSite, HeadAdapter
from headprune.models.remote.headprune_common import HeadlessSelfAttention  # one copy: the one exports carry
from headprune.models.slicing import slice_projections

MODEL_TYPES = ("bert",)


def match(model):
    """BERT, or any other model laid out as BERT is (base_model.encoder.layer[i].attention.self.query, ...).

    Gating and scoring work on such a model; pruning it needs a family file that names its attention
    class (``BertAdapter.prunable``).
    """
    if getattr(model.config, "model_type", None) in MODEL_TYPES:
        return BertAdapter()
    layers = getattr(getattr(getattr(model, "base_model", None), "encoder", None), "layer", None)
    if not layers:
        return None
    attention = getattr(layers[0], "attention", None)
    laid_out = all(hasattr(getattr(attention, "self", None), name) for name in ("query", "key", "value")) \
        and hasattr(getattr(attention, "output", None), "dense")
    return BertAdapter() if laid_out else None


class PrunableBertSelfAttention(HeadlessSelfAttention, BertSelfAttention):
    pass


class BertAdapter(HeadAdapter):
    family = "bert"
    attention_types = (ENC_SELF,)
    # What a pruned attention module becomes: one subclass per attention class the family has.
    prunable = (PrunableBertSelfAttention,)

    def sites(self, model):
        encoder = model.base_model.encoder
        config = model.config
        sites = []
        for i, layer in enumerate(encoder.layer):
            attn = layer.attention.self
            # The module's own count where it was not pruned: ConvBERT's config counts its convolution heads too
            heads = config.num_attention_heads if hasattr(attn, "headprune_kept_heads") else attn.num_attention_heads
            output = layer.attention.output.dense
            site = AttentionSite(ENC_SELF, i, attn, attn.query, attn.key, attn.value, output,
                                 head_dim=attn.attention_head_size, original_num_heads=heads, time_major=False)
            site.extra_features = output.in_features - site.num_heads * site.head_dim
            sites.append(site)
        return sites

    def loss_and_outputs(self, model, batch, output_attentions=False):
        outputs = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
            token_type_ids=batch.get("token_type_ids"), output_attentions=output_attentions,
        )
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

    def uniform_masking_problem(self, model, sites):
        # Relative position embeddings (relative_key, relative_key_query) add query . position terms to
        # BERT's scores. transformers 5's BERT no longer computes them and ignores the setting, so such
        # a checkpoint would run without them anyway; refuse rather than mask a model it is not.
        kind = getattr(model.config, "position_embedding_type", None)
        if kind not in (None, "absolute"):
            return (f"the model's config asks for position_embedding_type={kind!r}: relative positions add to "
                    "the attention scores")
        return super().uniform_masking_problem(model, sites)

    def prune_site(self, site, keep):
        attn = site.attention
        prunable = prunable_class(self, attn)
        slice_projections(site, keep)
        attn.__class__ = prunable
        attn.num_attention_heads = len(keep)
        attn.all_head_size = len(keep) * attn.attention_head_size


def classification_loss(outputs, batch):
    """Summed over the batch: squared error for a regression head (STS-B), cross entropy otherwise."""
    logits = outputs.logits
    if logits.shape[-1] == 1:
        return nn.functional.mse_loss(logits.squeeze(-1), batch["labels"].float(), reduction="sum")
    return nn.functional.cross_entropy(logits, batch["labels"], reduction="sum")


def prunable_class(adapter, attention):
    """The adapter's ``prunable`` subclass of the attention module's class (see the module docstring)."""
    for prunable in adapter.prunable:
        if isinstance(attention, prunable.__bases__[-1]):
            return prunable
    raise ValueError(f"the {adapter.family} adapter cannot prune a {type(attention).__name__}: add a family file "
                     "to headprune/models/families/ with a prunable subclass of it")


ADAPTER = BertAdapter
