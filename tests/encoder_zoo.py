"""Tiny random models of every encoder type of transformers' sequence-classification registry (issue #45).

``encoder_types()``: the types of ``MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES`` that are encoders by
transformers' own tables: not an encoder-decoder, and not in the causal-LM registry unless the config declares the
model bidirectional (``is_decoder`` or XLM's ``causal`` False: BERT's copies build a causal LM only when asked).
``tiny_model(model_type)`` builds one as AutoModelForSequenceClassification builds it: 2 layers of 4 heads, a small
vocabulary, from the config class's defaults with ``SIZES`` set where the config has the entry, and ``OVERRIDES``
for what a type needs beyond that, each with why. ``NOT_BUILT`` lists the types not built, each with why.
"""
from __future__ import annotations

import functools

import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                    MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES)

LAYERS, HEADS, HIDDEN, VOCAB = 2, 4, 32, 64
SIZES = dict(
    vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=64,
    max_position_embeddings=64, type_vocab_size=2, pad_token_id=0, bos_token_id=1, eos_token_id=2, sep_token_id=2,
    num_labels=3,
    # under other names (DistilBERT, XLM, Flaubert, MPNet's buckets, Funnel, Perceiver, SqueezeBERT, MobileBERT)
    dim=HIDDEN, hidden_dim=64, n_layers=LAYERS, n_heads=HEADS, emb_dim=HIDDEN, d_model=HIDDEN, n_head=HEADS,
    num_key_value_heads=2, embedding_size=HIDDEN, head_dim=HIDDEN // HEADS, d_head=HIDDEN // HEADS,
    d_inner=64, block_sizes=[1, 1], num_decoder_layers=1, true_hidden_size=HIDDEN, intra_bottleneck_size=HIDDEN,
    num_feedforward_networks=1, d_latents=HIDDEN, num_latents=8, num_blocks=1, num_self_attends_per_block=LAYERS,
    num_self_attention_heads=HEADS, num_cross_attention_heads=1, global_attn_every_n_layers=2,
    local_attention=8, attention_window=4, max_window_layers=LAYERS, n_langs=1, sliding_window=4,
    pooler_hidden_size=HIDDEN, prediction_head_size=HIDDEN,
    # 2-D layouts (LayoutLM v3, LiLT, MarkupLM's xpaths), entities (LUKE), glyphs and sounds (RoCBert)
    max_2d_position_embeddings=64, coordinate_size=4, shape_size=8, input_size=32, patch_size=16,
    max_xpath_tag_unit_embeddings=16, max_xpath_subs_unit_embeddings=16, tag_pad_id=15, subs_pad_id=15,
    xpath_unit_hidden_size=8, max_depth=8, entity_vocab_size=16, entity_emb_size=16, pronunciation_embed_dim=8,
    pronunciation_vocab_size=16, shape_embed_dim=8, shape_vocab_size=16,
    # a vision tower (ModernVBERT's): 2 x 2 patches
    image_size=32, num_channels=3,
    # latent attention (Mistral 4, read to tell it is no encoder)
    q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, qk_head_dim=8,
    n_routed_experts=4, moe_intermediate_size=16, num_experts_per_tok=2, n_group=1, topk_group=1,
)
OVERRIDES = {
    # Longformer's window must be even and per layer; BigBird on a short input runs its full attention
    "longformer": dict(attention_window=[4] * LAYERS),
    "big_bird": dict(attention_type="original_full"),
    # DeBERTa-v3 as its checkpoints are: disentangled relative positions sharing the content projections
    "deberta-v2": dict(relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=8,
                       max_relative_positions=16, position_biased_input=False, share_att_key=True,
                       norm_rel_ebd="layer_norm"),
    # Reformer's axial position embeddings must factor its max length; its chunks cover the short input
    "reformer": dict(axial_pos_embds_dim=[16, 16], axial_pos_shape=[8, 8], max_position_embeddings=64,
                     attn_layers=["local", "local"], local_attn_chunk_length=16, lsh_attn_chunk_length=16),
    # Canine's character hashing: its buckets and shifts at tiny size
    "canine": dict(num_hash_buckets=64, downsampling_rate=2, local_transformer_stride=4),
    "funnel": dict(block_sizes=[1, 1], block_repeats=None, num_decoder_layers=1, d_head=HIDDEN // HEADS, n_head=HEADS),
    "esmc": dict(num_key_value_heads=HEADS),  # it has no grouped key/value heads
    "lilt": dict(hidden_size=48),  # its layout stream is hidden_size / channel_shrink_ratio wide, 4 heads of it
    "tapas": dict(type_vocab_sizes=[3, 256, 256, 2, 256, 256, 10]),
}
NOT_BUILT = {
    "layoutlmv2": "LayoutLMv2's visual backbone needs detectron2, which is not installed",
    "mra": "MRA's attention runs only with its CUDA kernels (kernels-community/mra): without them it puts out zeros",
}
MAX_PARAMETERS = 2_000_000


@functools.cache
def encoder_types() -> tuple[str, ...]:
    found = []
    for model_type in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        default = CONFIG_MAPPING[model_type]()
        if default.is_encoder_decoder:
            continue
        bidirectional = getattr(default, "is_decoder", None) is False or getattr(default, "causal", None) is False
        if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or bidirectional:
            found.append(model_type)
    return tuple(found)


def class_name(model_type: str) -> str:
    return MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES[model_type]


def tiny_config(model_type: str, **changes):
    return _shrunk(CONFIG_MAPPING[model_type](), changes)


def _shrunk(default, changes=None):
    """``default`` at tiny size, its sub-configs (a text and a vision config) too; a table of layer kinds keeps one
    layer of each of its first two kinds (ModernBERT's global and local layers)."""
    values = default.to_dict()
    for key in getattr(type(default), "sub_configs", {}):
        if isinstance(getattr(default, key, None), transformers.PreTrainedConfig):
            values[key] = _shrunk(getattr(default, key), {})
    for key, size in SIZES.items():
        if key in values and (isinstance(size, list) or not isinstance(values[key], list)):
            values[key] = size
    kinds = values.get("layer_types")
    if isinstance(kinds, list) and kinds:
        values["layer_types"] = (list(dict.fromkeys(kinds)) + kinds)[:LAYERS]
    values.update({**OVERRIDES.get(default.model_type, {}), **(changes or {})})
    return type(default)(**values)


def tiny_model(model_type: str, **changes):
    """The type's tiny random classifier, in eval mode, under its default attention backend; ``changes`` to its
    tiny config."""
    if model_type in NOT_BUILT:
        raise ValueError(NOT_BUILT[model_type])
    config = tiny_config(model_type, **changes)
    cls = getattr(transformers, class_name(model_type))
    with torch.device("meta"):  # sized before anything is allocated
        count = sum(p.numel() for p in cls._from_config(config).parameters())
    if count > MAX_PARAMETERS:
        raise ValueError(f"its tiny model has {count:,} parameters: the config was not shrunk")
    model = cls._from_config(config).eval()
    if hasattr(model, "set_default_language"):  # X-MOD's adapters run for one language, which it asks to be set
        model.set_default_language(config.languages[0])
    return model
