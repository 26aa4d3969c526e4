"""Read and write fairseq translation checkpoints without the fairseq library.

fairseq no longer imports on Python 3.11 (see NOTES.md), so this module reads its checkpoint
format directly into transformers' FSMT, a port of fairseq's post-norm transformer:

    wmt14.en-fr.joined-dict.transformer/      (the tarball's single top-level folder)
        model.pt       torch pickle: {"args": argparse.Namespace, "model": state dict in
                       fairseq names, "optimizer_history", "extra_state", ...}
        dict.en.txt    "token count" lines; fairseq puts <s> <pad> </s> <unk> (ids 0-3) first
        dict.fr.txt
        bpecodes       subword-nmt merge operations

and writes FSMT models back out in that same format (the offline demo and the tests need a
tarball that looks like the real one).

Safety: a checkpoint is a pickle, and a pickle can run arbitrary code when loaded. Every global
a checkpoint references is checked against an allow-list BEFORE anything is unpickled, and the
load itself then goes through torch's restricted (weights_only) unpickler. Archives are checked
member by member before anything is extracted.
"""

import _compat_pickle
import argparse
import io
import json
import os
import pickle
import pickletools
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

import torch
from transformers import FSMTConfig, FSMTForConditionalGeneration, FSMTTokenizer
from transformers.models.fsmt.modeling_fsmt import SinusoidalPositionalEmbedding

# fairseq's Dictionary always starts with these four symbols, in this order, before the
# entries of the dict.xx.txt file; the file itself does not list them.
FAIRSEQ_SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>"]
BOS_ID, PAD_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

# subword-nmt marks a subword that continues into the next one with "@@"; FSMT's tokenizer
# instead marks the subword that ENDS a word with "</w>".
BPE_CONTINUATION = "@@"
FSMT_END_OF_WORD = "</w>"


# ----------------------------------------------------------------------------------------------
# Safe unpickling


class UnsafeCheckpointError(Exception):
    """A checkpoint references a Python global outside the allow-list; nothing was executed."""


# Everything a fairseq translation checkpoint legitimately needs: tensors and their storages,
# ordered dicts, the argparse.Namespace holding the training arguments, and numpy scalars
# (old fairseq versions kept e.g. a validation loss in "extra_state").
_TORCH_STORAGE_TYPES = [
    "Float", "Half", "BFloat16", "Double", "Long", "Int", "Short", "Char", "Byte", "Bool",
]
_TORCH_DTYPES = [
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
]
ALLOWED_GLOBALS = frozenset(
    [
        "collections.OrderedDict",
        "argparse.Namespace",
        "_codecs.encode",  # how protocol-2 pickles store bytes objects
        "builtins.set",
        "torch._utils._rebuild_tensor",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter",
        "torch._tensor._rebuild_from_type_v2",
        "torch.Size",
        "torch.device",
        "torch.storage.UntypedStorage",
        "torch.storage.TypedStorage",
        "torch.nn.parameter.Parameter",
        "numpy.core.multiarray.scalar",
        "numpy._core.multiarray.scalar",
        "numpy.dtype",
    ]
    + [f"torch.{kind}Storage" for kind in _TORCH_STORAGE_TYPES]
    + [f"torch.cuda.{kind}Storage" for kind in _TORCH_STORAGE_TYPES]
    + [f"torch.{dtype}" for dtype in _TORCH_DTYPES]
    + [f"numpy.dtypes.{name}" for name in ("Float16DType", "Float32DType", "Float64DType",
                                           "Int32DType", "Int64DType", "BoolDType")]
)

# Opcodes that push a string the pickle may later use as a module or attribute name.
_STRING_OPCODES = {
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8",
}
_MAX_PICKLES_IN_LEGACY_FILE = 5  # torch's pre-1.6 format: magic, protocol, sys_info, object, keys


