"""transformers' FSMT: fairseq's post-norm transformer, run on fairseq checkpoints (all three attention
types, time-major tensors)."""
from __future__ import annotations

import contextlib
import types

import torch
from torch import nn
from transformers.models.fsmt.modeling_fsmt import Attention as FSMTAttention

from headprune.models.attention_types import DEC_SELF, ENC_DEC, ENC_SELF
from headprune.models.families.seq2seq import Seq2SeqBatch
from headprune.models.sites import AttentionSite
from headprune.models.portable.modeling_headprune_fsmt import PrunedAttention
from headprune.models.slicing import slice_projections

MODEL_TYPES = ("fsmt",)


class FSMTAdapter(Seq2SeqBatch):
    """transformers' FSMT: fairseq's post-norm transformer, run on fairseq checkpoints.

    Its layers hold ``self_attn`` and ``encoder_attn`` modules with q/k/v/out projections, as
    fairseq's do, in (time, batch, dim). The translation batch and loss are every encoder-decoder's
    (``Seq2SeqBatch``, shared with the generic adapter).
    """

    family = "fsmt"
    time_major = True  # FSMT's attention works in (time, batch, dim)

    def sites(self, model):
        base = model.model if hasattr(model, "model") else model
        config = model.config
        sites = []
        for i, layer in enumerate(base.encoder.layers):
            sites.append(self._site(ENC_SELF, i, layer.self_attn, config.encoder_attention_heads))
        for i, layer in enumerate(base.decoder.layers):
            sites.append(self._site(ENC_DEC, i, layer.encoder_attn, config.decoder_attention_heads))
        for i, layer in enumerate(base.decoder.layers):
            sites.append(self._site(DEC_SELF, i, layer.self_attn, config.decoder_attention_heads))
        return sites

    def _site(self, attn_type, layer, attn, heads):
        return AttentionSite(attn_type, layer, attn, attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj,
                             head_dim=attn.head_dim, original_num_heads=heads, time_major=self.time_major)

    @contextlib.contextmanager
    def beam_decoding(self, model):
        """Beam search's steps through ``beam_step`` (one query per row; a sentence's beams share its source's
        keys and values)."""
        base = model.model if hasattr(model, "model") else model
        attentions = [a for layer in base.decoder.layers for a in (layer.self_attn, layer.encoder_attn)]
        for attention in attentions:
            attention.forward = types.MethodType(beam_step, attention)
        try:
            yield True
        finally:
            for attention in attentions:
                del attention.forward

    def prune_site(self, site, keep):
        slice_projections(site, keep)
        site.attention.__class__ = PrunableFSMTAttention
        site.attention.num_heads = len(keep)


class PrunableFSMTAttention(PrunedAttention, FSMTAttention):
    """FSMT attention whose shapes come from the heads it has, not from the embedding size: the forward of
    ``portable/modeling_headprune_fsmt.py`` (one copy, the one exports carry). With no heads left its output is the
    output projection's bias, and its cache entry keeps the decoded length."""


def beam_step(self, query, key, key_padding_mask=None, layer_state=None, attn_mask=None, output_attentions=False,
              **kwargs):
    """One step of headprune's beam search through an FSMT decoder attention (``FSMTAdapter.beam_decoding``):
    the attention FSMT's forward computes, for one query per row, laid out for speed.

    The query is (1, rows, dim) and rows = sentences x beams; ``key`` (source, sentences, dim) holds the encoder
    states once per sentence. Cross-attention projects them once per sentence and a sentence's beams attend to
    them in one matrix product (5 queries against the source: PyTorch's CPU kernel for one query at a time is
    several times slower, and the source's keys and values 5 times the memory). Self-attention reads the
    time-major keys of a ``BeamLayer`` and reduces over time elementwise, which beats that kernel as well.
    The sums run in another order than FSMT's, so scores may differ from its forward's in the last bits.
    """
    steps, rows, _ = query.shape
    heads, head_dim = self.num_heads, self.head_dim
    if steps != 1 or attn_mask is not None or output_attentions or self.training or layer_state is None:
        raise ValueError("beam_step takes beam search's steps only: one query per row, a cache, no attention "
                         "mask or attention output, eval mode")
    if key_padding_mask is not None and key_padding_mask.dim() == 0:
        key_padding_mask = None
    if heads == 0:  # pruned away: the output projection's bias; the cache still counts the decoded length
        if not self.encoder_decoder_attention:
            nothing = query.new_zeros(1, rows, 0, head_dim)
            layer_state.self_attention_cache.layers[self.layer_idx].append(nothing, nothing)
        return self.out_proj(query.new_zeros(1, rows, 0)), None
    q = (self.q_proj(query) * self.scaling).view(rows, heads, head_dim)
    if self.encoder_decoder_attention:
        cache = layer_state.cross_attention_cache
        if layer_state.is_updated.get(self.layer_idx):
            keys, values = cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values
        else:
            source, sentences, _ = key.shape
            keys = self.k_proj(key).view(source, sentences, heads, head_dim).permute(1, 2, 0, 3)
            values = self.v_proj(key).view(source, sentences, heads, head_dim).permute(1, 2, 0, 3)
            keys, values = cache.update(keys, values, self.layer_idx)
            layer_state.is_updated[self.layer_idx] = True
        sentences = keys.shape[0]  # keys, values: (sentences, heads, source, head_dim)
        beams = rows // sentences
        scores = torch.matmul(q.view(sentences, beams, heads, head_dim).transpose(1, 2), keys.transpose(-1, -2))
        if key_padding_mask is not None:  # (sentences, source), True at padding
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        output = torch.matmul(nn.functional.softmax(scores, dim=-1), values).transpose(1, 2)
    else:
        if key_padding_mask is not None:
            raise ValueError("beam_step: the target side has no padding in beam search")
        layer = layer_state.self_attention_cache.layers[self.layer_idx]  # a BeamLayer
        keys, values = layer.append(self.k_proj(query).view(1, rows, heads, head_dim),
                                    self.v_proj(query).view(1, rows, heads, head_dim))  # (time, rows, heads, dim)
        weights = nn.functional.softmax((keys * q).sum(-1), dim=0)  # (time, rows, heads)
        output = (weights[..., None] * values).sum(0)
    return self.out_proj(output.reshape(1, rows, heads * head_dim)), None


ADAPTER = FSMTAdapter


def match(model) -> FSMTAdapter | None:
    """FSMT's adapter for a model of its type, else None."""
    return FSMTAdapter() if getattr(model.config, "model_type", None) in MODEL_TYPES else None
