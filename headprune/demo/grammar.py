"""The demo's made-up language pair: its words, the grammar of its sentences and their translations.

Everything the demo writes is in this language: the translation corpus and the WikiText stand-in
(``headprune.demo.corpora``), the GLUE stand-ins (``headprune.demo.classification``, which build their
own sentences from these words) and their gold parses (``headprune.demo.parses``).
"""
from __future__ import annotations

import random
import zlib
from typing import Mapping

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
# The words the classification tasks add (headprune.demo.classification): "ze dax iz nok frell."
COPULA = "iz"
NEGATION = "nok"


def demo_vocabulary() -> list[str]:
    """Every word the demo's English side (translation source, classification tasks) can use."""
    words = [*NOUNS, *ADJECTIVES, *VERBS, *PREPOSITIONS, *ADVERBS, *DETERMINERS, CONJUNCTION[0], COPULA, NEGATION]
    return sorted(set(words))


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
