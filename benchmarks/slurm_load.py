"""Load: a DAG the size of the paper's through profiles/slurm on a SLURM cluster (issue #25, item 2).

The paper's config.yaml plans about 540 jobs, 462 of them single-head ablation jobs (one per head and per
layer). This runs a DAG of that size with the demo's tiny models standing in for the real ones: the demo
config in the paper's layout (one job per head, per layer and per pruning order) plus ``--copies``
needle-in-a-haystack studies on the demo's tiny Llama (each a study of 8 heads: 8 ablation jobs, 2 one
head per layer jobs, its evaluation and significance tests; no training), started from a finished demo
(``--demo``: its trained models and data; what depends on them runs again, through sbatch). It prints:

- jobs: planned (``snakemake -n``) and finished;
- sbatch submissions: counted by the cluster (``squeue --states=all`` with the run's job name), counted by
  Snakemake, and what ``group-components`` promises (each job alone, but the ablation jobs N to an sbatch
  job: the dry run's group jobs);
- wall time of the run;
- how far behind status polling was: for every sbatch job, the time from SLURM's EndTime to Snakemake
  logging its jobs finished (median and max), and the status query count.

    python benchmarks/slurm_load.py --demo /path/to/finished/demo       # starts a one-node cluster (root)
    python benchmarks/slurm_load.py --demo DIR --cluster /tmp/slurm     # a test cluster already started
    python benchmarks/slurm_load.py --demo DIR --copies 8 --plan-only   # how many jobs, nothing run

A cluster of our own is tests/slurm_cluster.py's (munged, slurmctld, slurmd in a temporary folder,
stopped by PID at the end). The profile is profiles/slurm with the test edits (tests/slurm_helpers.py:
partition ``debug``, no account, ``slurm-status-command: squeue``); its ``slurm-init-seconds-before-status-checks``
stays the profile's unless ``--init-seconds`` is given.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from dry_run import job_stats, planned_jobs, write_config  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402
from slurm_helpers import copy_run, write_test_profile  # noqa: E402

GROUP = "ablation_{study}"
FORCE = ("evaluate_full", "ablate_head", "one_head_layer", "make_retrieval_items")


def load_config(path, copies):
    """The demo config in the paper's layout, with `copies` retrieval studies on the tiny Llama."""
    def edit(config):
        config["ablation"].update(heads_per_job=1, layers_per_job=1)
        config["pruning"].update(orders_per_job=1)
        base = config["models"]["tiny_llama_niah"]
        for k in range(copies):
            name = f"niah_load{k}"
            config["models"][name] = {**base, "depths": [0, 50, 100], "needles_per_setting": 1}
            for experiment in ("ablation", "one_head_per_layer"):
                config["experiments"][experiment].append(name)
    return write_config(path, edit)


def fresh_copy(source, dest):
    """The finished demo's data and results, every mtime moved forward so that the newest is now."""
    copy_run(Path(source), Path(dest))
    files = [p for name in ("data", "results") for p in (Path(dest) / name).rglob("*") if not p.is_symlink()]
    shift = time.time_ns() - max(p.stat().st_mtime_ns for p in files) - 10**9
    for p in files:
        stat = p.stat()
        os.utime(p, ns=(stat.st_atime_ns, stat.st_mtime_ns + shift))


def snakemake(work, config, profile, env, *args, timeout=None):
    command = [sys.executable, "-m", "snakemake", "--profile", str(profile), "--forcerun", *FORCE, *args,
               "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile", str(config)]
    with open(Path(work).parent / "run.log", "w+") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                code = process.wait(120)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            print(f"stopped after {timeout:.0f} s", flush=True)
        out.seek(0)
        return subprocess.CompletedProcess(command, code, out.read(), "")


def predicted_sbatch(plan_text):
    """Group jobs of the dry run, plus every job outside a group: the sbatch jobs group-components promises."""
    headers = list(re.finditer(r"Group job (\S+) \(jobs in lexicogr\. order\):\n", plan_text))
    grouped = 0
    for header, following in zip(headers, headers[1:] + [None]):
        body = plan_text[header.end():following.start() if following else len(plan_text)]
        body = re.split(r"^(?:\[|(?:local)?rule |Job stats|This was a dry-run)", body, maxsplit=1, flags=re.M)[0]
        grouped += len(planned_jobs(body))
    total = sum(job_stats(plan_text).values())
    # The target rule `all` (no script) is never submitted: Snakemake finishes it itself. A real run logs it as
    # "localrule all", a dry run as "rule all", so count it by name; the pipeline has no other local rules.
    local = job_stats(plan_text).get("all", 0)
    return len(headers) + total - grouped - local, len(headers), grouped, total


def stamp(text):
    return datetime.strptime(text, "%a %b %d %H:%M:%S %Y").timestamp()


