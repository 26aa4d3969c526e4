"""Read and write fairseq translation checkpoints without the fairseq library.

fairseq no longer imports on Python 3.11 (see NOTES.md), so this module reads its checkpoint
format directly into transformers' FSMT, a port of fairseq's post-norm transformer, or, for
the pre-norm transformer, into ``headprune.models.prenorm.PreNormTransformer`` (M2M100):

    wmt14.en-fr.joined-dict.transformer/      (the tarball's single top-level folder)
        model.pt       torch pickle: {"args": argparse.Namespace (fairseq <= 0.10) or None with
                       "cfg": plain dicts (0.12), "model": state dict in fairseq names,
                       "optimizer_history", "extra_state" (training meters, iterator state),
                       "last_optimizer_state", ...}
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
import numbers
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

from headprune.io.atomic import atomic_path, copy_file, save_torch, tar_writer, write_text

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

# fairseq-train also pickles its training meters into every checkpoint (0.6-0.9:
# extra_state["train_meters"], an OrderedDict of these objects; a fork may pickle the 0.10+
# classes too). They are read as inert TrainingStatePlaceholder objects: the real classes are
# never imported, and nothing they could run does.
TRAINING_STATE_GLOBALS = frozenset(
    [f"fairseq.meters.{name}" for name in ("AverageMeter", "TimeMeter", "StopwatchMeter")]
    + [f"fairseq.logging.meters.{name}" for name in (
        "AverageMeter", "SumMeter", "ConcatMeter", "TimeMeter", "StopwatchMeter", "MetersDict")]
)


class TrainingStatePlaceholder:
    """Stands in for a fairseq training-state object (a meter): keeps the pickled state as data.

    Creating one and setting its state runs no code from the checkpoint; it has no methods a
    model or its options could use, and ``checked_model_options``/``checked_weights`` refuse it
    anywhere the model is built from.
    """

    fairseq_global = "?"

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls)

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state

    def __repr__(self):
        return f"<placeholder for {self.fairseq_global}>"


def _placeholder_class(global_name: str) -> type:
    return type(global_name.rsplit(".", 1)[-1], (TrainingStatePlaceholder,), {"fairseq_global": global_name})


_PLACEHOLDERS = {name: _placeholder_class(name) for name in sorted(TRAINING_STATE_GLOBALS)}

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
                if global_name not in ALLOWED_GLOBALS and global_name not in TRAINING_STATE_GLOBALS:
                    hint = ""
                    if global_name.startswith("omegaconf"):
                        hint = (" (fairseq 0.12 stores its config under 'cfg' as plain containers;"
                                " this file holds live omegaconf objects instead)")
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
    extra_globals = ([argparse.Namespace] + _numpy_safe_globals()
                     + [(placeholder, name) for name, placeholder in _PLACEHOLDERS.items()])
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


# ----------------------------------------------------------------------------------------------
# Model options: the checkpoint's args or cfg -> a transformers config, and back

# fairseq activation_fn -> transformers ACT2FN name. fairseq's "gelu" is the exact erf form;
# its "gelu_accurate" is the tanh approximation that transformers calls "gelu_new".
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_accurate": "gelu_new", "tanh": "tanh", "linear": "linear"}

# fairseq 0.12's dataclass TransformerConfig nests options: {"encoder": {"embed_dim": ...}} is
# the flat argument encoder_embed_dim (its own _NAME_PARSER rule).
_NESTED_OPTION_GROUPS = ("encoder", "decoder", "quant_noise")


def _is_plain(value) -> bool:
    """A value a model option may hold: numbers, strings, None, and lists/dicts of those."""
    if value is None or isinstance(value, (str, bool, numbers.Number)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_plain(item) for key, item in value.items())
    return False


def fairseq_model_options(checkpoint: dict) -> dict:
    """A fairseq checkpoint's architecture options, flat, in fairseq's argument names.

    fairseq <= 0.10 saves them as the argparse.Namespace ``args``; 0.12 sets ``args`` to None and
    saves ``cfg`` (OmegaConf.to_container: plain dicts) whose ``cfg["model"]`` is an argparse
    Namespace for the legacy architectures (``--arch transformer`` and its kin) or the nested
    dict of the dataclass TransformerConfig. Every option must be a plain value: a training-state
    placeholder (or anything else the unpickler built) never reaches the model.
    """
    if checkpoint.get("args") is not None:
        where, options = "args", checkpoint["args"]
    elif isinstance(checkpoint.get("cfg"), dict) and checkpoint["cfg"].get("model") is not None:
        where, options = "cfg['model']", checkpoint["cfg"]["model"]
    else:
        raise ValueError("no model options: neither 'args' (fairseq <= 0.10) nor cfg['model'] (fairseq 0.12) is set")
    if isinstance(options, argparse.Namespace):
        options = dict(vars(options))
    elif isinstance(options, dict):
        flat = {}
        for name, value in options.items():
            if name in _NESTED_OPTION_GROUPS and isinstance(value, dict):
                flat.update({f"{name}_{inner}": inner_value for inner, inner_value in value.items()})
            else:
                flat[name] = value
        options = flat
        options.setdefault("arch", options.get("_name", "transformer"))
    else:
        raise ValueError(f"{where} is a {type(options).__name__}, not an argparse Namespace or a dict of options")
    for name, value in options.items():
        if not _is_plain(value):
            raise UnsafeCheckpointError(
                f"{where}: option '{name}' holds {value!r} ({type(value).__name__}), not a plain value; "
                "a model is never built from it")
    return options


def _options_dict(options) -> dict:
    return dict(vars(options)) if isinstance(options, argparse.Namespace) else dict(options)


def config_from_fairseq_options(options, src_vocab_size: int, tgt_vocab_size: int, langs):
    """The transformers config of a fairseq translation transformer: FSMTConfig for the post-norm
    architecture, ``headprune.models.prenorm``'s M2M100Config for the pre-norm one.

    ``options`` are fairseq's (argparse Namespace or flat dict). An option neither class can
    represent is refused with an error naming it, so a checkpoint is never loaded into a model
    that computes something else.
    """
    a = _options_dict(options)

    def required(name):
        if a.get(name) is None:
            raise ValueError(f"fairseq options lack '{name}', which is needed to build the model")
        return a[name]

    arch = str(a.get("arch", "transformer"))
    if not arch.startswith("transformer") or arch.startswith("transformer_lm"):
        raise ValueError(f"unsupported fairseq arch '{arch}': only translation transformers are supported")

    embed_dim = required("encoder_embed_dim")
    unsupported = {
        "encoder_learned_pos": "learned encoder positional embeddings (only sinusoidal ones are supported)",
        "decoder_learned_pos": "learned decoder positional embeddings (only sinusoidal ones are supported)",
        "no_token_positional_embeddings": "no positional embeddings",
        "layernorm_embedding": "a layer norm on the embeddings",
        "cross_self_attention": "cross+self attention",
        "no_cross_attention": "a decoder without cross attention",
        "adaptive_softmax_cutoff": "an adaptive softmax",
        "adaptive_input": "adaptive input embeddings",
        "tie_adaptive_weights": "adaptive softmax weights tied to adaptive inputs",
        "char_inputs": "character inputs",
        "no_decoder_final_norm": "a pre-norm decoder without its final layer norm",
        "base_layers": "BASE (mixture of experts) layers",
        "encoder_layers_to_keep": "encoder layers pruned at load time",
        "decoder_layers_to_keep": "decoder layers pruned at load time",
    }
    for name, what in unsupported.items():
        if a.get(name):
            raise ValueError(f"fairseq option {name}={a[name]!r}: {what} cannot be represented by the converted model")
    for name in ("decoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        value = a.get(name, embed_dim)
        if value is not None and value != embed_dim:
            raise ValueError(f"fairseq option {name}={value} but encoder_embed_dim={embed_dim}: "
                             "the converted model needs one model dimension throughout")
    activation = a.get("activation_fn", "relu")  # fairseq before 0.7 had no choice: ReLU
    if activation not in _ACTIVATIONS:
        raise ValueError(f"fairseq option activation_fn='{activation}' has no transformers equivalent")
    pre_norm = bool(a.get("encoder_normalize_before", False)), bool(a.get("decoder_normalize_before", False))
    if pre_norm[0] != pre_norm[1]:
        raise ValueError(f"fairseq options encoder_normalize_before={pre_norm[0]} and decoder_normalize_before="
                         f"{pre_norm[1]}: a model that mixes pre-norm and post-norm stacks cannot be represented")
    share_all = bool(a.get("share_all_embeddings", False))
    share_output = bool(a.get("share_decoder_input_output_embed", False))
    if share_all and src_vocab_size != tgt_vocab_size:
        raise ValueError(f"fairseq option share_all_embeddings needs one joined dictionary, got vocab sizes "
                         f"{src_vocab_size} and {tgt_vocab_size}")
    # fairseq's own rule: the 2018 name relu_dropout applies when activation_dropout is 0 or absent.
    activation_dropout = a.get("activation_dropout") or a.get("relu_dropout") or 0.0
    common = dict(
        activation_function=_ACTIVATIONS[activation],
        d_model=int(embed_dim),
        # Both classes grow their sinusoidal tables on demand; this only sizes the first one.
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
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=EOS_ID,  # fairseq starts decoding from </s>
        forced_eos_token_id=EOS_ID,  # and ends every hypothesis with it at the length limit
    )
    if pre_norm[0]:
        from headprune.models.prenorm import prenorm_config

        return prenorm_config(source_vocab_size=src_vocab_size, target_vocab_size=tgt_vocab_size,
                              share_all_embeddings=share_all, share_decoder_input_output_embed=share_output,
                              **common)
    return FSMTConfig(
        langs=list(langs),
        src_vocab_size=int(src_vocab_size),
        tgt_vocab_size=int(tgt_vocab_size),
        # share_all_embeddings: one matrix for source embeddings, target embeddings and the
        # output projection; FSMT ties exactly those three when tie_word_embeddings is set.
        tie_word_embeddings=share_all,
        **common,
    )


def is_pre_norm(config) -> bool:
    return config.model_type == "m2m_100"


def model_class_for(config):
    """The transformers class a converted fairseq model runs in."""
    if is_pre_norm(config):
        from headprune.models.prenorm import PreNormTransformer

        return PreNormTransformer
    return FSMTForConditionalGeneration


def vocab_sizes(config) -> tuple[int, int]:
    """(source, target) vocabulary sizes of a converted model's config."""
    if is_pre_norm(config):
        return getattr(config, "source_vocab_size", None) or config.vocab_size, config.vocab_size
    return config.src_vocab_size, config.tgt_vocab_size


