"""Classification encoders with attention heads removed, for plain transformers: BERT, RoBERTa, XLM-R,
ELECTRA, DistilBERT and DeBERTa-v2/v3.

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), and named
in its config.json's ``auto_map``, so that

    AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    AutoModel.from_pretrained(folder, trust_remote_code=True)  # the encoder alone

load the pruned model without headprune. It imports only torch and transformers.

The config is transformers' own with the original head count and one more entry: ``headprune_pruned_heads``,
{"enc_self": {"<layer>": [removed heads, original indices]}}. Each class here is transformers' class, and at
init gives every layer with heads removed a self-attention of the saved weights' shapes: the kept heads'
rows of the query, key and value projections (and of DeBERTa's own relative-position projections, when it
has them) and columns of the output projection. A layer with no head left adds only the output
projection's bias.
"""
from __future__ import annotations

from torch import nn
from transformers.models.bert import modeling_bert
from transformers.models.deberta_v2 import modeling_deberta_v2
from transformers.models.distilbert import modeling_distilbert
from transformers.models.electra import modeling_electra
from transformers.models.roberta import modeling_roberta
from transformers.models.xlm_roberta import modeling_xlm_roberta

ATTN_TYPE = "enc_self"


def kept_heads(config, layer: int, num_heads: int) -> list[int]:
    """The original indices of the heads that layer ``layer`` keeps."""
    removed = (getattr(config, "headprune_pruned_heads", None) or {}).get(ATTN_TYPE, {}).get(str(layer), [])
    return [h for h in range(num_heads) if h not in set(removed)]


def _keep_first(linear: nn.Linear, out_features: int | None = None, in_features: int | None = None):
    """Give ``linear`` the shapes of the saved weights (which from_pretrained then loads into it)."""
    out_features = linear.out_features if out_features is None else out_features
    in_features = linear.in_features if in_features is None else in_features
    linear.weight = nn.Parameter(linear.weight.detach()[:out_features, :in_features].clone())
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias.detach()[:out_features].clone())
    linear.out_features, linear.in_features = out_features, in_features


# --- BERT and the encoders laid out as it is (RoBERTa, XLM-R, ELECTRA) ---------------------------------

class _HeadlessSelfAttention:
    """Mixed in before a BERT-style self-attention class (which the model records attention maps by): it
    also runs with no heads left (its output is then empty; the output projection adds its bias alone)."""

    def forward(self, hidden_states, *args, **kwargs):
        if self.num_attention_heads == 0:
            return hidden_states.new_zeros(*hidden_states.shape[:-1], 0), None
        return super().forward(hidden_states, *args, **kwargs)


class PrunedBertSelfAttention(_HeadlessSelfAttention, modeling_bert.BertSelfAttention):
    pass


class PrunedRobertaSelfAttention(_HeadlessSelfAttention, modeling_roberta.RobertaSelfAttention):
    pass


class PrunedXLMRobertaSelfAttention(_HeadlessSelfAttention, modeling_xlm_roberta.XLMRobertaSelfAttention):
    pass


class PrunedElectraSelfAttention(_HeadlessSelfAttention, modeling_electra.ElectraSelfAttention):
    pass


def prune_bert_layers(model, attention_class):
    config = model.config
    for i, layer in enumerate(model.base_model.encoder.layer):
        heads = kept_heads(config, i, config.num_attention_heads)
        if len(heads) == config.num_attention_heads:
            continue
        attn = layer.attention.self
        width = len(heads) * attn.attention_head_size
        for linear in (attn.query, attn.key, attn.value):
            _keep_first(linear, out_features=width)
        _keep_first(layer.attention.output.dense, in_features=width)
        attn.__class__ = attention_class
        attn.num_attention_heads = len(heads)
        attn.all_head_size = width


class PrunedBertModel(modeling_bert.BertModel):
    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        prune_bert_layers(self, PrunedBertSelfAttention)


class PrunedBertForSequenceClassification(modeling_bert.BertForSequenceClassification):
    def __init__(self, config):
        super().__init__(config)
        prune_bert_layers(self, PrunedBertSelfAttention)


class PrunedRobertaModel(modeling_roberta.RobertaModel):
    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        prune_bert_layers(self, PrunedRobertaSelfAttention)


