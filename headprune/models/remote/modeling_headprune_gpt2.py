"""GPT-2 with attention heads removed, for plain transformers.

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), with
``headprune_common.py``, and named in its config.json's ``auto_map``, so that

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

loads the pruned model without headprune. Its attention type is "dec_self". Each block with heads removed
gets an attention of the saved weights' shapes: the fused ``c_attn`` (a ``Conv1D``, weight (in, out)) puts
out [queries | keys | values] of the kept heads, and ``c_proj`` reads their outputs. A block with no head
left adds only ``c_proj``'s bias, and keeps a one-head zero cache entry as long as the other blocks'.
Cross-attention (``add_cross_attention``) is not supported.
"""
from __future__ import annotations

from torch import nn
from transformers.models.gpt2 import modeling_gpt2

from .headprune_common import DEC_SELF, PrunedModel, cache_without_heads


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
        cache_without_heads(past_key_values, False, self.layer_idx, batch, length, self.head_dim, hidden_states)
        # c_proj of no inputs is its bias (Conv1D itself cannot reshape an empty input)
        bias = self.c_proj.bias.expand(*hidden_states.shape[:-1], -1).clone()
        return self.resid_dropout(bias), None


class GPT2Layout(PrunedModel):
    def __init__(self, config, *args, **kwargs):
        if getattr(config, "add_cross_attention", False):
            raise ValueError("a pruned GPT-2 with cross-attention (add_cross_attention) is not supported")
        super().__init__(config, *args, **kwargs)

    def attention_sites(self):
        return [(DEC_SELF, i, block.attn, self.config.num_attention_heads) for i, block in enumerate(self.base_model.h)]

    def keep_heads(self, attention, heads):
        attention.__class__ = PrunedGPT2Attention
        attention.keep_heads(heads)


class PrunedGPT2Model(GPT2Layout, modeling_gpt2.GPT2Model):
    pass


class PrunedGPT2LMHeadModel(GPT2Layout, modeling_gpt2.GPT2LMHeadModel):
    pass