def fairseq_args_from_config(config, src_lang="en", tgt_lang="fr", share_all_embeddings=True,
                             share_decoder_input_output_embed=True):
    """The argparse.Namespace a fairseq training run of this architecture would have saved."""
    activation = {v: k for k, v in _ACTIVATIONS.items()}.get(config.activation_function)
    if activation is None:
        raise ValueError(f"activation '{config.activation_function}' has no fairseq activation_fn")
    big = (config.d_model, config.encoder_ffn_dim, config.encoder_attention_heads,
           config.encoder_layers, config.decoder_layers) == (1024, 4096, 16, 6, 6)
    pre_norm = is_pre_norm(config)
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
        encoder_normalize_before=pre_norm,
        encoder_learned_pos=False,
        encoder_layerdrop=config.encoder_layerdrop,
        decoder_embed_path=None,
        decoder_embed_dim=config.d_model,
        decoder_ffn_embed_dim=config.decoder_ffn_dim,
        decoder_layers=config.decoder_layers,
        decoder_attention_heads=config.decoder_attention_heads,
        decoder_normalize_before=pre_norm,
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
# Weights: fairseq names <-> transformers names
#
# FSMT and M2M100 name their layers as fairseq does (q/k/v/out_proj, self_attn_layer_norm,
# encoder_attn, fc1, fc2, final_layer_norm, and M2M100's final encoder/decoder.layer_norm),
# under "model."; only their embedding and output matrices are named differently.

