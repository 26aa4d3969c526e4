"""Tiny random models of every encoder-decoder of transformers' speech seq2seq registry
(MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES: Whisper, Moonshine, Speech2Text, SpeechT5, ...): 2 layers per stack, 4
heads of 8 features, a vocabulary of 64, as tests/seq2seq_zoo.py builds the text ones (its ``SIZES``).

``model_types()`` lists the registry's types whose default config is an encoder-decoder (the decoder-only audio LMs
the registry also holds, Voxtral, Granite Speech, Qwen3-ASR, ..., are not), ``NOT_SPEECH``'s
left out. ``tiny_model(model_type)`` builds one as the registry's class, in eval mode; ``OVERRIDES`` holds what a
type needs beyond the shared sizes; ``encoder_inputs(model, batch, length)`` gives its encoder's input (a random
log-mel spectrogram or waveform of the shape its feature extractor would give), ``length`` frames or samples where
the family takes any length (Whisper takes exactly 2 x max_source_positions frames).
"""
from __future__ import annotations

import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES

from seq2seq_zoo import HEADS, LAYERS, SIZES, VOCAB, _shrink

MEL_BINS = 8
# the size entries speech configs add to the text ones (Moonshine's per-stack counts)
SPEECH_SIZES = dict(encoder_num_hidden_layers=LAYERS, decoder_num_hidden_layers=LAYERS,
                    encoder_num_attention_heads=HEADS, decoder_num_attention_heads=HEADS,
                    encoder_num_key_value_heads=HEADS, decoder_num_key_value_heads=HEADS)
OVERRIDES = {
    # whisper tiny.en's head geometry (6 heads of 64 is its own: 4 of 8 here), a short window (32 frames)
    "whisper": dict(num_mel_bins=MEL_BINS, max_source_positions=16, max_target_positions=32,
                    begin_suppress_tokens=None, suppress_tokens=None),
    "speech_to_text": dict(input_feat_per_channel=MEL_BINS, max_source_positions=64, max_target_positions=32),
    "seamless_m4t": dict(feature_projection_input_dim=MEL_BINS, speech_encoder_layers=LAYERS,
                         speech_encoder_attention_heads=HEADS, speech_encoder_intermediate_size=64,
                         max_position_embeddings=64),
    "seamless_m4t_v2": dict(feature_projection_input_dim=MEL_BINS, speech_encoder_layers=LAYERS,
                            speech_encoder_attention_heads=HEADS, speech_encoder_intermediate_size=64,
                            max_position_embeddings=64),
}
NOT_SPEECH = {
    "pop2piano": "piano MIDI tokens from music, not speech to text: its generate() needs the composer tokens its "
                 "checkpoint's generation config names (T5's layout: the text table's t5 rows cover it)",
    "speech-encoder-decoder": "a composite of two other models (any speech encoder with any text decoder), not a "
                              "family of its own",
}
BATCHES = ((2, 48), (3, 64))  # (rows, frames or samples) of the two input shapes; Whisper's frames are fixed


def model_types() -> list[str]:
    """The registry's types whose default config is an encoder-decoder, but ``NOT_SPEECH``'s."""
    found = []
    for model_type in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES:
        try:
            default = CONFIG_MAPPING[model_type]()
        except Exception:  # noqa: BLE001  a config without defaults: not one of these
            continue
        if getattr(default, "is_encoder_decoder", False) and model_type not in NOT_SPEECH:
            found.append(model_type)
    return found


def tiny_config(model_type: str):
    config = CONFIG_MAPPING[model_type]()
    _shrink(config, {**SIZES, **SPEECH_SIZES, **OVERRIDES.get(model_type, {})})
    config.pad_token_id, config.decoder_start_token_id = 0, 0
    return config


def tiny_model(model_type: str):
    config = tiny_config(model_type)
    model = getattr(transformers, MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES[model_type])(config)
    return model.eval()


def _feature_width(config) -> int:
    """The features per frame the encoder reads (its config's, however it names them)."""
    for names in (("input_feat_per_channel", "input_channels"), ("feature_projection_input_dim",), ("num_mel_bins",),
                  ("feature_size",), ("input_dim",)):
        if all(getattr(config, n, None) for n in names):
            width = 1
            for name in names:
                width *= getattr(config, name)
            return width
    for name in getattr(config, "sub_configs", None) or {}:  # an encoder config of its own (Canary, Cohere ASR)
        sub = getattr(config, name, None)
        if hasattr(sub, "to_dict") and "encoder" in name:
            return _feature_width(sub)
    raise ValueError(f"{type(config).__name__} names no feature width the test knows")


def encoder_inputs(model, rows: int, length: int, generator) -> dict:
    """The encoder's input of ``rows`` x ``length`` (frames or samples) for ``model``, random, as its main input."""
    config, name = model.config, model.main_input_name
    if name == "input_values":  # a waveform (Moonshine, SpeechT5): its feature encoder's strides need samples
        return {name: torch.randn(rows, length * 64, generator=generator)}
    if name == "input_ids":  # text in, speech out (Dia's dialogue)
        return {name: torch.randint(3, VOCAB, (rows, length // 8), generator=generator)}
    if config.model_type == "whisper":  # channels first, exactly the window its positions cover
        return {name: torch.randn(rows, config.num_mel_bins, 2 * config.max_source_positions, generator=generator)}
    return {name: torch.randn(rows, length, _feature_width(config), generator=generator)}
