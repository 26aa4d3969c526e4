"""Every encoder-decoder of transformers' speech seq2seq registry (MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES: Whisper,
Moonshine, Speech2Text, Canary, ...) through the generic encoder-decoder adapter (issue #58).

Each model type is a tiny random model (tests/speech_zoo.py: 2 layers per stack, 4 heads; a random log-mel
spectrogram or waveform in), and the checks are tests/test_seq2seq_families.py's ``check_family``: the heads of the
three stacks are the attention modules the test finds by its own rules, a gate of 0 equals zeroing the head's input
features of the output projection, the masking modes run or are refused saying why, the pruned model (a layer of
each stack left without heads) equals the gated one and generates the same tokens (greedy), save_pruned and
load_pruned_weights give the same logits, and the exported folder loads as its users load it,
``AutoModelForSpeechSeq2Seq.from_pretrained(folder, trust_remote_code=True)``, with headprune blocked from import,
giving the pruned model's logits and generate() on two input shapes.

docs/models.md's "Speech encoder-decoder families" table holds the outcomes: this test fails when a type it lists as
passing no longer passes, and rewrites the table with HEADPRUNE_WRITE_MODELS_TABLE=1.
"""
from __future__ import annotations

import os
import textwrap

import torch

import registry_checks
import speech_zoo
import test_seq2seq_families as text
from speech_zoo import BATCHES, NOT_SPEECH, model_types

BEGIN = "<!-- speech-seq2seq-families: begin (tests/test_speech_seq2seq_families.py) -->"
END = "<!-- speech-seq2seq-families: end -->"
AUTO = "AutoModelForSpeechSeq2Seq"


def _batches(model) -> list:
    """Two batches of different shapes (rows, frames or samples; decoder length): (the encoder's input, the decoder's
    ids)."""
    generator = torch.Generator().manual_seed(0)
    return [(speech_zoo.encoder_inputs(model, rows, length, generator), text._decoder_ids(rows, 4 + i, generator))
            for i, (rows, length) in enumerate(BATCHES)]


SPEECH = text.Zoo(speech_zoo.tiny_model, speech_zoo.tiny_config, _batches, AUTO)


def check_family(model_type, folder):
    return text.check_family(model_type, folder, SPEECH)


def family_table(tmp_path) -> dict[str, tuple[str, str]]:
    return registry_checks.family_table(model_types(), check_family, text.generic_adapter, text.EXPORT_CHECK, tmp_path)


def render(results: dict[str, tuple[str, str]]) -> str:
    counts = {o: sum(1 for v, _ in results.values() if v == o) for o in text.OUTCOMES}
    left_out = "; ".join(f"{t}: {why}" for t, why in NOT_SPEECH.items())
    intro = (f"{len(results)} model types of transformers' speech seq2seq registry (MODEL_FOR_SPEECH_SEQ_2_SEQ_"
             "MAPPING_NAMES) whose default config is an encoder-decoder (the decoder-only audio LMs of that registry "
             "are not: those the multimodal table lists are rows of the decoder wrappers' table), through the "
             "generic encoder-decoder adapter, exported and loaded "
             f"with `{AUTO}` with headprune blocked; left out: {left_out}. "
             + ", ".join(f"{n} {o}" for o, n in counts.items()) + ".")
    lines = [BEGIN, "", *textwrap.wrap(intro, 115), "", "| model type | outcome | why / what is refused |",
             "|---|---|---|"]
    rows = [f"| {t} | {o} | {d.replace('|', '/')} |" for t, (o, d) in sorted(results.items())]
    return "\n".join(lines + rows + ["", END])


def test_every_speech_encoder_decoder_of_the_registry(tmp_path):
    results = family_table(tmp_path)
    if os.environ.get("HEADPRUNE_WRITE_MODELS_TABLE"):
        registry_checks.write_block(BEGIN, END, render(results))
    lost = {t: results.get(t, ("gone", "")) for t, outcome in registry_checks.documented(BEGIN, END).items()
            if outcome == "passes" and results.get(t, ("",))[0] != "passes"}
    assert not lost, f"types that passed no longer pass: {lost}"
    for must in ("whisper", "speech_to_text", "moonshine"):
        assert results[must][0] == "passes", (must, results[must])


# --- A Whisper at tiny.en's head geometry, as a user prunes and exports it -----------------------------------------

TINY_EN = dict(d_model=384, encoder_attention_heads=6, decoder_attention_heads=6, encoder_ffn_dim=1536,
               decoder_ffn_dim=1536, num_mel_bins=80, max_target_positions=448)
