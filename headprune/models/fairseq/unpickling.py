"""Safe unpickling of a fairseq/torch checkpoint. A checkpoint is a pickle, and a pickle can run arbitrary
code when loaded: every global it references is checked against an allow-list BEFORE anything is unpickled,
and the load itself then goes through torch's restricted (weights_only) unpickler; fairseq's pickled training
meters are read as inert placeholders."""

import _compat_pickle
import argparse
import io
import os
import pickle
import pickletools
import zipfile
from pathlib import Path

import torch


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
