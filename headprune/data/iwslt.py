"""IWSLT 2014 German-English (TED talks), prepared as fairseq's examples/translation/prepare-iwslt14.sh.

Section 6 of the paper trains its training-dynamics model (Figure 5) on this corpus. fairseq's
script, which defines the standard IWSLT14 de-en splits, does:

1. download ``de-en.tgz`` (first from wit3.fbk.eu; fairseq now points at its own mirror,
   https://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz) and extract ``de-en/``;
2. training text from ``train.tags.de-en.{de,en}``: drop the lines containing ``<url>``,
   ``<talkid>`` or ``<keywords>``; delete the tags ``<title>``, ``</title>``, ``<description>``,
   ``</description>`` (their text stays, as a sentence pair); Moses-tokenize;
3. ``clean-corpus-n.perl -ratio 1.5 ... 1 175``: drop a pair when a side is empty, has more than
   175 tokens, or one side has more than 1.5 times the tokens of the other;
4. lowercase;
5. valid = every 23rd line of the cleaned training text (lines 23, 46, ...), train = the rest;
6. test = the ``<seg>`` lines of IWSLT14.TED.dev2010, IWSLT14.TEDX.dev2012 and
   IWSLT14.TED.tst2010-2012 (``de-en/<set>.de-en.<lang>.xml``), concatenated in that order, with
   the tag removed and ’ replaced by ';
7. joint BPE, 10000 merges (subword-nmt) learned on train.de + train.en.

Here the text files keep the sentences DETOKENIZED (whitespace normalized, lowercased): the
pipeline's tokenizer (FSMTTokenizer: Moses + BPE, as for every other model) tokenizes them, so
BPE is learned on exactly the tokens it will see. Moses tokenization (sacremoses, like
tokenizer.perl without -a) is only used to count the tokens of the cleaning rule. The
dictionary is joined (one for both languages) since the trained model shares its embeddings.

``write_iwslt_archive`` writes an archive with the same layout from any sentence pairs (the
offline demo and the tests use it).
"""
from __future__ import annotations

import collections
import functools
import gzip
import io
import logging
import re
import tarfile
from dataclasses import asdict, dataclass
from multiprocessing import Pool
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping, Sequence

from headprune.data import bpe
from headprune.data.datasets import write_lines
from headprune.io.atomic import atomic_path, write_json
from headprune.io.download import ChecksumError, fetch, file_digest

log = logging.getLogger(__name__)

IWSLT14_DE_EN_URL = "https://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz"
# The five sets fairseq concatenates into test.{de,en}, in its order.
IWSLT14_TEST_SETS = ("IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010",
                     "IWSLT14.TED.tst2011", "IWSLT14.TED.tst2012")
# Sizes of fairseq's prepared splits as widely reported (fairseq's own preprocessing log); ours
# can differ slightly: the cleaning counts tokens with sacremoses instead of tokenizer.perl.
PUBLISHED_SIZES = {"train": 160239, "valid": 7283, "test": 6750}

TRAIN_DROP_MARKERS = ("<url>", "<talkid>", "<keywords>")
TRAIN_STRIP_TAGS = ("<title>", "</title>", "<description>", "</description>")
_SEG_OPEN = re.compile(r'<seg id="[0-9]*">\s*')
_SEG_CLOSE = re.compile(r"\s*</seg>\s*")


@dataclass(frozen=True)
class CleanRules:
    """clean-corpus-n.perl's rule, with fairseq's arguments (-ratio 1.5, min 1, max 175)."""

    ratio: float = 1.5
    min_tokens: int = 1
    max_tokens: int = 175
    max_word_length: int = 1000  # clean-corpus-n.perl's default


# ---------------------------------------------------------------------------------------------
# Download
# ---------------------------------------------------------------------------------------------


