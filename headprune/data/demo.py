"""The embedded offline demo: synthetic data and tiny models in the real distribution formats.

The whole study must run on 2 CPU cores in minutes, without internet. This module makes
stand-ins for everything the real pipeline downloads, written in the formats the real things
come in, so the same pipeline rules consume them:

- a translation corpus "en" -> "fr" (plain text, one sentence per line, Moses-tokenizable),
  subword-nmt BPE codes learned on it and fairseq dictionaries;
- a tiny fairseq-style transformer trained on it, written as a fairseq model tarball
  (``headprune.models.fairseq.write_fairseq_tarball``), standing in for ``wmt14.en-fr.joined-dict``;
- GLUE-like classification tasks: MNLI, SST-2, CoLA and MRPC stand-ins (normalized TSVs, and
  GLUE's archives or, for MRPC, SentEval's files);
- a tiny "pretrained" BERT folder in the Hugging Face format, standing in for
  ``bert-base-uncased``, and the BERT fine-tuning code (the same code fine-tunes the real
  BERT: only the settings differ).

The synthetic tasks are built so that attention matters and different heads get different
jobs (see ``TRANSLATION TASK`` and ``CLASSIFICATION TASKS`` below).
"""
from __future__ import annotations

import collections
import json
import random
import zipfile
import zlib
from pathlib import Path
from typing import Mapping, NamedTuple

import torch
from tqdm.auto import tqdm

from headprune.data.bpe import END_OF_WORD, bpe_segment, learn_bpe, write_bpe_codes
from headprune.data.download import sha256sum
from headprune.models.finetune import restores_torch_threads
from headprune.models.fairseq import write_fairseq_dict
from headprune.models.train import corpus_folder, fit_translation_model, write_translation_tarball

# ---------------------------------------------------------------------------------------------
# TRANSLATION TASK
#
# A made-up language pair. Source sentences follow a small grammar:
#     S  := NP VERB [NP] [PREP NP] [ADV] "."          (4-12 words before the full stop)
#     NP := (DET | NUMBER) [ADJ] NOUN
# The target is a word-by-word translation with three rules that need attention:
#   1. adjective-noun swap: "ze frell dax" -> "lo daxon frellois" (local reordering);
#   2. gender agreement: each target noun has a gender; the target determiner (emitted BEFORE
#      the noun) and the adjective (emitted after it) agree with it, so the decoder must look
#      ahead in the source to the noun;
#   3. numbers are copied verbatim (they are split by BPE: a copy job for cross-attention).
# Word frequencies are Zipfian inside each word class, so BPE keeps frequent words whole and
# splits rare ones, as on real data. The out-of-domain test set ("mtnt" by default) reverses
# the frequencies, uses more adjectives and numbers (some with three digits, never seen in
# training) and joins two clauses with "ond" ("and"), so it is longer than anything in training.
# ---------------------------------------------------------------------------------------------

# English noun -> (French noun, gender). Feminine French nouns end in "e".
NOUNS = {
    "dax": ("daxon", "m"), "blicket": ("bliquette", "f"), "wug": ("vuguet", "m"),
    "toma": ("tomade", "f"), "fep": ("fepin", "m"), "zorb": ("zorbelle", "f"),
    "glim": ("glimon", "m"), "prat": ("pratine", "f"), "snib": ("snibot", "m"),
    "kulp": ("culpette", "f"), "mip": ("mipard", "m"), "rund": ("ronde", "f"),
    "tazzle": ("tasson", "m"), "vorn": ("vornette", "f"), "gromp": ("grompier", "m"),
    "lisk": ("lisquine", "f"),
}
# English adjective -> French masculine form; the feminine form adds "e".
ADJECTIVES = {
    "frell": "frellois", "quom": "comant", "spiv": "spivain", "norl": "norlet",
    "tib": "tibal", "welk": "velquin", "yarp": "yarpeux", "zint": "zintier",
    "hosk": "hosquet", "plim": "plimard",
}
VERBS = {
    "gorps": "gorpa", "fims": "fimo", "blats": "blatu", "kens": "kena", "stribs": "stribo",
    "vames": "vamu", "jolts": "jolta", "pives": "pivo", "drams": "drama", "welts": "veltu",
}
PREPOSITIONS = {"om": "sor", "tas": "dan", "vel": "avo", "ub": "sut"}
ADVERBS = {"kwik": "vitto", "slom": "lento", "oft": "souva", "nevra": "jamo"}
# English determiner -> French form by gender of the noun it goes with.
DETERMINERS = {"ze": {"m": "lo", "f": "la"}, "ak": {"m": "un", "f": "una"}}
CONJUNCTION = ("ond", "et")

# Split of the translation demo into test sets, named like the paper's (WMT newstest 2009-2014
# and MTNT for the out-of-domain set): newstest2009-2012 estimate head importance, 2013 scores,
# 2014 tests the all-but-one selections.
DEMO_TEST_SETS = {f"newstest{year}": 200 for year in range(2009, 2015)} | {"mtnt": 200}
DEMO_SHIFTED_TEST_SETS = ("mtnt",)


def _zipf_weights(n: int, reverse: bool = False) -> list[float]:
    """Zipfian weights 1/rank for n items; reversed makes the rare items the common ones."""
    weights = [1.0 / (rank + 1) for rank in range(n)]
    return weights[::-1] if reverse else weights


class _SentenceSampler:
    """Samples (english, french) sentence pairs from the grammar above."""

    def __init__(self, rng: random.Random, shifted: bool = False):
        self.rng = rng
        self.shifted = shifted
        # in domain: frequent words first; shifted: the rare words become the frequent ones
        self.weights = {
            name: _zipf_weights(len(words), reverse=shifted)
            for name, words in (("noun", NOUNS), ("adj", ADJECTIVES), ("verb", VERBS),
                                ("prep", PREPOSITIONS), ("adv", ADVERBS))
        }
        self.p_adjective = 0.7 if shifted else 0.45
        self.p_number = 0.3 if shifted else 0.15
        self.p_conjunction = 0.4 if shifted else 0.1

    def _pick(self, kind: str, table: Mapping) -> str:
        return self.rng.choices(list(table), weights=self.weights[kind])[0]

    def _number(self) -> str:
        if self.shifted and self.rng.random() < 0.3:
            return str(self.rng.randint(100, 999))  # three digits: never seen in training
        return str(self.rng.randint(2, 99))

    def noun_phrase(self) -> tuple[list[str], list[str]]:
        noun = self._pick("noun", NOUNS)
        noun_fr, gender = NOUNS[noun]
        if self.rng.random() < self.p_number:
            first_en = first_fr = self._number()
        else:
            first_en = self.rng.choice(list(DETERMINERS))
            first_fr = DETERMINERS[first_en][gender]
        if self.rng.random() < self.p_adjective:
            adjective = self._pick("adj", ADJECTIVES)
            adjective_fr = ADJECTIVES[adjective] + ("e" if gender == "f" else "")
            return [first_en, adjective, noun], [first_fr, noun_fr, adjective_fr]
        return [first_en, noun], [first_fr, noun_fr]

    def clause(self) -> tuple[list[str], list[str]]:
        english, french = self.noun_phrase()
        verb = self._pick("verb", VERBS)
        english, french = english + [verb], french + [VERBS[verb]]
        if self.rng.random() < 0.8:  # transitive
            en, fr = self.noun_phrase()
            english, french = english + en, french + fr
        if self.rng.random() < 0.4:
            prep = self._pick("prep", PREPOSITIONS)
            en, fr = self.noun_phrase()
            english, french = english + [prep] + en, french + [PREPOSITIONS[prep]] + fr
        if self.rng.random() < 0.25:
            adverb = self._pick("adv", ADVERBS)
            english, french = english + [adverb], french + [ADVERBS[adverb]]
        return english, french

    def sentence(self) -> tuple[str, str]:
        while True:
            english, french = self.clause()
            if self.rng.random() < self.p_conjunction:
                en, fr = self.clause()
                english = english + [CONJUNCTION[0]] + en
                french = french + [CONJUNCTION[1]] + fr
            max_words = 24 if self.shifted else 12
            if 4 <= len(english) <= max_words:
                # Written detokenized, like real test sets: Moses splits off the full stop.
                return " ".join(english) + ".", " ".join(french) + "."


