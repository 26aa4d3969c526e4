"""DeBERTa-v2 and -v3 (``DebertaV2ForSequenceClassification``; v3 checkpoints are model type deberta-v2).

Each layer's ``attention.self`` is a ``DisentangledSelfAttention`` with ``query_proj``, ``key_proj``,
``value_proj``; its heads are concatenated head-major into ``attention.output.dense``. Its scores add
to query . key the relative-position terms of ``pos_att_type``: content-to-position (a head's query
against the relative-position embeddings projected to keys) and position-to-content (its key against
them projected to queries). Those projections are per head too: with ``share_att_key`` (v3) they are
``key_proj`` and ``query_proj`` themselves, else ``pos_key_proj`` and ``pos_query_proj``, whose kept
heads' rows ``prune_site`` keeps as well, so a pruned head loses its position terms with the rest.

Uniform masking is refused when those terms are on: a zero query zeroes content-to-position but not
position-to-content (the head's keys against the positions' queries), so the attention is not uniform.
(Under ``share_att_key`` the query hook would zero the positions' queries too, as they come out of
``query_proj``, but as one row for the whole batch: per-row gate variants cannot apply to them.)
"""
from __future__ import annotations

from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention

from headprune.models.families.bert import BertAdapter
from headprune.models.families.causal_lm import head_rows, keep_indices
from headprune.models.attention_types import ENC_SELF
from headprune.models.sites import AttentionSite
from headprune.models.slicing import slice_projections

MODEL_TYPES = ("deberta-v2",)


class DebertaV2Adapter(BertAdapter):
    family = "deberta_v2"

    def sites(self, model):
        config = model.config
        return [AttentionSite(ENC_SELF, i, layer.attention.self, layer.attention.self.query_proj,
                              layer.attention.self.key_proj, layer.attention.self.value_proj,
                              layer.attention.output.dense, head_dim=layer.attention.self.attention_head_size,
                              original_num_heads=config.num_attention_heads, time_major=False)
                for i, layer in enumerate(model.base_model.encoder.layer)]

    def uniform_masking_problem(self, model, sites):
        config = model.config
        terms = getattr(config, "pos_att_type", None) or []
        if getattr(config, "relative_attention", False) and terms:
            return (f"DeBERTa's disentangled attention adds relative-position terms ({', '.join(terms)}) to its "
                    "scores")
        return super().uniform_masking_problem(model, sites)

    def prune_site(self, site, keep):
        attn = site.attention
        rows = head_rows([site.kept_heads.index(h) for h in keep], site.head_dim, attn.query_proj.weight.device)
        for name in ("pos_key_proj", "pos_query_proj"):  # absent under share_att_key
            linear = getattr(attn, name, None)
            if linear is not None:
                keep_indices(linear, "weight", 0, rows)
                keep_indices(linear, "bias", 0, rows)
                linear.out_features = len(rows)
        slice_projections(site, keep)
        attn.__class__ = PrunableDisentangledSelfAttention
        attn.num_attention_heads = len(keep)
        attn.all_head_size = len(keep) * attn.attention_head_size


class PrunableDisentangledSelfAttention(DisentangledSelfAttention):
    """DeBERTa attention that also runs with no heads left (its output is then empty, and the output
    projection adds its bias alone), where its reshape to (heads, -1) cannot."""

    def forward(self, hidden_states, attention_mask, output_attentions=False, query_states=None, **kwargs):
        if self.num_attention_heads > 0:
            return super().forward(hidden_states, attention_mask, output_attentions, query_states=query_states,
                                   **kwargs)
        queries = hidden_states if query_states is None else query_states
        return queries.new_zeros(*queries.shape[:-1], 0), None


ADAPTER = DebertaV2Adapter
