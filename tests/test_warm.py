"""Warm start (headprune.warm): a job forked from a server that has imported torch runs as it would alone:
same outputs, exit code, stdout/stderr, working directory and environment; no job forks another."""
import os
import re
import signal
import subprocess
import sys
import textwrap
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


def run_job(workdir, warm=True, device="cpu", **env):
    script = workdir / "job.py"
    script.write_text(JOB % {"warm": warm, "device": device})
    environment = {key: value for key, value in os.environ.items() if key != "SLURM_JOB_ID"}
    environment.update(PYTHONPATH=str(ROOT), HEADPRUNE_WARM_IDLE="20", **env)
    return subprocess.run([sys.executable, str(script), "arg1"], cwd=workdir, env=environment, capture_output=True,
                          text=True, timeout=300)


def server_pids(workdir):
    logs = list((workdir / ".snakemake" / "warm").glob("*.log"))
    return [int(pid) for log in logs for pid in re.findall(r"warm server (\d+) ready", log.read_text())]


@pytest.fixture
def workdir(tmp_path):
    yield tmp_path
    for pid in server_pids(tmp_path):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def test_jobs_run_in_children_of_one_warm_server(workdir):
    first = run_job(workdir, JOB_TAG="a")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "out a\n" and f"err {workdir}" in first.stderr
    pid, parent, total, argv = (workdir / "result.txt").read_text().split(" ", 3)
    assert float(total) == 2.0 and argv == "['arg1']"
    [server] = server_pids(workdir)
    assert int(parent) == server  # the work ran in a child of the server, not in the job's process
    second = run_job(workdir, JOB_TAG="b")
    assert second.returncode == 0 and second.stdout == "out b\n"
    assert int((workdir / "result.txt").read_text().split()[1]) == server and server_pids(workdir) == [server]


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