# tiny.en has 4 layers per stack, 51,864 tokens and 30-second windows (3,000 frames, 1,500 positions): 2 layers, 1,024
# tokens and 5-second windows here keep the test fast; each layer keeps its own heads
WINDOW = 250  # max_source_positions: the encoder reads 2 x 250 frames
FRAMES = 2 * WINDOW
FREE_LAYOUT = [("enc_self", 0, 1), ("enc_self", 0, 4), ("enc_self", 1, 5), ("dec_self", 0, 0),
               ("dec_self", 1, 2), ("dec_self", 1, 3), ("enc_dec", 0, 3), ("enc_dec", 1, 0), ("enc_dec", 1, 1)]
LOAD_AS_USERS_DO = textwrap.dedent("""
    import json, sys, torch, warnings
    warnings.simplefilter("ignore")
    sys.modules["headprune"] = None  # headprune blocked from import: only the folder's own files run
    from transformers import AutoModelForSpeechSeq2Seq
    expected = torch.load(sys.argv[1] + "/expected.pt")
    model = AutoModelForSpeechSeq2Seq.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    for features, decoder_ids, logits, tokens in zip(*(expected[k] for k in ("features", "decoder_ids", "logits",
                                                                              "tokens"))):
        with torch.no_grad():
            got = model(input_features=features, decoder_input_ids=decoder_ids).logits
            generated = model.generate(features, max_new_tokens=6, do_sample=False, num_beams=1)
        print(json.dumps([type(model).__name__, list(features.shape), float((got - logits).abs().max()),
                          torch.equal(generated, tokens)]), flush=True)
""")


def test_a_pruned_whisper_loads_as_whisper_is_loaded_without_headprune(tmp_path):
    """load_model, remove_heads (each layer of each stack its own heads), save_pruned: the folder loads with
    AutoModelForSpeechSeq2Seq (the class Whisper's users call, and the card's), headprune blocked from import, as
    WhisperForConditionalGeneration with the pruned attentions, and gives the pruned model's logits and greedy
    generate() on two batch sizes of log-mel windows (80 mel bins x 500 frames)."""
    import json
    import subprocess
    import sys

    from transformers import WhisperConfig, WhisperForConditionalGeneration

    import headprune as hp

    config = WhisperConfig(vocab_size=1024, encoder_layers=2, decoder_layers=2, decoder_start_token_id=1,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2, begin_suppress_tokens=None,
                           suppress_tokens=None, max_source_positions=WINDOW, **TINY_EN)
    torch.manual_seed(0)
    WhisperForConditionalGeneration(config).save_pretrained(tmp_path / "whisper")
    model, _ = hp.load_model(tmp_path / "whisper")
    generator = torch.Generator().manual_seed(0)
    features = [torch.randn(rows, 80, FRAMES, generator=generator) for rows in (1, 2)]
    decoder_ids = [torch.randint(3, 1024, (rows, length), generator=generator) for rows, length in ((1, 5), (2, 9))]
    with torch.no_grad():
        unpruned = model(input_features=features[0], decoder_input_ids=decoder_ids[0]).logits
    pruned = hp.remove_heads(model, FREE_LAYOUT)
    with torch.no_grad():
        logits = [pruned(input_features=f, decoder_input_ids=d).logits for f, d in zip(features, decoder_ids)]
        tokens = [pruned.generate(f, max_new_tokens=6, do_sample=False, num_beams=1) for f in features]
    assert float((logits[0] - unpruned).abs().max()) > 1e-3  # the heads removed change what it computes
    folder = hp.save_pruned(pruned, None, tmp_path / "pruned")
    assert json.loads((folder / "config.json").read_text())["auto_map"]["AutoModelForSpeechSeq2Seq"] == \
        "modeling_headprune_seq2seq.PrunedWhisperForConditionalGeneration"
    card = (folder / "README.md").read_text()
    assert "model = AutoModelForSpeechSeq2Seq.from_pretrained(" in card and \
        "pipeline_tag: automatic-speech-recognition" in card
    torch.save({"features": features, "decoder_ids": decoder_ids, "logits": logits, "tokens": tokens},
               folder / "expected.pt")
    run = subprocess.run([sys.executable, "-c", LOAD_AS_USERS_DO, str(folder)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600, env={**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": "1"})
    answers = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(answers) == 2, run.stderr[-2000:]
    for (name, shape, gap, same_tokens), rows in zip(answers, (1, 2)):
        assert name == "PrunedWhisperForConditionalGeneration" and shape == [rows, 80, FRAMES], (name, shape)
        assert gap < 1e-4, f"{rows} rows: the export's logits differ from the pruned model's by {gap:.1e}"
        assert same_tokens, f"{rows} rows: generate() differs"
