"""Warm start for local runs: jobs fork from one Python that has already imported torch and transformers.

On 2 CPU cores a job of the demo spends about 6 s starting Python and importing torch,
transformers and the package, and often less than that on its work. With ``warm_start: true`` in
the config (the demo sets it), the first job starts a server (``python -m headprune.warm``) that
imports them once and then waits on a Unix socket under ``.snakemake/`` (the first job itself runs in its
own process meanwhile, and jobs that come before the server listens wait for it). Every later job's script
calls ``start(snakemake)`` before its own imports: it hands its stdin/stdout/stderr, working
directory and environment to the server, which forks a child that runs the same Snakemake script
file from the top (the child's ``start`` returns at once), and the job's process waits for the
child's exit code and exits with it. A job's outputs, log and exit code are the same either way:
only the imports are shared, copied on write by fork.

It is off unless the config asks for it, and off inside cluster jobs (``SLURM_JOB_ID``: each runs
on its own node) and on a GPU device (CUDA must not be initialised before a fork; the server never
touches it, but a job's device is the job's business). If the server cannot be reached the job
simply runs as usual. The server exits after ``IDLE_SECONDS`` without a job; its socket name
carries a digest of the Python executable and of the package's files, so an edited package gets
a fresh server.

Who may connect: the server runs any script a peer names, as the server's owner, so only its owner may
reach it. Its folder (``.snakemake/warm``) is the owner's alone (0700; one owned by another user, a link,
or one that others may write in is refused, and the job runs without the warm start), the socket is
bound under umask 0177 (0600 from the first moment), the server refuses a peer whose SO_PEERCRED uid
is not its own, and a job hands its streams and environment only to a server of its own uid. The folder
is opened once and used through its descriptor, so a folder swapped for another after the check is
never used.
"""
from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import json
import logging
import os
import runpy
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

IDLE_SECONDS = float(os.environ.get("HEADPRUNE_WARM_IDLE", 60))
CONNECT_SECONDS = float(os.environ.get("HEADPRUNE_WARM_CONNECT", 120))  # its imports take ~10 s, longer when busy
PRELOAD = ("numpy", "pandas", "torch", "transformers", "matplotlib.figure", "matplotlib.backends.backend_agg",
           "headprune.workflow", "headprune.models.loading", "headprune.models.heads", "headprune.models.prune",
           "headprune.training.finetune", "headprune.training.train", "headprune.models.prenorm",
           "headprune.scoring.importance", "headprune.analyses.criteria", "headprune.scoring.concrete",
           "headprune.scoring.roles", "headprune.evaluation.runs", "headprune.evaluation.evaluate",
           "headprune.evaluation.stats", "headprune.report.figures", "headprune.data.batching",
           "headprune.data.bpe", "headprune.evaluation.beam_search", "headprune.evaluation.shared_layers",
           "headprune.evaluation.perplexity",
           # what a job's first model load imports (0.1-0.3 s of a 0.5 s ablation job on the demo; FSMT's model
           # code comes with headprune.models.families, in serve, M2M100's with headprune.models.prenorm, BERT's,
           # which no family file imports since the generic encoder adapter serves it, here):
           "transformers.models.auto.tokenization_auto", "transformers.tokenization_utils_tokenizers",
           "transformers.modeling_layers", "transformers.models.bert.tokenization_bert", "transformers.models.align",
           "transformers.models.bert.modeling_bert",
           # what every job's Snakemake preamble imports (0.05-0.15 s), what a figure's PDF and a BLEU
           # significance test import (0.3 s: fontTools; 1.2 s: compare_mt pulls in nltk)
           "snakemake.script", "matplotlib.backends.backend_pdf", "compare_mt.scorers",
           # what the package imports only where it is used (a cold job needs none of them to evaluate a
           # classifier): BLEU, p-values, the fairseq checkpoint reader
           "sacrebleu", "sacremoses", "scipy.stats", "headprune.models.fairseq",
           # a study scored by an lm-evaluation-harness task (kind lm_eval): lm-eval, its task machinery and
           # datasets take seconds to import
           "headprune.evaluation.lm_tasks", "lm_eval.api.task", "lm_eval.tasks", "lm_eval.evaluator_utils",
           "lm_eval.models.huggingface", "datasets")

_in_child = False  # set in a forked child: its start() must let the script run
CHILD_ENV = "HEADPRUNE_WARM_CHILD"  # and in its environment, for anything it starts


FOLDER = Path(".snakemake") / "warm"


class UnsafeFolder(OSError):
    """The socket's folder is not its owner's alone: the warm start is refused, the job runs as usual."""


