"""Gold dependency parses of the demo's English: a deterministic parser of its grammar writes them as
CoNLL-U, standing in for the parser the real run applies to its source sentences (head roles).
"""
from __future__ import annotations

from headprune.demo.grammar import (ADJECTIVES, ADVERBS, CONJUNCTION, COPULA, DETERMINERS, NEGATION, NOUNS, PREPOSITIONS,
                                    VERBS)


# Each word of the demo grammar's vocabulary, by its class in the grammar; numbers are "num".
_WORD_CLASSES = {
    **dict.fromkeys(DETERMINERS, "det"), **dict.fromkeys(ADJECTIVES, "adj"), **dict.fromkeys(NOUNS, "noun"),
    **dict.fromkeys(VERBS, "verb"), **dict.fromkeys(PREPOSITIONS, "prep"), **dict.fromkeys(ADVERBS, "adv"),
    CONJUNCTION[0]: "conj", COPULA: "cop", NEGATION: "neg", ".": "punct",
}
_UPOS = {"det": "DET", "num": "NUM", "adj": "ADJ", "noun": "NOUN", "verb": "VERB", "prep": "ADP",
         "adv": "ADV", "conj": "CCONJ", "cop": "AUX", "neg": "PART", "punct": "PUNCT"}


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

    parsed = []
    for number, text in enumerate(sentences, 1):
        parse = _SentenceParse(number, text)
        parse.sentence()
        parsed.append(Sentence(parse.words, parse.heads, parse.deprels, [_UPOS[k] for k in parse.kinds],
                               [f"sent_id = {number}", f"text = {text}"]))
    return write_conllu(parsed)


class _SentenceParse:
    """One sentence being parsed: its words and their classes, and each word's head (1-based, 0 the root) and
    relation as the parser finds them. Each rule of the grammar takes the index of its first word and
    returns (the index of its head word, the index after it)."""

    def __init__(self, number: int, text: str):
        self.number, self.text = number, text
        words = text.split()
        if words and words[-1].endswith(".") and words[-1] != ".":
            words[-1:] = [words[-1][:-1], "."]
        self.words = words
        self.kinds = ["num" if word.isdigit() else _WORD_CLASSES.get(word, "unknown") for word in words]
        self.heads: list[int | None] = [None] * len(words)
        self.deprels: list[str | None] = [None] * len(words)

    def kind(self, i: int) -> str:
        return self.kinds[i] if i < len(self.words) else "end"

    def fail(self, i: int, expected: str):
        found = f"word {i + 1} {self.words[i]!r}" if i < len(self.words) else "the end of the sentence"
        raise ValueError(f"demo_conllu: sentence {self.number} {self.text!r} is outside the demo grammar: "
                         f"expected {expected}, found {found}")

    def attach(self, dependent: int, head: int, deprel: str) -> None:
        self.heads[dependent], self.deprels[dependent] = head + 1, deprel  # 1-based; head -1 is the root

    def sentence(self) -> None:
        """S := CLAUSE ("ond" CLAUSE)* ["."]"""
        root, j = self.clause(0)
        self.attach(root, -1, "root")
        while self.kind(j) == "conj":
            head, after = self.clause(j + 1)
            self.attach(j, head, "cc")
            self.attach(head, root, "conj")
            j = after
        if self.kind(j) == "punct" and j == len(self.words) - 1:
            self.attach(j, root, "punct")
            j += 1
        if j != len(self.words):
            self.fail(j, "'ond', '.' or the end of the sentence")

    def clause(self, i: int) -> tuple[int, int]:
        """CLAUSE := NP VERB [NP] [PREP NP] [ADV]  |  NP "iz" ["nok"] ADJ"""
        subject, j = self.noun_phrase(i)
        if self.kind(j) == "cop":
            return self.copula_clause(subject, j)
        if self.kind(j) != "verb":
            self.fail(j, "a verb or 'iz'")
        verb, j = j, j + 1
        self.attach(subject, verb, "nsubj")
        if self.kind(j) in ("det", "num"):
            obj, j = self.noun_phrase(j)
            self.attach(obj, verb, "obj")
        if self.kind(j) == "prep":
            noun, after = self.noun_phrase(j + 1)
            self.attach(j, noun, "case")
            self.attach(noun, verb, "obl")
            j = after
        if self.kind(j) == "adv":
            self.attach(j, verb, "advmod")
            j += 1
        return verb, j

    def copula_clause(self, subject: int, copula: int) -> tuple[int, int]:
        """The rest of NP "iz" ["nok"] ADJ, from "iz" on: the adjective heads it."""
        j = copula + 1
        negation = None
        if self.kind(j) == "neg":
            negation, j = j, j + 1
        if self.kind(j) != "adj":
            self.fail(j, "an adjective after 'iz'")
        self.attach(subject, j, "nsubj")
        self.attach(copula, j, "cop")
        if negation is not None:
            self.attach(negation, j, "advmod")
        return j, j + 1

    def noun_phrase(self, i: int) -> tuple[int, int]:
        """NP := (DET | NUMBER) [["nok"] ADJ] NOUN"""
        if self.kind(i) not in ("det", "num"):
            self.fail(i, "a determiner or a number")
        j, negation, adjective = i + 1, None, None
        if self.kind(j) == "neg":
            negation, j = j, j + 1
            if self.kind(j) != "adj":
                self.fail(j, "an adjective after 'nok'")
        if self.kind(j) == "adj":
            adjective, j = j, j + 1
        if self.kind(j) != "noun":
            self.fail(j, "a noun")
        self.attach(i, j, "det" if self.kinds[i] == "det" else "nummod")
        if adjective is not None:
            self.attach(adjective, j, "amod")
        if negation is not None:
            self.attach(negation, adjective, "advmod")
        return j, j + 1
