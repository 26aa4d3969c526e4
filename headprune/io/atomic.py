"""Write every output atomically: to a temporary name beside the destination, then rename (issue #25).

A job killed at any moment (time limit, out of memory, Ctrl-C), out of disk or failing in its writer
leaves under the destination's name either the old file or none: never a truncated one, which Snakemake
(it checks only that an output exists) and every later step would take for a result.

- ``atomic_path(dest)`` yields a temporary path in ``dest``'s own folder, so the final ``os.replace`` is a
  rename within one file system: atomic, never a copy. Before it, the bytes are fsynced: network file
  systems (NFS, Lustre) may report a full disk or quota only at close or fsync, and a node that crashes
  after the rename must not find an empty file under the final name. On any exception (KeyboardInterrupt
  and SystemExit too) the temporary is removed and the exception goes on, marked with the destination
  (``headprune.io.machine_failures``: a full disk is then reported as writing ``dest``, not a temporary).
- ``atomic_dir(dest)`` does the same for a folder (``save_pretrained``, a download, an extraction).
- ``write_text``, ``write_bytes``, ``write_json``, ``write_csv``, ``save_figure``, ``save_numpy``,
  ``save_torch``, ``save_safetensors``, ``tar_writer``, ``copy_file``: the writers the package uses, each
  through ``atomic_path``, writing the same bytes as the plain call.

A temporary is named ``.<name>.tmp-<pid>-<random><suffix>``: hidden and never an output's name; unique per
writer; ending with the destination's suffix because writers choose the format by it (matplotlib's savefig,
pandas' compression, np.save's ".npy"). A process killed by SIGKILL cannot remove its temporary: such a
leftover is never taken for an output, and ``leftovers(folder)`` lists them.

Imports only the standard library: pandas, numpy, torch are the caller's, or imported where used.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from headprune.io.machine_failures import note_destination

__all__ = ["atomic_path", "atomic_dir", "leftovers", "write_text", "write_bytes", "write_json", "write_csv",
           "save_figure", "save_numpy", "save_torch", "save_safetensors", "tar_writer", "copy_file"]

TEMPORARY_MARK = ".tmp-"  # in every temporary's name: .<name>.tmp-<pid>-<random><suffix>
ASIDE_MARK = ".old-"  # an old folder renamed aside while atomic_dir puts the new one in place


def temporary_name(dest: Path, mark: str = TEMPORARY_MARK) -> Path:
    return dest.with_name(f".{dest.name}{mark}{os.getpid()}-{secrets.token_hex(4)}{dest.suffix}")


def leftovers(folder) -> list[Path]:
    """The temporaries (and old folders renamed aside) of writers that died in ``folder``, SIGKILLed."""
    return sorted(path for path in Path(folder).glob(".*")
                  if TEMPORARY_MARK in path.name or ASIDE_MARK in path.name)


@contextlib.contextmanager
def atomic_path(dest) -> Iterator[Path]:
    """A temporary path beside ``dest`` to write one file at; renamed onto ``dest`` (replacing an older file)
    once the block succeeds, deleted if it raises. ``dest``'s folder must exist, as for a plain write::

        with atomic_path("table.csv") as tmp:
            table.to_csv(tmp, index=False)
    """
    dest = Path(dest)
    tmp = temporary_name(dest)
    try:
        yield tmp
        _fsync(tmp)  # a writer that wrote nowhere (or elsewhere) fails here, loudly
        os.replace(tmp, dest)
    except BaseException as error:
        _remove(tmp)
        note_destination(error, dest)
        raise
    _fsync_folder(dest.parent)


@contextlib.contextmanager
def atomic_dir(dest) -> Iterator[Path]:
    """A new empty temporary folder beside ``dest`` (its parents created) to fill; renamed to ``dest`` once
    the block succeeds, deleted with its content if it raises.

    One rename cannot replace a folder that has files, so an existing ``dest`` is first renamed aside
    (``.<name>.old-<pid>-<random>``), the new folder renamed in, and the old one deleted. Between the two
    renames (microseconds) ``dest`` does not exist; a process killed just then leaves the old folder, whole,
    under that hidden name. Never a mix of old and new files."""
    dest = Path(dest)
    tmp = temporary_name(dest)
    try:
        tmp.mkdir(parents=True)
    except OSError as error:  # a read-only or full disk: report dest, not the temporary
        note_destination(error, dest)
        raise
    try:
        yield tmp
        for folder, _, files in os.walk(tmp):
            for name in files:
                _fsync(Path(folder, name))
            _fsync_folder(Path(folder))
        _replace_folder(tmp, dest)
    except BaseException as error:
        _remove(tmp)
        note_destination(error, dest)
        raise


def _replace_folder(new: Path, dest: Path) -> None:
    old = None
    if dest.exists() or dest.is_symlink():
        old = temporary_name(dest, ASIDE_MARK)
        os.rename(dest, old)
    try:
        os.rename(new, dest)
    except BaseException:
        if old is not None:
            os.rename(old, dest)  # the old folder back under its name
        raise
    _fsync_folder(dest.parent)
    if old is not None:
        _remove(old)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable; some file systems cannot fsync a folder, and then it is skipped."""
    with contextlib.suppress(OSError):
        _fsync(folder)