def word_by_word_translation(english: str) -> str:
    """The reference point a model without context would reach: each word translated alone
    (masculine forms, no adjective-noun swap, numbers copied). BLEU above this needs attention."""
    words = english[:-1].split() if english.endswith(".") else english.split()
    lexicon = {**{en: fr for en, (fr, _) in NOUNS.items()}, **ADJECTIVES, **VERBS, **PREPOSITIONS, **ADVERBS,
               **{en: forms["m"] for en, forms in DETERMINERS.items()}, CONJUNCTION[0]: CONJUNCTION[1]}
    return " ".join(lexicon.get(word, word) for word in words) + ("." if english.endswith(".") else "")


def _subseed(seed: int, name: str) -> int:
    """A stable per-name seed (Python's hash() is salted per process, crc32 is not)."""
    return seed * 1_000_003 + zlib.crc32(name.encode())


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# BPE: subword-nmt's learner (codes format version 0.2) and segmenter, in headprune.data.bpe (shared
# with the IWSLT preparation). The codes are what fairseq's tarballs ship as "bpecodes";
# FSMTTokenizer applies them.
# ---------------------------------------------------------------------------------------------


def make_translation_corpus(
    out_dir,
    n_train: int,
    n_test_sets: Mapping[str, int] | None = None,
    seed: int = 0,
    *,
    shifted_sets=DEMO_SHIFTED_TEST_SETS,
    num_merges: int = 200,
    src_lang: str = "en",
    tgt_lang: str = "fr",
) -> dict[str, Path]:
    """Write the synthetic translation corpus, its BPE codes and its fairseq dictionaries.

    Files (keys of the returned dict are the file names):
      train.{src,tgt}            n_train sentence pairs, one sentence per line, detokenized
      NAME.{src,tgt}             one pair of files per test set in n_test_sets (NAME -> size);
                                 names in shifted_sets are drawn from the shifted distribution
      bpecodes                   subword-nmt codes learned on both sides of the training data
                                 (a joined vocabulary, like wmt14.en-fr.joined-dict)
      dict.{src,tgt}.txt         fairseq dictionaries (identical: joined), "token count" lines
                                 sorted by training count, plus (count 0) every character and
                                 merge product BPE can output, so no text maps to <unk>
    Test sentences never repeat a training sentence.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_test_sets = dict(DEMO_TEST_SETS if n_test_sets is None else n_test_sets)

    sampler = _SentenceSampler(random.Random(_subseed(seed, "train")))
    train_pairs = [sampler.sentence() for _ in range(n_train)]
    seen_sources = {src for src, _ in train_pairs}

    paths = {}
    for name, pairs in [("train", train_pairs)] + [(name, None) for name in n_test_sets]:
        if pairs is None:  # a test set: fresh sentences from its own random stream
            sampler = _SentenceSampler(random.Random(_subseed(seed, name)), shifted=name in shifted_sets)
            pairs = []
            while len(pairs) < n_test_sets[name]:
                src, tgt = sampler.sentence()
                if src not in seen_sources:
                    pairs.append((src, tgt))
        paths[f"{name}.{src_lang}"] = _write_lines(out_dir / f"{name}.{src_lang}", [s for s, _ in pairs])
        paths[f"{name}.{tgt_lang}"] = _write_lines(out_dir / f"{name}.{tgt_lang}", [t for _, t in pairs])

    # Moses tokenization of these sentences only splits off the final full stop.
    word_counts = collections.Counter(
        word for pair in train_pairs for side in pair for word in side[:-1].split() + ["."]
    )
    merges = learn_bpe(word_counts, num_merges)
    paths["bpecodes"] = write_bpe_codes(merges, out_dir / "bpecodes")

    # Dictionary: subword counts on the BPE-segmented training data, ordered like
    # fairseq-preprocess (count descending, then alphabetically).
    merge_ranks = {pair: rank for rank, pair in enumerate(merges)}
    token_counts = collections.Counter()
    for word, count in word_counts.items():
        for token in bpe_segment(word, merge_ranks):
            token_counts[token] += count
    # BPE can only output single characters and merge products: list them all (count 0 when
    # unseen) so a test-time word (an unseen number, a rare word split differently) never
    # maps to <unk>.
    characters = sorted({c for word in word_counts for c in word} | set("abcdefghijklmnopqrstuvwxyz0123456789"))
    possible_subwords = [c + END_OF_WORD for c in characters] + characters + [a + b for a, b in merges]
    for subword in possible_subwords:
        token = subword[: -len(END_OF_WORD)] if subword.endswith(END_OF_WORD) else subword + "@@"
        token_counts.setdefault(token, 0)
    ordered = sorted(token_counts.items(), key=lambda item: (-item[1], item[0]))
    for lang in (src_lang, tgt_lang):
        write_fairseq_dict(out_dir / f"dict.{lang}.txt", ordered)
        paths[f"dict.{lang}.txt"] = out_dir / f"dict.{lang}.txt"
    return paths


# ---------------------------------------------------------------------------------------------
# The tiny translation model: trained by headprune.models.train (the loop that also trains Figure 5's
# IWSLT model), written as a fairseq tarball.
# ---------------------------------------------------------------------------------------------


def train_tiny_translation_model(
    corpus_paths,
    out_tarball,
    *,
    layers: int = 2,
    heads: int = 4,
    d_model: int = 64,
    ffn: int = 128,
    epochs: int = 8,
    seed: int = 0,
    batch_size: int = 64,
    lr: float = 3e-3,
    dropout: float = 0.1,
    warmup_fraction: float = 0.05,
    folder_name: str = "demo.en-fr.transformer",
    src_lang: str = "en",
    tgt_lang: str = "fr",
    num_threads: int | None = 1,
    progress: bool = True,
) -> Path:
    """Train a small fairseq-architecture transformer on the demo corpus; write a fairseq tarball.

    corpus_paths is make_translation_corpus's output (its dict or its folder). The tarball
    (.tar.bz2) holds folder_name/ with model.pt, dict.{src,tgt}.txt and bpecodes, like the
    real wmt14.en-fr.joined-dict.transformer. See headprune.models.train.fit_translation_model for the
    training.
    """
    folder = corpus_folder(corpus_paths, src_lang, tgt_lang)
    model, _ = fit_translation_model(
        folder, layers=layers, heads=heads, d_model=d_model, ffn=ffn, epochs=epochs, seed=seed,
        batch_size=batch_size, lr=lr, dropout=dropout, warmup_fraction=warmup_fraction,
        src_lang=src_lang, tgt_lang=tgt_lang, num_threads=num_threads, progress=progress,
    )
    return write_translation_tarball(model, folder, out_tarball, folder_name, src_lang=src_lang, tgt_lang=tgt_lang)


# ---------------------------------------------------------------------------------------------
# CLASSIFICATION TASKS (GLUE stand-ins), in the made-up English of the translation task.
#
# "mnli": 3-way inference over sentence pairs. The premise is a sentence with 2-3 distinct
#   nouns, most with an adjective ("ze frell dax gorps ak quom wug."); the hypothesis says
#   that one of its nouns has, or does not have ("nok"), a property ("ze dax iz frell.").
#     entailment     the premise gives the noun that adjective, and the hypothesis agrees;
#     contradiction  the premise gives the noun that adjective, the hypothesis negates it;
#     neutral        the adjective appears nowhere in the premise (negated or not).
#   Neither negation nor any single word decides the label: the model must find whether the
#   hypothesis adjective occurs in the premise (matching across the two segments, which
#   attention does) and combine that with the negation. Labels are balanced.
#   "dev_mismatched" is shifted: 4-6 noun phrases in two or three clauses joined by "ond",
#   reversed word frequencies, and the indefinite determiner in hypotheses.
#   (Two harder variants were tried and left out: when the label also depended on whether
#   the hypothesis NOUN occurs in the premise, or on binding an adjective to its noun, the
#   2-layer model did not learn that part within a minute of CPU training.)
# "sst2": binary sentiment of one sentence. Adjectives are positive (POSITIVE_ADJECTIVES) or
#   negative (the others); "nok" (not) before an adjective flips it; the label is 1 when the
#   positive adjectives outnumber the negative ones (ties are never generated).
# "cola": acceptability of one sentence (70% acceptable, as in CoLA). Acceptable sentences
#   follow the grammar
#       S := CLAUSE ("ond" CLAUSE)* "."      CLAUSE := NP VERB [NP [PREP NP]]
#       NP := DET [["nok"] ADJ] NOUN
#   Unacceptable ones (label 0) break it once: the determiner after its noun, "nok" before a
#   noun, a verb missing or doubled, or the verb swapped with the object noun, the
#   preposition or the "ond" that follows it. Every word stays in the sentence's vocabulary,
#   so only word order tells: some errors show in two neighbouring words ("dax ze", "nok
#   dax"), others only in a whole clause ("ze dax om ak wug gorps": every word pair is
#   legal, but the clause has a prepositional phrase before its verb; a clause with no verb
#   or two verbs).
# "mrpc": paraphrase of sentence pairs (2/3 paraphrases, as in MRPC). Sentence 1 has one or
#   two clauses with distinct nouns, at least one with an adjective. A paraphrase (label 1)
#   says the same: the clauses swapped around "ond" and/or some adjectives moved into
#   "ze NOUN iz [nok] ADJ" clauses at the end. A non-paraphrase (label 0) changes one fact:
#   a noun or an adjective (to one the sentence does not use) or a negation; half of them are
#   also rewritten like a paraphrase, so that a rewritten sentence 2 does not by itself mean
#   "paraphrase".
# Label indices follow headprune.data.datasets.GLUE_TASKS (MNLI: contradiction, entailment, neutral).
# ---------------------------------------------------------------------------------------------

COPULA = "iz"
NEGATION = "nok"
POSITIVE_ADJECTIVES = ("frell", "quom", "spiv", "norl", "tib")
CLASSIFICATION_KINDS = {"mnli": "MNLI", "sst2": "SST-2", "cola": "CoLA", "mrpc": "MRPC"}


def demo_vocabulary() -> list[str]:
    """Every word the demo's English side (translation source, classification tasks) can use."""
    words = [*NOUNS, *ADJECTIVES, *VERBS, *PREPOSITIONS, *ADVERBS, *DETERMINERS, CONJUNCTION[0], COPULA, NEGATION]
    return sorted(set(words))