def fetch_iwslt_archive(spec: Mapping, dest, *, progress: bool = True) -> Path:
    """Download the archive ``spec["url"]`` (http(s), file:// or a local path) to ``dest``.

    Resumable and atomic (headprune.io.download.fetch); ``spec["sha256"]`` and ``spec["md5"]``
    are checked when given (a wrong file is deleted and ChecksumError raised).
    """
    path = fetch(spec["url"], dest, spec.get("sha256"), progress=progress)
    expected_md5 = (spec.get("md5") or "").strip().lower()
    if expected_md5:
        actual = file_digest(path, "md5")
        if actual != expected_md5:
            path.unlink()
            raise ChecksumError(spec["url"], path, f"md5 {expected_md5}", f"md5 {actual}")
    return path


# ---------------------------------------------------------------------------------------------
# fairseq's extraction rules
# ---------------------------------------------------------------------------------------------


def _split_lines(text: str) -> list[str]:
    """Lines as grep and sed see them: split at \\n only, no empty line after a final \\n."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def normalize_space(line: str) -> str:
    """Runs of whitespace to one space, none at the ends (clean-corpus-n.perl, Moses)."""
    return " ".join(line.split())


def train_lines_from_tags(lines: Iterable[str]) -> list[str]:
    """The training text of a train.tags file: prepare-iwslt14.sh's grep -v and sed rules."""
    out = []
    for line in lines:
        if any(marker in line for marker in TRAIN_DROP_MARKERS):
            continue
        for tag in TRAIN_STRIP_TAGS:
            line = line.replace(tag, "")
        out.append(line)
    return out


def segments_from_xml(text: str) -> list[str]:
    """The sentences of an IWSLT xml file: lines with '<seg id', the tag removed, ’ -> '."""
    out = []
    for line in _split_lines(text):
        if "<seg id" not in line:
            continue
        line = _SEG_CLOSE.sub("", _SEG_OPEN.sub("", line))
        out.append(line.replace("\u2019", "'"))
    return out


class IWSLTArchive:
    """Read the files of an IWSLT archive (``<pair>/...``) by name, without extracting it.

    Only regular files are read; a name found twice in the archive is an error.
    """

    def __init__(self, path):
        self.path = Path(path)
        self._members: dict[str, tarfile.TarInfo] = {}
        self._duplicates: set[str] = set()
        self._tar = tarfile.open(self.path, "r:*")
        for member in self._tar.getmembers():
            if member.isfile():
                name = PurePosixPath(member.name).name
                if name in self._members:
                    self._duplicates.add(name)
                self._members[name] = member

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._tar.close()

    def names(self) -> list[str]:
        return sorted(self._members)

    def text(self, name: str) -> str:
        if name in self._duplicates:
            raise ValueError(f"{self.path}: more than one file named {name}")
        if name not in self._members:
            raise FileNotFoundError(f"{self.path}: no file named {name} (it has {self.names()})")
        data = self._tar.extractfile(self._members[name]).read()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            log.warning("%s:%s is not valid UTF-8; invalid bytes replaced by U+FFFD", self.path, name)
            return data.decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------------------------