# Old fairseq (2018) kept each layer's norms in a list; fairseq's own upgrade code renames them.
_ENCODER_OLD_LAYER_NORMS = {"0": "self_attn_layer_norm", "1": "final_layer_norm"}
_DECODER_OLD_LAYER_NORMS = {"0": "self_attn_layer_norm", "1": "encoder_attn_layer_norm", "2": "final_layer_norm"}
_DROPPED_SUFFIXES = ("version", "embed_positions._float_tensor")  # bookkeeping, not weights
_FAIRSEQ_EMBEDDINGS = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                       "decoder.embed_out", "decoder.output_projection.weight")
# Per family: the transformers names of the source embeddings, target embeddings, output projection.
_EMBEDDING_NAMES = {
    "fsmt": (["model.encoder.embed_tokens.weight"], ["model.decoder.embed_tokens.weight"],
             ["model.decoder.output_projection.weight"]),
    "m2m_100": (["model.shared.weight", "model.encoder.embed_tokens.weight"], ["model.decoder.embed_tokens.weight"],
                ["lm_head.weight"]),
}


def _expected_shapes(config) -> dict[str, torch.Size]:
    """Names and shapes of the converted model's state dict, without allocating it."""
    with torch.device("meta"):
        model = model_class_for(config)(config)
    return {name: tensor.shape for name, tensor in model.state_dict().items()}


