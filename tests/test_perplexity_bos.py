"""Every perplexity window starts as the model expects a text to start (issue #44): with the BOS its tokenizer
puts before a text, as context only, while a tokenizer that adds none gets the windows it always got. The
pipeline's perplexity of a tiny random Gemma 3 against one computed here with plain transformers."""
import json
import math

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from headprune.evaluation.perplexity import (
    load_prepended, load_windows, perplexity, prefix_record_path, save_windows, window_batches, window_nll_variants,
    windows)

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
WORDS = [f"w{i}" for i in range(40)]
VOCAB = {token: i for i, token in enumerate(SPECIALS + WORDS)}
# 300 words drawn from the vocabulary, every one a token: the tests' windows of 16 leave a remainder
TEXT = " ".join(WORDS[(7 * i * i + 3 * i) % len(WORDS)] for i in range(300))


def word_level(template: str | None):
    tokenizer = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    if template is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=template, special_tokens=[(token, VOCAB[token]) for token in ("<bos>", "<eos>")])
    return tokenizer


def gemma_like(template: str = "<bos> $A"):
    """Gemma 3's shape of tokenizer: its post-processor puts <bos> before every text."""
    return PreTrainedTokenizerFast(tokenizer_object=word_level(template), bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def gpt2_like():
    """GPT-2's shape: one special token that is its bos and its eos, added to nothing."""
    return PreTrainedTokenizerFast(tokenizer_object=word_level(None), bos_token="<eos>", eos_token="<eos>",
                                   unk_token="<unk>")


def text_ids(tokenizer, text=TEXT):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def tiny_gemma3(vocab_size: int):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                              sliding_window=8, pad_token_id=VOCAB["<pad>"], bos_token_id=VOCAB["<bos>"],
                              eos_token_id=VOCAB["<eos>"], attn_implementation="eager")
    return Gemma3ForCausalLM(config).eval()


def reference_perplexity(model, bos: int, ids: list[int], window: int) -> float:
    """Plain transformers: each window [bos] + the next window - 1 text tokens, its logits, the cross entropy of
    every text token of it; exp(summed NLL / tokens)."""
    step = window - 1
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - step + 1, step):
            inputs = torch.tensor([[bos] + ids[start:start + step]])
            logits = model(input_ids=inputs).logits[0, :-1].double()
            total += float(torch.nn.functional.cross_entropy(logits, inputs[0, 1:], reduction="sum"))
            count += step
    return math.exp(total / count)


def test_every_window_starts_with_the_bos_and_every_text_token_is_a_target_once():
    tokenizer, window = gemma_like(), 16
    bos, ids = tokenizer.bos_token_id, text_ids(gemma_like())
    chunks = windows(tokenizer, TEXT, window)
    assert len(chunks) == len(ids) // (window - 1) and all(len(chunk) == window for chunk in chunks)
    assert all(chunk[0] == bos for chunk in chunks)
    targets = [token for chunk in chunks for token in chunk[1:]]  # every token after a window's first
    assert bos not in targets
    assert targets == ids[:len(targets)] and len(ids) - len(targets) < window - 1  # once each, in order
    # the first window is the one the protocol always had: the text tokenized with the tokenizer's defaults
    assert chunks[0] == tokenizer(TEXT)["input_ids"][:window]
    assert windows(tokenizer, TEXT, window, max_windows=3) == chunks[:3]


def test_a_tokenizer_that_adds_no_bos_gets_the_old_windows():
    tokenizer, window = gpt2_like(), 16
    assert tokenizer.bos_token_id == tokenizer.eos_token_id is not None  # named, never added
    ids = tokenizer(TEXT)["input_ids"]
    assert windows(tokenizer, TEXT, window) == [ids[start:start + window]
                                                 for start in range(0, len(ids) - window + 1, window)]


def test_pipeline_perplexity_of_a_gemma3_equals_plain_transformers(tmp_path):
    """save_windows -> load_windows -> window_batches -> window_nll_variants -> perplexity, against the
    reference; the windows of the old protocol (the BOS once) score otherwise."""
    tokenizer, window = gemma_like(), 16
    model = tiny_gemma3(len(VOCAB))
    count = save_windows(tokenizer, TEXT, window, tmp_path / "test.npy")
    chunks = load_windows(tmp_path / "test.npy")
    assert len(chunks) == count
    outputs = window_nll_variants(model, window_batches(chunks, batch_size=4), [None])[0]
    assert all(n == window - 1 for _, n in outputs)
    expected = reference_perplexity(model, tokenizer.bos_token_id, text_ids(tokenizer), window)
    assert perplexity(outputs) == pytest.approx(expected, rel=1e-5)
    ids = tokenizer(TEXT)["input_ids"]
    once = [ids[start:start + window] for start in range(0, len(ids) - window + 1, window)]
    old = perplexity(window_nll_variants(model, window_batches(once, batch_size=4), [None])[0])
    assert old != pytest.approx(perplexity(outputs), rel=1e-4)


