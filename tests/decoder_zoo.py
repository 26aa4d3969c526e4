"""Tiny random models of every causal-LM model type in transformers' registry, with the quirks real checkpoints
have: query heads per key/value head that are not a power of two (6 query heads on 2 kv heads), a ``head_dim``
that is not hidden_size / heads where the config has one (12, not 48 / 6), alternating sliding/global layers
where the config has layer types, a short sliding window, tied embeddings as the family's default.

``tiny_config(model_type)`` is generic: it shrinks every size the config class knows; ``OVERRIDES`` holds the few
families that need more, ``NOT_BUILT`` the model types that are not text decoders at this size (multimodal
wrappers, or configs that need tables this builder does not make), each with why.
"""
from __future__ import annotations

import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

LAYERS, HEADS, KV_HEADS, HIDDEN, VOCAB = 3, 6, 2, 48, 64
SIZES = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, moe_intermediate_size=32,
             num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
             max_position_embeddings=256, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, d_model=HIDDEN, ffn_dim=64,
             n_positions=256, num_layers=LAYERS, num_heads=HEADS, n_inner=64, num_experts=4, num_local_experts=4,
             n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=0,
             shared_expert_intermediate_size=32, num_kv_heads=KV_HEADS, n_kv_heads=KV_HEADS,
             pad_token_id=0, bos_token_id=1, eos_token_id=2, ffn_hidden_size=64, decoder_layers=LAYERS,
             decoder_attention_heads=HEADS, decoder_ffn_dim=64, encoder_layers=1, encoder_attention_heads=HEADS,
             encoder_ffn_dim=64)
OVERRIDES = {
    "gptj": dict(rotary_dim=4),
    "codegen": dict(rotary_dim=4),
}
NOT_BUILT = {
    "blt": "byte-level patching model: crashes at this size",
    "fuyu": "multimodal wrapper (image patches): allocates its vision tower",
    "gemma3": "multimodal wrapper of gemma3_text (tested as gemma3_text)",
    "gemma3n": "multimodal wrapper (needs timm)",
    "gemma4": "multimodal wrapper of gemma4_text",
    "gemma4_unified": "multimodal wrapper",
    "mllama": "multimodal wrapper (vision tower)",
}


def tiny_config(model_type: str):
    cls = CONFIG_MAPPING[model_type]
    base = cls().to_dict()
    values = {k: v for k, v in SIZES.items() if k in base}
    if "head_dim" in base:
        values["head_dim"] = 12  # not hidden_size / heads
    if base.get("layer_types"):
        kinds = list(dict.fromkeys(base["layer_types"]))  # e.g. sliding and full attention, alternating
        values["layer_types"] = [kinds[i % len(kinds)] for i in range(LAYERS)]
    for key, value in base.items():  # other per-layer tables: cut to LAYERS
        if key != "layer_types" and isinstance(value, list) and len(value) == base.get("num_hidden_layers", -1):
            values[key] = [value[i % len(value)] for i in range(LAYERS)]
    if base.get("sliding_window"):
        values["sliding_window"] = 4
    values.update(OVERRIDES.get(model_type, {}))
    return cls(**{**base, **values})


MAX_PARAMETERS = 2_000_000  # a config the builder did not shrink (nested sub-configs) would build a real-size model


def tiny_model(model_type: str):
    """A tiny random model of the type's causal-LM class (eval mode); ``TooLarge`` for a config that stays large
    (counted on the meta device first, so that nothing large is ever allocated)."""
    if model_type in NOT_BUILT:
        raise ValueError(NOT_BUILT[model_type])
    count = sum(p.numel() for p in meta_model(model_type).parameters())
    if count > MAX_PARAMETERS:
        raise TooLarge(f"its config stays large at this size ({count:,} parameters): the builder does not shrink it")
    return getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])(tiny_config(model_type)).eval()


class TooLarge(ValueError):
    """The type's config stays large (``meta_model`` still shows its layout: what an adapter would refuse)."""


def meta_model(model_type: str):
    """The type's causal-LM class built on the meta device (shapes only, no memory)."""
    import torch

    with torch.device("meta"):
        return getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])(tiny_config(model_type))


def model_types() -> list[str]:
    return list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