class _PremiseSampler:
    """Words and sentences for the classification tasks, which build the noun phrases themselves
    (they need to know which noun has which adjective)."""

    def __init__(self, rng: random.Random, shifted: bool = False):
        self.rng = rng
        self.shifted = shifted
        self.noun_weights = _zipf_weights(len(NOUNS), reverse=shifted)
        self.adjective_weights = _zipf_weights(len(ADJECTIVES), reverse=shifted)
        self.verb_weights = _zipf_weights(len(VERBS), reverse=shifted)

    def nouns(self, k: int) -> list[str]:
        chosen = []
        while len(chosen) < k:
            noun = self.rng.choices(list(NOUNS), weights=self.noun_weights)[0]
            if noun not in chosen:
                chosen.append(noun)
        return chosen

    def adjective(self) -> str:
        return self.rng.choices(list(ADJECTIVES), weights=self.adjective_weights)[0]

    def verb(self) -> str:
        return self.rng.choices(list(VERBS), weights=self.verb_weights)[0]

    def sentence(self, noun_phrases: list[list[str]]) -> str:
        """Noun phrases (lists of words) laid out as subject-verb-object clauses."""
        clauses, i = [], 0
        while i < len(noun_phrases):
            clause = noun_phrases[i] + [self.verb()]
            if i + 1 < len(noun_phrases):
                clause += noun_phrases[i + 1]
            if i + 2 < len(noun_phrases) and (len(noun_phrases) - i) % 2 == 1:
                clause += [self.rng.choice(list(PREPOSITIONS))] + noun_phrases[i + 2]
                i += 1
            clauses.append(" ".join(clause))
            i += 2
        return f" {CONJUNCTION[0]} ".join(clauses) + "."


