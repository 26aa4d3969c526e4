"""FSMT (fairseq's post-norm transformer: the WMT models, and fairseq checkpoints headprune converts) with
attention heads removed, for plain transformers.

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), with
``headprune_common.py``, and named in its config.json's ``auto_map``, so that

    AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    AutoModel.from_pretrained(folder, trust_remote_code=True)  # FSMTModel: the decoder's hidden states

load the pruned model without headprune. All three attention types are pruned, each layer on its own:
encoder self-attention ("enc_self"), decoder self-attention ("dec_self") and cross-attention ("enc_dec").
FSMT's attention works in (time, batch, dim) and reshapes its output to the embedding size: with heads
removed it runs ``PrunedAttention.forward`` below, transformers' step by step with only the reshapes
taken from the heads it has. With no heads left its output is the output projection's bias, and its
cache entry keeps the decoded length (FSMT's decoder reads its positions from layer 0's cache).
"""
from __future__ import annotations

import torch
from torch import nn
from transformers.cache_utils import EncoderDecoderCache
from transformers.models.fsmt import modeling_fsmt

from .headprune_common import EncoderDecoderModel, cache_without_heads


class PrunedAttention:
    """Mixed in before FSMT's ``Attention``: its forward with the shapes of the heads it has."""

    def forward(self, query, key, key_padding_mask=None, layer_state=None, attn_mask=None,
                output_attentions=False, **kwargs):
        tgt_len, bsz, _ = query.size()
        heads, head_dim = self.num_heads, self.head_dim
        if heads == 0:
            source = key if self.encoder_decoder_attention else query  # (time, batch, dim)
            cache_without_heads(layer_state, self.encoder_decoder_attention, self.layer_idx, bsz, source.shape[0],
                                head_dim, source)
            return self.out_proj(query.new_zeros(tgt_len, bsz, 0)), None

        is_updated = False
        if layer_state is not None:
            if isinstance(layer_state, EncoderDecoderCache):
                is_updated = layer_state.is_updated.get(self.layer_idx)
                cache = layer_state.cross_attention_cache if self.encoder_decoder_attention \
                    else layer_state.self_attention_cache
            else:
                cache = layer_state

        current_states = key if self.encoder_decoder_attention else query
        if self.encoder_decoder_attention and layer_state is not None and is_updated:
            key_states = cache.layers[self.layer_idx].keys
            value_states = cache.layers[self.layer_idx].values
        else:
            src_len = current_states.shape[0]
            key_states = self.k_proj(current_states).view(src_len, bsz, heads, head_dim).permute(1, 2, 0, 3)
            value_states = self.v_proj(current_states).view(src_len, bsz, heads, head_dim).permute(1, 2, 0, 3)
            if layer_state is not None:
                key_states, value_states = cache.update(key_states, value_states, self.layer_idx)
                if self.encoder_decoder_attention:
                    layer_state.is_updated[self.layer_idx] = True

        src_len = key_states.shape[2]
        query_states = (self.q_proj(query) * self.scaling).view(tgt_len, bsz * heads, head_dim).transpose(0, 1)
        key_states = key_states.reshape(bsz * heads, src_len, head_dim)
        value_states = value_states.reshape(bsz * heads, src_len, head_dim)

        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        if attn_mask is not None:
            attn_weights = (attn_weights.view(bsz, heads, tgt_len, src_len) + attn_mask).view(bsz * heads, tgt_len,
                                                                                               src_len)
        if key_padding_mask is not None and key_padding_mask.dim() == 0:
            key_padding_mask = None
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, heads, tgt_len, src_len).masked_fill(
                key_padding_mask[:, None, None, :], torch.finfo(attn_weights.dtype).min
            ).view(bsz * heads, tgt_len, src_len)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights_reshaped = attn_weights.view(bsz, heads, tgt_len, src_len) if output_attentions else None
        attn_probs = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)

        attn_output = torch.bmm(attn_probs, value_states)
        attn_output = attn_output.transpose(0, 1).contiguous().view(tgt_len, bsz, heads * head_dim)
        return self.out_proj(attn_output), attn_weights_reshaped


class FSMTLayout(EncoderDecoderModel):
    headless = PrunedAttention


class PrunedFSMTModel(FSMTLayout, modeling_fsmt.FSMTModel):
    pass


class PrunedFSMTForConditionalGeneration(FSMTLayout, modeling_fsmt.FSMTForConditionalGeneration):
    pass
