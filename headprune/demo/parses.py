"""Gold dependency parses of the demo's English: a deterministic parser of its grammar writes them as
CoNLL-U, standing in for the parser the real run applies to its source sentences (head roles).
"""
from __future__ import annotations

from headprune.demo.grammar import (ADJECTIVES, ADVERBS, CONJUNCTION, COPULA, DETERMINERS, NEGATION, NOUNS, PREPOSITIONS,
                                    VERBS)


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