def _python3_global_name(module: str, attribute: str, protocol: int) -> str:
    """The global the unpickler will really look up. Protocols 0-2 store Python 2 names
    (e.g. "__builtin__.set", "commands.call" for subprocess.call), which unpickling maps back."""
    if protocol < 3:
        if (module, attribute) in _compat_pickle.NAME_MAPPING:
            module, attribute = _compat_pickle.NAME_MAPPING[(module, attribute)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{attribute}"


def _globals_referenced_by_pickle(stream):
    """Yield "module.name" for every global one pickle refers to, WITHOUT unpickling it.

    pickletools.genops only decodes opcodes, so nothing in the file is executed. GLOBAL and INST
    carry the name inline; STACK_GLOBAL (protocol 4+) takes it from the two strings pushed just
    before it, which we track through the memo. A name we cannot resolve is reported as such and
    therefore refused.
    """
    memo = {}
    recent = []  # what each stack-pushing opcode pushed: the string, or None for anything else
    protocol = 0
    for opcode, arg, _ in pickletools.genops(stream):
        name = opcode.name
        if name == "PROTO":
            protocol = arg
        if name in ("GLOBAL", "INST"):
            module, _, attribute = arg.partition(" ")
            yield _python3_global_name(module, attribute, protocol)
            recent.append(None)
        elif name == "STACK_GLOBAL":
            module, attribute = (recent[-2], recent[-1]) if len(recent) >= 2 else (None, None)
            if isinstance(module, str) and isinstance(attribute, str):
                yield _python3_global_name(module, attribute, protocol)
            else:
                yield "<STACK_GLOBAL with a name that cannot be read statically>"
            recent.append(None)
        elif name in ("EXT1", "EXT2", "EXT4"):
            yield f"<copyreg extension code {arg}>"
        elif name in _STRING_OPCODES:
            recent.append(arg.decode("latin-1") if isinstance(arg, bytes) else arg)
        elif name == "MEMOIZE":
            memo[len(memo)] = recent[-1] if recent else None
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = recent[-1] if recent else None
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            recent.append(memo.get(arg))
        elif name not in ("PROTO", "FRAME", "STOP"):
            recent.append(None)


def _check_pickle_stream(stream, source: str, max_pickles: int) -> None:
    """Refuse any global outside ALLOWED_GLOBALS in up to `max_pickles` consecutive pickles."""
    for _ in range(max_pickles):
        if not stream.read(1):
            return  # end of file
        stream.seek(-1, os.SEEK_CUR)
        try:
            for global_name in _globals_referenced_by_pickle(stream):
                if global_name not in ALLOWED_GLOBALS:
                    hint = ""
                    if global_name.startswith("omegaconf"):
                        hint = (" (fairseq >= 0.10 stores its config as an omegaconf object under"
                                " 'cfg'; this reader only accepts the argparse 'args' format)")
                    raise UnsafeCheckpointError(
                        f"{source}: refusing to load checkpoint: it references the global "
                        f"'{global_name}', which is not on the allow-list{hint}. Nothing was executed."
                    )
        except UnsafeCheckpointError:
            raise
        except Exception as error:  # not a pickle stream at all
            raise ValueError(f"{source}: not a readable torch checkpoint ({error})") from error


def _numpy_safe_globals() -> list:
    """The numpy objects on the allow-list, as torch.serialization.safe_globals wants them."""
    try:
        import numpy
    except ImportError:
        return []
    objects = [numpy.dtype]
    scalar = getattr(getattr(getattr(numpy, "_core", None), "multiarray", None), "scalar", None)
    if scalar is not None:
        # numpy 2 moved numpy.core to numpy._core; old pickles still name numpy.core.
        objects += [(scalar, "numpy.core.multiarray.scalar"), (scalar, "numpy._core.multiarray.scalar")]
    for name in ("Float16DType", "Float32DType", "Float64DType", "Int32DType", "Int64DType", "BoolDType"):
        dtype_class = getattr(getattr(numpy, "dtypes", None), name, None)
        if dtype_class is not None:
            objects.append(dtype_class)
    return objects


def safe_load_checkpoint(path) -> dict:
    """Load a fairseq/torch checkpoint, refusing (and running nothing) if it references any
    global outside ALLOWED_GLOBALS. Handles torch's zip format and the older pickle-stream format."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")

    # Step 1: a static scan of every pickle torch.load would unpickle.
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if member.endswith(".pkl"):
                    with archive.open(member) as raw:
                        _check_pickle_stream(io.BytesIO(raw.read()), f"{path}:{member}", 1)
    else:
        with open(path, "rb") as stream:
            _check_pickle_stream(stream, str(path), _MAX_PICKLES_IN_LEGACY_FILE)

    # Step 2: the real load, through torch's restricted unpickler with the same allow-list.
    extra_globals = [argparse.Namespace] + _numpy_safe_globals()
    try:
        with torch.serialization.safe_globals(extra_globals):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise UnsafeCheckpointError(
            f"{path}: torch's restricted unpickler refused the checkpoint: {error}"
        ) from error
    except Exception as error:
        raise ValueError(f"{path}: could not read the checkpoint: {error}") from error
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{path}: expected a dict checkpoint, got {type(checkpoint).__name__}")
    return checkpoint


# ----------------------------------------------------------------------------------------------
# Safe archive extraction


def _archive_member_problem(member: tarfile.TarInfo, symlink_names: set) -> str | None:
    """Why this member must not be extracted, or None if it is fine."""
    name = member.name
    if not name or name.startswith("/"):
        return "absolute path"
    parts = PurePosixPath(name).parts
    if ".." in parts:
        return "path contains '..'"
    if member.isdev():  # character or block device, or fifo
        return "device or fifo file"
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        return "unsupported member type"
    # A path that goes THROUGH a symlink from the archive could be redirected anywhere once
    # that link exists on disk, whatever the names look like: refuse such paths outright.
    normalized = PurePosixPath(name)  # PurePosixPath drops "." components
    for ancestor in list(normalized.parents)[:-1]:
        if str(ancestor) in symlink_names:
            return f"path goes through the symlink '{ancestor}' from the same archive"
    if member.issym():
        target = member.linkname
        if target.startswith("/"):
            return f"symlink to the absolute path '{target}'"
        resolved = os.path.normpath(os.path.join(os.path.dirname(str(normalized)), target))
        if resolved == ".." or resolved.startswith("../"):
            return f"symlink '{target}' points outside the archive"
    if member.islnk():
        target = member.linkname  # hard links are relative to the archive root
        resolved = os.path.normpath(target)
        if target.startswith("/") or resolved == ".." or resolved.startswith("../"):
            return f"hard link to '{target}' points outside the archive"
    return None


def safe_extract(tar_path, dest_dir) -> Path:
    """Extract a .tar / .tar.bz2 / .tar.gz into dest_dir after checking EVERY member first.

    Refuses absolute paths, '..' components, symlinks or hard links that leave the archive,
    paths through an archived symlink, and device files; nothing is written if any member is
    refused. Returns the archive's single top-level folder if it has one, else dest_dir.
    """
    tar_path, dest_dir = Path(tar_path), Path(dest_dir)
    with tarfile.open(tar_path, "r:*") as archive:
        members = archive.getmembers()
        symlink_names = {str(PurePosixPath(m.name)) for m in members if m.issym()}
        for member in members:
            problem = _archive_member_problem(member, symlink_names)
            if problem is not None:
                raise ValueError(f"{tar_path}: refusing to extract member '{member.name}': {problem}")
        dest_dir.mkdir(parents=True, exist_ok=True)
        # The "data" filter re-checks every member against the real file system (defence in depth).
        archive.extractall(dest_dir, filter="data")

    top_level = {PurePosixPath(m.name).parts[0] for m in members if PurePosixPath(m.name).parts}
    if len(top_level) == 1:
        (only,) = top_level
        if (dest_dir / only).is_dir():
            return dest_dir / only
    return dest_dir


# ----------------------------------------------------------------------------------------------
# Dictionaries, BPE codes and the tokenizer


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
    with open(path, "w", encoding="utf-8") as out:
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
            (out_dir / name).write_text(text, encoding="utf-8")
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


# ----------------------------------------------------------------------------------------------
# Architecture arguments <-> FSMTConfig

# fairseq activation_fn -> transformers ACT2FN name. fairseq's "gelu" is the exact erf form;
# its "gelu_accurate" is the tanh approximation that transformers calls "gelu_new".
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_accurate": "gelu_new", "tanh": "tanh", "linear": "linear"}


def _args_dict(args) -> dict:
    if isinstance(args, argparse.Namespace):
        return vars(args)
    if isinstance(args, dict):
        return args
    raise TypeError(f"expected an argparse.Namespace or dict of fairseq args, got {type(args).__name__}")


def fsmt_config_from_fairseq_args(args, src_vocab_size: int, tgt_vocab_size: int, langs) -> FSMTConfig:
    """An FSMTConfig for a fairseq transformer's training args; refuses what FSMT cannot represent."""
    a = _args_dict(args)

    def required(name):
        if a.get(name) is None:
            raise ValueError(f"fairseq args lack '{name}', which is needed to build the model")
        return a[name]

    arch = str(a.get("arch", "transformer"))
    if not arch.startswith("transformer") or arch.startswith("transformer_lm"):
        raise ValueError(f"unsupported fairseq arch '{arch}': only translation transformers map to FSMT")

    embed_dim = required("encoder_embed_dim")
    unsupported = {
        "encoder_normalize_before": "pre-norm encoder (FSMT is post-norm only)",
        "decoder_normalize_before": "pre-norm decoder (FSMT is post-norm only)",
        "encoder_learned_pos": "learned encoder positional embeddings (FSMT is sinusoidal only)",
        "decoder_learned_pos": "learned decoder positional embeddings (FSMT is sinusoidal only)",
        "no_token_positional_embeddings": "no positional embeddings",
        "layernorm_embedding": "a layer norm on the embeddings",
        "cross_self_attention": "cross+self attention",
        "no_cross_attention": "a decoder without cross attention",
        "adaptive_softmax_cutoff": "an adaptive softmax",
        "adaptive_input": "adaptive input embeddings",
        "encoder_layers_to_keep": "encoder layers pruned at load time",
        "decoder_layers_to_keep": "decoder layers pruned at load time",
    }
    for name, what in unsupported.items():
        if a.get(name):
            raise ValueError(f"fairseq args set {name}={a[name]!r}: {what} cannot be represented in FSMT")
    for name in ("decoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        value = a.get(name, embed_dim)
        if value is not None and value != embed_dim:
            raise ValueError(
                f"fairseq args set {name}={value} but encoder_embed_dim={embed_dim}: "
                "FSMT needs one model dimension throughout"
            )
    activation = a.get("activation_fn", "relu")  # fairseq before 0.7 had no choice: ReLU
    if activation not in _ACTIVATIONS:
        raise ValueError(f"fairseq activation_fn '{activation}' has no FSMT equivalent")
    share_all = bool(a.get("share_all_embeddings", False))
    if share_all and src_vocab_size != tgt_vocab_size:
        raise ValueError(
            f"share_all_embeddings needs one joined dictionary, got vocab sizes {src_vocab_size} and {tgt_vocab_size}"
        )
    # fairseq's own rule: the 2018 name relu_dropout applies when activation_dropout is 0 or absent.
    activation_dropout = a.get("activation_dropout") or a.get("relu_dropout") or 0.0

    return FSMTConfig(
        langs=list(langs),
        src_vocab_size=int(src_vocab_size),
        tgt_vocab_size=int(tgt_vocab_size),
        activation_function=_ACTIVATIONS[activation],
        d_model=int(embed_dim),
        # FSMT grows its sinusoidal table on demand; this only sizes the initial one.
        max_position_embeddings=int(max(a.get("max_source_positions", 1024), a.get("max_target_positions", 1024))),
        encoder_ffn_dim=int(required("encoder_ffn_embed_dim")),
        encoder_layers=int(required("encoder_layers")),
        encoder_attention_heads=int(required("encoder_attention_heads")),
        encoder_layerdrop=float(a.get("encoder_layerdrop", 0.0) or 0.0),
        decoder_ffn_dim=int(required("decoder_ffn_embed_dim")),
        decoder_layers=int(required("decoder_layers")),
        decoder_attention_heads=int(required("decoder_attention_heads")),
        decoder_layerdrop=float(a.get("decoder_layerdrop", 0.0) or 0.0),
        dropout=float(a.get("dropout", 0.1)),
        attention_dropout=float(a.get("attention_dropout", 0.0)),
        activation_dropout=float(activation_dropout),
        scale_embedding=not a.get("no_scale_embedding", False),
        # share_all_embeddings: one matrix for source embeddings, target embeddings and the
        # output projection; FSMT ties exactly those three when tie_word_embeddings is set.
        tie_word_embeddings=share_all,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=EOS_ID,  # fairseq starts decoding from </s>
        forced_eos_token_id=EOS_ID,
    )


def fairseq_args_from_fsmt_config(config: FSMTConfig, src_lang="en", tgt_lang="fr",
                                  share_all_embeddings=True, share_decoder_input_output_embed=True):
    """The argparse.Namespace a fairseq training run of this architecture would have saved."""
    activation = {v: k for k, v in _ACTIVATIONS.items()}.get(config.activation_function)
    if activation is None:
        raise ValueError(f"FSMT activation '{config.activation_function}' has no fairseq activation_fn")
    big = (config.d_model, config.encoder_ffn_dim, config.encoder_attention_heads,
           config.encoder_layers, config.decoder_layers) == (1024, 4096, 16, 6, 6)
    return argparse.Namespace(
        arch="transformer_vaswani_wmt_en_fr_big" if big else "transformer",
        task="translation",
        source_lang=src_lang,
        target_lang=tgt_lang,
        criterion="label_smoothed_cross_entropy",
        label_smoothing=0.1,
        optimizer="adam",
        encoder_embed_path=None,
        encoder_embed_dim=config.d_model,
        encoder_ffn_embed_dim=config.encoder_ffn_dim,
        encoder_layers=config.encoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        encoder_normalize_before=False,
        encoder_learned_pos=False,
        encoder_layerdrop=config.encoder_layerdrop,
        decoder_embed_path=None,
        decoder_embed_dim=config.d_model,
        decoder_ffn_embed_dim=config.decoder_ffn_dim,
        decoder_layers=config.decoder_layers,
        decoder_attention_heads=config.decoder_attention_heads,
        decoder_normalize_before=False,
        decoder_learned_pos=False,
        decoder_layerdrop=config.decoder_layerdrop,
        decoder_output_dim=config.d_model,
        decoder_input_dim=config.d_model,
        attention_dropout=config.attention_dropout,
        relu_dropout=config.activation_dropout,  # the 2018 name ...
        activation_dropout=config.activation_dropout,  # ... and the later one
        activation_fn=activation,
        dropout=config.dropout,
        adaptive_softmax_cutoff=None,
        adaptive_softmax_dropout=0,
        share_all_embeddings=share_all_embeddings,
        share_decoder_input_output_embed=share_decoder_input_output_embed,
        no_token_positional_embeddings=False,
        no_scale_embedding=not config.scale_embedding,
        layernorm_embedding=False,
        max_source_positions=config.max_position_embeddings,
        max_target_positions=config.max_position_embeddings,
        left_pad_source="True",  # fairseq's defaults, stored as strings
        left_pad_target="False",
    )


# ----------------------------------------------------------------------------------------------
# Weights: fairseq names <-> FSMT names

# Old fairseq (2018) kept each layer's norms in a list; fairseq's own upgrade code renames them.
_ENCODER_OLD_LAYER_NORMS = {"0": "self_attn_layer_norm", "1": "final_layer_norm"}
_DECODER_OLD_LAYER_NORMS = {"0": "self_attn_layer_norm", "1": "encoder_attn_layer_norm", "2": "final_layer_norm"}
_DROPPED_SUFFIXES = ("version", "embed_positions._float_tensor")  # bookkeeping, not weights


def _expected_fsmt_shapes(config: FSMTConfig) -> dict[str, torch.Size]:
    """Names and shapes of FSMTForConditionalGeneration's state dict, without allocating it."""
    with torch.device("meta"):
        model = FSMTForConditionalGeneration(config)
    return {name: tensor.shape for name, tensor in model.state_dict().items()}


def _fairseq_name_to_fsmt(name: str) -> str | None:
    """FSMT name (without the "model." prefix) for a fairseq parameter name that maps one to one.

    Fused attention projections and embeddings are handled by the caller.
    """
    parts = name.split(".")
    if len(parts) >= 5 and parts[0] in ("encoder", "decoder") and parts[1] == "layers" and parts[3] == "layer_norms":
        renames = _ENCODER_OLD_LAYER_NORMS if parts[0] == "encoder" else _DECODER_OLD_LAYER_NORMS
        if parts[4] not in renames:
            return None
        return ".".join(parts[:3] + [renames[parts[4]]] + parts[5:])
    return name


def fairseq_to_fsmt_state_dict(fairseq_state: dict, config: FSMTConfig, args=None) -> dict:
    """Convert a fairseq transformer state dict into FSMTForConditionalGeneration's.

    Splits fused attention projections (in_proj_weight / in_proj_bias, rows q, k, v) into
    q_proj / k_proj / v_proj, renames old-style layer_norms.N, drops the "version" and
    "_float_tensor" bookkeeping entries, adds the sinusoidal position tables FSMT stores as
    weights, and fills shared embeddings / the output projection. Raises ValueError naming
    any unexpected or missing key and any shape mismatch.

    `args` (optional) lets the check of shared output embeddings use the training arguments.
    """
    expected = _expected_fsmt_shapes(config)
    converted = {}
    unexpected = []
    embeddings = {}  # fairseq embedding/output names -> tensor, resolved after the loop

    for name, tensor in fairseq_state.items():
        if name.endswith(_DROPPED_SUFFIXES):
            continue
        if name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                    "decoder.embed_out", "decoder.output_projection.weight"):
            embeddings[name] = tensor
            continue
        if name.endswith(".in_proj_weight") or name.endswith(".in_proj_bias"):
            prefix, kind = name.rsplit(".", 1)
            suffix = "weight" if kind == "in_proj_weight" else "bias"
            if f"model.{prefix}.q_proj.{suffix}" not in expected:
                unexpected.append(name)
                continue
            if tensor.shape[0] % 3 != 0:
                raise ValueError(f"fused projection '{name}' has {tensor.shape[0]} rows, not a multiple of 3")
            # fairseq's MultiheadAttention: rows [0, d) project queries, [d, 2d) keys, [2d, 3d) values.
            for projection, chunk in zip(("q_proj", "k_proj", "v_proj"), tensor.chunk(3, dim=0)):
                converted[f"model.{prefix}.{projection}.{suffix}"] = chunk.clone()
            continue
        fsmt_name = _fairseq_name_to_fsmt(name)
        if fsmt_name is None or f"model.{fsmt_name}" not in expected:
            unexpected.append(name)
            continue
        converted[f"model.{fsmt_name}"] = tensor
    if unexpected:
        raise ValueError(f"unexpected keys in the fairseq state dict (FSMT has no place for them): {unexpected}")

    # Embeddings. With share_all_embeddings fairseq stores the one matrix under both
    # encoder.embed_tokens and decoder.embed_tokens; the output projection reuses the decoder
    # embeddings unless a separate decoder.embed_out (old) / decoder.output_projection (new) exists.
    encoder_embed = embeddings.get("encoder.embed_tokens.weight")
    decoder_embed = embeddings.get("decoder.embed_tokens.weight")
    if config.tie_word_embeddings:
        encoder_embed = encoder_embed if encoder_embed is not None else decoder_embed
        decoder_embed = decoder_embed if decoder_embed is not None else encoder_embed
        if encoder_embed is not None and not torch.equal(encoder_embed, decoder_embed):
            raise ValueError("share_all_embeddings is set but encoder and decoder embeddings differ")
    output_projection = embeddings.get("decoder.output_projection.weight", embeddings.get("decoder.embed_out"))
    if output_projection is None:
        if args is not None:
            a = _args_dict(args)
            if not (a.get("share_all_embeddings") or a.get("share_decoder_input_output_embed")):
                raise ValueError("missing key 'decoder.embed_out': the args do not share decoder input/output embeddings")
        output_projection = decoder_embed
    for fsmt_name, tensor, fairseq_name in [
        ("model.encoder.embed_tokens.weight", encoder_embed, "encoder.embed_tokens.weight"),
        ("model.decoder.embed_tokens.weight", decoder_embed, "decoder.embed_tokens.weight"),
        ("model.decoder.output_projection.weight", output_projection, "decoder.embed_out"),
    ]:
        if tensor is not None:
            converted[fsmt_name] = tensor
        elif fsmt_name in expected:
            raise ValueError(f"missing key '{fairseq_name}' in the fairseq state dict")

    # FSMT keeps its (deterministic) sinusoidal tables as weights; fairseq does not save them.
    for side in ("encoder", "decoder"):
        name = f"model.{side}.embed_positions.weight"
        num_positions, dim = expected[name]
        converted[name] = SinusoidalPositionalEmbedding.get_embedding(num_positions, dim, config.pad_token_id)

    missing = sorted(set(expected) - set(converted))
    if missing:
        raise ValueError(f"missing keys (FSMT names) after converting the fairseq state dict: {missing}")
    for name, tensor in converted.items():
        if tuple(tensor.shape) != tuple(expected[name]):
            raise ValueError(
                f"shape mismatch for '{name}': checkpoint has {tuple(tensor.shape)}, "
                f"the architecture in the args needs {tuple(expected[name])}"
            )
    return converted


def fsmt_to_fairseq_state_dict(model: FSMTForConditionalGeneration, layer_norm_style: str = "old") -> dict:
    """Inverse of fairseq_to_fsmt_state_dict, in the layout of a fairseq checkpoint.

    layer_norm_style "old" writes the 2018 names (encoder layer_norms.0/1, decoder
    layer_norms.0/1/2), "new" the named ones (self_attn_layer_norm, ...). Attention projections
    are always fused into in_proj_weight / in_proj_bias, as in the 2018 checkpoints. Embeddings
    that FSMT ties are written as the same tensor under each fairseq name, and no
    decoder.embed_out is written when the output projection equals the decoder embeddings.
    """
    if layer_norm_style not in ("old", "new"):
        raise ValueError(f"layer_norm_style must be 'old' or 'new', got {layer_norm_style!r}")
    fsmt = {name.removeprefix("model."): tensor.detach() for name, tensor in model.state_dict().items()}
    state = {}
    config = model.config
    for side, num_layers, attentions, old_norms in [
        ("encoder", config.encoder_layers, ["self_attn"], _ENCODER_OLD_LAYER_NORMS),
        ("decoder", config.decoder_layers, ["self_attn", "encoder_attn"], _DECODER_OLD_LAYER_NORMS),
    ]:
        for layer in range(num_layers):
            prefix = f"{side}.layers.{layer}"
            for attention in attentions:
                for suffix in ("weight", "bias"):
                    state[f"{prefix}.{attention}.in_proj_{suffix}"] = torch.cat(
                        [fsmt[f"{prefix}.{attention}.{p}.{suffix}"] for p in ("q_proj", "k_proj", "v_proj")], dim=0
                    )
                    state[f"{prefix}.{attention}.out_proj.{suffix}"] = fsmt[f"{prefix}.{attention}.out_proj.{suffix}"]
            for index, norm in old_norms.items():
                for suffix in ("weight", "bias"):
                    name = f"{prefix}.layer_norms.{index}" if layer_norm_style == "old" else f"{prefix}.{norm}"
                    state[f"{name}.{suffix}"] = fsmt[f"{prefix}.{norm}.{suffix}"]
            for linear in ("fc1", "fc2"):
                for suffix in ("weight", "bias"):
                    state[f"{prefix}.{linear}.{suffix}"] = fsmt[f"{prefix}.{linear}.{suffix}"]

    encoder_embed = fsmt["encoder.embed_tokens.weight"]
    decoder_embed = fsmt["decoder.embed_tokens.weight"]
    output_projection = fsmt["decoder.output_projection.weight"]
    state["encoder.embed_tokens.weight"] = encoder_embed
    # Shared embeddings are one tensor in fairseq: torch.save then stores them once.
    shared = encoder_embed.shape == decoder_embed.shape and torch.equal(encoder_embed, decoder_embed)
    state["decoder.embed_tokens.weight"] = encoder_embed if shared else decoder_embed
    if not torch.equal(output_projection, decoder_embed):
        state["decoder.embed_out"] = output_projection
    for side in ("encoder", "decoder"):
        state[f"{side}.embed_positions._float_tensor"] = torch.zeros(1, dtype=encoder_embed.dtype)
        state[f"{side}.version"] = torch.tensor([3.0])
    return state


# ----------------------------------------------------------------------------------------------
# Loading


_EXTRACTED_MARKER = ".extracted_folder"  # written last: its presence means extraction finished


def _archive_stem(tar_path: Path) -> str:
    name = tar_path.name
    for suffix in (".tar.bz2", ".tar.gz", ".tar.xz", ".tbz2", ".tgz", ".tar"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return tar_path.stem


def _extracted_model_folder(tar_path: Path, extract_dir=None) -> Path:
    """Extract once next to the tarball (or into extract_dir) and reuse that on later calls.

    Extraction goes to a temporary sibling renamed into place at the end, so concurrent
    pipeline jobs never see a half-extracted folder.
    """
    target = Path(extract_dir) if extract_dir is not None else tar_path.parent / f"{_archive_stem(tar_path)}.extracted"
    marker = target / _EXTRACTED_MARKER
    if marker.is_file():
        return target / marker.read_text(encoding="utf-8").strip()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".extracting-", dir=target.parent))
    try:
        folder = safe_extract(tar_path, staging)
        relative = folder.relative_to(staging).as_posix()
        (staging / _EXTRACTED_MARKER).write_text(relative or ".", encoding="utf-8")
        try:
            os.rename(staging, target)
        except OSError:
            if not marker.is_file():  # not a concurrent job that got there first
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return target / marker.read_text(encoding="utf-8").strip()


