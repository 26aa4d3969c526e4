"""Outputs are written atomically (issue #25, headprune.io.atomic): a writer that fails at any moment (an
error mid-write, a full disk, a file-size limit) leaves the old file, or none, and no temporary behind; a
model folder is the old one whole or the new one whole. The last tests scan the package and the scripts
for a write that bypasses the helper."""
from __future__ import annotations

import ast
import errno
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headprune.io import atomic

REPO = Path(__file__).resolve().parents[1]


class Unprintable:
    """A cell whose text cannot be made: to_csv raises when it reaches it, after writing the rows before."""

    def __str__(self):
        raise RuntimeError("this cell cannot be written")

    __repr__ = __str__


def big_frame_failing_at_the_end(rows: int = 5000) -> pd.DataFrame:
    return pd.DataFrame({"text": [f"row {i} " + "x" * 50 for i in range(rows)] + [Unprintable()]})


def names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


# ----------------------------------------------------------------------------- an error mid-write


def test_a_plain_to_csv_that_fails_leaves_a_partial_file(tmp_path):
    """Why the helper exists: pandas has written most of the rows when the error comes."""
    with pytest.raises(RuntimeError):
        big_frame_failing_at_the_end().to_csv(tmp_path / "table.csv", index=False)
    assert (tmp_path / "table.csv").stat().st_size > 100_000


@pytest.mark.parametrize("old", [None, "the old table\n"])
def test_a_csv_that_fails_mid_write_leaves_the_old_file_or_none(tmp_path, old):
    dest = tmp_path / "table.csv"
    if old is not None:
        dest.write_text(old)
    with pytest.raises(RuntimeError, match="cannot be written"):
        atomic.write_csv(big_frame_failing_at_the_end(), dest, index=False)
    assert names(tmp_path) == ([] if old is None else ["table.csv"])
    if old is not None:
        assert dest.read_text() == old


@pytest.mark.parametrize("error", [OSError(errno.EIO, "I/O error"), KeyboardInterrupt(), SystemExit(1)])
def test_any_exception_in_the_block_removes_the_temporary(tmp_path, error):
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"old")
    with pytest.raises(type(error)):
        with atomic.atomic_path(dest) as tmp:
            assert tmp.parent == dest.parent and tmp.name.startswith(".out.bin.tmp-") and tmp.suffix == ".bin"
            with open(tmp, "wb") as stream:
                stream.write(b"new, half written")
            raise error
    assert names(tmp_path) == ["out.bin"] and dest.read_bytes() == b"old"


def test_a_writer_that_wrote_nowhere_fails_and_leaves_the_old_file(tmp_path):
    dest = tmp_path / "out.txt"
    dest.write_text("old")
    with pytest.raises(FileNotFoundError):
        with atomic.atomic_path(dest):
            pass
    assert names(tmp_path) == ["out.txt"] and dest.read_text() == "old"


def test_a_successful_write_replaces_the_old_file(tmp_path):
    dest = tmp_path / "out.json"
    dest.write_text("old")
    assert atomic.write_json(dest, {"a": [1, "é"]}, indent=1, ensure_ascii=False, end="\n", encoding="utf-8") == dest
    assert dest.read_text(encoding="utf-8") == json.dumps({"a": [1, "é"]}, indent=1, ensure_ascii=False) + "\n"
    assert names(tmp_path) == ["out.json"] and atomic.leftovers(tmp_path) == []


# ----------------------------------------------------------------------------- the same bytes as the plain calls


