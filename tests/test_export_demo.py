"""The demo's models, pruned and exported, load in plain transformers without headprune (issue #33).

The demo's models as ``headprune.demo`` makes them, trained briefly on its data: the translation transformer
written as a fairseq tarball (FSMT, fairseq's post-norm layout), the IWSLT-layout pre-norm transformer (the
authors' layout, ``PreNormTransformer``, all embeddings shared), the tiny BERT and RoBERTa loaded as
classifiers, and the tiny Llama (grouped-query attention) pruned by the ``headprune prune`` command. Each is
loaded as the pipeline loads it, pruned (every attention type of the translation models, layers left with
different head counts), saved with ``save_pruned``, and loaded back in a child that cannot import headprune
(``test_export.run_child``). There, on the demo's own sentences through the saved tokenizer: logits within 1e-5
of the unpruned model with those heads masked in headprune (``gated``), ``generate()`` with the saved
generation config (beam search: the translation models' 5 beams, the Llama's 3) token for token, and the
pruned model's parameter count.
"""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from test_export import child_job, masked_generate, masked_outputs, read_card, run_child
from headprune.demo import corpora, grammar
from headprune.demo import models as demo_models
from headprune.data.batching import translation_batches
from headprune.models.loading import load_model
from headprune.models.prune import prune_heads
from headprune.models.export import save_pruned
from headprune.training.train import corpus_folder, fit_translation_model, write_translation_tarball

ROOT = Path(__file__).resolve().parents[1]
TRANSLATION_REMOVAL = {"enc_self": {0: [0, 2], 1: [3]}, "dec_self": {0: [1], 1: [0, 1, 3]},
                       "enc_dec": {0: [2], 1: [0, 1, 2, 3]}}
CLASSIFIER_REMOVAL = {"enc_self": {0: [1, 2], 1: [0]}}
SEQ2SEQ, CLASSIFIER, CAUSAL_LM = "AutoModelForSeq2SeqLM", "AutoModelForSequenceClassification", "AutoModelForCausalLM"


