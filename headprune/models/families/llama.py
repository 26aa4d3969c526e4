"""The Llama layout (``LlamaForCausalLM``; Mistral and Qwen2 alike): heads, and removing them under GQA.

Each decoder layer's ``self_attn`` has ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj``, rotary
positions applied to queries and keys, and grouped-query attention: ``num_key_value_heads``
key/value heads, each read by ``num_attention_heads / num_key_value_heads`` consecutive query heads
(query head h reads kv head h // groups). Gates, importance and pruning address QUERY heads: a
head is what ``o_proj`` reads, head-major, so ``o_proj``'s forward pre-hook gates them as in every
family (``headprune.models.heads.gated``). Uniform masking works: the rotary rotation of a zero query is
zero.

Physical pruning (``LlamaAdapter.prune_site``) removes a query head's rows of ``q_proj`` and its
columns of ``o_proj``; a key/value head goes (its rows of ``k_proj`` and ``v_proj``) once every
query head reading it has gone. The layer then may have, say, kv head 0 read by one query head and
kv head 1 by two, which transformers' uniform ``num_key_value_groups`` repeat cannot say. So the
attention becomes a ``Prunable*Attention`` that holds the query-to-KV index: for each remaining
query head, the position among the remaining kv heads of the one it reads
(``query_kv_index``). Its forward follows the family's step by step; keys and values go into the
cache as they are (the cache holds only the remaining kv heads, as many per layer as it has left),
and only then are they gathered per query head by that index, with ``num_key_value_groups`` set
to 1 so that no backend (eager, sdpa, flash) repeats them again. When every remaining kv head is
read by the same number of query heads (nothing pruned, whole groups removed, no GQA) there is
nothing to gather: ``num_key_value_groups`` is that number and transformers' own grouped paths run.
With no head left the layer adds only ``o_proj``'s bias (none in Llama: zeros) and keeps a
one-head zero cache entry as long as the others' (``headprune.models.prune.cache_without_heads``).

The index is a non-persistent buffer, rebuilt from ``config.headprune_pruned_heads`` when a saved
pruned model is loaded (``headprune.models.prune.load_pruned_weights``). Only the dynamic cache (the
default) is supported: a static cache is sized from the config's head counts.

Streaming masking (``headprune.models.heads.Streaming``) gives a ``Prunable*Attention`` a per-head mask
over its remaining query heads, which every path above (gathered, grouped, eager, sdpa) applies per head.
"""
from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2

from headprune.models.heads import DEC_SELF, AttentionSite
from headprune.models.prune import cache_without_heads
from headprune.models.families.causal_lm import CausalLMAdapter, ValueView, head_rows, keep_indices


class LlamaAdapter(CausalLMAdapter):
    family = "llama"

    def sites(self, model):
        config = model.config
        grouped = config.num_key_value_heads != config.num_attention_heads
        sites = []
        for i, layer in enumerate(model.base_model.layers):
            attn = layer.self_attn
            # Under GQA the value projection has a vector per kv head; the site's values are per query head.
            values = ValueView(attn.v_proj, _values_per_query_head(attn)) if grouped else attn.v_proj
            sites.append(AttentionSite(
                DEC_SELF, i, attn, attn.q_proj, attn.k_proj, values, attn.o_proj, head_dim=attn.head_dim,
                original_num_heads=config.num_attention_heads, time_major=False,
            ))
        return sites

    def prune_site(self, site: AttentionSite, keep: list[int]):
        """Keep only query heads ``keep`` (original indices, a subset of ``site.kept_heads``), and the kv
        heads they read."""
        attn = site.attention
        d = site.head_dim
        groups = _original_groups(attn)
        device = attn.o_proj.weight.device
        kv_before = kept_kv_heads(site.kept_heads, groups)
        kv_after = kept_kv_heads(keep, groups)
        query_rows = head_rows([site.kept_heads.index(h) for h in keep], d, device)
        kv_rows = head_rows([kv_before.index(k) for k in kv_after], d, device)
        for linear, rows in ((attn.q_proj, query_rows), (attn.k_proj, kv_rows), (attn.v_proj, kv_rows)):
            keep_indices(linear, "weight", 0, rows)
            keep_indices(linear, "bias", 0, rows)
            linear.out_features = len(rows)
        keep_indices(attn.o_proj, "weight", 1, query_rows)
        attn.o_proj.in_features = len(query_rows)
        attn.headprune_kept_heads = list(keep)
        attn.__class__ = _PRUNABLE[_family_class(attn)]
        attn.set_query_kv_index(kv_index(keep, groups))