def test_the_writers_write_the_bytes_of_the_plain_calls(tmp_path):
    import torch
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    plain, atomic_ = tmp_path / "plain", tmp_path / "atomic"
    plain.mkdir()
    atomic_.mkdir()
    frame = pd.DataFrame({"a": [1.5, 2.0], "b": ["x", "y,z"]})
    frame.to_csv(plain / "t.csv", index=False)
    atomic.write_csv(frame, atomic_ / "t.csv", index=False)
    figure = Figure(figsize=(2, 2))
    FigureCanvasAgg(figure)
    figure.subplots().plot([0, 1], [1, 0], label="line")
    for name, metadata in (("f.png", None), ("f.pdf", {"CreationDate": None})):
        figure.savefig(plain / name, dpi=50, metadata=metadata)
        atomic.save_figure(figure, atomic_ / name, dpi=50, metadata=metadata)
    ids = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.save(plain / "w.npy", ids)
    atomic.save_numpy(atomic_ / "w.npy", ids)
    atomic.save_numpy(atomic_ / "no-suffix", ids)  # np.save would have written no-suffix.npy
    checkpoint = {"model": {"w": torch.arange(6.0)}, "args": {"n": 1}}
    torch.save(checkpoint, plain / "model.pt", _use_new_zipfile_serialization=False)
    atomic.save_torch(checkpoint, atomic_ / "model.pt", _use_new_zipfile_serialization=False)
    from safetensors.torch import save_file

    save_file({"w": torch.arange(6.0)}, plain / "model.safetensors", metadata={"format": "pt"})
    atomic.save_safetensors({"w": torch.arange(6.0)}, atomic_ / "model.safetensors", metadata={"format": "pt"})
    shutil.copyfile(plain / "t.csv", plain / "copy")
    atomic.copy_file(plain / "t.csv", atomic_ / "copy")
    (plain / "t.md").write_text("| a |\n|---|\nété\n")
    atomic.write_text(atomic_ / "t.md", "| a |\n|---|\nété\n")
    for name in ("t.csv", "f.png", "f.pdf", "w.npy", "model.pt", "model.safetensors", "copy", "t.md"):
        assert (atomic_ / name).read_bytes() == (plain / name).read_bytes(), name
    assert (atomic_ / "no-suffix").read_bytes() == (plain / "w.npy").read_bytes()
    # torch's zip format names its records after the file given: the temporary's name must not show.
    atomic.save_torch(checkpoint, atomic_ / "zipped.pt")
    assert b".tmp-" not in (atomic_ / "zipped.pt").read_bytes()
    assert torch.equal(torch.load(atomic_ / "zipped.pt")["model"]["w"], torch.arange(6.0))
    assert atomic.leftovers(atomic_) == []