def headprune_command(*args, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    return subprocess.run([sys.executable, "-m", "headprune.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's models (name -> (path, kind)), its English and French sentences and its WikiText-like text."""
    from headprune.data.wikitext import read_wikitext

    root = tmp_path_factory.mktemp("demo-models")
    corpus = corpora.make_translation_corpus(root / "corpus", 1000, {"newstest2013": 20}, seed=0)
    fsmt = demo_models.train_tiny_translation_model(corpus, root / "demo.en-fr.transformer.tar.bz2", epochs=2,
                                                    progress=False)
    prenorm, _ = fit_translation_model(corpus, epochs=2, normalize_before=True, progress=False)
    prenorm = write_translation_tarball(prenorm, corpus_folder(corpus, "en", "fr"), root / "iwslt.en-fr.tar.bz2",
                                        "iwslt.en-fr.transformer")
    archive = corpora.make_wikitext_corpus(root / "wikitext-2-raw-v1.zip", {"train": 1000}, seed=0)
    text = read_wikitext(archive, "train")
    # the demo's Llama settings (demo/config.yaml: demo.language_model), trained for a few steps only
    llama = demo_models.train_tiny_llama(root / "tiny-llama", text, steps=20, batch_size=4, vocab_size=434,
                                         initializer_range=0.1, max_positions=512, progress=False)
    bert = demo_models.make_tiny_bert(root / "bert-tiny", grammar.demo_vocabulary(), seed=0, progress=False)
    # its byte-level BPE learned on the grammar's English (the demo learns it on the MNLI-like task's)
    roberta = demo_models.make_tiny_roberta(root / "roberta-tiny", corpus["train.en"].read_text().splitlines()[:500])
    sentences = {lang: corpus[f"newstest2013.{lang}"].read_text().splitlines() for lang in ("en", "fr")}
    models = {"fsmt": (fsmt, "translation"), "prenorm": (prenorm, "translation"), "bert": (bert, "classification"),
              "roberta": (roberta, "classification"), "llama": (llama, "language_modeling")}
    return models, sentences, text, root


@pytest.fixture(scope="module")
def exported(demo):
    """name -> (unpruned model, pruned model, heads removed, inputs, folder, child's results); one child for all."""
    models, sentences, text, root = demo
    cases, jobs = {}, []
    for name, removal, auto in [("fsmt", TRANSLATION_REMOVAL, SEQ2SEQ), ("prenorm", TRANSLATION_REMOVAL, SEQ2SEQ),
                                ("bert", CLASSIFIER_REMOVAL, CLASSIFIER), ("roberta", CLASSIFIER_REMOVAL, CLASSIFIER)]:
        path, kind = models[name]
        model, tokenizer = load_model(path, kind)
        if kind == "translation":  # the demo decodes with 5 beams (demo/config.yaml: translation.beam), FSMT's default
            model.generation_config.num_beams = 5
            model.generation_config.max_new_tokens = 64
        pruned = prune_heads(copy.deepcopy(model), removal)  # one load: a classifier's head is initialized anew
        if kind == "translation":
            batch = translation_batches(tokenizer, sentences["en"][:4], sentences["fr"][:4])[0]
            inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "decoder_input_ids")}
        else:
            inputs = dict(tokenizer(sentences["en"][:4], padding=True, return_tensors="pt"))
        folder = save_pruned(pruned, tokenizer, root / f"{name}-pruned")
        generate = ["input_ids", "attention_mask"] if kind == "translation" else None
        job, out = child_job(root, name, auto, folder, inputs, generate, sentences["en"][0])
        jobs.append(job)
        cases[name] = (model, pruned, removal, inputs, folder, out, tokenizer)
    run_child(root, jobs)
    return cases


@pytest.mark.parametrize("name", ["fsmt", "prenorm", "bert", "roberta"])
def test_a_pruned_demo_model_loads_in_plain_transformers(exported, demo, name):
    model, pruned, removal, inputs, folder, out, tokenizer = exported[name]
    got = np.load(out / "output.npy")
    assert np.abs(got - masked_outputs(model, removal, inputs).numpy()).max() <= 1e-5
    parameters = json.loads((out / "parameters.json").read_text())["parameters"]
    assert parameters == sum(p.numel() for p in pruned.parameters()) < sum(p.numel() for p in model.parameters())
    sentence = demo[1]["en"][0]
    assert np.load(out / "tokens.npy").tolist() == tokenizer(sentence)["input_ids"]
    if name in ("fsmt", "prenorm"):
        expected = masked_generate(model, removal, inputs, ["input_ids", "attention_mask"])
        assert np.array_equal(np.load(out / "generated.npy"), expected.numpy())
        assert expected.shape[1] > 4
    front, body = read_card(folder)
    assert front["library_name"] == "transformers" and name in folder.name


def test_the_demo_translation_models_are_fairseqs_two_layouts(exported):
    assert type(exported["fsmt"][0]).__name__ == "FSMTForConditionalGeneration"
    prenorm = exported["prenorm"][0]
    assert type(prenorm).__name__ == "PreNormTransformer" and prenorm.config.tie_word_embeddings
    config = json.loads((exported["prenorm"][4] / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_headprune_seq2seq.PrunedPreNormTransformer"


def test_headprune_prune_exports_the_demo_llama_with_its_model_card(demo, tmp_path):
    """The command prunes 3 of the Llama's 8 heads by importance: a cut between the curve's 25% steps, which
    it scores for the model card. The exported folder loads in plain transformers as the masked model runs."""
    from headprune.analyses.sweeps import evalset_from_text, pruning_curve

    models, _, text, _ = demo
    llama = tmp_path / "tiny-llama"
    llama.mkdir()
    for file in models["llama"][0].iterdir():  # a copy whose generation config decodes with 3 beams
        (llama / file.name).write_bytes(file.read_bytes())
    generation = json.loads((llama / "generation_config.json").read_text())
    (llama / "generation_config.json").write_text(json.dumps({**generation, "num_beams": 3, "max_new_tokens": 8}))
    (tmp_path / "corpus.txt").write_text(text)
    out = tmp_path / "llama-pruned"
    result = headprune_command("prune", llama, "--data", tmp_path / "corpus.txt", "--window", 32, "--max-items", 12,
                               "--percent", 37.5, "--step", 25, "--out", out)
    assert result.returncode == 0, result.stderr

    model, tokenizer = load_model(llama)
    config = json.loads((out / "config.json").read_text())
    removal = {t: {int(layer): heads for layer, heads in layers.items()}
               for t, layers in config["headprune_pruned_heads"].items()}
    removed = [("dec_self", layer, h) for layer, heads in removal["dec_self"].items() for h in heads]
    assert len(removed) == 3
    inputs = dict(tokenizer([text[:120]], return_tensors="pt"))
    job, child_out = child_job(tmp_path, "llama", CAUSAL_LM, out, inputs, ["input_ids", "attention_mask"])
    run_child(tmp_path, [job])
    pruned, _ = load_model(out)
    assert np.abs(np.load(child_out / "output.npy") - masked_outputs(model, removal, inputs).numpy()).max() <= 1e-5
    expected = masked_generate(model, removal, inputs, ["input_ids", "attention_mask"])
    assert np.array_equal(np.load(child_out / "generated.npy"), expected.numpy())
    assert expected.shape[1] == inputs["input_ids"].shape[1] + 8
    parameters = json.loads((child_out / "parameters.json").read_text())["parameters"]
    assert parameters == sum(p.numel() for p in pruned.parameters()) < sum(p.numel() for p in model.parameters())

    front, body = read_card(out)
    assert front["library_name"] == "transformers" and front["pipeline_tag"] == "text-generation"
    assert "base_model" not in front and f"`{llama}` (LlamaForCausalLM) with 3 of its 8 attention heads" in body
    assert "- criterion: `importance`" in body and "- masking while scoring: zero" in body
    curve = pd.read_csv(out / "pruning.csv")
    assert 3 not in curve.heads_pruned.tolist()  # the cut is between the curve's steps: scored for the card
    evalset = evalset_from_text(tokenizer, text, 32, 12)
    cut = pruning_curve(model, tokenizer, evalset, removed, step_percent=100).set_index("heads_pruned").score
    unpruned = curve.set_index("heads_pruned").score[0]
    assert (f"- pruning curve: cut at 37.5% of the heads (3 of 8): perplexity {cut[3]:.4g} (unpruned: "
            f"{unpruned:.4g}), scored on corpus (32-token windows).") in body
    assert "AutoModelForCausalLM.from_pretrained(\"llama-pruned\", trust_remote_code=True)" in body
    for layer, heads in removal["dec_self"].items():
        assert f"| decoder self-attention (dec_self) | {layer} | {4 - len(heads)} of 4 |" in body

