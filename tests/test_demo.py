"""Tests for headprune.demo: the offline demo's synthetic data and tiny models.

The models are trained for real here (small sizes: about 30 s on 2 CPU cores in all), because
what matters is that they learn: the demo's ablation and pruning results are only meaningful
if the tiny models reach a useful score.
"""
import collections
import copy
import difflib
import hashlib
import json
import random
import re
import zipfile

import pytest
import sacrebleu
import torch
from transformers import AutoTokenizer, BertForSequenceClassification, BertTokenizer

from headprune.data import bpe
from headprune.data.batching import classification_batches
from headprune.data.glue import GLUE_TASKS, prepare_glue_task, read_glue_split
from headprune.demo import classification, corpora, grammar, passkey
from headprune.demo import models as demo_models
from headprune.evaluation.evaluate import predict_classes, translate
from headprune.models.fairseq import build_fsmt_tokenizer, load_fairseq_translation_model
from headprune.training import train
from headprune.training.finetune import finetune_bert_classifier

TEST_SETS = {"newstest2013": 100, "mtnt": 60}


def _read(path):
    return path.read_text(encoding="utf-8").splitlines()


# ----------------------------------------------------------------------------------------------
# Translation data and BPE


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return corpora.make_translation_corpus(tmp_path_factory.mktemp("corpus"), 2000, TEST_SETS, seed=0)


def test_translation_corpus_is_deterministic(tmp_path):
    first = corpora.make_translation_corpus(tmp_path / "a", 300, {"newstest2013": 20}, seed=3)
    second = corpora.make_translation_corpus(tmp_path / "b", 300, {"newstest2013": 20}, seed=3)
    other = corpora.make_translation_corpus(tmp_path / "c", 300, {"newstest2013": 20}, seed=4)
    assert first.keys() == second.keys()
    for name in first:
        assert first[name].read_bytes() == second[name].read_bytes(), name
    assert first["train.en"].read_bytes() != other["train.en"].read_bytes()


def test_translation_corpus_layout(corpus):
    expected = {"train.en", "train.fr", "bpecodes", "dict.en.txt", "dict.fr.txt"}
    expected |= {f"{name}.{lang}" for name in TEST_SETS for lang in ("en", "fr")}
    assert set(corpus) == expected
    assert len(_read(corpus["train.en"])) == len(_read(corpus["train.fr"])) == 2000
    training = set(_read(corpus["train.en"]))
    for name, size in TEST_SETS.items():
        sources, references = _read(corpus[f"{name}.en"]), _read(corpus[f"{name}.fr"])
        assert len(sources) == len(references) == size
        assert not training & set(sources), "test sentences must not repeat training sentences"
    for line in _read(corpus["train.en"]):
        assert 4 <= len(line.split()) <= 12 and line.endswith(".") and not line.endswith(" .")

    def mean_words(name):
        return sum(len(line.split()) for line in _read(corpus[f"{name}.en"])) / TEST_SETS[name]

    assert mean_words("mtnt") > mean_words("newstest2013") + 2  # the shifted set is longer

    assert _read(corpus["bpecodes"])[0] == "#version: 0.2"
    assert corpus["dict.en.txt"].read_bytes() == corpus["dict.fr.txt"].read_bytes()  # joined
    counts = [int(line.rsplit(" ", 1)[1]) for line in _read(corpus["dict.en.txt"])]
    assert counts == sorted(counts, reverse=True)


def test_translation_rules():
    sampler = grammar._SentenceSampler(random.Random(0))
    for _ in range(200):
        english, french = sampler.sentence()
        assert len(english.split()) == len(french.split())  # one target word per source word
    # adjective-noun swap, gender agreement of determiner and adjective, numbers copied
    sampler.rng = random.Random(5)
    examples = {sampler.sentence() for _ in range(3000)}
    assert ("ze frell blicket gorps 17 dax.", "la bliquette frelloise gorpa 17 daxon.") in examples or any(
        "la bliquette frelloise" in french for _, french in examples)
    for english, french in examples:
        if "ze frell blicket" in english:
            assert "la bliquette frelloise" in french
        if "ak quom dax" in english:
            assert "un daxon comant" in french
    assert grammar.word_by_word_translation("ze frell blicket gorps 17 dax.") == "lo frellois bliquette gorpa 17 daxon."