def _fairseq_name_to_hf(name: str) -> str | None:
    """transformers name (without "model.") for a fairseq parameter name that maps one to one.

    Fused attention projections and embeddings are handled by the caller.
    """
    parts = name.split(".")
    if len(parts) >= 5 and parts[0] in ("encoder", "decoder") and parts[1] == "layers" and parts[3] == "layer_norms":
        renames = _ENCODER_OLD_LAYER_NORMS if parts[0] == "encoder" else _DECODER_OLD_LAYER_NORMS
        if parts[4] not in renames:
            return None
        return ".".join(parts[:3] + [renames[parts[4]]] + parts[5:])
    return name


def checked_weights(state) -> dict:
    """The checkpoint's state dict, refused unless it maps names to tensors only."""
    if not isinstance(state, dict):
        raise UnsafeCheckpointError(f"'model' is a {type(state).__name__}, not a state dict")
    for name, tensor in state.items():
        if not isinstance(name, str) or type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            raise UnsafeCheckpointError(f"'model' entry {name!r} holds {type(tensor).__name__}, not a tensor; "
                                        "a model is never built from it")
    return state


def fairseq_to_hf_state_dict(fairseq_state: dict, config, options=None) -> dict:
    """Convert a fairseq transformer state dict into the state dict of ``model_class_for(config)``.

    Splits fused attention projections (in_proj_weight / in_proj_bias, rows q, k, v) into
    q_proj / k_proj / v_proj, renames old-style layer_norms.N, drops the "version" and
    "_float_tensor" bookkeeping entries, adds the sinusoidal position tables FSMT stores as
    weights, and fills shared embeddings / the output projection. Raises ValueError naming
    any unexpected or missing key and any shape mismatch, and any embedding the options say
    is shared that the checkpoint stores with other values.

    ``options`` (the fairseq options, optional) say which embeddings are shared.
    """
    expected = _expected_shapes(config)
    converted = {}
    unexpected = []
    embeddings = {}  # fairseq embedding/output names -> tensor, resolved after the loop

    for name, tensor in checked_weights(fairseq_state).items():
        if name.endswith(_DROPPED_SUFFIXES):
            continue
        if name in _FAIRSEQ_EMBEDDINGS:
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
        hf_name = _fairseq_name_to_hf(name)
        if hf_name is None or f"model.{hf_name}" not in expected:
            unexpected.append(name)
            continue
        converted[f"model.{hf_name}"] = tensor
    if unexpected:
        raise ValueError(f"unexpected keys in the fairseq state dict (the {config.model_type} model has no place "
                         f"for them): {unexpected}")

    # Embeddings. With share_all_embeddings fairseq stores the one matrix under both
    # encoder.embed_tokens and decoder.embed_tokens; the output projection reuses the decoder
    # embeddings unless a separate decoder.embed_out (old) / decoder.output_projection (new) exists.
    a = _options_dict(options) if options is not None else {}
    share_all = bool(a.get("share_all_embeddings", getattr(config, "tie_word_embeddings", False)))
    share_output = share_all or bool(a.get("share_decoder_input_output_embed", False))
    encoder_embed = embeddings.get("encoder.embed_tokens.weight")
    decoder_embed = embeddings.get("decoder.embed_tokens.weight")
    output_projection = embeddings.get("decoder.output_projection.weight", embeddings.get("decoder.embed_out"))
    if share_all:
        encoder_embed = encoder_embed if encoder_embed is not None else decoder_embed
        decoder_embed = decoder_embed if decoder_embed is not None else encoder_embed
        if encoder_embed is not None and not torch.equal(encoder_embed, decoder_embed):
            raise ValueError("share_all_embeddings is set but encoder and decoder embeddings differ")
    if output_projection is None:
        if options is not None and not share_output:
            raise ValueError("missing key 'decoder.embed_out': the options do not share decoder input/output embeddings")
        output_projection = decoder_embed
    elif share_output and decoder_embed is not None and not torch.equal(output_projection, decoder_embed):
        raise ValueError("the options share the decoder's input and output embeddings, but the checkpoint's "
                         "output projection differs from decoder.embed_tokens")
    source_names, target_names, output_names = _EMBEDDING_NAMES[config.model_type]
    for names, tensor, fairseq_name in [(source_names, encoder_embed, "encoder.embed_tokens.weight"),
                                        (target_names, decoder_embed, "decoder.embed_tokens.weight"),
                                        (output_names, output_projection, "decoder.embed_out")]:
        for hf_name in names:
            if tensor is not None:
                converted[hf_name] = tensor
            elif hf_name in expected:
                raise ValueError(f"missing key '{fairseq_name}' in the fairseq state dict")

    # FSMT keeps its (deterministic) sinusoidal tables as weights; fairseq does not save them.
    for side in ("encoder", "decoder"):
        name = f"model.{side}.embed_positions.weight"
        if name in expected:
            num_positions, dim = expected[name]
            converted[name] = SinusoidalPositionalEmbedding.get_embedding(num_positions, dim, config.pad_token_id)

    missing = sorted(set(expected) - set(converted))
    if missing:
        raise ValueError(f"missing keys ({config.model_type} names) after converting the fairseq state dict: {missing}")
    for name, tensor in converted.items():
        if tuple(tensor.shape) != tuple(expected[name]):
            raise ValueError(f"shape mismatch for '{name}': checkpoint has {tuple(tensor.shape)}, "
                             f"the architecture in the options needs {tuple(expected[name])}")
    return converted


