"""A T5-style translation model gets its task prefix before every source sentence (issue #45 item 7): the one the
checkpoint's config declares for the study's languages (``task_specific_params``, as transformers' translation
pipeline reads it), or ``models.<study>.source_prefix``; the targets never get it. The reference is the saved
tokenizer itself, called on the prefixed text."""
from __future__ import annotations

import warnings

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

from headprune.models.loading import load_seq2seq

PREFIX = "translate English to French: "
WORDS = ["<pad>", "</s>", "<unk>", "translate", "English", "to", "French", ":", "German", "the", "cat", "le", "chat"]


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("t5")
    vocab = {word: i for i, word in enumerate(WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(folder)
    config = T5Config(vocab_size=len(WORDS), d_model=16, d_kv=4, d_ff=16, num_layers=1, num_heads=4,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                      task_specific_params={"translation_en_to_fr": {"prefix": PREFIX}})
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        T5ForConditionalGeneration(config).save_pretrained(folder)
    return folder


def test_the_prefix_the_checkpoint_declares_goes_before_every_source(t5_folder):
    plain = PreTrainedTokenizerFast.from_pretrained(t5_folder)
    _, tokenizer = load_seq2seq(t5_folder, languages=("en", "fr"))
    assert tokenizer(["the cat", "cat"])["input_ids"] == plain([PREFIX + "the cat", PREFIX + "cat"])["input_ids"]
    assert tokenizer("the cat")["input_ids"] == plain(PREFIX + "the cat")["input_ids"]
    assert tokenizer(text_target=["le chat"])["input_ids"] == plain(text_target=["le chat"])["input_ids"]
    assert tokenizer.decode(plain("the cat")["input_ids"]) == plain.decode(plain("the cat")["input_ids"])
    assert tokenizer.pad_token_id == plain.pad_token_id and len(tokenizer) == len(plain)


def test_a_configured_prefix_wins_and_other_languages_get_none(t5_folder):
    plain = PreTrainedTokenizerFast.from_pretrained(t5_folder)
    _, german = load_seq2seq(t5_folder, languages=("en", "de"))  # the config declares no en->de prefix
    assert german("the cat")["input_ids"] == plain("the cat")["input_ids"]
    _, own = load_seq2seq(t5_folder, languages=("en", "de"), source_prefix="translate English to German: ")
    assert own("the cat")["input_ids"] == plain("translate English to German: the cat")["input_ids"]
    _, none = load_seq2seq(t5_folder, languages=("en", "fr"), source_prefix="")
    assert none("the cat")["input_ids"] == plain("the cat")["input_ids"]


def test_the_study_passes_its_prefix_and_languages_to_the_loader(t5_folder):
    from headprune.evaluation.kinds import kind_of

    plain = PreTrainedTokenizerFast.from_pretrained(t5_folder)
    kind = kind_of("translation")
    _, tokenizer = kind.load_model(t5_folder, "cpu", {"src_lang": "en", "tgt_lang": "fr"}, {})
    assert tokenizer("cat")["input_ids"] == plain(PREFIX + "cat")["input_ids"]
    _, tokenizer = kind.load_model(t5_folder, "cpu", {"src_lang": "en", "tgt_lang": "fr", "source_prefix": ""}, {})
    assert tokenizer("cat")["input_ids"] == plain("cat")["input_ids"]
