"""fairseq's dictionaries and BPE codes, and the FSMTTokenizer built from them: the dict.xx.txt files read and
written, their tokens converted to FSMT's vocabulary (subword-nmt's "@@" to FSMT's "</w>" marking) and back,
and a codes file read as FSMT's merges."""

import json
import tempfile
from pathlib import Path

from transformers import FSMTTokenizer

from headprune.io.atomic import atomic_path, write_text

# fairseq's Dictionary always starts with these four symbols, in this order, before the
# entries of the dict.xx.txt file; the file itself does not list them.
FAIRSEQ_SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>"]
BOS_ID, PAD_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

# subword-nmt marks a subword that continues into the next one with "@@"; FSMT's tokenizer
# instead marks the subword that ENDS a word with "</w>".
BPE_CONTINUATION = "@@"
FSMT_END_OF_WORD = "</w>"


def _text_lines(path) -> list[str]:
    """Lines split the way fairseq and subword-nmt split them: only at \n / \r, never at the
    other Unicode line breaks str.splitlines() honours (a token may contain U+2028)."""
    with open(path, encoding="utf-8") as file:
        return [line.rstrip("\r\n") for line in file]


def read_fairseq_dict(path) -> list[str]:
    """The tokens of a fairseq dict.xx.txt file, in file order (the 4 specials NOT included)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"fairseq dictionary file not found: {path}")
    tokens, seen = [], set()
    for line_number, line in enumerate(_text_lines(path), start=1):
        line = line.rstrip()
        if not line:
            continue
        fields = line.rsplit(" ", 1)
        if len(fields) == 2 and fields[1] == "#fairseq:overwrite":
            fields = fields[0].rsplit(" ", 1)
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            raise ValueError(f"{path}:{line_number}: expected '<token> <count>', got {line!r}")
        token = fields[0]
        if token in seen or token in FAIRSEQ_SPECIAL_TOKENS:
            raise ValueError(f"{path}:{line_number}: duplicate token {token!r}")
        seen.add(token)
        tokens.append(token)
    return tokens


def write_fairseq_dict(path, tokens) -> None:
    """Write a dict.xx.txt file. `tokens` are strings (count 1) or (token, count) pairs."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for entry in tokens:
            token, count = (entry, 1) if isinstance(entry, str) else entry
            out.write(f"{token} {int(count)}\n")


def fsmt_vocab_from_fairseq_dict(tokens: list[str]) -> dict[str, int]:
    """FSMT vocabulary (token -> id) for a fairseq dictionary's tokens (specials excluded).

    Ids are fairseq's: the 4 specials first, then the file's tokens in order. The token strings
    change marking convention: subword-nmt's "xx@@" (continues) becomes "xx", and a word-final
    "xx" becomes "xx</w>".
    """
    vocab = {token: index for index, token in enumerate(FAIRSEQ_SPECIAL_TOKENS)}
    for index, token in enumerate(tokens, start=len(FAIRSEQ_SPECIAL_TOKENS)):
        if token.endswith(BPE_CONTINUATION):
            fsmt_token = token[: -len(BPE_CONTINUATION)]
        else:
            fsmt_token = token + FSMT_END_OF_WORD
        if fsmt_token in vocab:
            raise ValueError(f"fairseq token {token!r} collides with another token as {fsmt_token!r}")
        vocab[fsmt_token] = index
    return vocab


def fairseq_dict_tokens_from_fsmt_vocab(vocab: dict[str, int]) -> list[str]:
    """Inverse of fsmt_vocab_from_fairseq_dict: the dict.xx.txt tokens, in id order."""
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    ids = [index for _, index in by_id]
    if ids != list(range(len(ids))):
        raise ValueError("FSMT vocabulary ids are not contiguous from 0")
    if [token for token, _ in by_id[: len(FAIRSEQ_SPECIAL_TOKENS)]] != FAIRSEQ_SPECIAL_TOKENS:
        raise ValueError(f"FSMT vocabulary must start with {FAIRSEQ_SPECIAL_TOKENS} (ids 0-3)")
    tokens = []
    for token, _ in by_id[len(FAIRSEQ_SPECIAL_TOKENS):]:
        if token.endswith(FSMT_END_OF_WORD):
            tokens.append(token[: -len(FSMT_END_OF_WORD)])
        else:
            tokens.append(token + BPE_CONTINUATION)
    return tokens


