"""The demo's text corpora, in the formats the real ones come in: the translation corpus "en" -> "fr"
(plain text, one sentence per line, Moses-tokenizable; test sets named like WMT's newstest and MTNT) with
its subword-nmt BPE codes and fairseq dictionaries, and WikiText-2's raw archive for the language model.
"""
from __future__ import annotations

import collections
import random
import zipfile
from pathlib import Path
from typing import Mapping

from headprune.data.bpe import END_OF_WORD, bpe_segment, learn_bpe, write_bpe_codes
from headprune.demo.grammar import _SentenceSampler, _subseed
from headprune.io.atomic import atomic_path, write_text
from headprune.models.fairseq import write_fairseq_dict

# Split of the translation demo into test sets, named like the paper's (WMT newstest 2009-2014
# and MTNT for the out-of-domain set): newstest2009-2012 estimate head importance, 2013 scores,
# 2014 tests the all-but-one selections.
DEMO_TEST_SETS = {f"newstest{year}": 200 for year in range(2009, 2015)} | {"mtnt": 200}
DEMO_SHIFTED_TEST_SETS = ("mtnt",)


def _write_lines(path: Path, lines: list[str]) -> Path:
    return write_text(path, "".join(line + "\n" for line in lines), encoding="utf-8")


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
# WikiText-2: the demo grammar's English as the language model's corpus (the demo's Llama, in
# headprune.demo.models, trains on it).
# ---------------------------------------------------------------------------------------------

WIKITEXT_SPLITS = {"train": "wiki.train.raw", "validation": "wiki.valid.raw", "test": "wiki.test.raw"}


def make_wikitext_corpus(out_zip, sentences: Mapping[str, int], seed: int = 0, paragraph: int = 6,
                         article: int = 8) -> Path:
    """The demo grammar's English as WikiText-2 raw is published (wikitext-2-raw-v1.zip): a folder
    wikitext-2-raw/ with wiki.{train,valid,test}.raw, articles under " = Title = " headings, paragraphs of
    ``paragraph`` sentences, every line followed by a blank one. ``sentences``: per split."""
    out_zip = Path(out_zip)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_zip) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as archive:
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
