"""Classification encoders with attention heads removed, for plain transformers: BERT, RoBERTa, XLM-R,
ELECTRA, DistilBERT and DeBERTa-v2/v3.

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), with
``headprune_common.py``, and named in its config.json's ``auto_map``, so that

    AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    AutoModel.from_pretrained(folder, trust_remote_code=True)  # the encoder alone

load the pruned model without headprune. Only encoder self-attention ("enc_self") is pruned. Each layer
with heads removed keeps their rows of the query, key and value projections (and of DeBERTa's own
relative-position projections, when it has them) and columns of the output projection. A layer with no
head left adds only the output projection's bias.
"""
from __future__ import annotations

from transformers.models.bert import modeling_bert
from transformers.models.deberta_v2 import modeling_deberta_v2
from transformers.models.distilbert import modeling_distilbert
from transformers.models.electra import modeling_electra
from transformers.models.roberta import modeling_roberta
from transformers.models.xlm_roberta import modeling_xlm_roberta

from .headprune_common import (ENC_SELF, HeadlessDistilBertAttention, HeadlessSelfAttention, PrunedModel, keep_width,
                               pruned_class)


class BertLayout(PrunedModel):
    """BERT and the encoders laid out as it is (RoBERTa, XLM-R, ELECTRA, DeBERTa): ``layer.attention`` holds
    the self-attention (``self``) and the output projection (``output.dense``)."""

    projections = ("query", "key", "value")

    def attention_sites(self):
        return [(ENC_SELF, i, layer.attention, self.config.num_attention_heads)
                for i, layer in enumerate(self.base_model.encoder.layer)]

    def keep_heads(self, attention, heads):
        attn = attention.self
        width = len(heads) * attn.attention_head_size
        projections = [getattr(attn, name) for name in self.projections if getattr(attn, name, None) is not None]
        keep_width(width, projections, attention.output.dense)
        attn.__class__ = pruned_class(HeadlessSelfAttention, type(attn))
        attn.num_attention_heads = len(heads)
        attn.all_head_size = width


class DebertaLayout(BertLayout):
    # the position projections are absent under share_att_key (DeBERTa-v3)
    projections = ("query_proj", "key_proj", "value_proj", "pos_key_proj", "pos_query_proj")


class PrunedBertModel(BertLayout, modeling_bert.BertModel):
    pass


class PrunedBertForSequenceClassification(BertLayout, modeling_bert.BertForSequenceClassification):
    pass


class PrunedRobertaModel(BertLayout, modeling_roberta.RobertaModel):
    pass


class PrunedRobertaForSequenceClassification(BertLayout, modeling_roberta.RobertaForSequenceClassification):
    pass


class PrunedXLMRobertaModel(BertLayout, modeling_xlm_roberta.XLMRobertaModel):
    pass


class PrunedXLMRobertaForSequenceClassification(BertLayout, modeling_xlm_roberta.XLMRobertaForSequenceClassification):
    pass


class PrunedElectraModel(BertLayout, modeling_electra.ElectraModel):
    pass


class PrunedElectraForSequenceClassification(BertLayout, modeling_electra.ElectraForSequenceClassification):
    pass


class PrunedDebertaV2Model(DebertaLayout, modeling_deberta_v2.DebertaV2Model):
    pass


class PrunedDebertaV2ForSequenceClassification(DebertaLayout, modeling_deberta_v2.DebertaV2ForSequenceClassification):
    pass


# --- DistilBERT: q_lin, k_lin, v_lin and out_lin all in each block's attention ---------------------------

class DistilBertLayout(PrunedModel):
    def attention_sites(self):
        return [(ENC_SELF, i, block.attention, self.config.n_heads)
                for i, block in enumerate(self.base_model.transformer.layer)]

    def keep_heads(self, attention, heads):
        keep_width(len(heads) * attention.attention_head_size, (attention.q_lin, attention.k_lin, attention.v_lin),
                   attention.out_lin)
        attention.__class__ = pruned_class(HeadlessDistilBertAttention, type(attention))
        attention.n_heads = len(heads)


class PrunedDistilBertModel(DistilBertLayout, modeling_distilbert.DistilBertModel):
    pass


class PrunedDistilBertForSequenceClassification(DistilBertLayout,
                                                modeling_distilbert.DistilBertForSequenceClassification):
    pass