def _mnli_example(sampler: _PremiseSampler, label: str) -> tuple[str, str]:
    n_phrases = sampler.rng.choice([4, 5, 6] if sampler.shifted else [2, 3])
    nouns = sampler.nouns(n_phrases)
    adjectives = [sampler.adjective() if sampler.rng.random() < 0.75 else None for _ in nouns]
    target = sampler.rng.randrange(len(nouns))
    if adjectives[target] is None:
        adjectives[target] = sampler.adjective()
    phrases = [
        [sampler.rng.choice(list(DETERMINERS))] + ([adjective] if adjective else []) + [noun]
        for noun, adjective in zip(nouns, adjectives)
    ]
    noun = nouns[target]
    if label == "entailment":  # "ze frell dax ..." -> "ze dax iz frell."
        adjective, negated = adjectives[target], False
    elif label == "contradiction":  # "ze frell dax ..." -> "ze dax iz nok frell."
        adjective, negated = adjectives[target], True
    else:  # the premise says nothing about this property: "ze dax iz (nok) quom."
        adjective = sampler.rng.choice([a for a in ADJECTIVES if a not in adjectives])
        negated = sampler.rng.random() < 0.5
    determiner = "ak" if sampler.shifted else "ze"
    hypothesis = [determiner, noun, COPULA] + ([NEGATION] if negated else []) + [adjective]
    return sampler.sentence(phrases), " ".join(hypothesis) + "."


def _sst2_example(sampler: _PremiseSampler) -> tuple[str, int]:
    while True:
        n_phrases = sampler.rng.choice([2, 3, 4])
        phrases, score = [], 0
        for noun in sampler.nouns(n_phrases):
            phrase = [sampler.rng.choice(list(DETERMINERS))]
            if sampler.rng.random() < 0.6:
                adjective = sampler.adjective()
                polarity = 1 if adjective in POSITIVE_ADJECTIVES else -1
                if sampler.rng.random() < 0.3:
                    phrase.append(NEGATION)
                    polarity = -polarity
                phrase.append(adjective)
                score += polarity
            phrases.append(phrase + [noun])
        if score != 0:
            return sampler.sentence(phrases), int(score > 0)


class _Phrase(NamedTuple):
    """A noun phrase of the cola and mrpc tasks: DET [["nok"] ADJ] NOUN."""

    determiner: str
    negated: bool
    adjective: str | None
    noun: str

    def words(self) -> list[str]:
        if self.adjective is None:
            return [self.determiner, self.noun]
        return [self.determiner] + [NEGATION] * self.negated + [self.adjective, self.noun]


def _clauses(sampler: _PremiseSampler, n_clauses: int, p_object: float, p_preposition: float,
             p_adjective: float) -> list[list]:
    """Clauses NP VERB [NP [PREP NP]] as lists of _Phrase and words; nouns are distinct."""
    rng = sampler.rng
    sizes = []  # noun phrases per clause: 1 intransitive, 2 transitive, 3 with a prepositional phrase
    for _ in range(n_clauses):
        sizes.append(1 if rng.random() >= p_object else 3 if rng.random() < p_preposition else 2)
    nouns = iter(sampler.nouns(sum(sizes)))

    def phrase() -> _Phrase:
        determiner = rng.choice(list(DETERMINERS))
        if rng.random() >= p_adjective:
            return _Phrase(determiner, False, None, next(nouns))
        return _Phrase(determiner, rng.random() < 0.25, sampler.adjective(), next(nouns))

    clauses = []
    for size in sizes:
        clause = [phrase(), sampler.verb()]
        if size >= 2:
            clause.append(phrase())
        if size == 3:
            clause += [rng.choice(list(PREPOSITIONS)), phrase()]
        clauses.append(clause)
    return clauses


def _render(clauses: list[list]) -> list[str]:
    words = []
    for i, clause in enumerate(clauses):
        if i:
            words.append(CONJUNCTION[0])
        for part in clause:
            words += part.words() if isinstance(part, _Phrase) else [part]
    return words


_WORD_CLASSES = {
    **dict.fromkeys(DETERMINERS, "det"), **dict.fromkeys(ADJECTIVES, "adj"), **dict.fromkeys(NOUNS, "noun"),
    **dict.fromkeys(VERBS, "verb"), **dict.fromkeys(PREPOSITIONS, "prep"), CONJUNCTION[0]: "conj", NEGATION: "neg",
}


def _break_grammar(rng: random.Random, words: list[str]) -> list[str]:
    """One of the cola errors (see CLASSIFICATION TASKS). Each is ungrammatical whatever the
    sentence: the comments say which rule of the grammar it breaks."""
    words = list(words)
    classes = [_WORD_CLASSES[word] for word in words]
    nouns = [i for i, c in enumerate(classes) if c == "noun"]
    verbs = [i for i, c in enumerate(classes) if c == "verb"]
    clause_end = {v: classes.index("conj", v) if "conj" in classes[v:] else len(words) for v in verbs}
    # The verb may swap with: the object noun (two nouns meet), the preposition (the clause
    # starts "NP PREP"), or the "ond" after it (the first clause loses its verb).
    swaps = []
    for verb in verbs:
        after = range(verb + 1, clause_end[verb])
        swaps += [(verb, i) for i in after if classes[i] == "noun"][:1]
        swaps += [(verb, i) for i in after if classes[i] == "prep"]
        swaps += [(verb, clause_end[verb])] if clause_end[verb] < len(words) else []
    errors = ["determiner_after_noun", "nok_before_noun", "verb_missing", "verb_doubled"] + ["swap"] * bool(swaps)
    error = rng.choice(errors)
    if error == "determiner_after_noun":  # a noun phrase must start with its determiner
        noun = rng.choice(nouns)
        determiner = max(i for i in range(noun) if classes[i] == "det")
        words.insert(noun, words.pop(determiner))
    elif error == "nok_before_noun":  # "nok" only goes before an adjective
        words.insert(rng.choice(nouns), NEGATION)
    elif error == "verb_missing":  # every clause has exactly one verb...
        del words[rng.choice(verbs)]
    elif error == "verb_doubled":  # ...so a second one, next to it or at the clause's end, is wrong
        verb = rng.choice(verbs)
        words.insert(rng.choice([verb + 1, clause_end[verb]]), rng.choice(list(VERBS)))
    else:
        i, j = rng.choice(swaps)
        words[i], words[j] = words[j], words[i]
    return words


def _cola_example(sampler: _PremiseSampler, acceptable: bool) -> str:
    n_clauses = 1 if sampler.rng.random() < 0.75 else 2
    words = _render(_clauses(sampler, n_clauses, p_object=0.7, p_preposition=0.4, p_adjective=0.5))
    if not acceptable:
        words = _break_grammar(sampler.rng, words)
    return " ".join(words) + "."


