"""A Llama-layout causal LM (Llama, Mistral, Qwen2) with attention heads removed, for plain transformers.

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), with
``headprune_common.py``, and named in its config.json's ``auto_map``, so that

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

loads the pruned model without headprune. Its attention type is "dec_self". Each layer with heads removed
gets an attention of the shapes the saved weights have: the kept query heads' rows of ``q_proj`` (columns
of ``o_proj``), and the rows of ``k_proj``/``v_proj`` of the key/value heads they read (query head h reads
kv head h // groups, groups = num_attention_heads // num_key_value_heads). After pruning a kv head may be
read by fewer query heads than another: the attention then holds, for each kept query head, the position
of its kv head among the kept ones (``kv_index``, a list) and gathers keys and values by it after the
cache, with ``num_key_value_groups`` 1, so that no attention backend (eager, sdpa) repeats them again. A
layer with no head left adds only ``o_proj``'s bias (zeros when it has none) and keeps a one-head zero
cache entry as long as the other layers'. Only the dynamic cache (the default) is supported: a static
cache is sized from the config's head counts.
"""
from __future__ import annotations

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2

from .headprune_common import DEC_SELF, PrunedModel, cache_without_heads, keep_first


class PrunedGroupedAttention:
    """Mixed into a family's attention class, so that the model still records its attention maps
    (output_attentions finds attention modules by class)."""

    _modeling = None  # the family's modeling module: its rotary embedding and eager attention

    def keep_heads(self, heads: list[int]):
        """Shrink a freshly built attention to the query heads ``heads`` (original indices) and their kv heads."""
        config = self.config
        groups = config.num_attention_heads // config.num_key_value_heads
        kv_heads = sorted({h // groups for h in heads})
        index = [kv_heads.index(h // groups) for h in heads]
        d = self.head_dim
        keep_first(self.q_proj, out_features=len(heads) * d)
        keep_first(self.k_proj, out_features=len(kv_heads) * d)
        keep_first(self.v_proj, out_features=len(kv_heads) * d)
        keep_first(self.o_proj, in_features=len(heads) * d)
        counts = [index.count(k) for k in range(len(kv_heads))]
        uniform = all(c == counts[0] for c in counts)  # also with no head left
        self.num_key_value_groups = counts[0] if counts and uniform else 1
        # A plain list, not a buffer: from_pretrained builds the model on the meta device, and would leave a
        # buffer that no weight file holds there.
        self.kv_index = None if uniform else index
        self._kv_index_on = {}

    def _gather_index(self, device) -> torch.Tensor:
        if device not in self._kv_index_on:
            self._kv_index_on[device] = torch.tensor(self.kv_index, dtype=torch.long, device=device)
        return self._kv_index_on[device]

    def _attention_kwargs(self) -> dict:
        return {}

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None, **kwargs):
        input_shape = hidden_states.shape[:-1]
        if self.q_proj.out_features == 0:  # keep this layer's cache as long as the others'
            cache_without_heads(past_key_values, False, self.layer_idx, input_shape[0], input_shape[1],
                                self.head_dim, hidden_states)
            return self.o_proj(hidden_states.new_zeros(*input_shape, 0)), None
        hidden_shape = (*input_shape, -1, self.head_dim)

        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        cos, sin = position_embeddings
        query_states, key_states = self._modeling.apply_rotary_pos_emb(query_states, key_states, cos, sin)

        if past_key_values is not None:  # the cache holds the kept kv heads
            key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)
        if self.kv_index is not None:  # one kv head per query head (num_key_value_groups is 1)
            index = self._gather_index(key_states.device)
            key_states = key_states.index_select(1, index)
            value_states = value_states.index_select(1, index)

        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, self._modeling.eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
            **self._attention_kwargs(), **kwargs,
        )
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights


class PrunedLlamaAttention(PrunedGroupedAttention, modeling_llama.LlamaAttention):
    _modeling = modeling_llama


class PrunedMistralAttention(PrunedGroupedAttention, modeling_mistral.MistralAttention):
    _modeling = modeling_mistral

    def _attention_kwargs(self):
        return {"sliding_window": getattr(self.config, "sliding_window", None)}


class PrunedQwen2Attention(PrunedGroupedAttention, modeling_qwen2.Qwen2Attention):
    _modeling = modeling_qwen2

    def _attention_kwargs(self):
        return {"sliding_window": self.sliding_window}


class LlamaLayout(PrunedModel):
    """Each decoder layer's ``self_attn`` becomes ``pruned_attention`` with the heads the config keeps."""

    pruned_attention = PrunedLlamaAttention

    def attention_sites(self):
        return [(DEC_SELF, i, layer.self_attn, self.config.num_attention_heads)
                for i, layer in enumerate(self.base_model.layers)]

    def keep_heads(self, attention, heads):
        attention.__class__ = self.pruned_attention
        attention.keep_heads(heads)


class MistralLayout(LlamaLayout):
    pruned_attention = PrunedMistralAttention


class Qwen2Layout(LlamaLayout):
    pruned_attention = PrunedQwen2Attention


class PrunedLlamaModel(LlamaLayout, modeling_llama.LlamaModel):
    pass


class PrunedLlamaForCausalLM(LlamaLayout, modeling_llama.LlamaForCausalLM):
    pass


class PrunedMistralModel(MistralLayout, modeling_mistral.MistralModel):
    pass


class PrunedMistralForCausalLM(MistralLayout, modeling_mistral.MistralForCausalLM):
    pass


class PrunedQwen2Model(Qwen2Layout, modeling_qwen2.Qwen2Model):
    pass


class PrunedQwen2ForCausalLM(Qwen2Layout, modeling_qwen2.Qwen2ForCausalLM):
    pass