def _original_groups(attn) -> int:
    return attn.config.num_attention_heads // attn.config.num_key_value_heads


def kept_kv_heads(query_heads: list[int], groups: int) -> list[int]:
    """Original indices of the kv heads that the given query heads (original indices) read."""
    return sorted({h // groups for h in query_heads})


def kv_index(query_heads: list[int], groups: int) -> list[int]:
    """For each of the given query heads, the position of its kv head among ``kept_kv_heads``."""
    kept = kept_kv_heads(query_heads, groups)
    return [kept.index(h // groups) for h in query_heads]


def query_kv_index(attn) -> torch.Tensor:
    """(remaining query heads,) long: which of the attention's remaining kv heads each query head reads."""
    index = getattr(attn, "headprune_kv_index", None)
    if index is not None:
        return index
    groups = attn.num_key_value_groups  # uniform: as transformers repeats them
    heads = attn.q_proj.out_features // attn.head_dim
    return torch.arange(heads, device=attn.q_proj.weight.device) // groups


def _values_per_query_head(attn):
    def select(values):  # (..., kv heads * head_dim) -> (..., query heads * head_dim)
        per_kv = values.unflatten(-1, (-1, attn.head_dim))
        return per_kv.index_select(-2, query_kv_index(attn).to(values.device)).flatten(-2)
    return select


class _PrunableGroupedAttention:
    """The forward of a Llama-layout attention whose query heads read kv heads by an index.

    Mixed into each family's attention class (``PrunableLlamaAttention`` etc.) so that the model
    still finds it as that class (output_attentions records attention weights by class).
    """

    _modeling: ModuleType  # the family's modeling module: its rotary embedding and eager attention

    def set_query_kv_index(self, index: list[int]):
        """Read kv heads by ``index`` (one entry per remaining query head, nondecreasing)."""
        counts = [index.count(k) for k in sorted(set(index))]
        uniform = all(c == counts[0] for c in counts)  # also with no head left
        # Nondecreasing with equal counts is exactly transformers' repeat_interleave of the kv heads.
        self.num_key_value_groups = counts[0] if counts and uniform else 1
        gather = None if uniform else torch.tensor(index, dtype=torch.long, device=self.o_proj.weight.device)
        self.register_buffer("headprune_kv_index", gather, persistent=False)

    def _attention_kwargs(self) -> dict:
        return {}

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
        input_shape = hidden_states.shape[:-1]
        if self.q_proj.out_features == 0:
            cache_without_heads(past_key_values, False, self.layer_idx, input_shape[0], input_shape[1],
                                 self.head_dim, hidden_states)
            return self.o_proj(hidden_states.new_zeros(*input_shape, 0)), None
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = self._modeling.apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_values is not None:  # the cache holds the remaining kv heads
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)
        if self.headprune_kv_index is not None:  # one kv head per query head (num_key_value_groups is 1)
            key_states = key_states.index_select(1, self.headprune_kv_index)
            value_states = value_states.index_select(1, self.headprune_kv_index)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, self._modeling.eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
            **self._attention_kwargs(), **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class PrunableLlamaAttention(_PrunableGroupedAttention, modeling_llama.LlamaAttention):
    _modeling = modeling_llama


class PrunableMistralAttention(_PrunableGroupedAttention, modeling_mistral.MistralAttention):
    _modeling = modeling_mistral

    def _attention_kwargs(self):
        return {"sliding_window": getattr(self.config, "sliding_window", None)}


class PrunableQwen2Attention(_PrunableGroupedAttention, modeling_qwen2.Qwen2Attention):
    _modeling = modeling_qwen2

    def _attention_kwargs(self):
        return {"sliding_window": self.sliding_window}


_PRUNABLE = {modeling_llama.LlamaAttention: PrunableLlamaAttention,
             modeling_mistral.MistralAttention: PrunableMistralAttention,
             modeling_qwen2.Qwen2Attention: PrunableQwen2Attention}


def _family_class(attn) -> type:
    for cls in _PRUNABLE:
        if isinstance(attn, cls):
            return cls
    raise TypeError(f"do not know how to prune {type(attn).__name__}")


MODEL_TYPES = ("llama", "mistral", "qwen2")
ADAPTER = LlamaAdapter
