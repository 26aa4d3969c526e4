"""A Llama-layout causal LM (Llama, Mistral, Qwen2) with attention heads removed, for plain transformers.

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), and named
in its config.json's ``auto_map``, so that

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

loads the pruned model without headprune. It imports only torch and transformers.

The config is transformers' own (``LlamaConfig`` ...), with the original head counts and one more entry:
``headprune_pruned_heads``, {"dec_self": {"<layer>": [removed query heads, original indices]}}. Each class
here is transformers' class, and at init gives every layer with heads removed an attention of the shapes
the saved weights have: the kept query heads' rows of ``q_proj`` (columns of ``o_proj``), and the rows of
``k_proj``/``v_proj`` of the key/value heads they read (query head h reads kv head h // groups, groups =
num_attention_heads // num_key_value_heads). After pruning a kv head may be read by fewer query heads
than another: the attention then holds, for each kept query head, the position of its kv head among the
kept ones (``kv_index``, a list) and gathers keys and values by it after the cache, with ``num_key_value_groups``
1, so that no attention backend (eager, sdpa) repeats them again. A layer with no head left adds only
``o_proj``'s bias (zeros when it has none) and keeps a one-head zero cache entry as long as the other
layers'. Only the dynamic cache (the default) is supported: a static cache is sized from the config's
head counts.
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.qwen2 import modeling_qwen2

ATTN_TYPE = "dec_self"


def kept_heads(config, layer: int, num_heads: int) -> list[int]:
    """The original indices of the query heads that layer ``layer`` keeps."""
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


class _PrunedGroupedAttention:
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
        _keep_first(self.q_proj, out_features=len(heads) * d)
        _keep_first(self.k_proj, out_features=len(kv_heads) * d)
        _keep_first(self.v_proj, out_features=len(kv_heads) * d)
        _keep_first(self.o_proj, in_features=len(heads) * d)
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
        if self.q_proj.out_features == 0:
            if past_key_values is not None:  # keep this layer's cache as long as the others'
                zeros = hidden_states.new_zeros(input_shape[0], 1, input_shape[1], self.head_dim)
                past_key_values.update(zeros, zeros, self.layer_idx)
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


class PrunedLlamaAttention(_PrunedGroupedAttention, modeling_llama.LlamaAttention):
    _modeling = modeling_llama


class PrunedMistralAttention(_PrunedGroupedAttention, modeling_mistral.MistralAttention):
    _modeling = modeling_mistral

    def _attention_kwargs(self):
        return {"sliding_window": getattr(self.config, "sliding_window", None)}


class PrunedQwen2Attention(_PrunedGroupedAttention, modeling_qwen2.Qwen2Attention):
    _modeling = modeling_qwen2

    def _attention_kwargs(self):
        return {"sliding_window": self.sliding_window}


def prune_layers(model, attention_class):
    """Give each decoder layer of ``model`` (any class of the family) the heads its config keeps."""
    config = model.config
    for i, layer in enumerate(model.base_model.layers):
        heads = kept_heads(config, i, config.num_attention_heads)
        if len(heads) < config.num_attention_heads:
            layer.self_attn.__class__ = attention_class
            layer.self_attn.keep_heads(heads)


class PrunedLlamaModel(modeling_llama.LlamaModel):
    def __init__(self, config):
        super().__init__(config)
        prune_layers(self, PrunedLlamaAttention)


class PrunedLlamaForCausalLM(modeling_llama.LlamaForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        prune_layers(self, PrunedLlamaAttention)


class PrunedMistralModel(modeling_mistral.MistralModel):
    def __init__(self, config):
        super().__init__(config)
        prune_layers(self, PrunedMistralAttention)


class PrunedMistralForCausalLM(modeling_mistral.MistralForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        prune_layers(self, PrunedMistralAttention)


class PrunedQwen2Model(modeling_qwen2.Qwen2Model):
    def __init__(self, config):
        super().__init__(config)
        prune_layers(self, PrunedQwen2Attention)


class PrunedQwen2ForCausalLM(modeling_qwen2.Qwen2ForCausalLM):
    def __init__(self, config):
        super().__init__(config)
        prune_layers(self, PrunedQwen2Attention)