# Tokenization: Moses for the cleaning rule, the pipeline's tokenizer for BPE
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _moses_tokenizer(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


@functools.lru_cache(maxsize=None)
def _moses_normalizer(lang: str):
    from sacremoses import MosesPunctNormalizer

    return MosesPunctNormalizer(lang=lang)


def cleaning_tokens(line: str, lang: str) -> list[str]:
    """Moses tokens as tokenizer.perl -l lang writes them (escaped, no aggressive dash splits)."""
    return _moses_tokenizer(lang).tokenize(line, escape=True, return_str=False)


def moses_words(line: str, lang: str) -> list[str]:
    """The words FSMTTokenizer feeds to BPE: its Moses pipeline (unicode punctuation, punctuation
    normalization, non-printing characters) then Moses tokens with aggressive dash splits."""
    from transformers.models.fsmt.tokenization_fsmt import remove_non_printing_char, replace_unicode_punct

    text = remove_non_printing_char(_moses_normalizer(lang).normalize(replace_unicode_punct(line)))
    return [w for w in _moses_tokenizer(lang).tokenize(text, aggressive_dash_splits=True, return_str=False,
                                                      escape=True) if w]


def _token_stats(job: tuple[str, list[str]]) -> list[tuple[int, int]]:
    lang, lines = job
    stats = []
    for line in lines:
        tokens = cleaning_tokens(line, lang) if line else []
        stats.append((len(tokens), max((len(t) for t in tokens), default=0)))
    return stats


def _word_counts(job: tuple[str, list[str]]) -> collections.Counter:
    lang, lines = job
    counts = collections.Counter()
    for line in lines:
        counts.update(moses_words(line, lang))
    return counts


def _map_chunks(function, lang: str, lines: Sequence[str], processes: int, chunk: int = 5000) -> list:
    jobs = [(lang, list(lines[i:i + chunk])) for i in range(0, len(lines), chunk)]
    if processes > 1 and len(jobs) > 1:
        with Pool(processes) as pool:
            return pool.map(function, jobs)
    return [function(job) for job in jobs]


# ---------------------------------------------------------------------------------------------
# Cleaning and splitting
# ---------------------------------------------------------------------------------------------


def clean_corpus(sources: Sequence[str], targets: Sequence[str], src_lang: str, tgt_lang: str,
                 rules: CleanRules = CleanRules(), processes: int = 1) -> tuple[list[int], dict[str, int]]:
    """Indices of the pairs clean-corpus-n.perl keeps (on Moses token counts), and why the others went.

    Reasons, checked in the script's order: empty (a side has no text), too_long (a side has more
    than max_tokens tokens), too_short (fewer than min_tokens), ratio (one side has more than
    ratio times the other's tokens), long_word (a token longer than max_word_length characters).
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source lines but {len(targets)} target lines: the files are not parallel")
    src_stats = [s for part in _map_chunks(_token_stats, src_lang, [normalize_space(x) for x in sources], processes)
                 for s in part]
    tgt_stats = [s for part in _map_chunks(_token_stats, tgt_lang, [normalize_space(x) for x in targets], processes)
                 for s in part]
    kept, dropped = [], collections.Counter()
    for index, ((src_n, src_w), (tgt_n, tgt_w)) in enumerate(zip(src_stats, tgt_stats)):
        if not normalize_space(sources[index]) or not normalize_space(targets[index]):
            dropped["empty"] += 1
        elif src_n > rules.max_tokens or tgt_n > rules.max_tokens:
            dropped["too_long"] += 1
        elif src_n < rules.min_tokens or tgt_n < rules.min_tokens:
            dropped["too_short"] += 1
        elif src_n / tgt_n > rules.ratio or tgt_n / src_n > rules.ratio:
            dropped["ratio"] += 1
        elif max(src_w, tgt_w) > rules.max_word_length:
            dropped["long_word"] += 1
        else:
            kept.append(index)
    return kept, dict(dropped)


def split_every(items: Sequence, every: int = 23) -> tuple[list, list]:
    """(rest, every n-th item): awk's NR % n == 0 on 1-based line numbers (lines n, 2n, ...)."""
    if every < 2:
        raise ValueError(f"every must be >= 2, got {every}")
    held_out = [item for number, item in enumerate(items, start=1) if number % every == 0]
    rest = [item for number, item in enumerate(items, start=1) if number % every != 0]
    return rest, held_out


# ---------------------------------------------------------------------------------------------
# The whole preparation
# ---------------------------------------------------------------------------------------------


def prepare_iwslt(archive, out_dir, *, src_lang: str = "de", tgt_lang: str = "en", lowercase: bool = True,
                  bpe_merges: int = 10000, valid_every: int = 23, test_sets: Sequence[str] = IWSLT14_TEST_SETS,
                  clean: CleanRules = CleanRules(), processes: int = 1,
                  expected_sizes: Mapping[str, int] | None = None) -> dict:
    """Prepare an IWSLT archive into ``out_dir``, the layout headprune.training.train reads.

    Writes {train,valid,test}.{src,tgt} (one detokenized sentence per line), bpecodes,
    dict.{src,tgt}.txt (one joined fairseq dictionary) and prepare.json (the summary returned:
    sizes, what cleaning dropped and why, the settings). ``expected_sizes`` (e.g.
    PUBLISHED_SIZES) only adds a comparison to the summary and a warning when sizes differ.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pair = f"{src_lang}-{tgt_lang}"
    with IWSLTArchive(archive) as files:
        raw = {lang: train_lines_from_tags(_split_lines(files.text(f"train.tags.{pair}.{lang}")))
               for lang in (src_lang, tgt_lang)}
        if len(raw[src_lang]) != len(raw[tgt_lang]):
            raise ValueError(f"{archive}: after removing the tag lines, train.tags.{pair}.{src_lang} has "
                             f"{len(raw[src_lang])} lines but .{tgt_lang} has {len(raw[tgt_lang])}")
        test = {src_lang: [], tgt_lang: []}
        test_sizes = {}
        for name in test_sets:
            segments = {lang: segments_from_xml(files.text(f"{name}.{pair}.{lang}.xml")) for lang in (src_lang, tgt_lang)}
            if len(segments[src_lang]) != len(segments[tgt_lang]):
                raise ValueError(f"{archive}: {name} has {len(segments[src_lang])} {src_lang} segments but "
                                 f"{len(segments[tgt_lang])} {tgt_lang} segments")
            test_sizes[name] = len(segments[src_lang])
            for lang in (src_lang, tgt_lang):
                test[lang] += segments[lang]

    kept, dropped = clean_corpus(raw[src_lang], raw[tgt_lang], src_lang, tgt_lang, clean, processes)

    def finish(line: str) -> str:
        line = normalize_space(line)
        return line.lower() if lowercase else line

    pairs = [(finish(raw[src_lang][i]), finish(raw[tgt_lang][i])) for i in kept]
    train, valid = split_every(pairs, valid_every)
    splits = {"train": train, "valid": valid, "test": list(zip(map(finish, test[src_lang]), map(finish, test[tgt_lang])))}
    for split, split_pairs in splits.items():
        write_lines(out_dir / f"{split}.{src_lang}", [s for s, _ in split_pairs])
        write_lines(out_dir / f"{split}.{tgt_lang}", [t for _, t in split_pairs])

    # Joint BPE on the words the pipeline's tokenizer will give BPE, both languages together.
    word_counts = collections.Counter()
    for index, lang in enumerate((src_lang, tgt_lang)):
        for counts in _map_chunks(_word_counts, lang, [p[index] for p in train], processes):
            word_counts.update(counts)
    merges = bpe.learn_bpe(word_counts, bpe_merges)
    bpe.write_bpe_codes(merges, out_dir / "bpecodes")
    dictionary = bpe.joined_dictionary(word_counts, merges)
    for lang in (src_lang, tgt_lang):
        lines = [f"{token} {count}" for token, count in dictionary]
        write_lines(out_dir / f"dict.{lang}.txt", lines)

    summary = {
        "archive": str(archive), "src_lang": src_lang, "tgt_lang": tgt_lang, "lowercase": lowercase,
        "clean": asdict(clean), "valid_every": valid_every, "test_sets": list(test_sets),
        "raw_train_pairs": len(raw[src_lang]), "dropped": dropped,
        "sizes": {split: len(split_pairs) for split, split_pairs in splits.items()}, "test_set_sizes": test_sizes,
        "bpe_merges": len(merges), "dictionary_size": len(dictionary),
    }
    if expected_sizes:
        summary["expected_sizes"] = dict(expected_sizes)
        differ = {k: (summary["sizes"].get(k), v) for k, v in expected_sizes.items() if summary["sizes"].get(k) != v}
        if differ:
            log.warning("prepared sizes differ from the expected ones (ours, expected): %s", differ)
    write_json(out_dir / "prepare.json", summary, indent=1, end="\n", encoding="utf-8")
    return summary


# ---------------------------------------------------------------------------------------------
# An archive in the same layout (the offline demo and the tests)
# ---------------------------------------------------------------------------------------------


def _train_tags(pairs: Sequence[tuple[str, str]], side: int, lang: str, talk_size: int) -> str:
    """train.tags text: per talk the header lines of the real files, then one sentence per line.

    A talk's first pair is written as its <title>, its second as its <description> (their text
    is training data, as in the real files), the rest as plain lines.
    """
    lines = []
    for talk, start in enumerate(range(0, len(pairs), talk_size), start=1):
        chunk = [p[side] for p in pairs[start:start + talk_size]]
        lines += [f"<url>http://www.ted.com/talks/lang/{lang}/demo_talk_{talk}.html</url>",
                  f"<keywords>talks, demo, talk{talk}</keywords>", f"<talkid>{talk}</talkid>"]
        lines.append(f"<title>{chunk[0]}</title>")
        if len(chunk) > 1:
            lines.append(f"<description>{chunk[1]}</description>")
        lines += chunk[2:]
    return "".join(line + "\n" for line in lines)


def _xml(name: str, sentences: Sequence[str], lang: str, src_lang: str, tgt_lang: str, talk_size: int) -> str:
    element = "srcset" if lang == src_lang else "refset"
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>",
             f'<{element} setid="{name.lower()}" srclang="{src_lang}" trglang="{tgt_lang}">']
    for talk, start in enumerate(range(0, len(sentences), talk_size), start=1):
        lines += [f'<doc docid="{talk}" genre="lectures">',
                  f"<url>http://www.ted.com/talks/demo_talk_{talk}.html</url>",
                  f"<description>TED Talk Subtitles and Transcript: demo talk {talk}</description>",
                  "<keywords>talks, demo</keywords>", f"<talkid>{talk}</talkid>", f"<title>Demo talk {talk}</title>"]
        lines += [f'<seg id="{start + i + 1}"> {s} </seg>' for i, s in enumerate(sentences[start:start + talk_size])]
        lines.append("</doc>")
    lines += [f"</{element}>", "</mteval>"]
    return "".join(line + "\n" for line in lines)


def write_iwslt_archive(path, train_pairs: Sequence[tuple[str, str]],
                        test_sets: Mapping[str, Sequence[tuple[str, str]]], *, src_lang: str = "de",
                        tgt_lang: str = "en", talk_size: int = 50, extra_files: Mapping[str, str] | None = None) -> Path:
    """Write a .tgz laid out like IWSLT's de-en.tgz: ``<src>-<tgt>/train.tags.<src>-<tgt>.<lang>`` and
    ``<src>-<tgt>/<set>.<src>-<tgt>.<lang>.xml`` per test set. ``extra_files`` adds more members
    (name -> text) under the folder. The bytes depend only on the arguments."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pair = f"{src_lang}-{tgt_lang}"
    files = {f"train.tags.{pair}.{lang}": _train_tags(train_pairs, side, lang, talk_size)
             for side, lang in enumerate((src_lang, tgt_lang))}
    for name, pairs in test_sets.items():
        for side, lang in enumerate((src_lang, tgt_lang)):
            files[f"{name}.{pair}.{lang}.xml"] = _xml(name, [p[side] for p in pairs], lang, src_lang, tgt_lang,
                                                      talk_size)
    files.update(extra_files or {})
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        folder = tarfile.TarInfo(pair)
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, 0
        archive.addfile(folder)
        for name, text in sorted(files.items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"{pair}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    with atomic_path(path) as partial, open(partial, "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as compressed:
        compressed.write(buffer.getvalue())
    return path