def _rewrite(rng: random.Random, clauses: list[list]) -> list[str]:
    """The same facts in other words: the clauses swapped around "ond" and/or some adjectives
    moved into "ze NOUN iz [nok] ADJ" clauses at the end. Given an adjective, never the
    sentence itself."""
    swap = len(clauses) > 1 and rng.random() < 0.6
    described = [part for clause in clauses for part in clause if isinstance(part, _Phrase) and part.adjective]
    if swap:
        clauses = clauses[::-1]
    if described and (not swap or rng.random() < 0.5):
        moved = [phrase for phrase in described if rng.random() < 0.7] or [rng.choice(described)]
        clauses = [[part._replace(negated=False, adjective=None) if part in moved else part for part in clause]
                   for clause in clauses]
        clauses += [[_Phrase("ze", False, None, phrase.noun), COPULA] + [NEGATION] * phrase.negated
                    + [phrase.adjective] for phrase in moved]
    return _render(clauses)


def _change_one_fact(sampler: _PremiseSampler, clauses: list[list]) -> list[list]:
    """The sentence with one noun, one adjective or one negation changed. A new noun or
    adjective is one the sentence does not use: with adjectives also taken from another noun
    of the sentence, the demo's BERT reached dev F1 0.85 instead of 0.90 (seed 0)."""
    rng = sampler.rng
    places = [(c, p) for c, clause in enumerate(clauses) for p, part in enumerate(clause) if isinstance(part, _Phrase)]
    described = [(c, p) for c, p in places if clauses[c][p].adjective]
    change = rng.choice(["noun", "adjective", "negation"])
    c, p = rng.choice(places if change == "noun" else described)
    phrase = clauses[c][p]
    if change == "noun":
        used = {clauses[i][j].noun for i, j in places}
        phrase = phrase._replace(noun=rng.choice([noun for noun in NOUNS if noun not in used]))
    elif change == "adjective":
        used = {clauses[i][j].adjective for i, j in described}
        phrase = phrase._replace(adjective=rng.choice([a for a in ADJECTIVES if a not in used]))
    else:
        phrase = phrase._replace(negated=not phrase.negated)
    clauses = [list(clause) for clause in clauses]
    clauses[c][p] = phrase
    return clauses


def _mrpc_example(sampler: _PremiseSampler, paraphrase: bool) -> tuple[str, str]:
    # At least one adjective, so that every kind of rewrite and change is possible; at most four
    # noun phrases, so that a pair with every adjective moved still fits in 64 tokens.
    while True:
        clauses = _clauses(sampler, sampler.rng.choice([1, 2]), p_object=0.8, p_preposition=0.3, p_adjective=0.6)
        phrases = [part for clause in clauses for part in clause if isinstance(part, _Phrase)]
        if len(phrases) <= 4 and any(phrase.adjective for phrase in phrases):
            break
    if paraphrase:
        second = _rewrite(sampler.rng, clauses)
    else:
        changed = _change_one_fact(sampler, clauses)
        second = _rewrite(sampler.rng, changed) if sampler.rng.random() < 0.5 else _render(changed)
    return " ".join(_render(clauses)) + ".", " ".join(second) + "."


def _classification_split(kind: str, n: int, rng: random.Random, shifted: bool) -> list[tuple[str, str, int]]:
    """n (text_a, text_b, label index) rows. MNLI and SST-2 are balanced; CoLA is 70%
    acceptable and MRPC 2/3 paraphrases, like the real tasks."""
    sampler = _PremiseSampler(rng, shifted)
    rows = []
    if kind == "mnli":
        labels = _glue_task(kind)["labels"]
        for i in range(n):
            label = labels[i % len(labels)]
            premise, hypothesis = _mnli_example(sampler, label)
            rows.append((premise, hypothesis, labels.index(label)))
    elif kind == "sst2":
        for i in range(n):
            wanted = i % 2  # balanced classes: resample until the sentence has the wanted label
            while True:
                sentence, label = _sst2_example(sampler)
                if label == wanted:
                    break
            rows.append((sentence, "", label))
    elif kind == "cola":
        for i in range(n):
            acceptable = i < round(0.7 * n)
            rows.append((_cola_example(sampler, acceptable), "", int(acceptable)))
    else:
        for i in range(n):
            paraphrase = i < round(2 * n / 3)
            rows.append((*_mrpc_example(sampler, paraphrase), int(paraphrase)))
    rng.shuffle(rows)
    return rows


def _glue_task(kind: str) -> dict:
    from headprune.data.datasets import GLUE_TASKS

    return GLUE_TASKS[CLASSIFICATION_KINDS[kind]]


def _write_normalized_tsv(path: Path, rows) -> Path:
    # The layout headprune.data.datasets.prepare_glue_task writes: text_a, text_b, label index.
    return _write_lines(path, ["text_a\ttext_b\tlabel"] + [f"{a}\t{b}\t{label}" for a, b, label in rows])


def _raw_glue_files(kind: str, splits: dict[str, list]) -> dict[str, str]:
    """The splits as GLUE's own files: {archive member: file text}.

    MNLI: MNLI/train.tsv, MNLI/dev_matched.tsv, MNLI/dev_mismatched.tsv with GLUE's columns
    (index, promptID, pairID, genre, four parse columns, sentence1, sentence2, label1[..label5
    on dev], gold_label) and label names. SST-2: SST-2/train.tsv and SST-2/dev.tsv with the
    columns sentence, label (0/1). CoLA: CoLA/train.tsv and CoLA/dev.tsv without a header,
    columns source, label (0/1), label_notes ("*" on unacceptable sentences), sentence.
    """
    task = _glue_task(kind)
    files = {}
    if kind == "mnli":
        members = {"train": "MNLI/train.tsv", "dev": "MNLI/dev_matched.tsv", "dev_mismatched": "MNLI/dev_mismatched.tsv"}
        for split, rows in splits.items():
            annotator_labels = ["label1"] if split == "train" else [f"label{i}" for i in range(1, 6)]
            header = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                      "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", *annotator_labels, "gold_label"]
            genre = "demo_shifted" if split == "dev_mismatched" else "demo"
            lines = ["\t".join(header)]
            for index, (premise, hypothesis, label) in enumerate(rows):
                name = task["labels"][label]
                parses = [f"( {premise} )", f"( {hypothesis} )", f"(ROOT {premise})", f"(ROOT {hypothesis})"]
                fields = [str(index), str(index), f"{index}{name[0]}", genre, *parses, premise, hypothesis,
                          *[name] * len(annotator_labels), name]
                lines.append("\t".join(fields))
            files[members[split]] = "".join(line + "\n" for line in lines)
    elif kind == "sst2":
        members = {"train": "SST-2/train.tsv", "dev": "SST-2/dev.tsv"}
        for split, rows in splits.items():
            lines = ["sentence\tlabel"] + [f"{sentence}\t{task['labels'][label]}" for sentence, _, label in rows]
            files[members[split]] = "".join(line + "\n" for line in lines)
    else:
        members = {"train": "CoLA/train.tsv", "dev": "CoLA/dev.tsv"}
        for split, rows in splits.items():
            # The source column names the book an example comes from, e.g. "gj04"; "*" is the
            # book's own mark on an unacceptable sentence.
            lines = [f"demo19\t{task['labels'][label]}\t{'' if label else '*'}\t{sentence}"
                     for sentence, _, label in rows]
            files[members[split]] = "".join(line + "\n" for line in lines)
    return files