def test_a_gzipped_tarball_records_its_own_name_not_the_temporary(tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.txt").write_text("a")
    with atomic.tar_writer(tmp_path / "model.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "folder", arcname="folder")
    header = (tmp_path / "model.tar.gz").read_bytes()[:64]
    assert b"model.tar\x00" in header and b".tmp-" not in header
    with tarfile.open(tmp_path / "model.tar.gz") as archive:
        assert archive.getnames() == ["folder", "folder/a.txt"]


# ----------------------------------------------------------------------------- folders


def old_model_folder(path: Path) -> dict[str, bytes]:
    files = {"config.json": b'{"old": true}\n', "model.safetensors": b"old weights" * 100, "stale.txt": b"old only"}
    path.mkdir(parents=True)
    for name, data in files.items():
        (path / name).write_bytes(data)
    return files


def folder_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in path.iterdir()}


def test_a_folder_that_fails_while_filled_leaves_the_old_folder_whole(tmp_path):
    old = old_model_folder(tmp_path / "model")
    with pytest.raises(RuntimeError):
        with atomic.atomic_dir(tmp_path / "model") as staging:
            (staging / "config.json").write_text('{"new": true}\n')
            raise RuntimeError("killed while writing the weights")
    assert folder_files(tmp_path / "model") == old
    assert names(tmp_path) == ["model"]


def test_a_folder_written_whole_replaces_the_old_one_whole(tmp_path):
    old_model_folder(tmp_path / "model")
    with atomic.atomic_dir(tmp_path / "model") as staging:
        assert not (tmp_path / "model" / "new.txt").exists()
        (staging / "config.json").write_text('{"new": true}\n')
        (staging / "new.txt").write_text("new")
    assert folder_files(tmp_path / "model") == {"config.json": b'{"new": true}\n', "new.txt": b"new"}
    assert names(tmp_path) == ["model"]


def test_a_failed_rename_puts_the_old_folder_back(tmp_path, monkeypatch):
    """The one moment without a folder under the name: the old one is aside, the new one not yet in."""
    old = old_model_folder(tmp_path / "model")
    rename = os.rename

    def failing_second_rename(source, dest):
        if ".tmp-" in Path(source).name:
            raise OSError(errno.EIO, "the new folder could not be renamed")
        rename(source, dest)

    monkeypatch.setattr(atomic.os, "rename", failing_second_rename)
    with pytest.raises(OSError, match="could not be renamed"):
        with atomic.atomic_dir(tmp_path / "model") as staging:
            (staging / "config.json").write_text("{}")
    monkeypatch.undo()
    assert folder_files(tmp_path / "model") == old and names(tmp_path) == ["model"]


def test_a_saved_model_folder_replaces_the_old_one_whole(tmp_path):
    """The package's own writer of model folders (save_pruned), over an older folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from headprune.models.export import save_pruned

    old_model_folder(tmp_path / "pruned")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    save_pruned(model, None, tmp_path / "pruned")
    save_pruned(model, None, tmp_path / "fresh")
    assert "model.safetensors" in names(tmp_path / "pruned")
    fresh = folder_files(tmp_path / "fresh")  # the model card names the folder it is in
    fresh["README.md"] = fresh["README.md"].replace(b"fresh", b"pruned")
    assert folder_files(tmp_path / "pruned") == fresh  # nothing of the old one left
    assert names(tmp_path) == ["fresh", "pruned"]


def test_a_fetched_model_tarball_replaces_the_old_folder_with_its_top_level_folder(tmp_path):
    from headprune.models.loading import fetch_pretrained

    (tmp_path / "src" / "bert-tiny").mkdir(parents=True)
    (tmp_path / "src" / "bert-tiny" / "model.safetensors").write_bytes(b"new weights")
    (tmp_path / "src" / "bert-tiny" / "bert-tiny").write_text("a file named as its folder")
    with tarfile.open(tmp_path / "bert-tiny.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "src" / "bert-tiny", arcname="bert-tiny")
    old_model_folder(tmp_path / "data" / "bert")
    assert fetch_pretrained({"url": str(tmp_path / "bert-tiny.tar.gz")}, tmp_path / "data" / "bert") == \
        tmp_path / "data" / "bert"
    assert folder_files(tmp_path / "data" / "bert") == {"model.safetensors": b"new weights",
                                                        "bert-tiny": b"a file named as its folder"}
    assert names(tmp_path / "data") == ["bert", "bert.tar.gz"]


def test_a_corpus_whose_second_split_fails_leaves_no_folder(tmp_path):
    from headprune.data.wikitext import prepare_corpus

    (tmp_path / "train.txt").write_text("the train text\n")
    spec = {"files": {"train": {"url": str(tmp_path / "train.txt")}, "test": {"url": str(tmp_path / "missing.txt")}}}
    with pytest.raises(Exception, match="missing.txt"):
        prepare_corpus(spec, tmp_path / "raw", tmp_path / "corpus")
    assert not (tmp_path / "corpus").exists() and atomic.leftovers(tmp_path) == []
    spec["files"]["test"]["url"] = str(tmp_path / "train.txt")
    assert prepare_corpus(spec, tmp_path / "raw", tmp_path / "corpus") == {"train": 15, "test": 15}
    assert names(tmp_path / "corpus") == ["test.txt", "train.txt"]


# ----------------------------------------------------------------------------- out of disk

# Run in a child process: it builds what it will write, then limits the size of any file it writes
# (RLIMIT_FSIZE, SIGXFSZ ignored: a write past the limit fails with EFBIG, as one on a full disk with ENOSPC)
# and writes each through the package's own functions. It prints, per case, the error it got (safetensors raises
# its own error, naming the system's).
CHILD = r"""
import json, resource, signal, sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from headprune.cli import write_csv
from headprune.report.figures import build_generic_lines, save_figure
from headprune.evaluation.perplexity import save_windows
from headprune.models.export import save_pruned
from headprune.workflow import write_json

out, limit = Path(sys.argv[1]), int(sys.argv[2])
frame = pd.DataFrame({"x": np.arange(20_000), "y": np.linspace(0, 1, 20_000)})
figure = build_generic_lines(frame.head(2_000), "x", "y")
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2))


class Tokenizer:  # save_windows tokenizes with it
    def __call__(self, text, return_attention_mask=False):
        return {"input_ids": list(range(len(text.split())))}


cases = {
    "table.csv": lambda: write_csv(frame, out / "table.csv"),
    "figure.png": lambda: save_figure(figure, out / "figure.png", out / "figure.pdf", {"dpi": 300}),
    "windows.npy": lambda: save_windows(Tokenizer(), "w " * 20_000, 16, out / "windows.npy"),
    "outputs.json": lambda: write_json(out / "outputs.json", {"items": list(range(20_000))}),
    "pruned": lambda: save_pruned(model, None, out / "pruned"),
}
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
errors = {}
for name, write in cases.items():
    try:
        write()
        errors[name] = None
    except Exception as error:
        errors[name] = f"{type(error).__name__}: {error}"
