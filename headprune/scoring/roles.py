"""What attention heads do: Voita et al. (2019)'s positional, syntactic and rare-word heads.

Voita et al. (2019, "Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting,
the Rest Can Be Pruned") name three functions of encoder self-attention heads, all read off where
a head puts its LARGEST attention weight (its argmax) for each query:

positional  its argmax falls on one fixed relative offset, -1 or +1, for at least 90% of the
            queries. Score: max over offset in {-1, +1} of the fraction of queries whose argmax is
            at that offset, counted over the queries that have a word at that offset (so a head
            that always looks at the previous word scores 1.0: the first word, which has no
            previous word, is not a case). ``positional_offset`` is the offset that wins.
syntactic   for each relation nsubj, obj (UD v1's dobj is read as obj), amod and advmod and each
            direction, how often the argmax lands on the related word:
              dep2head  the query is the dependent, the answer its head word (Voita's "s -> v"
                        for nsubj: the subject looks at its verb);
              head2dep  the query is the head word, counted once per head word with at least one
                        such dependent; a hit is the argmax on any of them ("v -> o" for obj).
            The baseline of a relation-direction is the accuracy of always predicting one fixed
            relative offset, the one right most often (for dep2head: the most frequent offset
            between the two words), computed on the same sentences. A head is syntactic when it
            beats the baseline by at least 10 points (``syntactic_margin`` >= 0.10) on some
            relation-direction. Deprels match exactly (after dobj -> obj): subtypes such as
            nsubj:pass are not nsubj (CoreNLP, which Voita et al. used, keeps nsubjpass apart).
rare-word   on the sentences whose rarest word (lowest count in the training data, unseen words
            count 0) is outside the ``top_k`` most frequent words (Voita et al.: 500), the
            fraction of queries (every word of those sentences, the rarest one included) whose
            argmax is the sentence's rarest word (any of them, when several share the lowest
            count). A word is among the top_k when its count is at least the top_k-th highest
            count (ties at the boundary count as frequent); unseen words never are. Voita et al.'s
            rare-word head hits the rarest token in 66% of such cases (OpenSubtitles) and one of
            the two rarest in just over 50% (WMT); a head here is rare-word when its score is at
            least 0.5. Words are compared as given (no lowercasing): give an uncased model
            lowercased frequencies and words.

Every score is NaN where it has fewer than ``min_cases`` cases (queries, sentences' words or
relation instances), and such a score decides nothing.

One role per head, by priority: "positional", then "rare-word", then "syntactic", else "other"
("pruned" for a head with no attention weights). Positional comes first because its criterion is
the strictest and a positional head matches some relations by construction (the baseline is
itself a fixed offset). Rare-word comes before syntactic because it is an absolute criterion
(half of all queries on one word) while syntactic is relative (10 points over a baseline): a head
sending every query to the rarest word hits whatever relations point at rare content words, but a
syntactic head does not send half of all queries to the rarest word. ``functions`` lists every
criterion a head meets ("positional+syntactic"), as heads can have several (Voita et al., Fig. 9).

Only encoder self-attention gets roles (``enc_self``: BERT's attention and the translation
model's encoder, fed source sentences alone); decoder self-attention and encoder-decoder
attention are left out of the maps and the table (their queries are target words, which have no
source-side parse).

Word-level attention. Models attend between subword tokens; parses are over words. Following
Clark et al. (2019), the attention FROM a word is the row of its FIRST subword (the first subword
sees the previous word's last subword as its neighbour, so a previous-token head stays a
previous-word head), and the attention TO a word is the SUM over its subwords' columns. Special
tokens (BOS, EOS, [CLS], [SEP], padding) belong to no word and are dropped, so a word row sums to
1 minus the weight on them; the argmax is taken over words only, which leaves out EOS as Voita
et al. do. Sentences are tokenized word by word (``token_word_map``), so the alignment is exact;
a sentence goes to the model alone ([CLS] words [SEP] for BERT, words </s> for the translation
encoder).
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from headprune.io.atomic import write_text
from headprune.io.progress import counted
from headprune.models.heads import ENC_DEC, ENC_SELF, adapter_for
from headprune.scoring.importance import _use_eager_attention

RELATIONS = ("nsubj", "obj", "amod", "advmod")
DIRECTIONS = ("dep2head", "head2dep")
RELATION_ALIASES = {"dobj": "obj"}  # UD v1 / Stanford dependencies -> UD v2
SYNTACTIC_COLUMNS = tuple(f"{relation}_{direction}" for relation in RELATIONS for direction in DIRECTIONS)

POSITIONAL_THRESHOLD = 0.9
RARE_WORD_THRESHOLD = 0.5
SYNTACTIC_MARGIN = 0.10
TOP_K = 500
MIN_CASES = 20
ROLE_PRIORITY = ("positional", "rare-word", "syntactic")
log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------
# CoNLL-U


@dataclasses.dataclass
class Sentence:
    """One parsed sentence: words with 1-based head indices (0 is the root) and relations."""

    words: list[str]
    heads: list[int]
    deprels: list[str]
    upos: list[str] | None = None
    comments: list[str] = dataclasses.field(default_factory=list)  # without the leading "# "

    def __post_init__(self):
        n = len(self.words)
        if len(self.heads) != n or len(self.deprels) != n or (self.upos is not None and len(self.upos) != n):
            raise ValueError(f"a sentence needs one head, deprel (and upos) per word: {n} words, "
                             f"{len(self.heads)} heads, {len(self.deprels)} deprels")
        bad = [h for h in self.heads if not 0 <= h <= n]
        if bad:
            raise ValueError(f"head indices must be in 0..{n}, got {bad}")

    def __len__(self):
        return len(self.words)


def read_conllu(path_or_text) -> list[Sentence]:
    """Sentences of a CoNLL-U file or text (words, heads, deprels, upos, comment lines).

    A ``Path``, or a string without a newline, is a file name; a string with a newline is the
    text itself. Comment lines, multiword-token lines ("1-2") and empty nodes ("1.1") are
    skipped. A malformed line raises ValueError naming the file (or "<text>") and line number.
    """
    if isinstance(path_or_text, Path) or "\n" not in str(path_or_text):
        name = str(path_or_text)
        text = Path(path_or_text).read_text(encoding="utf-8")
    else:
        name, text = "<text>", str(path_or_text)

    sentences: list[Sentence] = []
    rows: list[tuple[int, str, str, int, str]] = []  # (line number, form, upos, head, deprel)
    comments: list[str] = []

    def error(line_number, message):
        return ValueError(f"{name}:{line_number}: {message}")

    def finish():
        if not rows:
            comments.clear()
            return
        n = len(rows)
        for line_number, _, _, head, _ in rows:
            if head > n:
                raise error(line_number, f"HEAD {head} is beyond the sentence's {n} words")
        sentences.append(Sentence([r[1] for r in rows], [r[3] for r in rows], [r[4] for r in rows],
                                  [r[2] for r in rows], list(comments)))
        rows.clear()
        comments.clear()

    for line_number, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if not line.strip():
            finish()
            continue
        if line.startswith("#"):
            comments.append(line[1:].strip())
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise error(line_number, f"expected 10 tab-separated fields, got {len(fields)}: {line!r}")
        token_id = fields[0]
        if "-" in token_id or "." in token_id:  # multiword token or empty node
            continue
        if not token_id.isdigit():
            raise error(line_number, f"ID {token_id!r} is not a word index")
        if int(token_id) != len(rows) + 1:
            raise error(line_number, f"ID {token_id} should be {len(rows) + 1} (IDs count 1, 2, ... per sentence)")
        head = fields[6]
        if not head.isdigit():
            raise error(line_number, f"HEAD {head!r} is not a word index")
        if not fields[7] or fields[7] == "_":
            raise error(line_number, "DEPREL is missing")
        rows.append((line_number, fields[1], fields[3], int(head), fields[7]))
    finish()
    return sentences


def write_conllu(sentences: Iterable[Sentence], path=None) -> str:
    """CoNLL-U text of the sentences (LEMMA, XPOS, FEATS, DEPS, MISC left "_"), written to ``path`` if given."""
    blocks = []
    for sentence in sentences:
        lines = [f"# {comment}" for comment in sentence.comments]
        upos = sentence.upos or ["_"] * len(sentence)
        for i, (word, tag, head, deprel) in enumerate(zip(sentence.words, upos, sentence.heads, sentence.deprels), 1):
            lines.append("\t".join([str(i), word, "_", tag or "_", "_", "_", str(head), deprel, "_", "_"]))
        blocks.append("".join(line + "\n" for line in lines) + "\n")
    text = "".join(blocks)
    if path is not None:
        write_text(path, text, encoding="utf-8")
    return text


def word_frequencies(sentences: Iterable[Sentence | Sequence[str]]) -> collections.Counter:
    """Word counts over training sentences (Sentence objects or lists of words)."""
    counts: collections.Counter = collections.Counter()
    for sentence in sentences:
        counts.update(_words(sentence))
    return counts


def _words(sentence) -> list[str]:
    if isinstance(sentence, Sentence):
        return list(sentence.words)
    if isinstance(sentence, str):
        raise TypeError(f"expected a Sentence or a list of words, got the string {sentence!r}")
    return list(sentence)


# ----------------------------------------------------------------------------------------------
# Subword tokens -> words


def token_word_map(tokenizer, words: Sequence[str]) -> tuple[list[int], list[int]]:
    """(input_ids, word index per token) for one sentence given as words; -1 marks special tokens.

    Tokenizes word by word, so every token belongs to exactly one word. Tokenizers backed by
    🤗 tokenizers (BERT's) use ``is_split_into_words`` and ``word_ids()``; Python tokenizers
    (FSMTTokenizer: Moses + the fairseq BPE of the demo and the WMT models) encode each word
    alone and add the special tokens with ``build_inputs_with_special_tokens``.
    """
    words = list(words)
    if not words:
        raise ValueError("a sentence needs at least one word")
    try:
        encoding = tokenizer(words, is_split_into_words=True, add_special_tokens=True)
        word_ids = encoding.word_ids()
    except (ValueError, NotImplementedError, AttributeError, TypeError):
        encoding = None
    if encoding is not None:
        input_ids = list(encoding["input_ids"])
        word_index = [-1 if w is None else int(w) for w in word_ids]
    else:
        pieces = [tokenizer(word, add_special_tokens=False)["input_ids"] for word in words]
        flat = [token for piece in pieces for token in piece]
        input_ids = list(tokenizer.build_inputs_with_special_tokens(flat))
        special = tokenizer.get_special_tokens_mask(flat)
        if len(special) != len(input_ids) or len(special) - sum(special) != len(flat):
            raise ValueError(f"{type(tokenizer).__name__}: cannot tell the special tokens apart")
        owners = iter(i for i, piece in enumerate(pieces) for _ in piece)
        word_index = [-1 if is_special else next(owners) for is_special in special]
    missing = sorted(set(range(len(words))) - set(word_index))
    if missing:
        raise ValueError(f"words {[words[i] for i in missing]} become no token at all")
    return input_ids, word_index


def word_attention(attention, word_index: Sequence[int], num_words: int | None = None) -> np.ndarray:
    """Word-level attention (..., words, words) from token-level attention (..., tokens, tokens).

    ``word_index`` gives each token's word (-1 or None: a special token, belonging to none).
    Row w is the row of word w's first token; column v sums the columns of word v's tokens.
    Special tokens are dropped on both sides.
    """
    a = attention.detach().cpu().numpy() if torch.is_tensor(attention) else np.asarray(attention)
    index = np.array([-1 if w is None else int(w) for w in word_index])
    if a.shape[-1] != len(index) or a.shape[-2] != len(index):
        raise ValueError(f"attention over {a.shape[-2:]} tokens but a word index for {len(index)}")
    n = int(index.max()) + 1 if num_words is None else int(num_words)
    if n < 1:
        raise ValueError("no token belongs to a word")
    first = np.full(n, -1)
    for token in range(len(index) - 1, -1, -1):
        if index[token] >= 0:
            first[index[token]] = token
    if (first < 0).any():
        raise ValueError(f"words {np.flatnonzero(first < 0).tolist()} have no token")
    keys = np.zeros((len(index), n), dtype=a.dtype if np.issubdtype(a.dtype, np.floating) else np.float64)
    owned = index >= 0
    keys[np.flatnonzero(owned), index[owned]] = 1.0
    return a[..., first, :] @ keys


def attention_argmax(maps) -> np.ndarray:
    """The key word each query looks at most: (..., words) from (..., words, words); rows that are
    all NaN (a pruned head) give -1. Integer arrays are taken to be argmaxes already."""
    a = np.asarray(maps)
    if np.issubdtype(a.dtype, np.integer):
        return a.astype(np.int64)
    nan = np.isnan(a)
    best = np.argmax(np.where(nan, -np.inf, a), axis=-1)
    best[nan.all(-1)] = -1
    return best


# ----------------------------------------------------------------------------------------------
# Attention maps of a model


def attention_maps(model, tokenizer, sentences: Sequence[Sentence | Sequence[str]], *, batch_size: int = 32,
                   device=None, argmax: bool = False, progress: bool = True) -> dict[str, list[np.ndarray]]:
    """Word-level encoder self-attention of every sentence: {"enc_self": [one array per sentence]}.

    Each array is (layers, heads, words, words) float32 word attention (see the module doc), or
    with ``argmax=True`` the (layers, heads, words) int64 key word of each query's largest
    weight: all the detectors need, at a fraction of the memory. Heads are the original ones;
    physically pruned heads get NaN rows (argmax -1). BERT-like classifiers run their encoder
    on "[CLS] words [SEP]"; translation models (FSMT, M2M100) their encoder alone on
    "words </s>" (decoder attention gets no roles, so it is not computed). The model runs in eval
    mode with eager attention (switched, as headprune.scoring.importance does), without gradients,
    in batches of ``batch_size`` sentences of similar length.
    """
    adapter = adapter_for(model)
    _use_eager_attention(model)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    encoded = [token_word_map(tokenizer, _words(sentence)) for sentence in sentences]
    limit = getattr(model.config, "max_position_embeddings", None)
    for number, (ids, _) in enumerate(encoded):
        if limit is not None and len(ids) > limit:
            raise ValueError(f"sentence {number} has {len(ids)} tokens, more than the model's {limit} positions")
    sites = [site for site in adapter.sites(model) if site.attn_type == ENC_SELF]
    layers, heads = len(sites), max(site.original_num_heads for site in sites)
    with_heads = [site for site in sites if site.num_heads]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    results: list[np.ndarray | None] = [None] * len(encoded)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in counted(range(0, len(order), batch_size), f"attention maps of {len(order)} sentences",
                                 "batches", enabled=progress, log=log):
                chunk = order[start:start + batch_size]
                width = max(len(encoded[i][0]) for i in chunk)
                input_ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, i in enumerate(chunk):
                    ids = encoded[i][0]
                    input_ids[row, :len(ids)] = torch.tensor(ids)
                    mask[row, :len(ids)] = 1
                input_ids, mask = input_ids.to(device), mask.to(device)
                if ENC_DEC in adapter.attention_types:  # an encoder-decoder: its encoder alone
                    outputs = model.get_encoder()(input_ids=input_ids, attention_mask=mask, output_attentions=True)
                else:  # an encoder (BERT, RoBERTa, DistilBERT, ...); token types where the model has them
                    types = {"token_type_ids": torch.zeros_like(input_ids)} \
                        if getattr(model.config, "type_vocab_size", 0) else {}
                    outputs = model.base_model(input_ids=input_ids, attention_mask=mask, output_attentions=True, **types)
                weights = [w for w in (outputs.attentions or ()) if w is not None]
                if len(weights) != len(with_heads):
                    raise RuntimeError(f"{len(weights)} encoder attention maps for {len(with_heads)} layers with heads "
                                       "(is the model in eager attention?)")
                full = np.full((len(chunk), layers, heads, width, width), np.nan, dtype=np.float32)
                for site, w in zip(with_heads, weights):
                    full[:, site.layer, site.kept_heads] = w.float().cpu().numpy()
                for row, i in enumerate(chunk):
                    ids, index = encoded[i]
                    words = word_attention(full[row, ..., :len(ids), :len(ids)], index, num_words=max(index) + 1)
                    results[i] = attention_argmax(words) if argmax else words
    finally:
        model.train(was_training)
    return {ENC_SELF: results}


# ----------------------------------------------------------------------------------------------
# Detectors, on word-level maps: a sequence with one array per sentence, (..., words, words)
# float attention or (..., words) int argmax; the leading dimensions (e.g. layers, heads) are
# the heads, and every score comes back with their shape.


def _argmaxes(maps) -> list[np.ndarray]:
    out = [attention_argmax(m) for m in maps]
    if not out:
        raise ValueError("no attention maps")
    shape = out[0].shape[:-1]
    for number, a in enumerate(out):
        if a.shape[:-1] != shape:
            raise ValueError(f"sentence {number}'s map has heads {a.shape[:-1]}, the first one {shape}")
    return out


def _check_lengths(argmaxes, sentences):
    if len(argmaxes) != len(sentences):
        raise ValueError(f"{len(argmaxes)} attention maps for {len(sentences)} sentences")
    for number, (a, sentence) in enumerate(zip(argmaxes, sentences)):
        if a.shape[-1] != len(_words(sentence)):
            raise ValueError(f"sentence {number} has {len(_words(sentence))} words but its map {a.shape[-1]} queries")


def _fraction(hits, cases, min_cases):
    hits, cases = np.asarray(hits, dtype=float), np.asarray(cases, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cases >= max(min_cases, 1), hits / cases, np.nan)


def positional_scores(maps, offsets: Sequence[int] = (-1, 1), min_cases: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(score, offset) per head: the largest fraction, over ``offsets``, of queries whose argmax is
    at that relative offset (among queries with a word there), and that offset."""
    argmaxes = _argmaxes(maps)
    shape = argmaxes[0].shape[:-1]
    fractions = []
    for offset in offsets:
        hits, cases = np.zeros(shape), np.zeros(shape)
        for a in argmaxes:
            n = a.shape[-1]
            queries = np.arange(n)
            inside = (queries + offset >= 0) & (queries + offset < n)
            valid = (a >= 0) & inside
            hits += ((a == queries + offset) & valid).sum(-1)
            cases += valid.sum(-1)
        fractions.append(_fraction(hits, cases, min_cases))
    stacked = np.stack(fractions)
    filled = np.where(np.isnan(stacked), -1.0, stacked)
    best = filled.argmax(0)
    score = np.take_along_axis(stacked, best[None], 0)[0]
    offset = np.where(np.isnan(score), np.nan, np.asarray(offsets, dtype=float)[best])
    return score, offset


def _frequent_cutoff(frequencies: Mapping[str, int], top_k: int) -> float:
    """The count a word needs to be among the top_k most frequent (ties at the boundary are in)."""
    counts = sorted((c for c in frequencies.values() if c > 0), reverse=True)
    if top_k <= 0:
        return math.inf
    return counts[top_k - 1] if len(counts) >= top_k else (counts[-1] if counts else math.inf)


def rare_word_cases(sentences, frequencies: Mapping[str, int], top_k: int = TOP_K) -> list[list[int] | None]:
    """Per sentence, the indices of its rarest words, or None when its rarest word is among the
    ``top_k`` most frequent (the sentence is then not a case)."""
    cutoff = _frequent_cutoff(frequencies, top_k)
    cases = []
    for sentence in sentences:
        counts = [frequencies.get(word, 0) for word in _words(sentence)]
        lowest = min(counts)
        frequent = lowest > 0 and lowest >= cutoff
        cases.append(None if frequent else [i for i, c in enumerate(counts) if c == lowest])
    return cases


def rare_word_score(maps, sentences, frequencies: Mapping[str, int], top_k: int = TOP_K,
                    min_cases: int = 1) -> np.ndarray:
    """Per head, the fraction of queries whose argmax is their sentence's rarest word, over the
    sentences whose rarest word is outside the ``top_k`` most frequent (see the module doc)."""
    argmaxes = _argmaxes(maps)
    _check_lengths(argmaxes, sentences)
    shape = argmaxes[0].shape[:-1]
    hits, cases = np.zeros(shape), np.zeros(shape)
    for a, rarest in zip(argmaxes, rare_word_cases(sentences, frequencies, top_k)):
        if rarest is None:
            continue
        valid = a >= 0
        hits += (np.isin(a, rarest) & valid).sum(-1)
        cases += valid.sum(-1)
    return _fraction(hits, cases, min_cases)


def _relation(deprel: str) -> str:
    return RELATION_ALIASES.get(deprel, deprel)


def relation_cases(sentence: Sentence, relation: str, direction: str) -> list[tuple[int, list[int]]]:
    """(query word, the words that count as a hit), 0-based, for one relation and direction."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    arcs = [(dep, head - 1) for dep, (head, deprel) in enumerate(zip(sentence.heads, sentence.deprels))
            if head > 0 and _relation(deprel) == _relation(relation)]
    if direction == "dep2head":
        return [(dep, [head]) for dep, head in arcs]
    dependents: dict[int, list[int]] = {}
    for dep, head in arcs:
        dependents.setdefault(head, []).append(dep)
    return sorted(dependents.items())


class Baseline(NamedTuple):
    accuracy: float  # of always predicting ``offset``
    offset: int | None  # the relative offset (key - query) right most often
    cases: int


def syntactic_baselines(sentences: Sequence[Sentence], relations: Sequence[str] = RELATIONS) -> dict[str, Baseline]:
    """Per relation-direction ("nsubj_dep2head", ...), the best fixed-offset predictor's accuracy.

    Ties between offsets go to the smaller distance, then the negative one.
    """
    baselines = {}
    for relation in relations:
        for direction in DIRECTIONS:
            right: collections.Counter = collections.Counter()
            total = 0
            for sentence in sentences:
                for query, gold in relation_cases(sentence, relation, direction):
                    total += 1
                    right.update({g - query for g in gold})
            if not total:
                baselines[f"{relation}_{direction}"] = Baseline(math.nan, None, 0)
                continue
            offset, count = min(right.items(), key=lambda item: (-item[1], abs(item[0]), item[0]))
            baselines[f"{relation}_{direction}"] = Baseline(count / total, int(offset), total)
    return baselines


def syntactic_scores(maps, sentences: Sequence[Sentence], relations: Sequence[str] = RELATIONS,
                     min_cases: int = 1) -> dict[str, np.ndarray]:
    """Per relation-direction ("nsubj_dep2head", ...), per head: how often the argmax of a query
    lands on its related word (see the module doc); NaN below ``min_cases`` cases."""
    argmaxes = _argmaxes(maps)
    _check_lengths(argmaxes, sentences)
    shape = argmaxes[0].shape[:-1]
    scores = {}
    for relation in relations:
        for direction in DIRECTIONS:
            hits, cases = np.zeros(shape), np.zeros(shape)
            for a, sentence in zip(argmaxes, sentences):
                for query, gold in relation_cases(sentence, relation, direction):
                    chosen = a[..., query]
                    hits += np.isin(chosen, gold)
                    cases += chosen >= 0
            scores[f"{relation}_{direction}"] = _fraction(hits, cases, min_cases)
    return scores


# ----------------------------------------------------------------------------------------------
# The table


def head_roles(maps, sentences: Sequence[Sentence], frequencies: Mapping[str, int] | None, *,
               attn_type: str = ENC_SELF, top_k: int = TOP_K, relations: Sequence[str] = RELATIONS,
               positional_threshold: float = POSITIONAL_THRESHOLD, rare_word_threshold: float = RARE_WORD_THRESHOLD,
               syntactic_margin: float = SYNTACTIC_MARGIN, min_cases: int = MIN_CASES) -> pd.DataFrame:
    """One row per head with Voita et al.'s scores and its role.

    ``maps``: attention_maps' dict ({attn_type: per-sentence arrays}) or one list of per-sentence
    (layers, heads, words, words) float maps or (layers, heads, words) argmaxes, of ``attn_type``.
    ``sentences``: their parses; ``frequencies``: word counts of the training data (None: no
    rare-word scores).

    Columns: attn_type, layer, head, positional, positional_offset (-1/+1), rare_word, one score
    per relation-direction (nsubj_dep2head, nsubj_head2dep, obj_..., amod_..., advmod_...), the
    same with a ``_baseline`` suffix (equal for every head), syntactic_best (the relation-direction
    with the largest margin over its baseline), syntactic_margin (that margin), functions (every
    criterion met, joined by "+", or "") and role (ROLE_PRIORITY's first met, else "other";
    "pruned" for a head without attention weights).
    """
    per_type = dict(maps) if isinstance(maps, Mapping) else {attn_type: maps}
    sentences = list(sentences)
    baselines = syntactic_baselines(sentences, relations)
    rows = []
    for kind, type_maps in per_type.items():
        argmaxes = _argmaxes(type_maps)
        _check_lengths(argmaxes, sentences)
        if argmaxes[0].ndim != 3:
            raise ValueError(f"{kind}: maps must be (layers, heads, words[, words]) per sentence, "
                             f"got {argmaxes[0].ndim + 1}-d float or {argmaxes[0].ndim}-d argmax arrays")
        layers, heads = argmaxes[0].shape[:2]
        positional, offset = positional_scores(argmaxes, min_cases=min_cases)
        rare = (rare_word_score(argmaxes, sentences, frequencies, top_k, min_cases) if frequencies is not None
                else np.full((layers, heads), np.nan))
        syntactic = syntactic_scores(argmaxes, sentences, relations, min_cases)
        attended = np.zeros((layers, heads), dtype=bool)
        for a in argmaxes:
            attended |= (a >= 0).any(-1)
        for layer in range(layers):
            for head in range(heads):
                row = {"attn_type": kind, "layer": layer, "head": head,
                       "positional": float(positional[layer, head]), "positional_offset": float(offset[layer, head]),
                       "rare_word": float(rare[layer, head])}
                margins = {}
                for name, score in syntactic.items():
                    row[name] = float(score[layer, head])
                    if not math.isnan(row[name]) and not math.isnan(baselines[name].accuracy):
                        margins[name] = row[name] - baselines[name].accuracy
                for name, baseline in baselines.items():
                    row[f"{name}_baseline"] = baseline.accuracy
                best = max(margins, key=margins.get) if margins else None
                row["syntactic_best"] = best
                row["syntactic_margin"] = margins[best] if best else math.nan
                met = {
                    "positional": row["positional"] >= positional_threshold,
                    "rare-word": row["rare_word"] >= rare_word_threshold,
                    "syntactic": row["syntactic_margin"] >= syntactic_margin,
                }  # NaN compares False: too few cases decide nothing
                functions = [role for role in ROLE_PRIORITY if met[role]]
                row["functions"] = "+".join(functions)
                row["role"] = functions[0] if functions else ("other" if attended[layer, head] else "pruned")
                rows.append(row)
    return pd.DataFrame(rows)


def model_head_roles(model, tokenizer, sentences: Sequence[Sentence], frequencies: Mapping[str, int] | None, *,
                     batch_size: int = 32, device=None, progress: bool = True, **thresholds) -> pd.DataFrame:
    """``head_roles`` of a model's encoder self-attention on parsed sentences (``attention_maps``
    with argmax=True, then head_roles; ``thresholds`` are head_roles' keyword arguments)."""
    maps = attention_maps(model, tokenizer, sentences, batch_size=batch_size, device=device, argmax=True,
                          progress=progress)
    return head_roles(maps, sentences, frequencies, **thresholds)