def _remove(path: Path) -> None:
    """Best effort, as the writer's own error goes on: on a read-only file system even unlinking a file that was
    never made fails (EROFS), and that error must not replace the one that says why."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


# ----------------------------------------------------------------------------- the package's writers
# Each returns ``path`` as a Path and writes exactly what the plain call would.


def write_text(path, text: str, encoding: str | None = None) -> Path:
    """As ``Path.write_text`` (same default encoding, no newline translation on POSIX)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding=encoding) as stream:
        stream.write(text)
    return Path(path)


def write_bytes(path, data: bytes) -> Path:
    with atomic_path(path) as tmp, open(tmp, "wb") as stream:
        stream.write(data)
    return Path(path)


def write_json(path, payload, *, end: str = "", encoding: str | None = None, **dumps_options) -> Path:
    """``json.dumps(payload, **dumps_options) + end``: the caller gives indent, ensure_ascii, ... as before."""
    return write_text(path, json.dumps(payload, **dumps_options) + end, encoding=encoding)


def write_csv(frame, path, **to_csv_options) -> Path:
    """``frame.to_csv(path, **to_csv_options)`` for a pandas DataFrame or Series."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, **to_csv_options)
    return Path(path)


def save_figure(figure, path, **savefig_options) -> Path:
    """``figure.savefig(path, ...)``: the format comes from the suffix, which the temporary keeps."""
    with atomic_path(path) as tmp:
        figure.savefig(tmp, **savefig_options)
    return Path(path)


class _PythonWrites:
    """A file's ``write`` alone. np.save writes a real file with C's fwrite, which reports a full disk only as
    "N requested and M written"; through Python's write the OSError says which (ENOSPC, EDQUOT, EFBIG)."""

    def __init__(self, stream):
        self.write = stream.write


def save_numpy(path, array, **save_options) -> Path:
    """``np.save`` to exactly ``path``: given a file object, np.save adds no ".npy" to the name."""
    import numpy as np

    with atomic_path(path) as tmp, open(tmp, "wb") as stream:
        np.save(_PythonWrites(stream), array, **save_options)
    return Path(path)


def save_torch(obj, path, **save_options) -> Path:
    """``torch.save`` to ``path``. Given a file object: given a name, torch's zip format would name its
    records after the file, the temporary's random name."""
    import torch

    with atomic_path(path) as tmp, open(tmp, "wb") as stream:
        torch.save(obj, stream, **save_options)
    return Path(path)


def save_safetensors(tensors: dict, path, metadata: dict | None = None) -> Path:
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata=metadata)
    return Path(path)


@contextlib.contextmanager
def tar_writer(path, mode: str = "w:gz") -> Iterator:
    """``tarfile.open(path, mode)`` to write an archive. tarfile gets the open temporary and ``path`` as the
    name: gzip records the file's name in its header, and it must be ``path``'s, not the temporary's."""
    import tarfile

    with atomic_path(path) as tmp, open(tmp, "wb") as stream, tarfile.open(path, mode, fileobj=stream) as archive:
        yield archive


def copy_file(source, path) -> Path:
    """``shutil.copyfile(source, path)``: the bytes, not the permissions or times."""
    with atomic_path(path) as tmp:
        shutil.copyfile(source, tmp)
    return Path(path)
