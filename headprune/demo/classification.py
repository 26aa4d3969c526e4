"""The demo's classification tasks: GLUE stand-ins (MNLI, SST-2, CoLA, MRPC) in the made-up English of
``headprune.demo.grammar``, written as normalized splits and as the files the real tasks are downloaded as
(GLUE's archives or, for MRPC, SentEval's files).
"""
from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path
from typing import NamedTuple

from headprune.demo.corpora import _write_lines
from headprune.demo.grammar import (ADJECTIVES, CONJUNCTION, COPULA, DETERMINERS, NEGATION, NOUNS, PREPOSITIONS, VERBS,
                                    _subseed, _zipf_weights)
from headprune.io.atomic import atomic_path, write_json, write_text
from headprune.io.download import sha256sum

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
# Label indices follow headprune.data.glue.GLUE_TASKS (MNLI: contradiction, entailment, neutral).
# ---------------------------------------------------------------------------------------------

POSITIVE_ADJECTIVES = ("frell", "quom", "spiv", "norl", "tib")
CLASSIFICATION_KINDS = {"mnli": "MNLI", "sst2": "SST-2", "cola": "CoLA", "mrpc": "MRPC"}


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
    from headprune.data.glue import GLUE_TASKS

    return GLUE_TASKS[CLASSIFICATION_KINDS[kind]]


def _write_normalized_tsv(path: Path, rows) -> Path:
    # The layout headprune.data.glue.prepare_glue_task writes: text_a, text_b, label index.
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
      glue_task             glue_task.json: headprune.data.glue's task dict for these files (file://
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
            write_text(paths[key], text, encoding="utf-8")
            task["files"][key].update(url=paths[key].resolve().as_uri(), sha256=sha256sum(paths[key]))
    else:
        zip_path = out_dir / f"{CLASSIFICATION_KINDS[kind]}.zip"
        with atomic_path(zip_path) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for member, text in _raw_glue_files(kind, splits).items():
                # A fixed timestamp keeps the archive (and its sha256) identical for a given seed.
                archive.writestr(zipfile.ZipInfo(member, date_time=(2019, 5, 24, 0, 0, 0)), text)
        paths["glue_zip"] = zip_path
        task.update(url=zip_path.resolve().as_uri(), sha256=sha256sum(zip_path))
    task["splits"] = {split: where for split, where in task["splits"].items() if split in splits}
    paths["glue_task"] = out_dir / "glue_task.json"
    write_json(paths["glue_task"], task, indent=1, end="\n", encoding="utf-8")
    return paths
