"""Physically remove attention heads: slice q/k/v rows and output-projection columns.

Works for any set of heads, including every head of a layer (the layer then adds
only the output projection's bias), keeps dtype and device, and records the
removed heads in ``config.headprune_pruned_heads`` so that a saved model reloads
with the same shapes (``load_pruned_weights``).

FSMT's attention reshapes with its full embedding size, so its attention modules
are switched to ``PrunableFSMTAttention``, a subclass whose forward reshapes with
the number of heads the layer still has. BERT's and M2M100's attention already infer
the head count from the projection size, except when they have none left. Families whose
adapter has a ``prune_site`` (GPT-2, the Llama layout: ``headprune.adapters``) slice themselves.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers.cache_utils import EncoderDecoderCache
from transformers.models.bert.modeling_bert import BertSelfAttention
from transformers.models.fsmt.modeling_fsmt import Attention as FSMTAttention
from transformers.models.m2m_100.modeling_m2m_100 import M2M100Attention

from .heads import AttentionSite, adapter_for

PRUNED_HEADS_KEY = "headprune_pruned_heads"


def prune_heads(model, heads: dict[str, dict[int, list[int]]]):
    """Remove ``heads[attn_type][layer]`` (original head indices) from ``model`` in place.

    Heads already removed are ignored, so pruning can be applied step by step.
    Returns the model.
    """
    adapter = adapter_for(model)
    # Families with their own layout (GPT-2's fused projection, grouped-query attention) slice themselves.
    slice_site = getattr(adapter, "prune_site", _slice_site)
    recorded = pruned_heads(model)
    for site in adapter.sites(model):
        remove = set(int(h) for h in heads.get(site.attn_type, {}).get(site.layer, []))
        for h in remove:
            if not 0 <= h < site.original_num_heads:
                raise ValueError(f"{site.attn_type} layer {site.layer} has no head {h} "
                                 f"(it has {site.original_num_heads})")
        if not remove & set(site.kept_heads):
            continue
        keep = [h for h in site.kept_heads if h not in remove]
        slice_site(site, keep)
        already = set(recorded.setdefault(site.attn_type, {}).get(site.layer, []))
        recorded[site.attn_type][site.layer] = sorted(already | remove)
    # JSON keys are strings: store layers that way so a saved config reads back the same.
    setattr(model.config, PRUNED_HEADS_KEY,
            {t: {str(layer): hs for layer, hs in sorted(layers.items())} for t, layers in recorded.items()})
    return model


def pruned_heads(model) -> dict[str, dict[int, list[int]]]:
    """The heads removed so far, as {attn_type: {layer: [original head indices]}}."""
    stored = getattr(model.config, PRUNED_HEADS_KEY, None) or {}
    return {t: {int(layer): list(hs) for layer, hs in layers.items()} for t, layers in stored.items()}


def count_heads(model) -> int:
    return sum(site.num_heads for site in adapter_for(model).sites(model))


def _slice_site(site: AttentionSite, keep: list[int]):
    positions = [site.kept_heads.index(h) for h in keep]  # where the kept heads sit now
    device = site.output.weight.device
    rows = torch.tensor(
        [p * site.head_dim + i for p in positions for i in range(site.head_dim)], dtype=torch.long, device=device
    )
    for linear in (site.query, site.key, site.value):
        _keep_rows(linear, rows)
    _keep_input_columns(site.output, rows)
    attn = site.attention
    attn.headprune_kept_heads = list(keep)
    if isinstance(attn, FSMTAttention):
        attn.__class__ = PrunableFSMTAttention
        attn.num_heads = len(keep)
    elif isinstance(attn, M2M100Attention):
        attn.__class__ = PrunableM2M100Attention
        attn.num_heads = len(keep)
    elif isinstance(attn, BertSelfAttention):
        attn.__class__ = PrunableBertSelfAttention
        attn.num_attention_heads = len(keep)
        attn.all_head_size = len(keep) * attn.attention_head_size
    else:
        raise TypeError(f"do not know how to prune {type(attn).__name__}")


def _keep_rows(linear: nn.Linear, rows: torch.Tensor):
    linear.weight = nn.Parameter(linear.weight.detach().index_select(0, rows).clone(),
                                 requires_grad=linear.weight.requires_grad)
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias.detach().index_select(0, rows).clone(),
                                   requires_grad=linear.bias.requires_grad)
    linear.out_features = len(rows)


def _keep_input_columns(linear: nn.Linear, columns: torch.Tensor):
    linear.weight = nn.Parameter(linear.weight.detach().index_select(1, columns).clone(),
                                 requires_grad=linear.weight.requires_grad)
    linear.in_features = len(columns)


class PrunableBertSelfAttention(BertSelfAttention):
    """BERT self-attention that also runs with no heads left (its output is then empty)."""

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, **kwargs):
        if self.num_attention_heads == 0:
            empty = hidden_states.new_zeros(*hidden_states.shape[:-1], 0)
            return empty, None
        return super().forward(hidden_states, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs)


class PrunableFSMTAttention(FSMTAttention):
    """FSMT attention whose shapes come from the heads it has, not from the embedding size.

    Follows transformers' FSMT ``Attention.forward`` (fairseq's multi-head
    attention) step by step; only the reshapes differ. With no heads left its output is the
    output projection's bias, and its cache entry keeps the decoded length (_cache_without_heads).
    """

    def forward(self, query, key, key_padding_mask=None, layer_state=None, attn_mask=None,
                output_attentions=False, **kwargs):
        tgt_len, bsz, _ = query.size()
        heads, head_dim = self.num_heads, self.head_dim
        if heads == 0:
            source = key if self.encoder_decoder_attention else query  # (time, batch, dim)
            _cache_without_heads(layer_state, self.encoder_decoder_attention, self.layer_idx, bsz, source.shape[0],
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
            attn_weights = (attn_weights.view(bsz, heads, tgt_len, src_len) + attn_mask).view(bsz * heads, tgt_len, src_len)
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


def _cache_without_heads(cache, is_cross: bool, layer_idx: int, batch: int, length: int, head_dim: int, like):
    """Give a layer with no heads left its key/value cache entry: one all-zero head, never attended.

    Its cache must grow as the other layers' do: decoders read the generated length from the
    cache (FSMT's positions from layer 0), and an empty tensor counts as length 0.
    """
    if cache is None:
        return
    layers = cache
    if isinstance(cache, EncoderDecoderCache):
        if is_cross and cache.is_updated.get(layer_idx):
            return
        layers = cache.cross_attention_cache if is_cross else cache.self_attention_cache
    zeros = like.new_zeros(batch, 1, length, head_dim)
    layers.update(zeros, zeros, layer_idx)
    if is_cross and isinstance(cache, EncoderDecoderCache):
        cache.is_updated[layer_idx] = True


class PrunableM2M100Attention(M2M100Attention):
    """M2M100 attention that also runs with no heads left: its output is then the output
    projection's bias, and its cache entry keeps the decoded length (_cache_without_heads)."""

    def forward(self, hidden_states, key_value_states=None, past_key_values=None, attention_mask=None, **kwargs):
        if self.num_heads > 0:
            return super().forward(hidden_states, key_value_states=key_value_states,
                                   past_key_values=past_key_values, attention_mask=attention_mask, **kwargs)
        is_cross = key_value_states is not None
        source = key_value_states if is_cross else hidden_states  # (batch, time, dim)
        _cache_without_heads(past_key_values, is_cross, self.layer_idx, source.shape[0], source.shape[1],
                             self.head_dim, source)
        return self.out_proj(hidden_states.new_zeros(*hidden_states.shape[:-1], 0)), None


def apply_recorded_pruning(model):
    """Give a freshly built model the shapes recorded in its config (before loading weights)."""
    recorded = pruned_heads(model)
    setattr(model.config, PRUNED_HEADS_KEY, {})
    return prune_heads(model, recorded) if recorded else model


def load_pruned_weights(model_class, folder: str | Path, **kwargs):
    """Load a model folder saved by save_pretrained, pruned or not.

    A pruned model is built from its config, pruned to the recorded shapes, then given its
    weights; so is a class that says ``loads_without_from_pretrained``. Other classes go
    through from_pretrained. Matrices that save_pretrained stored once for several tied names
    are restored under all of them.
    """
    from safetensors.torch import load_file
    from transformers import AutoConfig
    from transformers.initialization import no_init_weights

    folder = Path(folder)
    config = AutoConfig.from_pretrained(folder)
    if not getattr(config, PRUNED_HEADS_KEY, None) and not getattr(model_class, "loads_without_from_pretrained", False):
        return model_class.from_pretrained(folder, **kwargs)
    kwargs.pop("use_safetensors", None)  # only safetensors are read below anyway
    build = getattr(model_class, "from_config", None) or model_class._from_config  # Auto* or concrete class
    with no_init_weights():  # every weight is loaded below: random init would only cost time
        model = build(config, **kwargs)
    apply_recorded_pruning(model)
    weights = folder / "model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"{weights}: a model folder loaded here must hold model.safetensors")
    state = load_file(str(weights))
    model.tie_weights()
    _, unexpected = model.load_state_dict(state, strict=False)
    # A name is missing only if no name sharing its tensor was loaded.
    names_of = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        names_of.setdefault(id(tensor), []).append(name)
    missing = [name for names in names_of.values() if not any(n in state for n in names) for name in names]
    if missing or unexpected:
        raise ValueError(f"{weights}: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}")
    return model.eval()
