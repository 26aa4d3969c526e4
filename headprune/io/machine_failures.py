"""Failures of the machine, not of the input: a full disk, a quota, a folder that may not be written, a read-only
file system. A writer that meets one (safetensors, pandas, the json module) raises it from deep inside, in its own
words (safetensors: "SafetensorError: Error while serializing: I/O error: No space left on device (os error 28)");
what the user needs is one line naming the path, and nothing half-written, which the atomic writers
(headprune.io.atomic) already see to. So:

    cannot write results/pruned: No space left on device (ENOSPC): free space on that disk, or write elsewhere

``machine_failure(error)`` finds such a failure in an exception or what it was raised from or during (its cause
and context), with the path it was writing: the destination an atomic writer was making (``note_destination``
marks it on the exception on its way out: the folder or file the user named, not a temporary), else the OSError's
own file name. The ``headprune`` command and every pipeline job (headprune.workflow.logged) print that line and
exit with status 1 instead of a traceback.

Imports only the standard library.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
from dataclasses import dataclass

# The errors of the machine, with what to do about each
ADVICE = {
    errno.ENOSPC: "free space on that disk, or write elsewhere",
    errno.EDQUOT: "free space within your disk quota, or write elsewhere",
    errno.EROFS: "the file system is mounted read-only: write elsewhere",
    errno.EACCES: "write where you have permission, or change the folder's permissions",
    errno.EPERM: "write where you have permission, or change the folder's permissions",
}
DESTINATION = "headprune_destination"  # the attribute note_destination sets on an exception
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how Rust (safetensors, tokenizers) shows an OS error


WRITES_ONLY = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}  # a permission may be missing for a read too


@dataclass(frozen=True)
class MachineFailure:
    code: int  # errno
    path: str | None  # the path, where known
    writing: bool  # known to have been a write

    def __str__(self) -> str:
        verb = "write" if self.writing or self.code in WRITES_ONLY else "access"
        where = f"cannot {verb} {self.path}" if self.path else f"cannot {verb} (the path was not reported)"
        return f"{where}: {os.strerror(self.code)} ({errno.errorcode[self.code]}): {ADVICE[self.code]}"


def note_destination(error: BaseException, path) -> None:
    """Mark ``error`` as raised while writing ``path``. Writers nest (a file inside a folder being made): each
    marks it on the way out, so the outermost, the path the caller named, is the one kept."""
    with contextlib.suppress(AttributeError, TypeError):  # an exception type that takes no attributes
        setattr(error, DESTINATION, str(path))


def chain(error: BaseException):
    """``error``, then what it was raised from or while handling, and so on, as a traceback shows them (``raise
    ... from None`` ends the chain)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ if error.__cause__ is not None or error.__suppress_context__ else error.__context__


def os_error_code(error: BaseException) -> int | None:
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno
    found = RUST_OS_ERROR.search(str(error))
    return int(found.group(1)) if found else None


def machine_failure(error: BaseException) -> MachineFailure | None:
    """The failure of the machine in ``error`` (or its cause or context), or None where it is something else."""
    for link in chain(error):
        code = os_error_code(link)
        if code in ADVICE:
            destinations = [getattr(e, DESTINATION) for e in chain(error) if getattr(e, DESTINATION, None)]
            named = destinations[0] if destinations else getattr(link, "filename", None)
            return MachineFailure(code, None if named is None else str(named), writing=bool(destinations))
    return None


# How torch words a host allocation it could not make, where it raises a plain RuntimeError
HOST_ALLOCATION_FAILED = re.compile(r"DefaultCPUAllocator: (?:not enough memory|can't allocate memory)")


def out_of_memory(error: BaseException) -> str | None:
    """What ran out in ``error`` (or its cause or context): "out of memory (...)", one line with torch's own
    first line; None where it is something else. The caller adds what to lower (its options or config keys).
    A process the kernel kills for memory raises nothing: the batch sizes are chosen to fit
    (headprune.models.memory) so that it is not."""
    torch = sys.modules.get("torch")  # not imported here: a run that never loaded torch ran out of memory in Python
    cuda_oom = getattr(torch, "OutOfMemoryError", None)
    for link in chain(error):
        said = str(link).strip().splitlines()[0][:200] if str(link).strip() else type(link).__name__
        if isinstance(link, MemoryError) or HOST_ALLOCATION_FAILED.search(str(link)):
            return f"out of memory ({said})"
        if cuda_oom is not None and isinstance(link, cuda_oom):
            return f"out of GPU memory ({said})"
    return None