def test_learn_bpe_follows_subword_nmt():
    # Sennrich et al.'s example: (e, s) and (s, t</w>) tie at 9; subword-nmt takes the larger pair.
    merges = bpe.learn_bpe({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 10)
    assert merges[0] == ("s", "t</w>")
    assert merges[1] == ("e", "st</w>")
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    for word in ("newest", "lowest", "widest", "zzz"):
        pieces = bpe.bpe_segment(word, ranks)
        assert "".join(p.removesuffix("@@") for p in pieces) == word
        assert all(p.endswith("@@") for p in pieces[:-1]) and not pieces[-1].endswith("@@")


def test_bpe_codes_apply_through_fsmt_tokenizer(corpus):
    folder = corpus["bpecodes"].parent
    english, french = build_fsmt_tokenizer(folder, "en", "fr"), build_fsmt_tokenizer(folder, "fr", "en")
    merges = [tuple(line.split()) for line in _read(corpus["bpecodes"])[1:]]
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    split_words = 0
    for tokenizer, lang in ((english, "en"), (french, "fr")):
        for name in ("train", *TEST_SETS):
            for line in _read(corpus[f"{name}.{lang}"])[:150]:
                ids = tokenizer(line)["input_ids"]
                assert tokenizer.unk_token_id not in ids, line
                assert tokenizer.decode(ids, skip_special_tokens=True) == line
                # FSMTTokenizer's BPE gives the same segmentation as the demo's own segmenter
                expected = [piece for word in line[:-1].split() + ["."] for piece in bpe.bpe_segment(word, ranks)]
                fsmt = [t[: -len("</w>")] if t.endswith("</w>") else t + "@@" for t in tokenizer.tokenize(line)]
                assert fsmt == expected
                split_words += sum(piece.endswith("@@") for piece in expected)
    assert split_words > 0, "the codes should leave some (rare) words split"


# ----------------------------------------------------------------------------------------------
# The tiny translation model


def test_tiny_translation_model_learns_and_round_trips(corpus, tmp_path):
    settings = dict(epochs=6, seed=0, progress=False)
    tarball = demo_models.train_tiny_translation_model(corpus, tmp_path / "demo.en-fr.tar.bz2", **settings)
    assert tarball.name == "demo.en-fr.tar.bz2" and tarball.is_file()
    loaded, tokenizer = load_fairseq_translation_model(tarball, extract_dir=tmp_path / "extracted")
    assert loaded.config.encoder_attention_heads == 4 and loaded.config.encoder_layers == 2

    sources, references = _read(corpus["newstest2013.en"]), _read(corpus["newstest2013.fr"])
    hypotheses = translate(loaded, tokenizer, sources, beam=5)
    bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    copy_bleu = sacrebleu.corpus_bleu(sources, [references]).score
    word_by_word_bleu = sacrebleu.corpus_bleu([grammar.word_by_word_translation(s) for s in sources], [references]).score
    assert copy_bleu < 5
    assert bleu > 50 and bleu > word_by_word_bleu + 10, (bleu, word_by_word_bleu)

    # Training is deterministic, and the tarball holds exactly the trained model.
    trained, trained_tokenizer = train.fit_translation_model(corpus, **settings)
    batch = trained_tokenizer(sources[:8], return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[2, 10, 11, 12]] * 8)
    with torch.no_grad():
        expected = trained(**batch, decoder_input_ids=decoder_input_ids, use_cache=False).logits
        actual = loaded(**batch, decoder_input_ids=decoder_input_ids, use_cache=False).logits
    assert torch.equal(expected, actual)
    assert translate(trained, trained_tokenizer, sources[:20]) == hypotheses[:20]