def enabled(snakemake) -> bool:
    config = getattr(snakemake, "config", {}) or {}
    # SO_PEERCRED (Linux) is how the server knows who connected: without it there is no warm start.
    return (bool(config.get("warm_start")) and str(config.get("device", "cpu")) == "cpu"
            and "SLURM_JOB_ID" not in os.environ and hasattr(socket, "send_fds") and hasattr(socket, "SO_PEERCRED"))


def start(snakemake):
    """Run this job in a child of the warm server and exit with its code; return at once where the job
    should run here (in the child itself, or when warm start is off or the server unreachable)."""
    if _in_child or os.environ.get(CHILD_ENV) or not enabled(snakemake):
        return
    try:
        folder = open_private_folder(FOLDER)
    except OSError as error:
        print(f"headprune.warm: {error}; running the job without the warm start", file=sys.stderr)
        return
    try:
        conn = _connect(folder, f"{_package_digest()}.sock")
    except OSError as error:
        print(f"headprune.warm: no warm server ({error}); running the job here", file=sys.stderr)
        return
    finally:
        os.close(folder)
    if conn is None:  # this job started the server: it runs here meanwhile, the next ones in the server
        return
    with conn:
        socket.send_fds(conn, [b"job"], [0, 1, 2])
        payload = json.dumps({"script": os.path.abspath(sys.argv[0]), "argv": sys.argv, "cwd": os.getcwd(),
                              "env": dict(os.environ), "client": os.getpid()}).encode()
        conn.sendall(struct.pack("!I", len(payload)) + payload)
        status = _read_exactly(conn, 4)
    if len(status) < 4:
        print("headprune.warm: the job's process died without an exit code", file=sys.stderr)
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(struct.unpack("!i", status)[0])


def _package_digest() -> str:
    digest = hashlib.sha256(sys.executable.encode())
    for path in sorted(Path(__file__).resolve().parent.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    return digest.hexdigest()[:16]


def open_private_folder(path: Path) -> int:
    """A descriptor of ``path``, a folder only its owner may use, made 0700 where it is missing.

    Refused (UnsafeFolder): a link, a folder owned by another user, or one that group or others may write
    in (they could have put a socket or a link in it). One that others may only read or search, as an
    earlier version made it, is narrowed to 0700: nobody but its owner can have written in it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)  # the umask can only narrow it
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise UnsafeFolder(error.errno, f"{path} is not a folder of its own (a link or a file)", str(path)) from None
    info = os.fstat(fd)
    problem = None
    if info.st_uid != os.getuid():
        problem = f"{path} is owned by uid {info.st_uid}, not by you (uid {os.getuid()})"
    elif info.st_mode & 0o022:
        problem = (f"{path} may be written by others (mode {info.st_mode & 0o777:04o}); remove it, or make it "
                   f"yours alone with chmod 700 after checking what is in it")
    if problem:
        os.close(fd)
        raise UnsafeFolder(1, problem + ": the warm start runs scripts for whoever reaches its socket", str(path))
    if info.st_mode & 0o077:
        os.fchmod(fd, 0o700)
    return fd


def _in_folder(folder: int, name: str) -> str:
    # The folder as opened and checked, whatever its path names now; short, too (a Unix socket's path
    # is limited to ~100 bytes).
    return f"/proc/self/fd/{folder}/{name}"


def _peer(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end, as the kernel saw it connect."""
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))


def _try_connect(folder: int, name: str) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_in_folder(folder, name))
        server_uid = _peer(conn)[1]
        if server_uid != os.getuid():  # a job's streams and environment go to its own user only
            raise PermissionError(f"the server on {FOLDER / name} runs as uid {server_uid}, not as you")
    except OSError:
        conn.close()
        raise
    return conn


