"""Failures of the machine, not of the input (issue #33): a full disk, a read-only folder, a folder without write
permission. The ``headprune`` command and a pipeline job (a script of scripts/ under Snakemake, through
headprune.workflow.logged) each say it in one line naming the path, exit non-zero without a traceback, and leave
nothing half-written (headprune.io.machine_failures; the writes are headprune.io.atomic's).

The disks are real: a 64 kB tmpfs, a tmpfs mounted read-only (root, who may mount, ignores file modes), and a
folder of mode 555 written by a child that keeps root's uid but not its power to override file modes (setpriv);
each skips where it cannot be had."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from headprune.io import atomic
from headprune.io.machine_failures import MachineFailure, machine_failure

ROOT = Path(__file__).resolve().parents[1]
TEXT = "the cat sat on the mat and the dog sat on the log . " * 30
NO_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]  # root, bound by modes


# --- finding the failure in an exception --------------------------------------------------------------------------

class RustError(Exception):
    """As safetensors raises it: no errno, the OS error's number in the message."""


def test_a_machine_failure_is_found_with_its_path_wherever_the_writer_raised_it(tmp_path):
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert machine_failure(full) == MachineFailure(errno.ENOSPC, None, writing=False)
    assert str(machine_failure(full)).startswith("cannot write (the path was not reported): No space left on device")
    rust = RustError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert machine_failure(rust).code == errno.ENOSPC
    try:  # raised while handling one: the context
        try:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), "/data/out.csv")
        except OSError:
            raise ValueError("could not save") from None
    except ValueError as error:
        assert machine_failure(error) is None  # `from None`: the user said it is not the cause
    try:
        try:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), "/data/out.csv")
        except OSError as error:
            raise RuntimeError("could not save") from error
    except RuntimeError as error:
        assert str(machine_failure(error)) == ("cannot write /data/out.csv: Read-only file system (EROFS): the file "
                                               "system is mounted read-only: write elsewhere")
    # a permission may be a read's: "access" unless an atomic writer says it was writing
    assert str(machine_failure(PermissionError(errno.EACCES, "Permission denied", "/data/in.txt"))).startswith(
        "cannot access /data/in.txt: Permission denied (EACCES)")
    for error in (ValueError("bad value"), OSError(errno.ENOENT, "No such file or directory", "x"),
                  RustError("I/O error: Broken pipe (os error 32)"), KeyboardInterrupt()):
        assert machine_failure(error) is None


def test_nested_atomic_writers_report_the_path_the_caller_named(tmp_path):
    """A file written inside a folder being made: the folder is reported, not a temporary's name."""
    with pytest.raises(RustError) as raised:
        with atomic.atomic_dir(tmp_path / "model") as staging, atomic.atomic_path(staging / "weights.bin"):
            raise RustError("I/O error: Disk quota exceeded (os error 122)")
    assert str(machine_failure(raised.value)).startswith(f"cannot write {tmp_path / 'model'}: Disk quota exceeded "
                                                         "(EDQUOT)")
    assert list(tmp_path.iterdir()) == []


# --- real disks ---------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def tmpfs(folder: Path, *options: str):
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(["size=64k", *options]), "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture(params=["full disk", "read-only", "no permission"])
def place(request, tmp_path):
    """(a folder that cannot take the outputs, the command prefix that writes there, the error expected)."""
    if request.param == "full disk":
        with tmpfs(tmp_path / "disk") as folder:
            yield folder, [], errno.ENOSPC
    elif request.param == "read-only":
        with tmpfs(tmp_path / "disk", "ro") as folder:
            yield folder, [], errno.EROFS
    else:
        folder = tmp_path / "locked"
        folder.mkdir()
        if shutil.which("setpriv") is None or subprocess.run(
                [*NO_OVERRIDE, sys.executable, "-c", ""], capture_output=True).returncode != 0:
            pytest.skip("setpriv cannot drop the power to override file modes here")
        folder.chmod(0o555)
        try:
            yield folder, NO_OVERRIDE, errno.EACCES
        finally:
            with contextlib.suppress(FileNotFoundError):  # Snakemake removes a failed job's empty output folder
                folder.chmod(0o755)