def test_the_record_of_what_was_prepended_round_trips(tmp_path):
    save_windows(gemma_like(), TEXT, 16, tmp_path / "test.npy")
    assert load_prepended(tmp_path / "test.npy") == [VOCAB["<bos>"]]
    record = json.loads(prefix_record_path(tmp_path / "test.npy").read_text())
    assert record == {"window": 16, "prepended": [VOCAB["<bos>"]], "prepended_tokens": ["<bos>"]}
    assert np.load(tmp_path / "test.npy", allow_pickle=False).dtype == np.int64  # the array as before
    save_windows(gpt2_like(), TEXT, 16, tmp_path / "gpt2.npy")
    assert load_prepended(tmp_path / "gpt2.npy") == []
    # written over an older record: never a stale one
    save_windows(gpt2_like(), TEXT, 16, tmp_path / "test.npy")
    assert load_prepended(tmp_path / "test.npy") == []
    np.save(tmp_path / "older.npy", np.zeros((2, 16), dtype=np.int64))  # saved before the record existed
    assert load_prepended(tmp_path / "older.npy") is None


def test_an_eos_the_tokenizer_appends_ends_the_document_once():
    """The text is one document: the EOS after it stays its last token, a target of the last window only when
    that window reaches it; no window gets an EOS of its own."""
    tokenizer, window = gemma_like("<bos> $A <eos>"), 16
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    document = text_ids(tokenizer) + [eos]
    assert tokenizer(TEXT)["input_ids"] == [bos] + document
    chunks = windows(tokenizer, TEXT, window)
    targets = [token for chunk in chunks for token in chunk[1:]]
    assert all(chunk[0] == bos for chunk in chunks) and targets == document[:len(targets)]
    assert (len(document) % (window - 1) == 0) == (eos in targets)
    # a text whose document fills its windows exactly: the EOS is the last window's last target, once
    words = TEXT.split()
    exact = " ".join(words[:len(words) - len(words) % (window - 1) - 1])
    chunks = windows(tokenizer, exact, window)
    targets = [token for chunk in chunks for token in chunk[1:]]
    assert targets == text_ids(tokenizer, exact) + [eos] and targets.count(eos) == 1 and chunks[-1][-1] == eos


def test_a_tokenizer_of_ones_own_without_the_option_is_read_from_its_bos():
    """A plain callable: it adds its bos_token_id when the text's ids start with it; without one, nothing."""

    class Words:
        bos_token_id = 1

        def __call__(self, text, return_attention_mask=False):
            return {"input_ids": [self.bos_token_id] + [3 + len(word) for word in text.split()]}

    class Plain(Words):
        bos_token_id = None

        def __call__(self, text, return_attention_mask=False):
            return {"input_ids": [3 + len(word) for word in text.split()]}

    ids = Plain()(TEXT)["input_ids"]
    with_bos = windows(Words(), TEXT, 8)
    targets = [token for chunk in with_bos for token in chunk[1:]]
    assert all(chunk[0] == 1 for chunk in with_bos) and targets == ids[:len(targets)] and len(ids) - len(targets) < 7
    assert windows(Plain(), TEXT, 8) == [ids[start:start + 8] for start in range(0, len(ids) - 8 + 1, 8)]


def test_a_window_must_leave_room_for_text_after_the_bos():
    with pytest.raises(ValueError, match="at least 2 tokens"):
        windows(gemma_like(), TEXT, 1)
    assert [len(chunk) for chunk in windows(gemma_like(), TEXT, 2, max_windows=2)] == [2, 2]
    with pytest.raises(ValueError, match="fewer than one window"):
        windows(gemma_like(), "w1 w2", 16)


RUNNER = """
import json, runpy, sys, types

job = json.loads(sys.argv[1])
snakemake = types.SimpleNamespace(input=types.SimpleNamespace(**job["input"]), output=job["output"], log=job["log"],
                                  params=types.SimpleNamespace(**job["params"]), rule="tokenize_corpus", config={})
runpy.run_path(job["script"], init_globals={"snakemake": snakemake}, run_name="__main__")
"""


@pytest.mark.parametrize("make", [gemma_like, gpt2_like])
def test_tokenize_corpus_records_and_logs_what_every_window_starts_with(tmp_path, make):
    """The rule's script, as Snakemake runs it: its output folder (the rule's one declared output) holds each
    split's windows and their record, and its log says what was prepended."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    tokenizer = make()
    tokenizer.save_pretrained(tmp_path / "model")
    tiny_gemma3(len(VOCAB)).config.save_pretrained(tmp_path / "model")  # a model folder: its config says its kind
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "test.txt").write_text(TEXT, encoding="utf-8")
    job = {"script": str(root / "scripts" / "tokenize_corpus.py"),
           "input": {"model": str(tmp_path / "model"), "corpus": str(tmp_path / "corpus")},
           "output": [str(tmp_path / "windows")], "log": [str(tmp_path / "tokenize.log")],
           "params": {"tokenize": {"window": 16, "splits": ["test"]}}}
    result = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(job)], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)}, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:] + (tmp_path / "tokenize.log").read_text()[-3000:]
    assert sorted(p.name for p in (tmp_path / "windows").iterdir()) == ["test.json", "test.npy"]
    assert load_windows(tmp_path / "windows" / "test.npy") == windows(tokenizer, TEXT, 16)
    log = (tmp_path / "tokenize.log").read_text()
    if make is gemma_like:
        assert load_prepended(tmp_path / "windows" / "test.npy") == [tokenizer.bos_token_id]
        assert f"each starts with ['<bos>'] (ids [{tokenizer.bos_token_id}]), then 15 text tokens" in log
    else:
        assert load_prepended(tmp_path / "windows" / "test.npy") == []
        assert "the tokenizer adds no BOS: nothing prepended" in log