def _mrpc_files(splits: dict[str, list], rng: random.Random) -> dict[str, str]:
    """The splits as the three files MRPC is downloaded as: {key of the MRPC task's files: text}.

    msr_paraphrase_train and msr_paraphrase_test have SentEval's layout: a UTF-8 byte order
    mark, the header Quality, #1 ID, #2 ID, #1 String, #2 String, one pair per line with a
    sentence id for each side. The train file holds the train and dev rows riffled together
    (each split keeps its own order, so selecting by ids gives back exactly splits["train"]
    and splits["dev"]); mrpc_dev_ids lists the dev rows' id pairs, one "#1 ID<TAB>#2 ID"
    per line without a header, like GLUE's file. The test file holds splits["test"].
    """
    train, dev, test = splits["train"], splits["dev"], splits["test"]
    dev_positions = set(rng.sample(range(len(train) + len(dev)), len(dev)))
    train_rows, dev_rows = iter(train), iter(dev)
    riffled = [(i in dev_positions, next(dev_rows if i in dev_positions else train_rows))
               for i in range(len(train) + len(dev))]
    # Sentence ids are distinct numbers of six or seven digits, like the corpus's own.
    ids = iter(rng.sample(range(100_000, 10_000_000), 2 * (len(riffled) + len(test))))
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    files = {"msr_paraphrase_train": header, "mrpc_dev_ids": "", "msr_paraphrase_test": header}
    for key, rows in (("msr_paraphrase_train", riffled), ("msr_paraphrase_test", [(False, row) for row in test])):
        for is_dev, (sentence1, sentence2, label) in rows:
            id1, id2 = next(ids), next(ids)
            files[key] += f"{label}\t{id1}\t{id2}\t{sentence1}\t{sentence2}\n"
            if is_dev:
                files["mrpc_dev_ids"] += f"{id1}\t{id2}\n"
    return files


def make_classification_task(
    out_dir, kind: str, n_train: int, n_dev: int, n_dev_mismatched: int | None = None, seed: int = 0
) -> dict[str, Path]:
    """Write a synthetic GLUE-like task ("mnli", "sst2", "cola" or "mrpc"; see CLASSIFICATION
    TASKS above) as the normalized splits and as the files the real task is downloaded as.

    Files (keys of the returned dict):
      train, dev[, dev_mismatched | test]
                            normalized TSVs {split}.tsv: header "text_a text_b label"
                            (tab-separated), label = index into the GLUE label list; text_b is
                            empty for sst2 and cola. dev_mismatched (n_dev_mismatched rows) is
                            mnli only; test (n_dev rows) is mrpc only, from MRPC's test file.
      glue_zip              mnli, sst2, cola: the splits as GLUE's archive (MNLI.zip, SST-2.zip,
                            CoLA.zip) with GLUE's member paths, columns and label names
      msr_paraphrase_train, msr_paraphrase_test, mrpc_dev_ids
                            mrpc: the three files MRPC is downloaded as (see _mrpc_files),
                            named as in their real URLs
      glue_task             glue_task.json: headprune.data.datasets's task dict for these files (file://
                            urls and their sha256), for prepare_glue_task
    The same arguments give byte-identical files.
    """
    kind = kind.lower().replace("-", "")
    if kind not in CLASSIFICATION_KINDS:
        raise ValueError(f"unknown classification task kind {kind!r}; expected one of {sorted(CLASSIFICATION_KINDS)}")
    if n_dev_mismatched and kind != "mnli":
        raise ValueError("only the mnli task has a mismatched dev set")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    splits = {
        "train": _classification_split(kind, n_train, random.Random(_subseed(seed, f"{kind}-train")), shifted=False),
        "dev": _classification_split(kind, n_dev, random.Random(_subseed(seed, f"{kind}-dev")), shifted=False),
    }
    if n_dev_mismatched:
        splits["dev_mismatched"] = _classification_split(
            kind, n_dev_mismatched, random.Random(_subseed(seed, f"{kind}-dev_mismatched")), shifted=True
        )
    if kind == "mrpc":  # MRPC's test file has labels: a third split
        splits["test"] = _classification_split(kind, n_dev, random.Random(_subseed(seed, "mrpc-test")), shifted=False)
    paths = {split: _write_normalized_tsv(out_dir / f"{split}.tsv", rows) for split, rows in splits.items()}

    task = json.loads(json.dumps(_glue_task(kind)))  # a deep copy
    if kind == "mrpc":
        files = _mrpc_files(splits, random.Random(_subseed(seed, "mrpc-files")))
        for key, text in files.items():
            paths[key] = out_dir / task["files"][key]["url"].rsplit("/", 1)[1]
            paths[key].write_text(text, encoding="utf-8")
            task["files"][key].update(url=paths[key].resolve().as_uri(), sha256=sha256sum(paths[key]))
    else:
        zip_path = out_dir / f"{CLASSIFICATION_KINDS[kind]}.zip"
        with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for member, text in _raw_glue_files(kind, splits).items():
                # A fixed timestamp keeps the archive (and its sha256) identical for a given seed.
                archive.writestr(zipfile.ZipInfo(member, date_time=(2019, 5, 24, 0, 0, 0)), text)
        paths["glue_zip"] = zip_path
        task.update(url=zip_path.resolve().as_uri(), sha256=sha256sum(zip_path))
    task["splits"] = {split: where for split, where in task["splits"].items() if split in splits}
    paths["glue_task"] = out_dir / "glue_task.json"
    paths["glue_task"].write_text(json.dumps(task, indent=1) + "\n", encoding="utf-8")
    return paths


# ---------------------------------------------------------------------------------------------
# BERT: a tiny stand-in for bert-base-uncased, and the fine-tuning code (real and demo)
# ---------------------------------------------------------------------------------------------

BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@restores_torch_threads
def make_tiny_bert(
    out_dir,
    vocab_words,
    *,
    layers: int = 2,
    heads: int = 4,
    hidden: int = 64,
    intermediate: int | None = None,
    max_position_embeddings: int = 512,
    dropout: float = 0.1,
    initializer_range: float = 0.1,
    seed: int = 0,
    pretrain_sentences: list[str] | list[tuple[str, str]] | None = None,
    pretrain_steps: int = 0,
    batch_size: int = 32,
    lr: float = 1e-3,
    num_threads: int | None = 1,
    progress: bool = True,
) -> Path:
    """Write a tiny "pretrained" BERT folder in the Hugging Face format of bert-base-uncased.

    The folder has config.json, model.safetensors (a BertForMaskedLM: encoder, pooler
    and MLM head) and the tokenizer files (vocab.txt, tokenizer.json, tokenizer_config.json),
    loadable with AutoTokenizer and BertForSequenceClassification.from_pretrained. The
    WordPiece vocabulary holds the specials, every word of vocab_words (lowercased) and all
    letters, digits and punctuation (also as "##" pieces), so no word becomes [UNK].
    With pretrain_sentences (strings, or (text_a, text_b) pairs) and pretrain_steps > 0 the
    model first learns masked-language modelling briefly (BERT's 15% masking, 80/10/10);
    otherwise the weights are random. (A few hundred MLM steps did not help the demo tasks.)

    initializer_range is 0.1, not BERT's 0.02: with 0.02 the tiny model's attention barely
    moves at first, and demo MNLI fine-tuning stayed at chance for one of two seeds; with 0.1
    it reached 91-95% dev accuracy in 20 s. transformers 5 does not write the attention
    implementation to config.json: load with attn_implementation="eager" for attention weights.
    """
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    characters = list("abcdefghijklmnopqrstuvwxyz0123456789") + list(".,;:!?'\"()-")
    vocab = list(BERT_SPECIAL_TOKENS)
    for token in sorted({w.lower() for w in vocab_words}) + characters + ["##" + c for c in characters]:
        if token not in vocab:
            vocab.append(token)
    vocab_file = out_dir / "vocab.txt"
    _write_lines(vocab_file, vocab)
    tokenizer = BertTokenizer(vocab=str(vocab_file), do_lower_case=True, model_max_length=max_position_embeddings)

    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate or 4 * hidden,
        max_position_embeddings=max_position_embeddings,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        initializer_range=initializer_range,
        pad_token_id=BERT_SPECIAL_TOKENS.index("[PAD]"),
        attn_implementation="eager",  # attention weights must be available to the analysis
    )
    model = BertForMaskedLM(config)
    if pretrain_steps > 0 and not pretrain_sentences:
        raise ValueError("pretrain_steps > 0 needs pretrain_sentences to pretrain on")
    if pretrain_steps > 0:
        _pretrain_masked_lm(model, tokenizer, pretrain_sentences, pretrain_steps, batch_size, lr, seed, progress)
    model.eval()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def _pretrain_masked_lm(model, tokenizer, sentences, steps: int, batch_size: int, lr: float, seed: int,
                       progress: bool = True) -> None:
    """A few steps of BERT's masked-LM objective on the given sentences."""
    rng = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    special_ids = torch.tensor(tokenizer.all_special_ids)
    model.train()
    for _ in tqdm(range(steps), desc="pretrain tiny bert (masked LM)", disable=not progress):
        picks = [sentences[i] for i in torch.randint(len(sentences), (batch_size,), generator=rng).tolist()]
        if isinstance(picks[0], str):
            batch = tokenizer(picks, return_tensors="pt", padding=True, truncation=True, max_length=128)
        else:  # sentence pairs, like BERT's two-segment pretraining inputs
            batch = tokenizer([a for a, _ in picks], [b for _, b in picks], return_tensors="pt",
                              padding=True, truncation=True, max_length=128)
        input_ids = batch["input_ids"].clone()
        maskable = ~torch.isin(input_ids, special_ids)
        chosen = (torch.rand(input_ids.shape, generator=rng) < 0.15) & maskable
        labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
        roll = torch.rand(input_ids.shape, generator=rng)
        input_ids[chosen & (roll < 0.8)] = tokenizer.mask_token_id
        random_tokens = torch.randint(len(BERT_SPECIAL_TOKENS), model.config.vocab_size, input_ids.shape, generator=rng)
        replace = chosen & (roll >= 0.8) & (roll < 0.9)
        input_ids[replace] = random_tokens[replace]
        loss = model(input_ids=input_ids, attention_mask=batch["attention_mask"],
                     token_type_ids=batch["token_type_ids"], labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def demo_conllu(sentences: list[str]) -> str:
    """Gold dependency parses (CoNLL-U, Universal Dependencies relations) of demo English sentences.

    A deterministic parser of the demo grammar, which covers the translation source sentences
    (``_SentenceSampler``, shifted too) and the classification tasks' grammatical sentences
    (premises, hypotheses, paraphrases; not CoLA's deliberately broken ones):
        S      := CLAUSE ("ond" CLAUSE)* ["."]
        CLAUSE := NP VERB [NP] [PREP NP] [ADV]  |  NP "iz" ["nok"] ADJ
        NP     := (DET | NUMBER) [["nok"] ADJ] NOUN
    Relations: det (ze, ak) / nummod (numbers) and amod -> noun; "nok" advmod -> its adjective;
    subject nsubj, object obj, the preposition's noun obl and the adverb advmod -> the verb; the
    preposition is case -> its noun. In "NP iz [nok] ADJ" the adjective heads the clause (UD's
    copula analysis): nsubj and cop ("iz") -> the adjective. The first clause's head is the root;
    each later clause's head is conj -> the root, its "ond" cc -> that head; the full stop
    (split off the last word, as Moses does) is punct -> the root. Comments give sent_id (1, 2,
    ...) and text; UPOS is filled, LEMMA, XPOS, FEATS, DEPS and MISC are "_". A sentence outside
    the grammar raises ValueError naming it and the word where parsing failed.
    """
    from headprune.scoring.roles import Sentence, write_conllu

    classes = {
        **dict.fromkeys(DETERMINERS, "det"), **dict.fromkeys(ADJECTIVES, "adj"), **dict.fromkeys(NOUNS, "noun"),
        **dict.fromkeys(VERBS, "verb"), **dict.fromkeys(PREPOSITIONS, "prep"), **dict.fromkeys(ADVERBS, "adv"),
        CONJUNCTION[0]: "conj", COPULA: "cop", NEGATION: "neg", ".": "punct",
    }
    upos_of = {"det": "DET", "num": "NUM", "adj": "ADJ", "noun": "NOUN", "verb": "VERB", "prep": "ADP",
               "adv": "ADV", "conj": "CCONJ", "cop": "AUX", "neg": "PART", "punct": "PUNCT"}
    parsed = []
    for number, text in enumerate(sentences, 1):
        words = text.split()
        if words and words[-1].endswith(".") and words[-1] != ".":
            words[-1:] = [words[-1][:-1], "."]
        kinds = ["num" if word.isdigit() else classes.get(word, "unknown") for word in words]
        heads = [None] * len(words)
        deprels = [None] * len(words)

        def kind(i):
            return kinds[i] if i < len(words) else "end"

        def fail(i, expected):
            found = f"word {i + 1} {words[i]!r}" if i < len(words) else "the end of the sentence"
            raise ValueError(f"demo_conllu: sentence {number} {text!r} is outside the demo grammar: "
                             f"expected {expected}, found {found}")

        def attach(dependent, head, deprel):
            heads[dependent], deprels[dependent] = head + 1, deprel  # 1-based; head -1 is the root

        def noun_phrase(i):
            if kind(i) not in ("det", "num"):
                fail(i, "a determiner or a number")
            j, negation, adjective = i + 1, None, None
            if kind(j) == "neg":
                negation, j = j, j + 1
                if kind(j) != "adj":
                    fail(j, "an adjective after 'nok'")
            if kind(j) == "adj":
                adjective, j = j, j + 1
            if kind(j) != "noun":
                fail(j, "a noun")
            attach(i, j, "det" if kinds[i] == "det" else "nummod")
            if adjective is not None:
                attach(adjective, j, "amod")
            if negation is not None:
                attach(negation, adjective, "advmod")
            return j, j + 1

        def clause(i):
            subject, j = noun_phrase(i)
            if kind(j) == "cop":
                copula, j = j, j + 1
                negation = None
                if kind(j) == "neg":
                    negation, j = j, j + 1
                if kind(j) != "adj":
                    fail(j, "an adjective after 'iz'")
                attach(subject, j, "nsubj")
                attach(copula, j, "cop")
                if negation is not None:
                    attach(negation, j, "advmod")
                return j, j + 1
            if kind(j) != "verb":
                fail(j, "a verb or 'iz'")
            verb, j = j, j + 1
            attach(subject, verb, "nsubj")
            if kind(j) in ("det", "num"):
                obj, j = noun_phrase(j)
                attach(obj, verb, "obj")
            if kind(j) == "prep":
                noun, after = noun_phrase(j + 1)
                attach(j, noun, "case")
                attach(noun, verb, "obl")
                j = after
            if kind(j) == "adv":
                attach(j, verb, "advmod")
                j += 1
            return verb, j

        root, j = clause(0)
        attach(root, -1, "root")
        while kind(j) == "conj":
            head, after = clause(j + 1)
            attach(j, head, "cc")
            attach(head, root, "conj")
            j = after
        if kind(j) == "punct" and j == len(words) - 1:
            attach(j, root, "punct")
            j += 1
        if j != len(words):
            fail(j, "'ond', '.' or the end of the sentence")
        parsed.append(Sentence(words, heads, deprels, [upos_of[k] for k in kinds],
                               [f"sent_id = {number}", f"text = {text}"]))
    return write_conllu(parsed)


# ---------------------------------------------------------------------------------------------
# A decoder-only LM and a second encoder: the demo's stand-ins for Llama on WikiText-2 and RoBERTa.
# ---------------------------------------------------------------------------------------------

WIKITEXT_SPLITS = {"train": "wiki.train.raw", "validation": "wiki.valid.raw", "test": "wiki.test.raw"}


def make_wikitext_corpus(out_zip, sentences: Mapping[str, int], seed: int = 0, paragraph: int = 6,
                         article: int = 8) -> Path:
    """The demo grammar's English as WikiText-2 raw is published (wikitext-2-raw-v1.zip): a folder
    wikitext-2-raw/ with wiki.{train,valid,test}.raw, articles under " = Title = " headings, paragraphs of
    ``paragraph`` sentences, every line followed by a blank one. ``sentences``: per split."""
    out_zip = Path(out_zip)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out_zip, "w", zipfile.ZIP_DEFLATED) as archive:
        for split, count in sentences.items():
            sampler = _SentenceSampler(random.Random(_subseed(seed, f"wikitext-{split}")))
            english = [sampler.sentence()[0] for _ in range(count)]
            lines = []
            for start in range(0, count, paragraph):
                if start % (paragraph * article) == 0:
                    lines.append(f" = Article {start // (paragraph * article) + 1} = ")
                lines.append(" " + " ".join(english[start:start + paragraph]) + " ")
            archive.writestr(f"wikitext-2-raw/{WIKITEXT_SPLITS[split]}", "".join(f"\n{line}\n" for line in lines))
    return out_zip


