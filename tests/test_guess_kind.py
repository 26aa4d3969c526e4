"""What kind of model a folder holds (``headprune.models.loading.guess_kind``), read from its config.json (issue #45
item 4): a seq2seq or speech-seq2seq class is never a classifier, a decoder-only LM with an audio tower that
transformers also lists as seq2seq (Qwen2-Audio, Voxtral) stays a language model, and a speech-to-text
encoder-decoder (Whisper) loads in its own Auto class.

The reference is each config's own ``is_encoder_decoder`` (as transformers builds it) and the class the model is
saved as: what a user's folder would say.
"""
from __future__ import annotations

import json
import warnings

import pytest
import torch
from transformers.models.auto import modeling_auto
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from tolerances import assert_within_rounding
from headprune.models.loading import guess_kind, seq2seq_class
from headprune.models.prune import load_pruned_weights


def _folder(tmp_path, model_type: str, architecture: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = CONFIG_MAPPING[model_type]()
    folder = tmp_path / f"{model_type}-{architecture}"
    folder.mkdir()
    entries = config.to_dict()
    entries["architectures"] = [architecture]
    (folder / "config.json").write_text(json.dumps(entries, default=str))
    return folder, bool(getattr(config, "is_encoder_decoder", False))


def _classes(table: str) -> list[tuple[str, str]]:
    pairs = []
    for model_type, value in getattr(modeling_auto, table).items():
        for name in (value if isinstance(value, (tuple, list)) else (value,)):
            pairs.append((model_type, name))
    return pairs


def test_every_encoder_decoder_of_the_seq2seq_tables_is_a_translation_model(tmp_path):
    wrong = {}
    for table in ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"):
        for model_type, architecture in _classes(table):
            if model_type not in CONFIG_MAPPING:
                continue
            try:
                folder, encoder_decoder = _folder(tmp_path, model_type, architecture)
            except FileExistsError:
                continue
            except Exception:  # a config that cannot be built from its defaults
                continue
            kind = guess_kind(folder)
            expected = "translation" if encoder_decoder else "language_modeling"
            if kind != expected:
                wrong[architecture] = (kind, expected)
    assert not wrong, wrong


@pytest.mark.parametrize("model_type, architecture, expected", [
    ("whisper", "WhisperForConditionalGeneration", "translation"),
    ("qwen2_audio", "Qwen2AudioForConditionalGeneration", "language_modeling"),
    ("voxtral", "VoxtralForConditionalGeneration", "language_modeling"),
    ("gemma3", "Gemma3ForConditionalGeneration", "language_modeling"),
    ("t5", "T5ForConditionalGeneration", "translation"),
    ("t5", "T5EncoderModel", "classification"),
    ("bart", "BartForSequenceClassification", "classification"),
    ("modernbert", "ModernBertForMaskedLM", "classification"),
    ("bert", "BertLMHeadModel", "language_modeling"),
    ("llama", "LlamaModel", "language_modeling"),
])
def test_kind_of_a_folder(tmp_path, model_type, architecture, expected):
    folder, _ = _folder(tmp_path, model_type, architecture)
    assert guess_kind(folder) == expected


def test_a_whisper_folder_loads_in_the_speech_seq2seq_class(tmp_path):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(vocab_size=96, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                           decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, num_mel_bins=8,
                           max_source_positions=16, max_target_positions=16, pad_token_id=0, bos_token_id=1,
                           eos_token_id=2, decoder_start_token_id=1)
    torch.manual_seed(0)
    WhisperForConditionalGeneration(config).save_pretrained(tmp_path / "whisper")
    assert guess_kind(tmp_path / "whisper") == "translation"
    model = load_pruned_weights(seq2seq_class(tmp_path / "whisper"), tmp_path / "whisper")
    assert type(model).__name__ == "WhisperForConditionalGeneration"


@pytest.mark.parametrize("model_type", ["audioflamingo3", "qwen2_audio"])
def test_an_audio_wrapper_of_a_language_model_loads_in_its_own_class(tmp_path, model_type):
    """AudioFlamingo 3 is listed only by the seq2seq tables, Qwen2-Audio by the multimodal one too: each is a
    language model (its config is no encoder-decoder) and loads as the class it was saved as."""
    from decoder_zoo import tiny_model

    from headprune.models.loading import language_model_class

    model = tiny_model(model_type, wrapper=True)
    model.save_pretrained(tmp_path / model_type)
    assert guess_kind(tmp_path / model_type) == "language_modeling"
    loaded = load_pruned_weights(language_model_class(tmp_path / model_type), tmp_path / model_type)
    assert type(loaded) is type(model)


def test_whisper_is_gated_and_pruned_on_its_heads():
    """Whisper (audio in, text out) through the generic encoder-decoder adapter: its three stacks' heads; a gate of 0
    equals zeroing that head's features at the output projection, by a hook this test places on the module it finds
    itself; the pruned model equals the gated one."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from headprune.models.heads import adapter_for, full_gates, gated
    from headprune.models.prune import prune_heads

    config = WhisperConfig(vocab_size=96, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=16, decoder_ffn_dim=16, num_mel_bins=8,
                           max_source_positions=16, max_target_positions=16, pad_token_id=0, bos_token_id=1,
                           eos_token_id=2, decoder_start_token_id=1)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    features, tokens = torch.randn(2, 8, 32), torch.randint(3, 90, (2, 5))

    def logits():
        with torch.no_grad():
            return model(input_features=features, decoder_input_ids=tokens).logits

    sites = adapter_for(model).sites(model)
    assert [(s.attn_type, s.layer, s.num_heads) for s in sites] == [
        (t, layer, 4) for t in ("enc_self", "enc_dec", "dec_self") for layer in (0, 1)]
    full = logits()
    references = {"enc_self": model.model.encoder.layers[1].self_attn.out_proj,
                  "enc_dec": model.model.decoder.layers[1].encoder_attn.out_proj,
                  "dec_self": model.model.decoder.layers[1].self_attn.out_proj}
    for attn_type, output in references.items():
        def zero_head_2(module, args):
            head = args[0].clone()
            head[..., 2 * 4:3 * 4] = 0  # head 2 of 4, 4 features each
            return (head,)

        handle = output.register_forward_pre_hook(zero_head_2)
        expected = logits()
        handle.remove()
        gates = full_gates(model)
        gates[attn_type][1, 2] = 0
        with gated(model, gates):
            assert_within_rounding(logits(), expected)
        assert (expected - full).abs().max() > 1e-4, attn_type
    gates = full_gates(model)
    for attn_type in gates:
        gates[attn_type][0, 1] = 0
    gates["enc_dec"][1, :] = 0
    with gated(model, gates):
        expected = logits()
    prune_heads(model, {"enc_self": {0: [1]}, "dec_self": {0: [1]}, "enc_dec": {0: [1], 1: [0, 1, 2, 3]}})
    assert_within_rounding(logits(), expected)