def test_training_leaves_the_thread_count_alone(corpus, tmp_path):
    before = torch.get_num_threads()
    train.fit_translation_model(corpus, epochs=1, layers=1, d_model=16, ffn=16, num_threads=1, progress=False)
    assert torch.get_num_threads() == before


# ----------------------------------------------------------------------------------------------
# Classification tasks


def test_classification_task_files(tmp_path):
    paths = classification.make_classification_task(tmp_path / "mnli", "mnli", 300, 90, 60, seed=1)
    again = classification.make_classification_task(tmp_path / "again", "mnli", 300, 90, 60, seed=1)
    assert set(paths) == {"train", "dev", "dev_mismatched", "glue_zip", "glue_task"}
    for name in ("train", "dev", "dev_mismatched", "glue_zip"):
        assert paths[name].read_bytes() == again[name].read_bytes(), name
    assert paths["glue_zip"].name == "MNLI.zip"

    pairs, labels = read_glue_split(paths["train"])
    assert _read(paths["train"])[0] == "text_a\ttext_b\tlabel"
    assert collections.Counter(labels) == {0: 100, 1: 100, 2: 100}  # balanced
    mismatched, _ = read_glue_split(paths["dev_mismatched"])
    assert sum(len(a.split()) for a, _ in mismatched) / 60 > sum(len(a.split()) for a, _ in pairs) / 300 + 4

    # The raw GLUE-format archive goes through the real download-and-normalize code.
    task = json.loads(paths["glue_task"].read_text())
    counts = prepare_glue_task(task, tmp_path / "raw", tmp_path / "normalized")
    assert counts == {"train": 300, "dev": 90, "dev_mismatched": 60}
    for split in counts:
        assert (tmp_path / "normalized" / f"{split}.tsv").read_bytes() == paths[split].read_bytes()

    sst2 = classification.make_classification_task(tmp_path / "sst2", "sst2", 100, 40, seed=1)
    assert set(sst2) == {"train", "dev", "glue_zip", "glue_task"} and sst2["glue_zip"].name == "SST-2.zip"
    assert prepare_glue_task(json.loads(sst2["glue_task"].read_text()), tmp_path / "raw2", tmp_path / "n2") == {
        "train": 100, "dev": 40}
    texts, sst2_labels = read_glue_split(sst2["train"])
    assert all(b == "" for _, b in texts) and collections.Counter(sst2_labels) == {0: 50, 1: 50}
    with pytest.raises(ValueError):
        classification.make_classification_task(tmp_path / "x", "qqp", 10, 10)


def test_mnli_labels_follow_the_rule(tmp_path):
    paths = classification.make_classification_task(tmp_path, "mnli", 600, 10, 200, seed=2)
    names = ["contradiction", "entailment", "neutral"]  # headprune.data.glue.GLUE_TASKS["MNLI"]
    for split in ("train", "dev_mismatched"):
        for (premise, hypothesis), label in zip(*read_glue_split(paths[split])):
            match = re.fullmatch(r"(ze|ak) (\w+) iz (nok )?(\w+)\.", hypothesis)
            assert match, hypothesis
            _, noun, negation, adjective = match.groups()
            premise_words = premise[:-1].split()
            assert noun in premise_words
            if adjective in premise_words:
                # the premise gives this noun this adjective ("... frell dax ...")
                assert any(w == adjective and premise_words[i + 1] == noun for i, w in enumerate(premise_words))
                assert names[label] == ("contradiction" if negation else "entailment")
            else:
                assert names[label] == "neutral"


def test_sst2_labels_follow_the_rule(tmp_path):
    paths = classification.make_classification_task(tmp_path, "sst2", 300, 10, seed=2)
    for (sentence, _), label in zip(*read_glue_split(paths["train"])):
        words = sentence[:-1].split()
        score = 0
        for i, word in enumerate(words):
            if word in grammar.ADJECTIVES:
                polarity = 1 if word in classification.POSITIVE_ADJECTIVES else -1
                score += -polarity if i > 0 and words[i - 1] == grammar.NEGATION else polarity
        assert score != 0 and label == int(score > 0)