def hf_to_fairseq_state_dict(model, layer_norm_style: str = "old") -> dict:
    """Inverse of fairseq_to_hf_state_dict, in the layout of a fairseq checkpoint.

    layer_norm_style "old" writes the 2018 names (encoder layer_norms.0/1, decoder
    layer_norms.0/1/2), "new" the named ones (self_attn_layer_norm, ...). Attention projections
    are always fused into in_proj_weight / in_proj_bias, as in the 2018 checkpoints. Embeddings
    the model ties are written as the same tensor under each fairseq name, and no
    decoder.embed_out is written when the output projection equals the decoder embeddings.
    """
    if layer_norm_style not in ("old", "new"):
        raise ValueError(f"layer_norm_style must be 'old' or 'new', got {layer_norm_style!r}")
    weights = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    hf = {name.removeprefix("model."): tensor for name, tensor in weights.items()}
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
                        [hf[f"{prefix}.{attention}.{p}.{suffix}"] for p in ("q_proj", "k_proj", "v_proj")], dim=0
                    )
                    state[f"{prefix}.{attention}.out_proj.{suffix}"] = hf[f"{prefix}.{attention}.out_proj.{suffix}"]
            for index, norm in old_norms.items():
                for suffix in ("weight", "bias"):
                    name = f"{prefix}.layer_norms.{index}" if layer_norm_style == "old" else f"{prefix}.{norm}"
                    state[f"{name}.{suffix}"] = hf[f"{prefix}.{norm}.{suffix}"]
            for linear in ("fc1", "fc2"):
                for suffix in ("weight", "bias"):
                    state[f"{prefix}.{linear}.{suffix}"] = hf[f"{prefix}.{linear}.{suffix}"]
        for suffix in ("weight", "bias"):  # pre-norm: the final layer norm of each stack
            if f"{side}.layer_norm.{suffix}" in hf:
                state[f"{side}.layer_norm.{suffix}"] = hf[f"{side}.layer_norm.{suffix}"]

    source_names, target_names, output_names = _EMBEDDING_NAMES[config.model_type]
    encoder_embed, decoder_embed, output_projection = (weights[names[-1]] for names in
                                                       (source_names, target_names, output_names))
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
        write_text(staging / _EXTRACTED_MARKER, relative or ".", encoding="utf-8")
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
    """(model in eval mode, FSMTTokenizer) for a fairseq translation model.

    The model is transformers' FSMT for fairseq's post-norm transformer and
    ``headprune.models.prenorm.PreNormTransformer`` (M2M100) for the pre-norm one. `path` is a fairseq
    tarball (extracted once, next to it or into `extract_dir`) or an extracted model folder with
    model.pt, dict.{src}.txt, dict.{tgt}.txt and bpecodes. The checkpoint may be fairseq 0.6-0.12's,
    training state included (see safe_load_checkpoint and fairseq_model_options).
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
    try:
        if "model" not in checkpoint:
            raise ValueError("no 'model' entry with the weights")
        options = fairseq_model_options(checkpoint)
        config = config_from_fairseq_options(options, src_vocab_size, tgt_vocab_size, [src_lang, tgt_lang])
        state = fairseq_to_hf_state_dict(checkpoint["model"], config, options)
    except (ValueError, UnsafeCheckpointError) as error:
        raise type(error)(f"{checkpoint_path}: {error}") from error

    from transformers.initialization import no_init_weights

    with no_init_weights():  # every weight is loaded next: random init would only cost time
        model = model_class_for(config)(config)
    model.tie_weights()  # skipped with the initialization
    model.load_state_dict(state, strict=True)
    model.to(dtype=dtype).eval()
    if not is_pre_norm(config):
        # FSMT only builds its causal decoder mask when use_cache is off: with the default (on), a
        # forward pass given decoder_input_ids would let each position see the future. Plain
        # forward passes therefore default to use_cache=False; generate() keeps its cache.
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
    for side, tokens, size in zip((src_lang, tgt_lang), (src_tokens, tgt_tokens), vocab_sizes(config)):
        if len(tokens) + len(FAIRSEQ_SPECIAL_TOKENS) != size:
            raise ValueError(
                f"dict.{side}.txt would have {len(tokens)} tokens + 4 specials, but the model's vocabulary has {size}"
            )
    if not Path(bpecodes_path).is_file():
        raise FileNotFoundError(f"BPE codes file not found: {bpecodes_path}")

    state = hf_to_fairseq_state_dict(model, layer_norm_style)
    shares_decoder_output = "decoder.embed_out" not in state
    share_all = (
        shares_decoder_output
        and state["encoder.embed_tokens.weight"] is state["decoder.embed_tokens.weight"]
        and src_tokens == tgt_tokens  # fairseq requires a joined dictionary for this
    )
    if state["encoder.embed_tokens.weight"] is state["decoder.embed_tokens.weight"] and not share_all:
        # Equal but not shareable in fairseq's terms: store two copies.
        state["decoder.embed_tokens.weight"] = state["decoder.embed_tokens.weight"].clone()
    args = fairseq_args_from_config(config, src_lang, tgt_lang, share_all, shares_decoder_output)
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
    save_torch(checkpoint, out_dir / "model.pt", _use_new_zipfile_serialization=False)
    write_fairseq_dict(out_dir / f"dict.{src_lang}.txt", src_dict_tokens)
    write_fairseq_dict(out_dir / f"dict.{tgt_lang}.txt", tgt_dict_tokens)
    copy_file(bpecodes_path, out_dir / "bpecodes")
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
        with tar_writer(tar_path, "w:bz2") as archive:
            archive.add(folder, arcname=folder_name)
    return tar_path
