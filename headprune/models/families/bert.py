"""BERT (transformers' BertForSequenceClassification and its base): encoder self-attention only."""
from __future__ import annotations

from torch import nn
from transformers.models.bert.modeling_bert import BertSelfAttention

from headprune.models.heads import ENC_SELF, AttentionSite, HeadAdapter
from headprune.models.prune import slice_projections

MODEL_TYPES = ("bert",)


def matches(model) -> bool:
    """Any other model laid out as BERT is (base_model.encoder.layer[i].attention.self)."""
    return hasattr(model, "base_model") and hasattr(model.base_model, "encoder") \
        and hasattr(model.base_model.encoder, "layer")


class BertAdapter(HeadAdapter):
    family = "bert"
    attention_types = (ENC_SELF,)

    def sites(self, model):
        encoder = model.base_model.encoder
        config = model.config
        sites = []
        for i, layer in enumerate(encoder.layer):
            attn = layer.attention.self
            sites.append(AttentionSite(
                ENC_SELF, i, attn, attn.query, attn.key, attn.value, layer.attention.output.dense,
                head_dim=attn.attention_head_size, original_num_heads=config.num_attention_heads,
                time_major=False,
            ))
        return sites

    def loss_and_outputs(self, model, batch, output_attentions=False):
        outputs = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
            token_type_ids=batch.get("token_type_ids"), output_attentions=output_attentions,
        )
        logits = outputs.logits
        if logits.shape[-1] == 1:  # regression head (STS-B)
            loss = nn.functional.mse_loss(logits.squeeze(-1), batch["labels"].float(), reduction="sum")
        else:
            loss = nn.functional.cross_entropy(logits, batch["labels"], reduction="sum")
        return loss, outputs

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
        slice_projections(site, keep)
        attn = site.attention
        attn.__class__ = PrunableBertSelfAttention
        attn.num_attention_heads = len(keep)
        attn.all_head_size = len(keep) * attn.attention_head_size


class PrunableBertSelfAttention(BertSelfAttention):
    """BERT self-attention that also runs with no heads left (its output is then empty)."""

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, **kwargs):
        if self.num_attention_heads == 0:
            empty = hidden_states.new_zeros(*hidden_states.shape[:-1], 0)
            return empty, None
        return super().forward(hidden_states, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs)


ADAPTER = BertAdapter