def _local(path):
    """A url and sha256 for a local file, as a config would give them."""
    return {"url": path.resolve().as_uri(), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def test_cola_task_goes_through_the_real_cola_spec(tmp_path):
    paths = classification.make_classification_task(tmp_path / "cola", "cola", 600, 200, seed=1)
    assert set(paths) == {"train", "dev", "glue_zip", "glue_task"} and paths["glue_zip"].name == "CoLA.zip"
    task = copy.deepcopy(GLUE_TASKS["CoLA"]) | _local(paths["glue_zip"])  # only where the archive is
    assert json.loads(paths["glue_task"].read_text()) == task
    assert prepare_glue_task(task, tmp_path / "raw", tmp_path / "normalized") == {"train": 600, "dev": 200}
    for split, size in (("train", 600), ("dev", 200)):
        assert (tmp_path / "normalized" / f"{split}.tsv").read_bytes() == paths[split].read_bytes()
        texts, labels = read_glue_split(paths[split])
        assert collections.Counter(labels) == {1: round(0.7 * size), 0: size - round(0.7 * size)}  # CoLA: 70%
        assert all(b == "" and a.endswith(".") for a, b in texts)
    # CoLA's own layout: no header; source, label, label_notes ("*" when unacceptable), sentence
    with zipfile.ZipFile(paths["glue_zip"]) as archive:
        assert sorted(archive.namelist()) == ["CoLA/dev.tsv", "CoLA/train.tsv"]
        lines = archive.read("CoLA/train.tsv").decode().splitlines()
    texts, labels = read_glue_split(paths["train"])
    assert [line.split("\t") for line in lines] == [
        ["demo19", str(label), "" if label else "*", text] for (text, _), label in zip(texts, labels)]


# The cola grammar, written again as a regular expression over word classes (see headprune/demo/classification.py).
_WORD_CLASS = {**dict.fromkeys(grammar.DETERMINERS, "D"), **dict.fromkeys(grammar.ADJECTIVES, "A"),
               **dict.fromkeys(grammar.NOUNS, "N"), **dict.fromkeys(grammar.VERBS, "V"),
               **dict.fromkeys(grammar.PREPOSITIONS, "P"), "nok": "K", "ond": "C"}
_NP = "D(K?A)?N"
_CLAUSE = f"{_NP}V({_NP}(P{_NP})?)?"


def _grammatical(sentence):
    assert sentence.endswith(".") and not sentence.endswith(" .")
    return re.fullmatch(f"{_CLAUSE}(C{_CLAUSE})*", "".join(_WORD_CLASS[w] for w in sentence[:-1].split())) is not None


def test_cola_labels_follow_the_grammar(tmp_path):
    paths = classification.make_classification_task(tmp_path, "cola", 1000, 10, seed=2)
    texts, labels = read_glue_split(paths["train"])
    for (sentence, _), label in zip(texts, labels):
        assert _grammatical(sentence) == bool(label), (sentence, label)
    # "nok" is no giveaway: acceptable sentences have it too (before adjectives)
    assert any("nok" in s.split() for (s, _), label in zip(texts, labels) if label)
    # Some errors need a whole clause to be seen: every pair of neighbouring word classes also
    # occurs in acceptable sentences ("ze dax om ak wug gorps.", a clause without its verb).
    def class_bigrams(sentence):
        classes = "^" + "".join(_WORD_CLASS[w] for w in sentence[:-1].split()) + "$"
        return set(zip(classes, classes[1:]))

    legal = set().union(*(class_bigrams(s) for (s, _), label in zip(texts, labels) if label))
    unacceptable = [s for (s, _), label in zip(texts, labels) if not label]
    only_legal_pairs = sum(class_bigrams(s) <= legal for s in unacceptable)
    assert 0.1 < only_legal_pairs / len(unacceptable) < 0.5, only_legal_pairs


def test_mrpc_task_goes_through_the_real_mrpc_spec(tmp_path):
    paths = classification.make_classification_task(tmp_path / "mrpc", "mrpc", 600, 150, seed=1)
    files = ("msr_paraphrase_train", "msr_paraphrase_test", "mrpc_dev_ids")
    assert set(paths) == {"train", "dev", "test", "glue_task", *files}
    assert [paths[key].name for key in files] == ["msr_paraphrase_train.txt", "msr_paraphrase_test.txt",
                                                  "mrpc_dev_ids.tsv"]
    task = copy.deepcopy(GLUE_TASKS["MRPC"])
    for key in files:  # only where the files are
        task["files"][key] = _local(paths[key])
    assert json.loads(paths["glue_task"].read_text()) == task
    counts = prepare_glue_task(task, tmp_path / "raw", tmp_path / "normalized")
    assert counts == {"train": 600, "dev": 150, "test": 150}
    for split, size in counts.items():
        assert (tmp_path / "normalized" / f"{split}.tsv").read_bytes() == paths[split].read_bytes()
        _, labels = read_glue_split(paths[split])
        assert collections.Counter(labels) == {1: round(2 * size / 3), 0: size - round(2 * size / 3)}  # MRPC: 2/3

    # SentEval's layout, and GLUE's dev split: the train file's rows whose id pair is listed
    raw = paths["msr_paraphrase_train"].read_bytes()
    assert raw.startswith(b"\xef\xbb\xbfQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    rows = [line.split("\t") for line in raw.decode("utf-8-sig").splitlines()[1:]]
    assert len(rows) == 750 and all(len(row) == 5 for row in rows)
    assert len(_read(paths["msr_paraphrase_test"])) == 1 + 150
    dev_ids = {tuple(line.split("\t")) for line in _read(paths["mrpc_dev_ids"])}
    assert len(dev_ids) == 150
    all_ids = [id_ for row in rows for id_ in row[1:3]]
    assert len(set(all_ids)) == len(all_ids) and all(id_.isdigit() for id_ in all_ids)
    for split, selected in (("dev", [r for r in rows if tuple(r[1:3]) in dev_ids]),
                            ("train", [r for r in rows if tuple(r[1:3]) not in dev_ids])):
        texts, labels = read_glue_split(paths[split])
        assert [(row[3], row[4], int(row[0])) for row in selected] == [(a, b, y) for (a, b), y in zip(texts, labels)]
    assert 0 < [tuple(r[1:3]) in dev_ids for r in rows].index(True) < 600  # dev rows are spread through the file


def _facts(sentence):
    """The multiset of (noun, adjective, negated) a sentence states: "ze frell dax" and
    "ze dax ... ond ze dax iz frell" both state (dax, frell, False); a bare noun has (noun, None, False)."""
    facts, described = {}, {}
    for clause in sentence[:-1].split(" ond "):
        words = clause.split()
        if words[2] == "iz":  # "ze NOUN iz [nok] ADJ"
            described[words[1]] = (words[-1], words[-2] == "nok")
            continue
        adjective, negated = None, False
        for word in words:
            if word == "nok":
                negated = True
            elif word in grammar.ADJECTIVES:
                adjective = word
            elif word in grammar.NOUNS:
                assert word not in facts
                facts[word], adjective, negated = (adjective, negated), None, False
    for noun, fact in described.items():
        assert facts[noun] == (None, False), sentence  # a noun's adjective is said in one place
        facts[noun] = fact
    return collections.Counter((noun, *fact) for noun, fact in facts.items())


def _near_copy(first, second):
    """Sentence 2 is sentence 1 with one word replaced, added or removed, and nothing else."""
    first, second = first.split(), second.split()
    opcodes = difflib.SequenceMatcher(a=first, b=second, autojunk=False).get_opcodes()
    edits = [(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in opcodes if tag != "equal"]
    return len(edits) == 1 and max(edits[0]) == 1


def test_mrpc_labels_follow_the_facts(tmp_path):
    paths = classification.make_classification_task(tmp_path, "mrpc", 1000, 10, seed=2)
    texts, labels = read_glue_split(paths["train"])
    near_copies = collections.Counter()
    for (first, second), label in zip(texts, labels):
        assert (_facts(first) == _facts(second)) == bool(label), (first, second, label)
        verbs = [sorted(w for w in s[:-1].split() if w in grammar.VERBS) for s in (first, second)]
        assert verbs[0] == verbs[1]  # neither a rewrite nor a change touches the verbs
        if label:
            assert first != second
        near_copies[label] += _near_copy(first, second)
    # Paraphrases are rewritten; so are about half the non-paraphrases, so that the form of
    # sentence 2 does not give the label away.
    assert near_copies[1] == 0 and 0.3 < near_copies[0] / labels.count(0) < 0.7, near_copies


@pytest.mark.parametrize("kind", ["cola", "mrpc"])
def test_cola_and_mrpc_files_are_deterministic(tmp_path, kind):
    first = classification.make_classification_task(tmp_path / "a", kind, 200, 50, seed=3)
    second = classification.make_classification_task(tmp_path / "b", kind, 200, 50, seed=3)
    other = classification.make_classification_task(tmp_path / "c", kind, 200, 50, seed=4)
    assert first.keys() == second.keys() == other.keys()
    for name in set(first) - {"glue_task"}:  # glue_task.json holds the files' absolute urls
        assert first[name].read_bytes() == second[name].read_bytes(), name
        assert first[name].read_bytes() != other[name].read_bytes(), name


# ----------------------------------------------------------------------------------------------
# BERT


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return demo_models.make_tiny_bert(tmp_path_factory.mktemp("bert"), grammar.demo_vocabulary(), seed=0)


def test_tiny_bert_folder_is_a_hugging_face_bert(tiny_bert, tmp_path):
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"):
        assert (tiny_bert / name).is_file(), name
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    assert isinstance(tokenizer, BertTokenizer)
    encoded = tokenizer("Ze frell dax gorps.", "ze dax iz nok frell.")
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[:6] == ["[CLS]", "ze", "frell", "dax", "gorps", "."] and "[UNK]" not in tokens
    assert "[UNK]" not in tokenizer.tokenize("unseenword 123")  # falls back to characters
    model = BertForSequenceClassification.from_pretrained(tiny_bert, num_labels=3, attn_implementation="eager")
    config = model.config
    assert (config.num_hidden_layers, config.num_attention_heads, config.hidden_size) == (2, 4, 64)
    output = model(**tokenizer(["ze dax gorps."], return_tensors="pt"), output_attentions=True)
    assert output.logits.shape == (1, 3) and output.attentions[0].shape[1] == 4

    # The optional masked-LM warm-up runs and changes the weights.
    warmed = demo_models.make_tiny_bert(tmp_path, grammar.demo_vocabulary(), seed=0, pretrain_steps=3,
                                 pretrain_sentences=[("ze frell dax gorps.", "ze dax iz frell."), ("ak wug kens.", "")],
                                 progress=False)
    assert (warmed / "model.safetensors").read_bytes() != (tiny_bert / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="pretrain_sentences"):
        demo_models.make_tiny_bert(tmp_path / "nothing", grammar.demo_vocabulary(), pretrain_steps=3)


def _finetune(tiny_bert, task, out_dir, num_labels, epochs):
    return finetune_bert_classifier(
        tiny_bert, task["train"], task["dev"], out_dir, num_labels,
        epochs=epochs, lr=1e-3, batch_size=32, max_length=128, seed=0, num_threads=1, progress=False,
    )


def test_bert_classifier_learns_mnli(tiny_bert, tmp_path):
    task = classification.make_classification_task(tmp_path / "data", "mnli", 3000, 300, seed=0)
    report = _finetune(tiny_bert, task, tmp_path / "model", 3, epochs=6)
    assert report["dev_accuracy"] > 0.55, report  # chance and majority class: 1/3
    assert report["num_train_examples"] == 3000 and report["steps"] == 6 * 94 and report["device"] == "cpu"


def test_bert_classifier_learns_sst2_and_reloads(tiny_bert, tmp_path):
    task = classification.make_classification_task(tmp_path / "data", "sst2", 1000, 200, seed=0)
    report = _finetune(tiny_bert, task, tmp_path / "model", 2, epochs=4)
    assert report["dev_accuracy"] > 0.7, report  # majority class: 0.5

    pairs, labels = read_glue_split(task["dev"])
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    model = BertForSequenceClassification.from_pretrained(tmp_path / "model", attn_implementation="eager")
    predictions = predict_classes(model, classification_batches(tokenizer, pairs, None, 64, 128))
    assert sum(p == y for p, y in zip(predictions, labels)) / len(labels) == report["dev_accuracy"]

    # Same seed, same classifier: fine-tuning is deterministic.
    _finetune(tiny_bert, task, tmp_path / "again", 2, epochs=4)
    model_again = BertForSequenceClassification.from_pretrained(tmp_path / "again", attn_implementation="eager")
    for (name, p), (_, q) in zip(model.state_dict().items(), model_again.state_dict().items()):
        assert torch.equal(p, q), name


# ----------------------------------------------------------------------------------------------
# The tiny Llama's passkey documents (needle in a haystack) and its training


@pytest.fixture(scope="module")
def llama_text(tmp_path_factory):
    from headprune.data.wikitext import read_wikitext

    archive = corpora.make_wikitext_corpus(tmp_path_factory.mktemp("wikitext") / "wikitext-2-raw-v1.zip",
                                           {"train": 5000, "test": 200}, seed=0)
    return read_wikitext(archive, "train"), read_wikitext(archive, "test")


@pytest.fixture(scope="module")
def llama_tokenizer(llama_text):
    # the demo's tokenizer settings (demo/config.yaml: demo.language_model)
    return demo_models.tiny_llama_tokenizer(llama_text[0], 434, passkey.passkey_texts(1000, seed=0))


def _passkey_maker(llama_text, tokenizer):
    return passkey.PasskeyMaker(tokenizer, tokenizer(llama_text[0], add_special_tokens=False)["input_ids"])


def test_passkey_tokenizer_keeps_words_whole_and_digits_apart(llama_tokenizer):
    tokens = llama_tokenizer.tokenize(" The special magic number is 12345.")
    assert tokens == ["ĠThe", "Ġspecial", "Ġmagic", "Ġnumber", "Ġis", "Ġ1", "2", "3", "4", "5", "."]
    question = llama_tokenizer.tokenize(f"\n{passkey.QUESTION}\n{passkey.ANSWER_PREFIX}")
    assert len(question) == 18  # every word one token
    assert llama_tokenizer("ze dax")["input_ids"][0] == llama_tokenizer.bos_token_id


def test_passkey_documents_are_prompt_and_answer(llama_text, llama_tokenizer):
    tokenizer = llama_tokenizer
    maker = _passkey_maker(llama_text, tokenizer)
    haystack = maker.haystack
    stops = {i for token, i in tokenizer.get_vocab().items() if token.endswith(".")}
    batches = list(maker.batches(40, 4, 32, 96, ramp=0.5, seed=1))
    assert [len(d.input_ids[d.context]) for d in batches[0]] == [32] * 4  # the ramp starts at the shortest
    lengths, at_start, at_end = set(), 0, 0
    for batch in batches:
        assert len({len(d.input_ids[d.context]) for d in batch}) == 1  # one context length per batch
        for d in batch:
            ids, context = d.input_ids, d.input_ids[d.context]
            lengths.add(len(context))
            assert 32 <= len(context) <= 96
            assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
            assert d.context.start == 1 and d.context.stop <= d.answer.start
            assert d.context.start <= d.needle.start < d.needle.stop <= d.context.stop
            # the needle: its sentence and value, at a sentence boundary
            assert re.fullmatch(r"[1-9]\d{4}", d.value)
            assert tokenizer.decode(ids[d.needle]).strip() == passkey.NEEDLE.format(value=d.value)
            assert d.needle.start == d.context.start or ids[d.needle.start - 1] in stops
            at_start += d.needle.start == d.context.start
            at_end += d.needle.stop == d.context.stop
            # the rest of the context is one stretch of the training text
            rest = ids[d.context.start:d.needle.start] + ids[d.needle.stop:d.context.stop]
            first = next(i for i in range(len(haystack)) if haystack[i:i + len(rest)] == rest)
            assert haystack[first:first + len(rest)] == rest
            # then the question, the answer prefix and the answer
            assert tokenizer.decode(ids[d.context.stop:d.answer.start]) == (
                f"\n{passkey.QUESTION}\n{passkey.ANSWER_PREFIX}")
            assert d.prompt == ids[:d.answer.start]
            assert tokenizer.decode(ids[d.answer]) == f" {d.value}.</s>"
            assert tokenizer.decode(ids, skip_special_tokens=True).endswith(f"{passkey.ANSWER_PREFIX} {d.value}.")
    assert len(lengths) > 10 and max(lengths) > 80  # spread over the range
    assert at_start > 5 and at_end > 5  # the needle also opens or closes the context (depths 0% and 100%)

    # deterministic for a seed
    again = list(_passkey_maker(llama_text, tokenizer).batches(40, 4, 32, 96, ramp=0.5, seed=1))
    assert [[d.input_ids for d in b] for b in again] == [[d.input_ids for d in b] for b in batches]
    other = list(maker.batches(40, 4, 32, 96, ramp=0.5, seed=2))
    assert [[d.input_ids for d in b] for b in other] != [[d.input_ids for d in b] for b in batches]
    with pytest.raises(ValueError, match="cannot hold the needle"):
        maker.document(5, random.Random(0))


def test_passkey_loss_masks(llama_text, llama_tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    maker = _passkey_maker(llama_text, llama_tokenizer)
    rng = random.Random(0)
    documents = [maker.document(40, rng), maker.document(60, rng)]
    batch = passkey.collate(documents, llama_tokenizer.pad_token_id)
    assert batch["input_ids"].shape == (2, len(documents[1].input_ids))
    for row, d in enumerate(documents):
        n = len(d.input_ids)
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (batch["input_ids"].shape[1] - n)
        answer = batch["answer"][row].nonzero().flatten().tolist()
        assert answer == list(range(d.answer.start - 1, d.answer.stop - 1))  # column t predicts token t + 1
        text = set(batch["text"][row].nonzero().flatten().tolist())
        assert text == set(range(d.answer.start - 1)) - set(range(d.needle.start - 1, d.needle.stop - 1))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(llama_tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch["input_ids"][:, 1:], reduction="none")
    weights = batch["answer"].clone()
    for row, d in enumerate(documents):
        weights[row, d.answer.start - 1] = 4.0
    expected = (nll * batch["text"]).sum() / batch["text"].sum() + 2.0 * (nll * weights).sum() / weights.sum()
    actual = passkey.passkey_loss(model, batch, answer_weight=2.0, first_weight=4.0)
    assert torch.allclose(actual, expected)


def test_tiny_llama_trains_on_passkeys_deterministically(llama_text, tmp_path):
    settings = dict(steps=4, batch_size=2, vocab_size=434, initializer_range=0.1, max_positions=512,
                    passkey={"batch_size": 2, "min_tokens": 32, "max_tokens": 64, "tokenizer_texts": 200},
                    progress=False)
    first = demo_models.train_tiny_llama(tmp_path / "a", llama_text[0], **settings)
    second = demo_models.train_tiny_llama(tmp_path / "b", llama_text[0], **settings)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    config = json.loads((first / "config.json").read_text())
    assert config["max_position_embeddings"] == 512 and config["num_key_value_heads"] == 2
    tokenizer = AutoTokenizer.from_pretrained(first)
    assert "Ġspecial" in tokenizer.get_vocab()
    with pytest.raises(ValueError, match="unknown passkey settings"):
        demo_models.train_tiny_llama(tmp_path / "c", llama_text[0], steps=1, passkey={"documents": 3})