def _connect(folder: int, name: str) -> socket.socket | None:
    """Connect to the server; or start it, if no one has, and return None: the starter's job runs in its own
    process rather than wait for the server's imports (on 2 cores the other core would sit idle for them).

    One starter at a time, by a file lock: the starter hands its lock to the server, which lets go of it once
    it listens, so the jobs that come meanwhile wait on the lock and then connect. A server that dies before
    it listens lets go of the lock too (its descriptors close), and the next job starts another."""
    with contextlib.suppress(OSError):
        return _try_connect(folder, name)
    stem = name.removesuffix(".sock")
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    lock = os.open(f"{stem}.lock", flags, 0o600, dir_fd=folder)
    try:
        deadline = time.monotonic() + CONNECT_SECONDS
        while True:  # a server that hangs in its imports must not hold every later job
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the warm server starting on {FOLDER / name} did not listen within "
                                       f"{CONNECT_SECONDS} s") from None
                time.sleep(0.05)
        with contextlib.suppress(OSError):
            return _try_connect(folder, name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=folder)  # a server that is gone left its socket
        log = os.open(f"{stem}.log", flags | os.O_APPEND, 0o600, dir_fd=folder)
        try:
            subprocess.Popen([sys.executable, "-m", "headprune.warm", str(FOLDER), name, str(lock)],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                             cwd=os.getcwd(), pass_fds=(lock,))
        finally:
            os.close(log)
        return None
    finally:
        os.close(lock)  # the server holds the lock now, until it listens


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _first_ops():
    """Run the operations a model job runs, once, on small tensors: a process's first call of each pays
    one-off set-up (kernel dispatch, the BLAS library's buffers), which the forked jobs then inherit. On one
    thread: an OpenMP thread team started here does not exist in a forked child, which then hangs in its
    first parallel operation (a job that sets no thread count hung in layer_norm)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with contextlib.suppress(Exception), torch.no_grad():
        x = torch.randn(64, 16, 32)
        w = torch.randn(32, 32)
        h = torch.nn.functional.layer_norm(torch.nn.functional.gelu(torch.nn.functional.linear(x, w)), (32,))
        scores = torch.softmax(torch.matmul(h, h.transpose(1, 2)), -1)
        logits = torch.log_softmax(torch.bmm(scores, h).flatten(0, 1) @ w, -1)
        torch.nn.functional.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long))
        torch.topk(logits, 4)
        torch.nn.functional.embedding(torch.arange(8), w)
    torch.set_num_threads(threads)  # starts no thread: a team starts at the first parallel region


def serve(folder_path: str, name: str, idle: float = IDLE_SECONDS, lock: int | None = None):
    """Import the heavy modules once, then fork a child per job of this user until ``idle`` seconds pass
    without one. ``lock``: the starter's lock, let go of once the socket listens (``_connect``)."""
    import importlib

    folder = open_private_folder(Path(folder_path))
    for module in PRELOAD:
        with contextlib.suppress(ImportError):  # another transformers version may lay its modules out otherwise
            importlib.import_module(module)
    from headprune.models.families import families

    families()  # every family's adapter (and FSMT's model code): a job's first adapter lookup imports them
    _first_ops()
    with contextlib.suppress(Exception):  # an optimization only: transformers builds this table (900 regular
        # expressions, 0.2 s) on a process's first from_pretrained and caches it; build it here, once for all jobs
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping

        get_checkpoint_conversion_mapping("bert")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    # Every object the imports made goes to the collector's permanent generation: a forked job's collections
    # then scan only its own objects. Otherwise each full collection in each job walked the half million
    # objects of torch and transformers, and writing their headers copied their memory pages into the job
    # (copy on write): a third of a small job's CPU time.
    gc.freeze()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)  # the socket is 0600 from its first moment: no window between bind and chmod
    try:
        server.bind(_in_folder(folder, name))
    finally:
        os.umask(umask)
    server.listen(64)
    server.settimeout(idle)
    print(f"warm server {os.getpid()} ready on {Path(folder_path) / name}", flush=True)
    if lock is not None:
        os.close(lock)  # the jobs waiting on it connect now
    try:
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                break
            pid, uid, _ = _peer(conn)
            if uid != os.getuid():
                print(f"refused a job from uid {uid} (pid {pid}): only uid {os.getuid()}, the server's own, "
                      f"may run jobs here", flush=True)
                conn.close()
                continue
            if os.fork() == 0:
                server.close()
                _run_child(conn)  # never returns
            conn.close()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=folder)


def _run_child(conn: socket.socket):
    global _in_child
    _in_child = True
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the job may start subprocesses and wait for them
    code = 1
    try:
        _, fds, _, _ = socket.recv_fds(conn, 16, 3)
        size = struct.unpack("!I", _read_exactly(conn, 4))[0]
        job = json.loads(_read_exactly(conn, size))
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        os.setsid()
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        os.environ[CHILD_ENV] = "1"
        sys.argv = list(job["argv"])
        _exit_with_client(job["client"])
        try:
            runpy.run_path(job["script"], run_name="__main__")
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        with contextlib.suppress(BaseException):
            logging.shutdown()  # what a normal exit does (os._exit below skips atexit)
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            conn.sendall(struct.pack("!i", code))
        os._exit(code)


def _exit_with_client(client: int):
    """A job whose process Snakemake killed (Ctrl-C, a failed sibling) stops too."""
    def watch():
        while True:
            time.sleep(1)
            try:
                os.kill(client, 0)
            except ProcessLookupError:
                os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    # Serve from the module as the jobs import it (headprune.warm, not __main__), so that a child's
    # start() sees the flag _run_child sets.
    from headprune import warm

    warm.serve(sys.argv[1], sys.argv[2], lock=int(sys.argv[3]) if len(sys.argv) > 3 else None)
