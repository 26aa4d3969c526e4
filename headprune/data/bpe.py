"""Byte-pair encoding as subword-nmt learns it (codes format version 0.2), and fairseq dictionaries.

The codes are what fairseq's tarballs ship as ``bpecodes``; transformers' FSMTTokenizer applies
them (``headprune.models.fairseq.build_fsmt_tokenizer``). The demo learns a few hundred merges on a
made-up language; IWSLT 2014 de-en learns fairseq's 10000 merges on ~320k sentences, which is
why ``learn_bpe`` updates its pair counts incrementally instead of recounting every pair after
each merge (the merges are the same: ``tests/test_train.py`` checks them against the plain
algorithm).
"""
from __future__ import annotations

import collections
import heapq
import logging
import math
from pathlib import Path
from typing import Iterable, Mapping

from headprune.io.atomic import write_text
from headprune.io.progress import Progress

END_OF_WORD = "</w>"
CONTINUATION = "@@"


class _Candidate:
    """A heap entry: the most frequent pair first, ties broken by the larger pair (subword-nmt)."""

    __slots__ = ("count", "pair")

    def __init__(self, count: int, pair: tuple[str, str]):
        self.count = count
        self.pair = pair

    def __lt__(self, other: "_Candidate") -> bool:
        if self.count != other.count:
            return self.count > other.count
        return self.pair > other.pair


def _merge_word(symbols: tuple[str, ...], pair: tuple[str, str], merged: str) -> tuple[str, ...]:
    """Replace every non-overlapping occurrence of ``pair``, left to right."""
    out, i, n = [], 0, len(symbols)
    while i < n:
        if i < n - 1 and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def learn_bpe(word_counts: Mapping[str, int], num_merges: int) -> list[tuple[str, str]]:
    """Learn BPE merges like subword-nmt: the most frequent adjacent symbol pair, repeatedly.

    A word starts as its characters, the last one carrying "</w>" (so "ab" is ("a", "b</w>")).
    Ties are broken like subword-nmt (the largest pair in string order), so the codes are
    deterministic; learning stops early when no pair occurs twice (subword-nmt's
    --min-frequency 2). Empty words are ignored.

    Pair counts are kept up to date incrementally (only the words containing the merged pair
    are touched) with a lazily updated heap, so 10000 merges on a real corpus take minutes,
    not hours.
    """
    words: list[tuple[str, ...]] = []
    counts: list[int] = []
    for word, count in word_counts.items():
        if word and count > 0:
            words.append(tuple(word[:-1]) + (word[-1] + END_OF_WORD,))
            counts.append(int(count))

    stats: dict[tuple[str, str], int] = collections.defaultdict(int)
    where: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
    for index, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            stats[pair] += counts[index]
            where[pair].add(index)
    heap = [_Candidate(count, pair) for pair, count in stats.items()]
    heapq.heapify(heap)

    merges: list[tuple[str, str]] = []
    counter = Progress(num_merges, f"learn BPE on {len(words)} word types", "merges", log=logging.getLogger(__name__))
    while len(merges) < num_merges:
        # Entries whose count is no longer the pair's count are stale: skip them.
        while heap and stats.get(heap[0].pair) != heap[0].count:
            heapq.heappop(heap)
        if not heap or heap[0].count < 2:  # subword-nmt stops when no pair occurs twice
            counter.note = "no pair occurs twice any more"
            break
        best = heapq.heappop(heap).pair
        merges.append(best)
        merged = best[0] + best[1]
        delta: dict[tuple[str, str], int] = collections.defaultdict(int)
        for index in where.pop(best):
            symbols = words[index]
            new = _merge_word(symbols, best, merged)
            if len(new) == len(symbols):  # a stale index: the word no longer has the pair
                continue
            count = counts[index]
            for pair in zip(symbols, symbols[1:]):
                delta[pair] -= count
            for pair in zip(new, new[1:]):
                delta[pair] += count
                where[pair].add(index)
            words[index] = new
        for pair, change in delta.items():
            if change == 0:
                continue
            stats[pair] += change
            if stats[pair] <= 0:
                del stats[pair]
            else:
                heapq.heappush(heap, _Candidate(stats[pair], pair))
        stats.pop(best, None)
        counter.update()
    counter.close()
    return merges


def write_bpe_codes(merges: Iterable[tuple[str, str]], path) -> Path:
    """Write merges in subword-nmt's codes format: a version header, then one "a b" per line."""
    path = Path(path)
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in merges]
    return write_text(path, "".join(line + "\n" for line in lines), encoding="utf-8")


def bpe_segment(word: str, merge_ranks: Mapping[tuple[str, str], int]) -> list[str]:
    """Split one word into subwords in fairseq's notation ("le@@ tter"), like subword-nmt.

    Same algorithm as FSMTTokenizer.bpe: merge the lowest-ranked adjacent pair until none
    of the pairs is a known merge.
    """
    symbols = list(word[:-1]) + [word[-1] + END_OF_WORD]
    while len(symbols) > 1:
        pairs = list(zip(symbols, symbols[1:]))
        best = min(pairs, key=lambda pair: merge_ranks.get(pair, math.inf))
        if best not in merge_ranks:
            break
        out, i = [], 0
        while i < len(symbols):
            if i < len(symbols) - 1 and (symbols[i], symbols[i + 1]) == best:
                out.append(best[0] + best[1])
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        symbols = out
    # fairseq notation: "@@" marks a subword that continues; the word-final one is bare
    return [s[: -len(END_OF_WORD)] if s.endswith(END_OF_WORD) else s + CONTINUATION for s in symbols]


def joined_dictionary(word_counts: Mapping[str, int], merges: list[tuple[str, str]],
                      extra_characters: Iterable[str] = ()) -> list[tuple[str, int]]:
    """A fairseq dictionary (token, count) for BPE over ``word_counts``, ordered like fairseq-preprocess.

    Counts are those of the BPE-segmented words (count descending, then alphabetical). Every
    single character of the words (and ``extra_characters``), in both its word-final and its
    continuing form, and every merge product are listed too (count 0 when unseen), so that text
    made of known characters never maps to <unk> whatever way BPE splits it.
    """
    merge_ranks = {pair: rank for rank, pair in enumerate(merges)}
    token_counts: collections.Counter = collections.Counter()
    for word, count in word_counts.items():
        if word:
            for token in bpe_segment(word, merge_ranks):
                token_counts[token] += count
    characters = sorted({c for word in word_counts for c in word} | set(extra_characters))
    for subword in [c + END_OF_WORD for c in characters] + characters + [a + b for a, b in merges]:
        token = subword[: -len(END_OF_WORD)] if subword.endswith(END_OF_WORD) else subword + CONTINUATION
        token_counts.setdefault(token, 0)
    return sorted(token_counts.items(), key=lambda item: (-item[1], item[0]))
