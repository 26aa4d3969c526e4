"""transformers' M2M100: fairseq's pre-norm transformer (``headprune.models.prenorm``), batch-major."""
from __future__ import annotations

from transformers.models.m2m_100.modeling_m2m_100 import M2M100Attention

from headprune.models.families.fsmt import FSMTAdapter
from headprune.models.prune import cache_without_heads, slice_projections

MODEL_TYPES = ("m2m_100",)


class M2M100Adapter(FSMTAdapter):
    """transformers' M2M100: fairseq's pre-norm transformer (``headprune.models.prenorm``)."""

    family = "m2m100"
    time_major = False

    def prune_site(self, site, keep):
        slice_projections(site, keep)
        site.attention.__class__ = PrunableM2M100Attention
        site.attention.num_heads = len(keep)


class PrunableM2M100Attention(M2M100Attention):
    """M2M100 attention that also runs with no heads left: its output is then the output
    projection's bias, and its cache entry keeps the decoded length (cache_without_heads)."""

    def forward(self, hidden_states, key_value_states=None, past_key_values=None, attention_mask=None, **kwargs):
        if self.num_heads > 0:
            return super().forward(hidden_states, key_value_states=key_value_states,
                                   past_key_values=past_key_values, attention_mask=attention_mask, **kwargs)
        is_cross = key_value_states is not None
        source = key_value_states if is_cross else hidden_states  # (batch, time, dim)
        cache_without_heads(past_key_values, is_cross, self.layer_idx, source.shape[0], source.shape[1],
                             self.head_dim, source)
        return self.out_proj(hidden_states.new_zeros(*hidden_states.shape[:-1], 0)), None


ADAPTER = M2M100Adapter