print(json.dumps(errors))
"""

OLD_FILES = {"table.csv": "old table\n", "figure.png": "old png", "figure.pdf": "old pdf", "windows.npy": "old npy",
             "outputs.json": "old json"}


def write_old_outputs(folder: Path) -> dict[str, bytes]:
    for name, text in OLD_FILES.items():
        (folder / name).write_text(text)
    old_model_folder(folder / "pruned")
    return snapshot(folder)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def run_child(folder: Path, limit: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(limit)], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def ran_out(error: str | None, code: int) -> bool:
    """The write failed for want of room: the system's error, or numpy's report of a short write."""
    return error is not None and (os.strerror(code) in error or "requested and" in error)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="RLIMIT_FSIZE: Linux")
def test_outputs_larger_than_the_file_size_limit_leave_the_old_files_whole(tmp_path):
    old = write_old_outputs(tmp_path)
    errors = run_child(tmp_path, 8192)
    assert list(errors) == ["table.csv", "figure.png", "windows.npy", "outputs.json", "pruned"]
    assert all(ran_out(error, errno.EFBIG) for error in errors.values()), errors
    assert snapshot(tmp_path) == old  # every old file as it was, nothing partial or temporary beside them
    assert atomic.leftovers(tmp_path) == atomic.leftovers(tmp_path / "pruned") == []


TMPFS_SIZE = 64 * 1024


@pytest.fixture
def small_disk(tmp_path):
    """A 64 kB tmpfs, where the system lets this user mount one (root, outside a locked-down container)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_outputs_on_a_full_disk_leave_the_old_files_whole(small_disk):
    """The same writes on a real file system that runs out of space (ENOSPC): a 64 kB tmpfs."""
    old = write_old_outputs(small_disk)
    errors = run_child(small_disk, 0)  # no file-size limit: the disk is the limit
    assert list(errors) == ["table.csv", "figure.png", "windows.npy", "outputs.json", "pruned"]
    assert all(ran_out(error, errno.ENOSPC) for error in errors.values()), errors
    assert snapshot(small_disk) == old
    assert atomic.leftovers(small_disk) == atomic.leftovers(small_disk / "pruned") == []


# ----------------------------------------------------------------------------- no write bypasses the helper

SOURCES = [REPO / "headprune", REPO / "scripts"]
EXCLUDED = [REPO / "headprune" / "models" / "portable",  # static modeling files copied into exported models: they
            # import only torch and transformers, and write nothing
            REPO / "headprune" / "io" / "atomic.py"]  # the helper itself

# (file, function) -> why it may write without the helper. Every entry must still match a write (checked).
ALLOWED = {
    ("headprune/io/download.py", "_copy_local_file"): "the .part file: fetch renames it once complete and verified",
    ("headprune/io/download.py", "_http_attempt"): "the .part file, appended to when a download resumes",
    ("headprune/io/download.py", "fetch"): "its download() fills the .part file",
    ("headprune/workflow.py", "logged"): "the rule's log file: not an output, and wanted as it grows",
    ("scripts/plot_dynamics.py", "<module>"): "the rule's log file",
    ("scripts/prepare_iwslt.py", "<module>"): "the rule's log file",
    ("headprune/warm.py", "_connect"): "the warm server's lock file and log",
    ("headprune/warm.py", "open_private_folder"): "opens the warm server's folder to check it (read only)",
    ("headprune/models/gpus.py", "_try_lock"): "a GPU's lock file",
    ("headprune/models/loading.py", "model_folder"): "into the hub cache, which huggingface_hub fills atomically "
                                                     "itself (.incomplete files, renamed)",
    ("headprune/models/fairseq/archives.py", "safe_extract"): "extracts into a folder its callers make atomic "
                                                              "(_extracted_model_folder, fetch_pretrained)",
}

# Calls that write a file, by the name of the method or function called.
WRITING_CALLS = {"to_csv", "to_json", "to_parquet", "to_pickle", "to_excel", "to_feather", "to_hdf", "savefig",
                 "save_pretrained", "save_model", "write_text", "write_bytes", "save", "savez", "savez_compressed",
                 "savetxt", "save_file", "dump", "copyfile", "copy2", "copytree", "extractall", "snapshot_download",
                 "download"}
SHUTIL_WRITING = {"copy", "move"}  # only as shutil.copy/shutil.move: frames and dicts have a .copy()
OPENERS = {"open", "ZipFile", "GzipFile", "BZ2File", "LZMAFile", "TarFile"}  # write when their mode says so
# Blocks inside which raw writes go to a temporary: the helper renames it (or the folder) into place.
ATOMIC_BLOCKS = {"atomic_path", "atomic_dir", "tar_writer"}


