"""Warm start (headprune.warm): a job forked from a server that has imported torch runs as it would alone:
same outputs, exit code, stdout/stderr, working directory and environment; no job forks another."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

JOB = textwrap.dedent('''
    import os, sys, types
    snakemake = types.SimpleNamespace(config={"warm_start": %(warm)r, "device": %(device)r})
    from headprune import warm
    warm.start(snakemake)
    import torch  # preloaded in the server: in a warm child it is already there
    print("out", os.environ.get("JOB_TAG"), flush=True)
    print("err", os.getcwd(), file=sys.stderr, flush=True)
    open("result.txt", "w").write(f"{os.getpid()} {os.getppid()} {torch.ones(2).sum().item()} {sys.argv[1:]}")
    if os.environ.get("JOB_FAIL") == "exit":
        sys.exit(3)
    if os.environ.get("JOB_FAIL") == "raise":
        raise RuntimeError("boom")
''')


def run_job(workdir, warm=True, device="cpu", preexec=None, **env):
    script = workdir / "job.py"
    script.write_text(JOB % {"warm": warm, "device": device})
    environment = {key: value for key, value in os.environ.items() if key != "SLURM_JOB_ID"}
    environment.update(PYTHONPATH=str(ROOT), HEADPRUNE_WARM_IDLE="20", **env)
    return subprocess.run([sys.executable, str(script), "arg1"], cwd=workdir, env=environment, capture_output=True,
                          text=True, timeout=300, preexec_fn=preexec)


def server_pids(workdir):
    logs = list((workdir / ".snakemake" / "warm").glob("*.log"))
    return [int(pid) for log in logs for pid in re.findall(r"warm server (\d+) ready", log.read_text())]


def stop_servers(workdir):
    for pid in server_pids(workdir):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


@pytest.fixture
def workdir(tmp_path):
    yield tmp_path
    stop_servers(tmp_path)


def test_jobs_run_in_children_of_one_warm_server(workdir):
    """The first job starts the server and runs in its own process meanwhile; the next, which comes while the
    server is still importing, waits for it and runs in a child of it, as every later one does."""
    first = run_job(workdir, JOB_TAG="a")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "out a\n" and f"err {workdir}" in first.stderr
    pid, parent, total, argv = (workdir / "result.txt").read_text().split(" ", 3)
    assert float(total) == 2.0 and argv == "['arg1']"
    assert int(parent) == os.getpid()  # the starter's work ran in the job's own process
    for tag in "bc":
        later = run_job(workdir, JOB_TAG=tag)
        assert later.returncode == 0 and later.stdout == f"out {tag}\n", later.stderr
        [server] = server_pids(workdir)
        assert int((workdir / "result.txt").read_text().split()[1]) == server  # in a child of the server


def test_jobs_that_start_together_start_one_server(workdir):
    """Three jobs at once: one starts the server and runs in its own process, the two that find it starting wait
    on the starter's lock (which the server holds until it listens) and run in children of that one server."""
    script = workdir / "job.py"
    script.write_text(JOB % {"warm": True, "device": "cpu"} + "\nopen(f'parent-{sys.argv[1]}', 'w').write(str(os.getppid()))\n")
    environment = {key: value for key, value in os.environ.items() if key != "SLURM_JOB_ID"}
    environment.update(PYTHONPATH=str(ROOT), HEADPRUNE_WARM_IDLE="20")
    jobs = [subprocess.Popen([sys.executable, str(script), str(k)], cwd=workdir, env=environment,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(3)]
    for job in jobs:
        _, err = job.communicate(timeout=300)
        assert job.returncode == 0, err
    [server] = server_pids(workdir)
    parents = sorted(int((workdir / f"parent-{k}").read_text()) for k in range(3))
    assert parents.count(server) == 2 and os.getpid() in parents


def test_a_server_that_never_listens_holds_no_job(workdir):
    """A job that finds the server starting waits on the starter's lock, but not forever: if the server never
    listens (here: the lock stays taken), the job runs in its own process after HEADPRUNE_WARM_CONNECT seconds."""
    import fcntl

    from headprune import warm

    folder = workdir / ".snakemake" / "warm"
    folder.mkdir(parents=True, mode=0o700)
    lock = os.open(folder / f"{warm._package_digest()}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = time.monotonic()
        result = run_job(workdir, HEADPRUNE_WARM_CONNECT="1")
        assert result.returncode == 0, result.stderr
        assert "did not listen within 1.0 s" in result.stderr and "running the job here" in result.stderr
        assert int((workdir / "result.txt").read_text().split()[1]) == os.getpid()  # it ran here
        assert time.monotonic() - started < 60 and not server_pids(workdir)
    finally:
        os.close(lock)


def test_a_warm_job_inherits_the_imports_frozen_for_the_collector(workdir):
    """The server freezes what its imports made (gc.freeze) before it forks jobs, so a job's collections do not
    walk, and copy, the preloaded modules' objects; a job run without the warm start has nothing frozen."""
    probe = "\nimport gc\nopen('frozen.txt', 'w').write(str(gc.get_freeze_count()))\n"
    # the first warm job starts the server and runs in its own process; the second runs in the server
    for warm, check in ((True, lambda count: True), (True, lambda count: count > 100_000),
                        (False, lambda count: count == 0)):
        script = workdir / "job.py"
        script.write_text(JOB % {"warm": warm, "device": "cpu"} + probe)
        environment = {key: value for key, value in os.environ.items() if key != "SLURM_JOB_ID"}
        environment.update(PYTHONPATH=str(ROOT), HEADPRUNE_WARM_IDLE="20")
        result = subprocess.run([sys.executable, str(script), "arg1"], cwd=workdir, env=environment,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        assert check(int((workdir / "frozen.txt").read_text())), (warm, (workdir / "frozen.txt").read_text())


def test_exit_codes_and_errors_come_back(workdir):
    assert run_job(workdir, JOB_FAIL="exit").returncode == 3
    failed = run_job(workdir, JOB_FAIL="raise")
    assert failed.returncode == 1 and "RuntimeError: boom" in failed.stderr


@pytest.mark.parametrize("setting", [dict(warm=False), dict(device="cuda"), dict(SLURM_JOB_ID="42")])
def test_off_unless_asked_on_the_cpu_outside_a_cluster(workdir, setting):
    result = run_job(workdir, **setting)
    assert result.returncode == 0, result.stderr
    pid, parent = map(int, (workdir / "result.txt").read_text().split()[:2])
    assert not server_pids(workdir) and parent == os.getpid()  # ran in the process this test started


MODEL_JOB = textwrap.dedent('''
    import sys, types
    from headprune import warm
    warm.start(types.SimpleNamespace(config={"warm_start": True, "device": "cpu"}))
    before = {id(module) for module in sys.modules.values()}
    from headprune.models.heads import adapter_for
    from headprune.models.loading import load_classifier
    model, tokenizer = load_classifier(sys.argv[1])
    adapter_for(model)
    model(**tokenizer(["a b"], ["c"], return_tensors="pt"))
    # (a module entered under a second name, as transformers aliases its tokenizer modules, is not new)
    new = [name for name, module in sys.modules.items() if id(module) not in before]
    open("new_modules.txt", "w").write(" ".join(sorted(new)))
''')


def test_a_warm_job_loading_a_model_imports_nothing_new(workdir):
    """The server preloads what a job's model load and head-adapter lookup import (every family's
    transformers model code, the tokenizer classes): a forked job imported them anew, 0.3 s of a 0.5 s
    demo ablation job. The job sets no thread count: a child forked after the server had run an OpenMP
    thread team hung in its first parallel operation."""
    from transformers import BertTokenizer

    from conftest import tiny_bert

    vocab = workdir / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]) + "\n")
    tiny_bert().save_pretrained(workdir / "model")
    BertTokenizer(str(vocab)).save_pretrained(workdir / "model")
    (workdir / "job.py").write_text(MODEL_JOB)
    environment = {key: value for key, value in os.environ.items() if key != "SLURM_JOB_ID"}
    environment.update(PYTHONPATH=str(ROOT), HEADPRUNE_WARM_IDLE="20")
    for _ in range(2):  # the first starts the server
        result = subprocess.run([sys.executable, "job.py", str(workdir / "model")], cwd=workdir, env=environment,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
    assert server_pids(workdir)
    new = (workdir / "new_modules.txt").read_text().split()
    assert not [name for name in new if name.startswith(("transformers", "headprune", "torch"))], new


def test_every_preloaded_package_module_imports():
    """The server skips a preloaded name that does not import (another transformers version may lay its
    modules out otherwise), so a package module that moved would silently stop being preloaded: every
    headprune name in PRELOAD must import."""
    import importlib

    from headprune import warm

    names = [name for name in warm.PRELOAD if name.split(".")[0] == "headprune"]
    assert len(names) > 10
    failed = {}
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as error:
            failed[name] = str(error)
    assert not failed, f"PRELOAD names package modules that do not import: {failed}"


# --- who may connect (the server runs any script a peer names, as its owner) -------------------------------

NOBODY = 65534


def as_group_member(workdir):
    """The first jobs under umask 002 (shared group folders): everything they make is group-writable by default.
    The first starts the server (and runs in its own process); the second waits for it and runs in it."""
    first = run_job(workdir, preexec=lambda: os.umask(0o002))
    return first if first.returncode else run_job(workdir, preexec=lambda: os.umask(0o002))


def folder_and_socket(workdir):
    folder = workdir / ".snakemake" / "warm"
    return folder, next(folder.glob("*.sock"))


def as_other_user(action):
    """Run ``action()`` in a forked child as uid/gid 65534 and return its exit code (skip unless root)."""
    if os.getuid() != 0:
        pytest.skip("switching to another uid needs root")
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            code = action()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def send_job(path, script):
    """A client speaking the server's protocol: 10 the job ran (an exit code came back), 20 the server hung
    up without running it, 30 the connection was refused by the file system."""
    import json
    import socket
    import struct

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except PermissionError:
        return 30
    try:
        socket.send_fds(conn, [b"job"], [0, 1, 2])
        payload = json.dumps({"script": str(script), "argv": [str(script)], "cwd": str(script.parent),
                              "env": {}, "client": os.getpid()}).encode()
        conn.sendall(struct.pack("!I", len(payload)) + payload)
        return 10 if len(conn.recv(4)) == 4 else 20
    except (BrokenPipeError, ConnectionResetError):
        return 20


@pytest.fixture
def shared_workdir():
    """A working folder other users can reach, as a group's shared folder is (pytest's own is root's alone)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="headprune-warm-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    stop_servers(path)
    subprocess.run(["rm", "-rf", str(path)], check=False)


def test_under_a_group_umask_the_folder_and_socket_are_the_owners_alone(workdir):
    first = as_group_member(workdir)
    assert first.returncode == 0, first.stderr
    folder, sock = folder_and_socket(workdir)
    assert (workdir / ".snakemake").stat().st_mode & 0o777 == 0o775  # the umask did apply to what it may
    assert folder.stat().st_mode & 0o777 == 0o700
    assert sock.stat().st_mode & 0o777 == 0o600
    assert {path.stat().st_mode & 0o777 for path in folder.iterdir()} == {0o600}  # lock and log too
    assert int((workdir / "result.txt").read_text().split()[1]) in server_pids(workdir)


def test_another_user_cannot_reach_the_socket(shared_workdir):
    assert as_group_member(shared_workdir).returncode == 0
    _, sock = folder_and_socket(shared_workdir)
    script = shared_workdir / "theirs.py"
    script.write_text(f"open({str(shared_workdir / 'pwned')!r}, 'w').write('ran')\n")
    assert as_other_user(lambda: send_job(sock, script)) == 30
    assert not (shared_workdir / "pwned").exists()


def test_the_server_refuses_a_peer_of_another_uid_whatever_the_modes(shared_workdir):
    """The file modes are one wall; this takes it down (as a careless chmod would) to test the second: the
    server asks the kernel who connected (SO_PEERCRED) and hangs up on anyone but its owner."""
    assert as_group_member(shared_workdir).returncode == 0
    folder, sock = folder_and_socket(shared_workdir)
    folder.chmod(0o711)
    sock.chmod(0o666)
    script = shared_workdir / "theirs.py"
    script.write_text(f"open({str(shared_workdir / 'pwned')!r}, 'w').write('ran')\n")
    assert as_other_user(lambda: send_job(sock, script)) == 20
    time.sleep(0.5)  # a job the server had run would have written by now
    assert not (shared_workdir / "pwned").exists()
    log = next(folder.glob("*.log")).read_text()
    assert f"refused a job from uid {NOBODY}" in log
    assert send_job(sock, script) == 10 and (shared_workdir / "pwned").read_text() == "ran"  # its owner may


def test_a_job_does_not_hand_itself_to_a_server_of_another_uid(shared_workdir):
    import socket as sockets

    from headprune import warm

    folder = shared_workdir / ".snakemake" / "warm"
    folder.mkdir(parents=True, mode=0o777)
    folder.chmod(0o777)
    ready = shared_workdir / "ready"

    def fake_server():
        server = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
        server.bind(str(folder / "x.sock"))
        server.listen(1)
        ready.touch()
        time.sleep(30)
        return 0

    if os.getuid() != 0:
        pytest.skip("switching to another uid needs root")
    pid = os.fork()
    if pid == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        os._exit(fake_server())
    try:
        for _ in range(100):
            if ready.exists():
                break
            time.sleep(0.05)
        folder.chmod(0o700)
        fd = warm.open_private_folder(folder)
        try:
            with pytest.raises(PermissionError, match=f"runs as uid {NOBODY}, not as you"):
                warm._try_connect(fd, "x.sock")
        finally:
            os.close(fd)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


@pytest.mark.parametrize("unsafe", ["world-writable", "group-writable", "another owner", "a link"])
def test_a_folder_that_is_not_the_owners_alone_is_refused_and_the_job_runs_here(workdir, unsafe):
    folder = workdir / ".snakemake" / "warm"
    folder.parent.mkdir()
    if unsafe == "a link":
        (workdir / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(workdir / "elsewhere")
    else:
        folder.mkdir()
        folder.chmod({"world-writable": 0o777, "group-writable": 0o770}.get(unsafe, 0o700))
        if unsafe == "another owner":
            if os.getuid() != 0:
                pytest.skip("giving a folder away needs root")
            os.chown(folder, NOBODY, NOBODY)
    before = folder.lstat()
    result = run_job(workdir)
    assert result.returncode == 0, result.stderr
    expected = {"world-writable": "may be written by others (mode 0777)", "group-writable": "mode 0770",
                "another owner": f"owned by uid {NOBODY}", "a link": "not a folder of its own"}[unsafe]
    assert expected in result.stderr and "running the job without the warm start" in result.stderr
    assert result.stdout == "out None\n"  # the job itself ran, here
    assert int((workdir / "result.txt").read_text().split()[1]) == os.getpid()
    after = folder.lstat()
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)  # left as it was
    assert not list((workdir / "elsewhere" if unsafe == "a link" else folder).iterdir())


def test_a_folder_an_earlier_version_left_readable_is_narrowed_and_used(workdir):
    folder = workdir / ".snakemake" / "warm"
    folder.mkdir(parents=True)
    folder.chmod(0o755)  # nobody else could write in it, so nothing in it is theirs
    for _ in range(2):  # the first starts the server, the second waits for it
        result = run_job(workdir)
        assert result.returncode == 0, result.stderr
    assert folder.stat().st_mode & 0o777 == 0o700 and server_pids(workdir)
