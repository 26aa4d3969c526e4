"""DistilBERT (``DistilBertForSequenceClassification``): BERT's encoder under other names.

Each block's ``attention`` holds ``q_lin``, ``k_lin``, ``v_lin`` and its output projection ``out_lin``
itself (BERT keeps the latter in ``attention.output.dense``). DistilBERT has no token types: its
forward takes no ``token_type_ids``, so ``loss_and_outputs`` never passes the batch's.
"""
from __future__ import annotations

from transformers.models.distilbert.modeling_distilbert import DistilBertSelfAttention

from headprune.models.families.bert import BertAdapter
from headprune.models.families.classifier import classification_loss
from headprune.models.attention_types import ENC_SELF
from headprune.models.sites import AttentionSite
from headprune.models.remote.headprune_common import HeadlessDistilBertAttention  # one copy: the one exports carry
from headprune.models.slicing import slice_projections

MODEL_TYPES = ("distilbert",)


class DistilBertAdapter(BertAdapter):
    family = "distilbert"

    def sites(self, model):
        config = model.config
        return [AttentionSite(ENC_SELF, i, block.attention, block.attention.q_lin, block.attention.k_lin,
                              block.attention.v_lin, block.attention.out_lin,
                              head_dim=block.attention.attention_head_size, original_num_heads=config.n_heads,
                              time_major=False)
                for i, block in enumerate(model.base_model.transformer.layer)]

    def loss_and_outputs(self, model, batch, output_attentions=False):
        outputs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        output_attentions=output_attentions)
        return classification_loss(outputs, batch), outputs

    def prune_site(self, site, keep):
        slice_projections(site, keep)
        site.attention.__class__ = PrunableDistilBertSelfAttention  # a subclass: its maps are still recorded
        site.attention.n_heads = len(keep)


class PrunableDistilBertSelfAttention(HeadlessDistilBertAttention, DistilBertSelfAttention):
    """DistilBERT attention that also runs with no heads left: its output is then ``out_lin``'s bias (its reshape
    to (-1, head size) cannot split an empty projection)."""


ADAPTER = DistilBertAdapter