def the_line(code: int, path: Path) -> str:
    return f"cannot write {path}: {os.strerror(code)} ({errno.errorcode[code]}): "


def contents(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    """A tiny Llama (300 kB of weights: more than the full disk holds) and a text to prune it on."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("models") / "tiny-llama"
    words = sorted(set(TEXT.split()))
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<unk>", *words])}, "<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>").save_pretrained(folder)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=len(words) + 1, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2)).save_pretrained(folder)
    (folder.parent / "corpus.txt").write_text(TEXT)
    return folder


def test_the_command_says_a_failure_of_the_machine_in_one_line(llama, place):
    folder, prefix, code = place
    out = folder / "pruned"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"}
    result = subprocess.run([*prefix, sys.executable, "-m", "headprune.cli", "prune", str(llama), "--data",
                             str(llama.parent / "corpus.txt"), "--window", "16", "--heads", "0-1", "--out", str(out)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("headprune: error: " + the_line(code, out)), result.stderr[-3000:]
    assert contents(folder) == []  # nothing half-written, no temporary left


def concat_inputs(work: Path) -> list[Path]:
    """Two CSVs of 60 kB each: their concatenation is more than the full disk holds."""
    work.mkdir(exist_ok=True)
    rows = "".join(f"{i},{i * 0.5}\n" for i in range(6000))
    for name in ("a.csv", "b.csv"):
        (work / name).write_text("x,y\n" + rows)
    return [work / "a.csv", work / "b.csv"]


# A job as Snakemake's script directive runs it: the script file with a ``snakemake`` object in its globals
JOB = """
import runpy, sys, types
*inputs, output, log, script = sys.argv[1:]
snakemake = types.SimpleNamespace(input=inputs, output=[output], log=[log], rule="concat", config={}, params={},
                                  wildcards={}, threads=1)
runpy.run_path(script, init_globals={"snakemake": snakemake}, run_name="__main__")
"""


def test_a_job_says_a_failure_of_the_machine_in_one_line(tmp_path, place):
    """scripts/concat_tables.py with its output on the place: exit status 1, its stderr's one line names the output,
    its log has that line and no traceback, and the place is left as it was."""
    folder, prefix, code = place
    inputs, out, log = concat_inputs(tmp_path / "work"), folder / "table.csv", tmp_path / "work" / "concat.log"
    result = subprocess.run([*prefix, sys.executable, "-c", JOB, *map(str, [*inputs, out, log]),
                             str(ROOT / "scripts" / "concat_tables.py")], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    line = f"rule concat failed: {the_line(code, out)}"
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith(line), result.stderr[-3000:]
    assert "Traceback" not in log.read_text() and line in log.read_text(), log.read_text()
    assert contents(folder) == []


SNAKEFILE = """
rule concat:
    input: ["a.csv", "b.csv"]
    output: "{out}"
    log: "logs/concat.log"
    script: "{script}"
"""


def test_snakemake_shows_the_jobs_line_when_the_disk_is_full(tmp_path):
    """The same job run by Snakemake: its output shows the job's line. (A read-only output folder stops Snakemake
    itself before the job starts: it removes an old output first, and on a read-only file system even removing a
    file that is not there fails, in Snakemake's own traceback.)"""
    work = tmp_path / "work"
    concat_inputs(work)
    with tmpfs(tmp_path / "disk") as folder:
        out = folder / "table.csv"
        (work / "Snakefile").write_text(textwrap.dedent(SNAKEFILE).format(
            out=out, script=ROOT / "scripts" / "concat_tables.py"))
        result = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--directory", str(work)],
                                capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                cwd=work, timeout=600)
        line = f"rule concat failed: {the_line(errno.ENOSPC, out)}"
        assert result.returncode != 0
        assert any(text.startswith(line) for text in result.stderr.splitlines()), result.stderr[-3000:]
        assert line in (work / "logs" / "concat.log").read_text()
        assert contents(folder) == []