def _byte_level_bpe(texts: list[str], vocab_size: int, specials: list[str]):
    """A byte-level BPE (GPT-2's, Llama 3's kind of tokenizer) learned on ``texts`` (huggingface tokenizers)."""
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                  show_progress=False)
    return tokenizer


@restores_torch_threads
def train_tiny_llama(out_dir, text: str, *, layers: int = 2, heads: int = 4, kv_heads: int = 2, hidden: int = 64,
                     ffn: int = 128, window: int = 64, vocab_size: int = 400, steps: int = 300, batch_size: int = 16,
                     lr: float = 3e-3, seed: int = 0, num_threads: int | None = 1, progress: bool = True) -> Path:
    """Train a Llama-layout causal LM with grouped-query attention (``heads`` query heads reading
    ``kv_heads`` key/value heads) on ``text`` and save it as a Hugging Face model folder: config.json,
    model.safetensors, and a byte-level BPE tokenizer.json that puts <s> before every text (as Llama's)."""
    from tokenizers.processors import TemplateProcessing
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if num_threads:
        torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bpe = _byte_level_bpe([line for line in text.splitlines() if line.strip()], vocab_size, ["<s>", "</s>", "<pad>"])
    bos = bpe.token_to_id("<s>")
    bpe.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    config = LlamaConfig(vocab_size=bpe.get_vocab_size(), hidden_size=hidden, intermediate_size=ffn,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=4 * window, bos_token_id=bos, eos_token_id=bpe.token_to_id("</s>"),
                         pad_token_id=bpe.token_to_id("<pad>"), tie_word_embeddings=True, attn_implementation="eager")
    model = LlamaForCausalLM(config)
    ids = torch.tensor(tokenizer(text)["input_ids"])
    chunks = ids[:len(ids) // window * window].view(-1, window)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 20) * (1 - step / steps))
    shuffle = torch.Generator().manual_seed(seed)
    model.train()
    bar = tqdm(range(steps), desc="train tiny Llama", disable=not progress)
    for _ in bar:
        batch = chunks[torch.randint(len(chunks), (batch_size,), generator=shuffle)]
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def make_tiny_roberta(out_dir, texts: list[str], *, layers: int = 2, heads: int = 4, hidden: int = 64,
                      vocab_size: int = 400, max_length: int = 64, initializer_range: float = 0.1,
                      seed: int = 0) -> Path:
    """Write a tiny "pretrained" RoBERTa folder as roberta-base is published: config.json,
    model.safetensors (RobertaForMaskedLM, random weights: as the tiny BERT, it learns the task in
    fine-tuning) and its byte-level BPE tokenizer (vocab.json, merges.txt) learned on ``texts``."""
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizerFast

    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    bpe = _byte_level_bpe(texts, vocab_size, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(out_dir))
    tokenizer = RobertaTokenizerFast(vocab=str(out_dir / "vocab.json"), merges=str(out_dir / "merges.txt"),
                                     model_max_length=max_length)
    config = RobertaConfig(vocab_size=bpe.get_vocab_size(), hidden_size=hidden, num_hidden_layers=layers,
                           num_attention_heads=heads, intermediate_size=4 * hidden,
                           max_position_embeddings=max_length + 2 * 2, type_vocab_size=1,
                           initializer_range=initializer_range, pad_token_id=tokenizer.pad_token_id,
                           bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                           attn_implementation="eager")
    RobertaForMaskedLM(config).eval().save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