def fairseq_model_folder(path, extract_dir=None) -> Path:
    """The model folder for `path`: the folder itself, or a tarball's (safely) extracted folder."""
    path = Path(path)
    if path.is_dir():
        return path
    if path.is_file() and tarfile.is_tarfile(path):
        return _extracted_model_folder(path, extract_dir)
    raise FileNotFoundError(f"not a fairseq model folder or tarball: {path}")


def build_target_tokenizer(path, src_lang="en", tgt_lang="fr", extract_dir=None) -> FSMTTokenizer:
    """A tokenizer for TARGET-language text (e.g. references scored with a loss).

    FSMTTokenizer always encodes with the source language's Moses rules and the source
    vocabulary; fairseq's training data was tokenized per language (Moses splits French
    "l'homme" as "l' homme", English rules as "l 'homme"). The mirror-image tokenizer gives
    fairseq's target ids: Moses {tgt} + BPE + dict.{tgt}.txt, with </s> appended.
    """
    return build_fsmt_tokenizer(fairseq_model_folder(path, extract_dir), src_lang=tgt_lang, tgt_lang=src_lang)


def load_fairseq_translation_model(path, src_lang="en", tgt_lang="fr", dtype=torch.float32,
                                   checkpoint_name="model.pt", extract_dir=None, tokenizer_dir=None):
    """(FSMTForConditionalGeneration in eval mode, FSMTTokenizer) for a fairseq translation model.

    `path` is a fairseq tarball (extracted once, next to it or into `extract_dir`) or an
    extracted model folder with model.pt, dict.{src}.txt, dict.{tgt}.txt and bpecodes.
    fp32 by default: FSMT's masking overflows in fp64 (NOTES.md). The tokenizer encodes
    source text; see build_target_tokenizer for target text.
    """
    folder = fairseq_model_folder(path, extract_dir)
    for required in (checkpoint_name, f"dict.{src_lang}.txt", f"dict.{tgt_lang}.txt", "bpecodes"):
        if not (folder / required).is_file():
            raise FileNotFoundError(f"{folder}: missing '{required}' (expected a fairseq model folder)")

    tokenizer = build_fsmt_tokenizer(folder, src_lang, tgt_lang, tokenizer_dir)
    src_vocab_size = len(FAIRSEQ_SPECIAL_TOKENS) + len(read_fairseq_dict(folder / f"dict.{src_lang}.txt"))
    tgt_vocab_size = len(FAIRSEQ_SPECIAL_TOKENS) + len(read_fairseq_dict(folder / f"dict.{tgt_lang}.txt"))

    checkpoint_path = folder / checkpoint_name
    checkpoint = safe_load_checkpoint(checkpoint_path)
    if "args" not in checkpoint or checkpoint["args"] is None:
        raise ValueError(f"{checkpoint_path}: no 'args' entry (only argparse-style fairseq checkpoints are supported)")
    if "model" not in checkpoint:
        raise ValueError(f"{checkpoint_path}: no 'model' entry with the weights")
    args = checkpoint["args"]
    try:
        config = fsmt_config_from_fairseq_args(args, src_vocab_size, tgt_vocab_size, [src_lang, tgt_lang])
        state = fairseq_to_fsmt_state_dict(checkpoint["model"], config, args=args)
    except ValueError as error:
        raise ValueError(f"{checkpoint_path}: {error}") from error

    model = FSMTForConditionalGeneration(config)
    model.load_state_dict(state, strict=True)
    model.to(dtype=dtype).eval()
    # FSMT only builds its causal decoder mask when use_cache is off: with the default (on), a
    # forward pass given decoder_input_ids would let each position see the future. Plain forward
    # passes therefore default to use_cache=False; generate() keeps its cache.
    model.config.use_cache = False
    model.generation_config.use_cache = True
    return model, tokenizer