def polling_lag(run_text, env):
    """Seconds from SLURM's EndTime of each sbatch job to Snakemake logging its (last) job finished."""
    jobs = {}  # snakemake jobid -> "rule:wildcards"
    for block in re.finditer(r"^\s*(?:local)?rule (\w+):\n((?:\s{4,}.*\n)+)", run_text, flags=re.M):
        jobid = re.search(r"jobid: (\d+)", block.group(2))
        wildcards = re.search(r"wildcards: (.*)", block.group(2))
        if jobid:
            jobs[jobid.group(1)] = f"{block.group(1)}:{wildcards.group(1).replace(', ', ',') if wildcards else ''}"
    finished = {}
    for match in re.finditer(r"^\[(.+?)\]\nFinished jobid: (\d+)", run_text, flags=re.M):
        finished[jobs.get(match.group(2))] = stamp(match.group(1))
    lags = []
    for slurm_id in re.findall(r"has been submitted with SLURM jobid (\d+)", run_text):
        record = subprocess.run(["scontrol", "show", "job", "--oneliner", slurm_id], capture_output=True, text=True,
                                env=env).stdout
        end = re.search(r"EndTime=(\S+)", record)
        script = subprocess.run(["scontrol", "write", "batch_script", slurm_id, "-"], capture_output=True, text=True,
                                env=env).stdout
        targets = re.search(r"--target-jobs (.*?) --", script)
        if not end or not targets or end.group(1) == "Unknown":
            continue
        keys = [t.strip("'\"") for t in targets.group(1).split()]
        times = [finished[k] for k in keys if k in finished]
        if times:
            lags.append(max(times) - datetime.fromisoformat(end.group(1)).timestamp())
    return lags


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", default=os.environ.get("HEADPRUNE_DEMO_DIR"), required=not os.environ.get(
        "HEADPRUNE_DEMO_DIR"), help="a finished demo's working directory (HEADPRUNE_DEMO_DIR)")
    parser.add_argument("--copies", type=int, default=21, help="retrieval studies added (21: about 540 jobs)")
    parser.add_argument("--cluster", help="the folder of a test cluster already started (tests/slurm_cluster.py)")
    parser.add_argument("--work", help="working directory (default: a temporary one)")
    parser.add_argument("--group-size", type=int, help="group-components of ablation_{study} (default: the profile's)")
    parser.add_argument("--init-seconds", type=int, help="slurm-init-seconds-before-status-checks")
    parser.add_argument("--plan-only", action="store_true", help="print the planned jobs and sbatch jobs, run nothing")
    parser.add_argument("--timeout", type=float, help="stop the run (SIGTERM: Snakemake cancels its jobs) after this "
                        "many seconds and print what it did until then")
    args = parser.parse_args()

    work = Path(args.work or tempfile.mkdtemp(prefix="headprune-load-"))
    work.mkdir(parents=True, exist_ok=True)
    config = load_config(work / "load.yaml", args.copies)
    settings = {}
    if args.group_size:
        settings["group-components"] = {GROUP: args.group_size}
    if args.init_seconds:
        settings["slurm-init-seconds-before-status-checks"] = args.init_seconds
    profile = write_test_profile(work / "profile", **settings)
    size = yaml.safe_load((profile / "config.yaml").read_text())["group-components"][GROUP]
    if not (work / "run" / "results").exists():
        fresh_copy(args.demo, work / "run")

    cluster = None
    if args.cluster:
        folder = Path(args.cluster).resolve()
        env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf"),
               "PATH": f"{folder / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    elif not args.plan_only:
        cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="headprune-slurm-")))
        cluster.start()
        env = {**os.environ, **cluster.env}
    else:
        env = dict(os.environ)
    try:
        plan = snakemake(work / "run", config, profile, env, "--dry-run")
        plan_text = plan.stdout + plan.stderr
        if plan.returncode != 0:
            sys.exit(plan_text[-3000:])
        promised, groups, grouped, total = predicted_sbatch(plan_text)
        print(f"planned: {total} jobs ({grouped} in {groups} group jobs of up to {size}); "
              f"group-components promises {promised} sbatch jobs", flush=True)
        if args.plan_only:
            return
        started = time.monotonic()
        result = snakemake(work / "run", config, profile, env, timeout=args.timeout)
        wall = time.monotonic() - started
        text = result.stdout + result.stderr
        steps = re.findall(r"(\d+) of (\d+) steps \(\d+%\) done", text)
        run_id = re.search(r"SLURM run ID: (\S+)", text).group(1)
        on_cluster = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i %T", "--name", run_id],
                                    capture_output=True, text=True, env=env).stdout.split("\n")
        on_cluster = [line.split() for line in on_cluster if line.strip()]
        states = {}
        for _, state in on_cluster:
            states[state] = states.get(state, 0) + 1
        submitted = len(re.findall(r"has been submitted with SLURM jobid", text))
        lags = polling_lag(text, env)
        print(f"exit code: {result.returncode}; finished: {steps[-1][0] if steps else 0} of {total} jobs")
        print(f"sbatch submissions: {len(on_cluster)} on the cluster ({states}), {submitted} by Snakemake, "
              f"{promised} promised by group-components")
        print(f"wall time: {wall:.0f} s ({wall / max(total, 1):.2f} s a job)")
        if lags:
            print(f"status polling: sbatch job end to Snakemake's 'Finished': median {statistics.median(lags):.0f} s, "
                  f"max {max(lags):.0f} s over {len(lags)} sbatch jobs")
        print(f"run log: {work / 'run.log'}")
        if result.returncode != 0:
            print(text[-3000:])
            sys.exit(result.returncode)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
