"""BERT (transformers' BertForSequenceClassification and its base): encoder self-attention only.

Its batch, loss and masks are every encoder classifier's (``classifier.py``). Encoders laid out as BERT is (RoBERTa and XLM-R, ELECTRA: ``roberta.py``, ``electra.py``) subclass
``BertAdapter`` and name their own ``prunable`` attention classes: a pruned attention module must stay
an instance of its family's attention class, as transformers 5 records attention maps
(``output_attentions``) from modules of that class (``_can_record_outputs``) and would silently leave
out a layer whose module had become a ``BertSelfAttention``.
"""
from __future__ import annotations

from transformers.models.bert.modeling_bert import BertSelfAttention

from headprune.models.attention_types import ENC_SELF
from headprune.models.families.classifier import ClassifierAdapter
from headprune.models.sites import AttentionSite
from headprune.models.remote.headprune_common import HeadlessSelfAttention  # one copy: the one exports carry
from headprune.models.slicing import slice_projections

MODEL_TYPES = ("bert",)


def match(model):
    """BERT, or any other model laid out as BERT is (base_model.encoder.layer[i].attention.self.query, ...) that the
    generic encoder adapter (``encoder.py``, asked first) does not serve: ConvBERT, whose output projection also
    reads its convolution heads (``extra_features``).

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


class BertAdapter(ClassifierAdapter):
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


def prunable_class(adapter, attention):
    """The adapter's ``prunable`` subclass of the attention module's class (see the module docstring)."""
    for prunable in adapter.prunable:
        if isinstance(attention, prunable.__bases__[-1]):
            return prunable
    raise ValueError(f"the {adapter.family} adapter cannot prune a {type(attention).__name__}: add a family file "
                     "to headprune/models/families/ with a prunable subclass of it")


ADAPTER = BertAdapter