def fsmt_merges_from_bpecodes(path) -> list[str]:
    """The merge lines ("a b") for FSMT's merges.txt from a subword-nmt (or fastBPE) codes file.

    Drops subword-nmt's "#version" header and fastBPE's trailing counts, and keeps the FIRST
    occurrence of a repeated merge (subword-nmt's rule; FSMT's would keep the last).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"BPE codes file not found: {path}")
    merges, seen = [], set()
    for line_number, line in enumerate(_text_lines(path), start=1):
        if line_number == 1 and line.startswith("#version"):
            if line.split()[-1] not in ("0.2", "0.2.0"):
                raise ValueError(f"{path}: unsupported subword-nmt codes version {line!r} (need 0.2)")
            continue
        fields = line.split()
        if not fields:
            continue
        if len(fields) not in (2, 3):
            raise ValueError(f"{path}:{line_number}: expected 'left right [count]', got {line!r}")
        left, right = fields[0], fields[1]
        if right == FSMT_END_OF_WORD:
            # subword-nmt 0.1 codes treat "</w>" as a separate symbol; FSMT implements 0.2 only.
            raise ValueError(
                f"{path}:{line_number}: subword-nmt version 0.1 codes (a bare '</w>' symbol); "
                "FSMTTokenizer applies version 0.2 semantics, so these codes would segment differently"
            )
        if (left, right) not in seen:
            seen.add((left, right))
            merges.append(f"{left} {right}")
    return merges


def build_fsmt_tokenizer(folder, src_lang="en", tgt_lang="fr", tokenizer_dir=None) -> FSMTTokenizer:
    """An FSMTTokenizer (Moses + BPE in, BPE removal + Moses detokenization out) from a fairseq
    model folder's dict.{src}.txt, dict.{tgt}.txt and bpecodes.

    The vocab-src.json / vocab-tgt.json / merges.txt files FSMTTokenizer reads are written to
    `tokenizer_dir` if given, else to a temporary folder deleted once the tokenizer is built
    (FSMTTokenizer reads them only in its constructor).
    """
    folder = Path(folder)
    src_tokens = read_fairseq_dict(folder / f"dict.{src_lang}.txt")
    tgt_tokens = read_fairseq_dict(folder / f"dict.{tgt_lang}.txt")
    merges = fsmt_merges_from_bpecodes(folder / "bpecodes")

    def build(out_dir: Path) -> FSMTTokenizer:
        out_dir.mkdir(parents=True, exist_ok=True)
        files = {
            "vocab-src.json": json.dumps(fsmt_vocab_from_fairseq_dict(src_tokens), ensure_ascii=False, indent=1),
            "vocab-tgt.json": json.dumps(fsmt_vocab_from_fairseq_dict(tgt_tokens), ensure_ascii=False, indent=1),
            # FSMTTokenizer drops the text after the last newline, so the file must end with one.
            "merges.txt": "".join(merge + "\n" for merge in merges),
        }
        for name, text in files.items():
            write_text(out_dir / name, text, encoding="utf-8")
        return FSMTTokenizer(
            langs=[src_lang, tgt_lang],
            src_vocab_file=str(out_dir / "vocab-src.json"),
            tgt_vocab_file=str(out_dir / "vocab-tgt.json"),
            merges_file=str(out_dir / "merges.txt"),
        )

    if tokenizer_dir is not None:
        return build(Path(tokenizer_dir))
    with tempfile.TemporaryDirectory(prefix="fsmt-tokenizer-") as temporary:
        return build(Path(temporary))