def _called_name(call: ast.Call) -> tuple[str | None, str]:
    """(receiver, name) of a call: (None, "open") for open(...), ("shutil", "copy") for shutil.copy(...)."""
    if isinstance(call.func, ast.Name):
        return None, call.func.id
    if isinstance(call.func, ast.Attribute):
        receiver = call.func.value
        return (receiver.id if isinstance(receiver, ast.Name) else "?"), call.func.attr
    return None, ""


def _opens_for_writing(call: ast.Call) -> bool:
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    positional = list(call.args)
    if positional and isinstance(positional[0], ast.Constant) and isinstance(positional[0].value, str) \
            and set(positional[0].value) <= set("rwaxbt+") and positional[0].value:
        positional.insert(0, None)  # Path.open("w"): the mode comes first
    mode = keywords.get("mode", positional[1] if len(positional) > 1 else None)
    if mode is None:
        return False  # reading
    if "fileobj" in keywords and not positional:
        return False  # writes into a stream opened elsewhere (and checked there)
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return bool(set(mode.value) & set("wax+"))
    return True  # a mode computed at run time: assume it writes


class _Writes(ast.NodeVisitor):
    def __init__(self, tree: ast.Module):
        self.scope, self.atomic_depth, self.found = ["<module>"], 0, []
        # The helper's own writers share names with the raw ones (write_text, ...): atomic.write_text(...), or
        # write_text(...) imported from headprune.io.atomic, is the helper.
        self.helpers = {alias.asname or alias.name for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) and node.module == "headprune.io.atomic"
                        for alias in node.names}
        self.visit(tree)

    def visit_FunctionDef(self, node):
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_With(self, node):
        atomic_block = any(isinstance(item.context_expr, ast.Call)
                           and _called_name(item.context_expr)[1] in ATOMIC_BLOCKS for item in node.items)
        self.atomic_depth += atomic_block
        self.generic_visit(node)
        self.atomic_depth -= atomic_block

    def visit_Call(self, node):
        receiver, name = _called_name(node)
        helper = receiver == "atomic" or (receiver is None and name in self.helpers)
        writes = not helper and (name in WRITING_CALLS or (receiver == "shutil" and name in SHUTIL_WRITING)
                                 or (name in OPENERS and _opens_for_writing(node)))
        if writes and not self.atomic_depth:
            self.found.append((node.lineno, self.scope[-1], ast.unparse(node)[:100]))
        self.generic_visit(node)


def raw_writes(root: Path = REPO) -> list[tuple[str, int, str, str]]:
    """(file, line, function, call) of every call that writes a file outside an atomic block."""
    found = []
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            if any(path == excluded or excluded in path.parents for excluded in EXCLUDED):
                continue
            visitor = _Writes(ast.parse(path.read_text(encoding="utf-8"), str(path)))
            found += [(path.relative_to(root).as_posix(), *write) for write in visitor.found]
    return found


def test_every_output_is_written_through_the_atomic_helper():
    unexplained = [f"{file}:{line} in {function}: {call}" for file, line, function, call in raw_writes()
                   if (file, function) not in ALLOWED]
    assert not unexplained, ("writes that bypass headprune.io.atomic (use its writers, or write inside "
                             "`with atomic_path(...)`/`atomic_dir(...)`):\n" + "\n".join(unexplained))


def test_the_allow_list_has_no_stale_entry():
    used = {(file, function) for file, _, function, _ in raw_writes()}
    assert set(ALLOWED) <= used, f"entries of ALLOWED that match no write any more: {set(ALLOWED) - used}"


def test_the_scan_finds_raw_writes_and_accepts_atomic_blocks():
    source = textwrap.dedent('''
        import shutil
        from headprune.io.atomic import atomic_path, write_text
        def bad(frame, figure, path, stream):
            frame.to_csv(path, index=False)
            figure.savefig(path)
            open(path, "w").write("x")
            Path(path).open("a")
            shutil.copy(path, path)
            model.save_pretrained(path)
        def good(frame, path, folder):
            frame = frame.copy()
            open(path).read()
            open(path, "rb")
            atomic.write_csv(frame, path, index=False)
            write_text(path, "x")
            with atomic_path(path) as tmp, open(tmp, "w") as out:
                out.write("x")
            with atomic.atomic_dir(folder) as staging:
                model.save_pretrained(staging)
            tarfile.open(fileobj=buffer, mode="w")
    ''')
    visitor = _Writes(ast.parse(source))
    assert [(function, call.split("(")[0]) for _, function, call in visitor.found] == [
        ("bad", "frame.to_csv"), ("bad", "figure.savefig"), ("bad", "open"), ("bad", "Path"), ("bad", "shutil.copy"),
        ("bad", "model.save_pretrained")]
