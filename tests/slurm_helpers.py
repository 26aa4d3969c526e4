"""What the SLURM tests share (tests/test_slurm.py, tests/test_slurm_faults.py): running Snakemake on the
repository's Snakefile, a one-node test cluster for a test module, the test copy of profiles/slurm, and
reading what SLURM and the executor plugin say about the jobs they ran."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from dry_run import DEMO_CONFIG
from slurm_cluster import PARTITION, SlurmCluster, missing_reason

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "profiles" / "slurm"
REQUIRED = os.environ.get("HEADPRUNE_REQUIRE_SLURM") == "1"


def snakemake(workdir, *args, configfile=DEMO_CONFIG, env=None, timeout=1200):
    command = [sys.executable, "-m", "snakemake", *args, "--snakefile", str(ROOT / "Snakefile"),
               "--directory", str(workdir), "--configfile", str(configfile)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def module_cluster(**options):
    """A started SlurmCluster for one test module (a generator for a module-scope fixture): skipped with the
    reason where none can start (a failure under HEADPRUNE_REQUIRE_SLURM=1), stopped by PID at the end."""
    reason = missing_reason()
    if reason:
        if REQUIRED:
            pytest.fail(f"HEADPRUNE_REQUIRE_SLURM=1 but no SLURM test cluster can start: {reason}")
        pytest.skip(reason)
    # Not under pytest's tmp folder: munged (user munge) must be able to reach its socket.
    root = Path(os.environ.get("HEADPRUNE_SLURM_ROOT") or tempfile.mkdtemp(prefix="headprune-slurm-"))
    cluster = SlurmCluster(root, **options)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        assert not any(cluster.running().values()), cluster.running()
        shutil.rmtree(root, ignore_errors=True)


def write_test_profile(folder, **settings):
    """profiles/slurm with the one edit a user makes (partition; this cluster has no accounts), and test speed;
    `settings` override profile entries. Returns the folder of the written profile."""
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    profile["default-resources"]["slurm_partition"] = PARTITION
    del profile["default-resources"]["slurm_account"]
    profile.update({
        "slurm-status-command": "squeue",  # no accounting storage here: sacct cannot answer
        "slurm-init-seconds-before-status-checks": 2,
        "slurm-keep-successful-logs": True,
        "latency-wait": 5,
    })
    profile.update(settings)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return folder


# tests/slurm_poll/sitecustomize.py: Snakemake asks SLURM about its jobs at least every 3 s (the plugin's interval
# otherwise grows by 10 s a query, and a test would mostly wait for the next one)
POLL = {"HEADPRUNE_TEST_MAX_STATUS_INTERVAL": "3"}


def poll_env():
    path = os.pathsep.join(filter(None, [str(ROOT / "tests" / "slurm_poll"), os.environ.get("PYTHONPATH")]))
    return {**POLL, "PYTHONPATH": path}


def cluster_env(cluster):
    return {**os.environ, **cluster.env, **poll_env()}


def submitted(text):
    """{snakemake jobid: SLURM jobid} from 'Job 3 has been submitted with SLURM jobid 12 (log: ...)'
    (a group job's id is a UUID)."""
    return dict(re.findall(r"Job ([\w-]+) has been submitted with SLURM jobid (\d+)", text))


def batch_script(cluster, slurm_id):
    return subprocess.run(["scontrol", "write", "batch_script", str(slurm_id), "-"], capture_output=True, text=True,
                          env=cluster_env(cluster), check=True).stdout


def jobs_in_sbatch_job(cluster, slurm_id):
    """The rules of the Snakemake jobs one sbatch job ran: the --target-jobs ('rule:wildcards') of its script."""
    targets = re.search(r"--target-jobs (.*?) --", batch_script(cluster, slurm_id)).group(1)
    return re.findall(r"'?(\w+):\S+", targets)


def time_limit(minutes):
    """SLURM's TimeLimit for a number of minutes (under a day)."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def scontrol_job(cluster, slurm_id):
    out = subprocess.run(["scontrol", "show", "job", "--oneliner", str(slurm_id)], capture_output=True, text=True,
                         env=cluster_env(cluster), check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def copy_run(source, dest):
    """The data and results of a finished run (mtimes kept), without its .snakemake state."""
    for name in ("data", "results"):
        shutil.copytree(source / name, dest / name, symlinks=True)
    return dest
