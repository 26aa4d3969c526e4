"""headprune.run_hooks: a local run drops Snakemake's job rate limiter (a cluster run keeps it), in a real run."""
import subprocess
import sys
import textwrap
from types import SimpleNamespace

from headprune.run_hooks import drop_local_rate_limit

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_only_a_local_run_loses_its_rate_limiter():
    limiter = object()
    local = SimpleNamespace(local_exec=True, scheduler=SimpleNamespace(job_rate_limiter=limiter))
    assert drop_local_rate_limit(local) and local.scheduler.job_rate_limiter is None
    assert not drop_local_rate_limit(local)  # already gone
    cluster = SimpleNamespace(local_exec=False, scheduler=SimpleNamespace(job_rate_limiter=limiter))
    assert not drop_local_rate_limit(cluster) and cluster.scheduler.job_rate_limiter is limiter
    other = SimpleNamespace(local_exec=True, scheduler=SimpleNamespace())  # a Snakemake that renamed it
    assert not drop_local_rate_limit(other)


def test_a_real_local_run_schedules_without_it(tmp_path):
    """Snakemake 9 runs the hooks file's onstart and schedules every job (chains and a fan-in) without the
    limiter (its job selection asserts a consistent job count when there is none)."""
    (tmp_path / "Snakefile").write_text(textwrap.dedent(f"""
        include: {str(ROOT / "rules" / "hooks.smk")!r}

        rule all:
            input: expand("c{{i}}.txt", i=range(4))

        rule a:
            output: "a{{i}}.txt"
            shell: "echo {{wildcards.i}} > {{output}}"

        rule c:
            input: "a{{i}}.txt"
            output: "c{{i}}.txt"
            shell: "cat {{input}} > {{output}}"
        """))
    result = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "without its job rate limiter" in result.stdout + result.stderr
    assert [(tmp_path / f"c{i}.txt").read_text() for i in range(4)] == [f"{i}\n" for i in range(4)]
