"""Tiny random models of every true encoder-decoder of text in transformers' seq2seq registry
(MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES): 2 layers per stack, 4 heads of 8 features, a vocabulary of 64.

``model_types()`` lists the registry's types whose default config is an encoder-decoder (``is_encoder_decoder``):
the decoder-only audio LMs the registry also holds (Qwen2-Audio, Voxtral, Granite Speech, ...) are not.
``NOT_TEXT`` names the encoder-decoders left out, each with why. ``tiny_model(model_type)`` builds one as the
registry's class, in eval mode; ``tiny_config`` starts from the config class's defaults and sets every size entry it
has (``SIZES``), in its sub-configs too; ``OVERRIDES`` holds what a type needs beyond that, each with why.
"""
from __future__ import annotations

import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES

LAYERS, HEADS, HEAD_DIM, HIDDEN, VOCAB = 2, 4, 8, 32, 64
SIZES = dict(
    vocab_size=VOCAB, d_model=HIDDEN, hidden_size=HIDDEN, d_kv=HEAD_DIM, head_dim=HEAD_DIM, d_ff=64,
    intermediate_size=64, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
    encoder_layers=LAYERS, decoder_layers=LAYERS, num_layers=LAYERS, num_decoder_layers=LAYERS,
    num_hidden_layers=LAYERS, num_encoder_layers=LAYERS,
    encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, num_heads=HEADS, num_attention_heads=HEADS,
    num_key_value_heads=HEADS, num_encoder_attention_heads=HEADS, num_decoder_attention_heads=HEADS,
    cross_attention_hidden_size=HIDDEN,  # T5Gemma's decoder reads the encoder's width
    pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=0,
    # FSMT's two vocabularies; mixture-of-experts layers (NLLB-MoE, Switch Transformers)
    src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, num_experts=4, expert_capacity=8, encoder_sparse_step=2,
    decoder_sparse_step=2, num_sparse_encoder_layers=1, num_sparse_decoder_layers=1,
)
OVERRIDES = {
    # block-sparse attention needs sequences of many blocks; a short one runs its full attention (as real inputs
    # shorter than that do), which is what is studied here
    "bigbird_pegasus": dict(attention_type="original_full"),
    # Longformer's windows must be even and cover a tiny input
    "led": dict(attention_window=[4, 4], max_encoder_position_embeddings=64, max_decoder_position_embeddings=64),
    # its default block length is larger than a tiny input, its global tokens the whole of it
    "pegasus_x": dict(block_size=4, num_global_tokens=2, stagger_local_blocks=False),
    "longt5": dict(local_radius=2),
    "prophetnet": dict(ngram=2, num_buckets=8, relative_max_distance=16),
}
NOT_TEXT = {
    "encoder-decoder": "a composite of two other models (any encoder with any decoder), not a family of its own",
}


def model_types() -> list[str]:
    """The registry's types whose default config is an encoder-decoder, but ``NOT_TEXT``'s."""
    found = []
    for model_type in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        try:
            default = CONFIG_MAPPING[model_type]()
        except Exception:  # noqa: BLE001  a config without defaults: not one of these
            continue
        if getattr(default, "is_encoder_decoder", False) and model_type not in NOT_TEXT:
            found.append(model_type)
    return found


def _shrink(config, sizes: dict) -> None:
    for name, value in sizes.items():
        if hasattr(config, name):
            try:
                setattr(config, name, value)
            except NotImplementedError:  # an alias the config refuses to set (ProphetNet's num_hidden_layers)
                pass
    table = getattr(config, "layer_types", None)  # per-layer tables follow the depth
    if isinstance(table, list) and len(table) != LAYERS:
        config.layer_types = table[:LAYERS]
    for name in getattr(config, "sub_configs", None) or {}:
        sub = getattr(config, name, None)
        if hasattr(sub, "to_dict"):
            _shrink(sub, sizes)


def tiny_config(model_type: str):
    config = CONFIG_MAPPING[model_type]()
    _shrink(config, {**SIZES, **OVERRIDES.get(model_type, {})})
    # generation reads these from the config (T5's default has no decoder start token)
    config.pad_token_id, config.decoder_start_token_id = 0, 0
    return config


def tiny_model(model_type: str):
    config = tiny_config(model_type)
    model = getattr(transformers, MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES[model_type])(config)
    return model.eval()
