"""Safe extraction of a fairseq tarball, checked member by member before anything is extracted, and the
model folder of a path: the folder itself, or a tarball's extracted once, next to it, atomically."""

import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from headprune.io.atomic import write_text


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
