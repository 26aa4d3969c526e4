"""GPT-2 with attention heads removed, for plain transformers.

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), and named
in its config.json's ``auto_map``, so that

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

loads the pruned model without headprune. It imports only torch and transformers.

The config is transformers' ``GPT2Config`` with the original head count and one more entry:
``headprune_pruned_heads``, {"dec_self": {"<layer>": [removed heads, original indices]}}. At init each block
with heads removed gets an attention of the saved weights' shapes: the fused ``c_attn`` (a ``Conv1D``,
weight (in, out)) puts out [queries | keys | values] of the kept heads, and ``c_proj`` reads their outputs.
A block with no head left adds only ``c_proj``'s bias, and keeps a one-head zero cache entry as long as the
other blocks'. Cross-attention (``add_cross_attention``) is not supported.
"""
from __future__ import annotations

from torch import nn
from transformers.models.gpt2 import modeling_gpt2

ATTN_TYPE = "dec_self"


def kept_heads(config, layer: int, num_heads: int) -> list[int]:
    """The original indices of the heads that layer ``layer`` keeps."""
    removed = (getattr(config, "headprune_pruned_heads", None) or {}).get(ATTN_TYPE, {}).get(str(layer), [])
    return [h for h in range(num_heads) if h not in set(removed)]


class PrunedGPT2Attention(modeling_gpt2.GPT2Attention):
    """GPT-2 attention with fewer heads, also none (it then adds only ``c_proj``'s bias)."""

    def keep_heads(self, heads: list[int]):
        """Shrink a freshly built attention to ``len(heads)`` heads (from_pretrained then loads their weights)."""
        width = len(heads) * self.head_dim
        self.c_attn.weight = nn.Parameter(self.c_attn.weight.detach()[:, :3 * width].clone())
        self.c_attn.bias = nn.Parameter(self.c_attn.bias.detach()[:3 * width].clone())
        self.c_attn.nf = 3 * width
        self.c_proj.weight = nn.Parameter(self.c_proj.weight.detach()[:width].clone())
        self.c_proj.nx = width
        self.num_heads = len(heads)
        self.split_size = width

    def forward(self, hidden_states, past_key_values=None, attention_mask=None, encoder_hidden_states=None,
                encoder_attention_mask=None, output_attentions=False, **kwargs):
        if self.num_heads > 0:
            return super().forward(hidden_states, past_key_values=past_key_values, attention_mask=attention_mask,
                                   encoder_hidden_states=encoder_hidden_states,
                                   encoder_attention_mask=encoder_attention_mask,
                                   output_attentions=output_attentions, **kwargs)
        if encoder_hidden_states is not None:
            raise ValueError("a pruned GPT-2 cross-attention is not supported")
        batch, length = hidden_states.shape[:2]
        if past_key_values is not None:  # keep this block's cache as long as the others'
            zeros = hidden_states.new_zeros(batch, 1, length, self.head_dim)
            past_key_values.update(zeros, zeros, self.layer_idx)
        # c_proj of no inputs is its bias (Conv1D itself cannot reshape an empty input)
        bias = self.c_proj.bias.expand(*hidden_states.shape[:-1], -1).clone()
        return self.resid_dropout(bias), None


def prune_blocks(model):
    """Give each block of ``model`` (any GPT-2 class) the heads its config keeps."""
    config = model.config
    if getattr(config, "add_cross_attention", False):
        raise ValueError("a pruned GPT-2 with cross-attention (add_cross_attention) is not supported")
    for i, block in enumerate(model.base_model.h):
        heads = kept_heads(config, i, config.num_attention_heads)
        if len(heads) < config.num_attention_heads:
            block.attn.__class__ = PrunedGPT2Attention
            block.attn.keep_heads(heads)


class PrunedGPT2Model(modeling_gpt2.GPT2Model):
    def __init__(self, config):
        super().__init__(config)
        prune_blocks(self)


class PrunedGPT2LMHeadModel(modeling_gpt2.GPT2LMHeadModel):
    def __init__(self, config):
        super().__init__(config)
        prune_blocks(self)