class PrunedRobertaForSequenceClassification(modeling_roberta.RobertaForSequenceClassification):
    def __init__(self, config):
        super().__init__(config)
        prune_bert_layers(self, PrunedRobertaSelfAttention)


class PrunedXLMRobertaModel(modeling_xlm_roberta.XLMRobertaModel):
    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        prune_bert_layers(self, PrunedXLMRobertaSelfAttention)


class PrunedXLMRobertaForSequenceClassification(modeling_xlm_roberta.XLMRobertaForSequenceClassification):
    def __init__(self, config):
        super().__init__(config)
        prune_bert_layers(self, PrunedXLMRobertaSelfAttention)


class PrunedElectraModel(modeling_electra.ElectraModel):
    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        prune_bert_layers(self, PrunedElectraSelfAttention)


class PrunedElectraForSequenceClassification(modeling_electra.ElectraForSequenceClassification):
    def __init__(self, config):
        super().__init__(config)
        prune_bert_layers(self, PrunedElectraSelfAttention)


# --- DistilBERT: q_lin, k_lin, v_lin and out_lin in each block's attention ----------------------------

class PrunedDistilBertSelfAttention(modeling_distilbert.DistilBertSelfAttention):
    """With no heads left its output is ``out_lin``'s bias."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        if self.n_heads > 0:
            return super().forward(hidden_states, attention_mask=attention_mask, **kwargs)
        return self.out_lin(hidden_states.new_zeros(*hidden_states.shape[:-1], 0)), None


def prune_distilbert_layers(model):
    config = model.config
    for i, block in enumerate(model.base_model.transformer.layer):
        heads = kept_heads(config, i, config.n_heads)
        if len(heads) == config.n_heads:
            continue
        attn = block.attention
        width = len(heads) * attn.attention_head_size
        for linear in (attn.q_lin, attn.k_lin, attn.v_lin):
            _keep_first(linear, out_features=width)
        _keep_first(attn.out_lin, in_features=width)
        attn.__class__ = PrunedDistilBertSelfAttention
        attn.n_heads = len(heads)


class PrunedDistilBertModel(modeling_distilbert.DistilBertModel):
    def __init__(self, config):
        super().__init__(config)
        prune_distilbert_layers(self)


class PrunedDistilBertForSequenceClassification(modeling_distilbert.DistilBertForSequenceClassification):
    def __init__(self, config):
        super().__init__(config)
        prune_distilbert_layers(self)


# --- DeBERTa-v2/v3: disentangled attention, with position projections per head ---------------------------

class PrunedDisentangledSelfAttention(modeling_deberta_v2.DisentangledSelfAttention):
    """With no heads left its output is empty (the output projection adds its bias alone)."""

    def forward(self, hidden_states, attention_mask, output_attentions=False, query_states=None, **kwargs):
        if self.num_attention_heads > 0:
            return super().forward(hidden_states, attention_mask, output_attentions, query_states=query_states,
                                   **kwargs)
        queries = hidden_states if query_states is None else query_states
        return queries.new_zeros(*queries.shape[:-1], 0), None


def prune_deberta_layers(model):
    config = model.config
    for i, layer in enumerate(model.base_model.encoder.layer):
        heads = kept_heads(config, i, config.num_attention_heads)
        if len(heads) == config.num_attention_heads:
            continue
        attn = layer.attention.self
        width = len(heads) * attn.attention_head_size
        for name in ("query_proj", "key_proj", "value_proj", "pos_key_proj", "pos_query_proj"):
            linear = getattr(attn, name, None)  # the position ones are absent under share_att_key
            if linear is not None:
                _keep_first(linear, out_features=width)
        _keep_first(layer.attention.output.dense, in_features=width)
        attn.__class__ = PrunedDisentangledSelfAttention
        attn.num_attention_heads = len(heads)
        attn.all_head_size = width


class PrunedDebertaV2Model(modeling_deberta_v2.DebertaV2Model):
    def __init__(self, config):
        super().__init__(config)
        prune_deberta_layers(self)


class PrunedDebertaV2ForSequenceClassification(modeling_deberta_v2.DebertaV2ForSequenceClassification):
    def __init__(self, config):
        super().__init__(config)
        prune_deberta_layers(self)
