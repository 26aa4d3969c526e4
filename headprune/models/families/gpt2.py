"""GPT-2 (``GPT2LMHeadModel``, ``GPT2Model``): where its heads are, and how to remove them.

Each block's ``attn`` computes queries, keys and values with one fused ``Conv1D``, ``c_attn``, and
mixes the heads with another, ``c_proj``. A ``Conv1D`` is a linear layer whose weight is stored
transposed, (in, out), and computes x @ weight + bias. ``c_attn``'s outputs are [queries | keys |
values], each head-major; ``c_proj``'s inputs are the concatenated head outputs, head-major, so its
forward pre-hook gates heads as in every family (``headprune.models.heads.gated``).

The site's query and key are both ``c_attn``: uniform masking (a zero query) is refused, as it
would zero keys and values too. Its value is a ``ValueView`` of ``c_attn``'s last third.

Pruning slices the kept heads' columns out of each of ``c_attn``'s three blocks (weight and bias)
and their rows out of ``c_proj``'s weight, and switches the attention to
``PrunableGPT2Attention``: GPT-2's attention splits ``c_attn``'s output at ``split_size`` (set to
the kept heads' width) and infers the head count from it, but cannot split an empty output. With
no heads left the attention adds ``c_proj``'s bias alone and keeps the layer's cache as long as
the others (``headprune.models.prune.cache_without_heads``). Cross-attention (``add_cross_attention``) is
not supported.
"""
from __future__ import annotations

import torch
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

from headprune.models.heads import DEC_SELF, AttentionSite
from headprune.models.prune import cache_without_heads
from headprune.models.families.causal_lm import CausalLMAdapter, ValueView, head_rows, keep_indices


class GPT2Adapter(CausalLMAdapter):
    family = "gpt2"

    def sites(self, model):
        config = model.config
        if getattr(config, "add_cross_attention", False):
            raise ValueError("GPT-2 with cross-attention (add_cross_attention) is not supported")
        sites = []
        for i, block in enumerate(model.base_model.h):
            attn = block.attn
            values = ValueView(attn.c_attn, lambda out: out.tensor_split(3, dim=-1)[2])
            sites.append(AttentionSite(
                DEC_SELF, i, attn, attn.c_attn, attn.c_attn, values, attn.c_proj, head_dim=attn.head_dim,
                original_num_heads=config.num_attention_heads, time_major=False,
            ))
        return sites

    def prune_site(self, site: AttentionSite, keep: list[int]):
        """Keep only heads ``keep`` (original indices, a subset of ``site.kept_heads``)."""
        attn = site.attention
        d = site.head_dim
        rows = head_rows([site.kept_heads.index(h) for h in keep], d, attn.c_proj.weight.device)
        width = site.num_heads * d  # of each of c_attn's blocks, before this cut
        columns = torch.cat([rows, rows + width, rows + 2 * width])
        keep_indices(attn.c_attn, "weight", 1, columns)  # (in, 3 * width)
        keep_indices(attn.c_attn, "bias", 0, columns)
        attn.c_attn.nf = len(columns)
        keep_indices(attn.c_proj, "weight", 0, rows)  # (width, out); the bias stays
        attn.c_proj.nx = len(rows)
        attn.headprune_kept_heads = list(keep)
        attn.num_heads = len(keep)
        attn.split_size = len(keep) * d
        attn.__class__ = PrunableGPT2Attention


class PrunableGPT2Attention(GPT2Attention):
    """GPT-2 attention that also runs with no heads left: it then adds only c_proj's bias."""

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


MODEL_TYPES = ("gpt2",)
ADAPTER = GPT2Adapter