# ----------------------------------------------------------------------------------------------
# Writing


def write_fairseq_checkpoint_dir(model, src_dict_tokens, tgt_dict_tokens, bpecodes_path, out_dir,
                                 src_lang="en", tgt_lang="fr", layer_norm_style="old") -> Path:
    """Write `model` as a fairseq model folder: model.pt, dict.{src}.txt, dict.{tgt}.txt, bpecodes.

    *_dict_tokens are the dict.xx.txt tokens in fairseq id order WITHOUT the 4 specials, as
    strings (count 1 is written) or (token, count) pairs.
    """
    out_dir = Path(out_dir)
    config = model.config
    src_tokens = [entry if isinstance(entry, str) else entry[0] for entry in src_dict_tokens]
    tgt_tokens = [entry if isinstance(entry, str) else entry[0] for entry in tgt_dict_tokens]
    for side, tokens, size in [(src_lang, src_tokens, config.src_vocab_size), (tgt_lang, tgt_tokens, config.tgt_vocab_size)]:
        if len(tokens) + len(FAIRSEQ_SPECIAL_TOKENS) != size:
            raise ValueError(
                f"dict.{side}.txt would have {len(tokens)} tokens + 4 specials, but the model's vocabulary has {size}"
            )
    if not Path(bpecodes_path).is_file():
        raise FileNotFoundError(f"BPE codes file not found: {bpecodes_path}")

    state = fsmt_to_fairseq_state_dict(model, layer_norm_style)
    shares_decoder_output = "decoder.embed_out" not in state
    share_all = (
        shares_decoder_output
        and state["encoder.embed_tokens.weight"] is state["decoder.embed_tokens.weight"]
        and src_tokens == tgt_tokens  # fairseq requires a joined dictionary for this
    )
    if state["encoder.embed_tokens.weight"] is state["decoder.embed_tokens.weight"] and not share_all:
        # Equal but not shareable in fairseq's terms: store two copies.
        state["decoder.embed_tokens.weight"] = state["decoder.embed_tokens.weight"].clone()
    args = fairseq_args_from_fsmt_config(config, src_lang, tgt_lang, share_all, shares_decoder_output)
    checkpoint = {
        "args": args,
        "model": state,
        "optimizer_history": [
            {"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "FairseqAdam",
             "lr_scheduler_state": {"best": None}, "num_updates": 0}
        ],
        "extra_state": {},
        "last_optimizer_state": None,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    # torch's pre-1.6 serialization, as in the 2018 checkpoints (torch.load reads both formats).
    torch.save(checkpoint, out_dir / "model.pt", _use_new_zipfile_serialization=False)
    write_fairseq_dict(out_dir / f"dict.{src_lang}.txt", src_dict_tokens)
    write_fairseq_dict(out_dir / f"dict.{tgt_lang}.txt", tgt_dict_tokens)
    shutil.copyfile(bpecodes_path, out_dir / "bpecodes")
    return out_dir


def write_fairseq_tarball(model, src_dict_tokens, tgt_dict_tokens, bpecodes_path, tar_path, folder_name,
                          src_lang="en", tgt_lang="fr", layer_norm_style="old") -> Path:
    """Write `model` as a fairseq .tar.bz2 whose single top-level folder is `folder_name/`."""
    tar_path = Path(tar_path)
    if not folder_name or "/" in folder_name or folder_name in (".", ".."):
        raise ValueError(f"folder_name must be a plain folder name, got {folder_name!r}")
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fairseq-tarball-") as staging:
        folder = write_fairseq_checkpoint_dir(
            model, src_dict_tokens, tgt_dict_tokens, bpecodes_path, Path(staging) / folder_name,
            src_lang, tgt_lang, layer_norm_style,
        )
        partial = tar_path.with_name(tar_path.name + ".partial")
        with tarfile.open(partial, "w:bz2") as archive:
            archive.add(folder, arcname=folder_name)
        os.replace(partial, tar_path)
    return tar_path
