"""Nothing lost when the cluster fails (issue #25): faults hit the real pipeline's jobs under profiles/slurm.

On a one-node test cluster of its own (tests/slurm_cluster.py; memory enforced as a real cluster does, the
node declared down 10 s after its slurmd goes silent), the demo's MNLI ablation jobs run through sbatch from
a copy of a finished demo (HEADPRUNE_DEMO_DIR as it is, else the session's demo run: its fine-tuned model
and data), one job per head (the paper's layout), GROUP_SIZE ablation jobs to an sbatch job (the job group
`ablation_mnli`). Then:

- a group's sbatch job cancelled (scancel) after two of its jobs finished, the third's output half written:
  the run fails naming the group, its jobs and logs (the SLURM log shown); the half-written output is gone;
  the finished jobs' outputs stay (headprune.io.commits) and the README's rerun command redoes only the
  two others;
- a single job cancelled mid-run, its output half written; a job killed for exceeding its memory request:
  the run fails naming the rule, the SLURM job, its state and the logs; the rerun redoes that job alone and
  leaves what finished untouched (mtimes);
- slurmd stopped while a group runs (the node goes down), then started again: the group's sbatch job
  fails, its finished jobs keep their outputs, the rerun redoes the others;
- a group's sbatch job requeued (scontrol requeue): SLURM runs it again, the run completes.

What each fault does, and what Snakemake prints: docs/cluster.md, "When a job fails".
"""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dry_run import job_stats, write_config
from slurm_helpers import (PROFILE, ROOT, batch_script, cluster_env, copy_run, module_cluster, scontrol_job,
                           snakemake, submitted, write_test_profile)

STUDY = "mnli"
RESULTS = Path("results/demo") / STUDY
HEADS = [f"enc_self-{layer}-{head}" for layer in range(2) for head in range(4)]
GROUP_SIZE = 4


def head_output(head):
    return RESULTS / "ablation" / f"{head}.json"


def layer_output(layer):
    return RESULTS / "one_head" / f"{layer}.json"


@pytest.fixture(scope="module")
def slurm_cluster():
    yield from module_cluster(enforce_memory=True, slurmd_timeout=10)


@pytest.fixture(scope="module")
def slurm_profile(tmp_path_factory):
    """profiles/slurm as the tests run it (tests/slurm_helpers.py), groups of GROUP_SIZE ablation jobs."""
    return write_test_profile(tmp_path_factory.mktemp("profile"),
                              **{"group-components": {"ablation_{study}": GROUP_SIZE}})


@pytest.fixture(scope="module")
def demo_results(request):
    """A finished demo's working directory: the session's demo run, or HEADPRUNE_DEMO_DIR as it is (these tests
    only copy its data and results: its fine-tuned model and test sets)."""
    if os.environ.get("HEADPRUNE_DEMO_DIR"):
        return Path(os.environ["HEADPRUNE_DEMO_DIR"])
    return request.getfixturevalue("demo_run")


def fresh_copy(source, dest):
    """The data and results of a finished demo (tests/slurm_helpers.copy_run), every mtime moved forward by
    the same amount so that the newest is now: the copy is as finished as the original, and newer than
    the scripts (Snakemake reruns a job whose script is newer than its outputs)."""
    copy_run(source, dest)
    files = [p for name in ("data", "results") for p in (dest / name).rglob("*") if not p.is_symlink()]
    shift = time.time_ns() - max(p.stat().st_mtime_ns for p in files) - 10**9
    for p in sorted(files, key=lambda p: -len(p.parts)):
        stat = p.stat()
        os.utime(p, ns=(stat.st_atime_ns, stat.st_mtime_ns + shift))
    return dest


def fault_config(path, **resources):
    """The demo config, one job per head and per layer (the paper's layout), `resources` changed."""
    def edit(config):
        config["ablation"].update(heads_per_job=1, layers_per_job=1)
        config["resources"].update(resources)
    return write_config(path, edit)


class Run:
    """`snakemake --profile <profile>` in the background, its output in files (read while it runs)."""

    started = []  # every run, stopped after its test (stop_runs) should the test fail before it ends

    def __init__(self, work, targets, profile, configfile, cluster, *extra):
        self.work = work
        self.out = open(work.parent / f"run-{time.monotonic_ns()}.txt", "w+")
        command = [sys.executable, "-m", "snakemake", *map(str, targets), "--profile", str(profile), *extra,
                   "--snakefile", str(ROOT / "Snakefile"), "--directory", str(work), "--configfile", str(configfile)]
        self.process = subprocess.Popen(command, stdout=self.out, stderr=subprocess.STDOUT, text=True,
                                        env=cluster_env(cluster))
        Run.started.append(self)

    def text(self):
        return Path(self.out.name).read_text(errors="replace")

    def wait(self, timeout=600):
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError("snakemake did not end:\n" + self.text()[-5000:])


@pytest.fixture(autouse=True)
def stop_runs():
    """A test that fails while its Snakemake runs leaves no Snakemake behind (SIGTERM, then SIGKILL, by PID)."""
    yield
    while Run.started:
        process = Run.started.pop().process
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_for(what, condition, timeout=300, run=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if run is not None and run.process.poll() is not None:
            raise AssertionError(f"snakemake ended before {what}:\n" + run.text()[-5000:])
        time.sleep(0.5)
    raise AssertionError(f"no {what} after {timeout} s" + ("\n" + run.text()[-5000:] if run else ""))


def targets_of(cluster, slurm_id):
    """The outputs of the ablation jobs one sbatch job runs (its --target-jobs 'rule:study=..,head=..')."""
    targets = re.search(r"--target-jobs (.*?) --", batch_script(cluster, slurm_id)).group(1)
    return [head_output(name) if kind == "head" else layer_output(name)
            for kind, name in re.findall(r"(?:ablate_head|one_head_layer):study=\w+,(head|layer)=([\w.-]+)", targets)]


def write_half(path):
    """A half-written output where a job is writing it, as a writer killed mid-file leaves it (a file of its
    own: should the job have finished just before, its output stays committed as it wrote it). Returns its
    inode."""
    tmp = path.with_name(f".{path.name}.half")
    tmp.write_text('{"study": "mnli", "heads": {"enc_self')
    os.replace(tmp, path)
    return path.stat().st_ino


def mtimes(work, paths):
    return {p: (work / p).stat().st_mtime_ns for p in paths if (work / p).exists()}


def inodes(work, paths):
    """The files themselves (a finished job's output is touched by Snakemake after the job wrote it: its mtime
    moves, its inode stays)."""
    return {p: (work / p).stat().st_ino for p in paths if (work / p).exists()}


def complete_json(path):
    """An ablation output as a finished job writes it (a half-written one does not parse)."""
    data = json.loads(Path(path).read_text())
    assert data["study"] == STUDY and data["heads"], path
    return data


def readme_rerun_command():
    """The rerun command of the README's SLURM section, as a list of arguments after `snakemake`."""
    readme = (ROOT / "README.md").read_text().split("## Running on SLURM", 1)[1].split("\n## ", 1)[0]
    line = next(line for line in readme.splitlines() if line.startswith("snakemake ") and "rerun" in line.lower())
    return line.split("#")[0].split()[1:]


def rerun(work, targets, profile, configfile, cluster):
    """The README's rerun command (its profile the test copy of profiles/slurm), on `targets`."""
    args = [str(profile) if a == "profiles/slurm" else a for a in readme_rerun_command()]
    args = [a for a in args if a != "--configfile" and a != "demo/config.yaml"]
    result = snakemake(work, *map(str, targets), *args, configfile=configfile, env=cluster_env(cluster), timeout=900)
    return result, result.stdout + result.stderr


def ran_jobs(text):
    """{rule: count} of the jobs a (real) run started: its 'Job stats' table."""
    return job_stats(text)


# --- the tests --------------------------------------------------------------------------------


def test_profile_never_trusts_or_keeps_incomplete_output():
    import yaml

    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    # an output left marked incomplete (Snakemake itself killed) is redone, not trusted; a failed job's outputs
    # are removed, not kept (keep-incomplete would keep a half-written one, and mark it complete)
    assert profile.get("rerun-incomplete") is True
    assert not profile.get("keep-incomplete")
    assert not profile.get("retries")  # a failure stops at the job that failed, named, for the rerun
    assert readme_rerun_command()[:2] == ["--profile", "profiles/slurm"]


def start_group(folder, demo_results, profile, cluster):
    """A fresh copy of the demo in ``folder`` whose first GROUP_SIZE ablation jobs run as one group's sbatch
    job, in the background: (work, config, targets, run, SLURM job id, the outputs that sbatch job makes)."""
    work = fresh_copy(demo_results, folder / "work")
    config = fault_config(folder / "config.yaml")
    targets = [head_output(h) for h in HEADS[:GROUP_SIZE]]
    run = Run(work, targets, profile, config, cluster)
    (slurm_id,) = wait_for("submission", lambda: list(submitted(run.text()).values()) or None, 120, run)
    return work, config, targets, run, slurm_id, targets_of(cluster, slurm_id)


@pytest.fixture(scope="module")
def cancelled_group(slurm_cluster, slurm_profile, demo_results, tmp_path_factory):
    """A group's sbatch job (4 ablation jobs, one after another) cancelled (scancel) once two of its jobs have
    finished, the third's output half written; then the README's rerun command. Returns what the tests
    look at: the two runs' output, the finished jobs' files (inodes) before the cancel, the outputs after it
    (inodes, mtimes) and after the rerun (mtimes)."""
    folder = tmp_path_factory.mktemp("cancelled_group")
    work, config, targets, run, slurm_id, members = start_group(folder, demo_results, slurm_profile, slurm_cluster)
    assert sorted(members) == sorted(targets), batch_script(slurm_cluster, slurm_id)
    done = wait_for("two finished jobs in the group",
                    lambda: (done := [p for p in members if (work / p).exists()]) and len(done) >= 2 and done, 300, run)
    finished = inodes(work, done)
    half = next(p for p in members if p not in finished)
    half_written = write_half(work / half)
    subprocess.run(["scancel", slurm_id], env=cluster_env(slurm_cluster), check=True)
    code = run.wait()
    after_cancel = inodes(work, members)
    kept_mtimes = mtimes(work, members)
    first = run.text()
    state = scontrol_job(slurm_cluster, slurm_id)["JobState"]
    result, second = rerun(work, targets, slurm_profile, config, slurm_cluster)
    return dict(work=work, slurm_id=slurm_id, members=members, code=code, state=state, first=first,
                finished=finished, half=half, half_written=half_written, after_cancel=after_cancel,
                kept_mtimes=kept_mtimes, rerun_code=result.returncode, second=second,
                after_rerun=mtimes(work, members))


def test_cancelled_group_job_fails_the_run_and_the_rerun_completes_it(cancelled_group):
    """The run fails naming the group, its jobs, their logs and the sbatch job's SLURM log (shown: CANCELLED);
    the half-written output is not kept; the rerun completes every output."""
    c = cancelled_group
    assert c["code"] != 0 and c["state"] == "CANCELLED"
    text = c["first"]
    assert "Error in group ablation_mnli" in text, text[-4000:]
    assert re.search(rf"log: \S*\.snakemake/slurm_logs/\S+/{c['slurm_id']}\.log", text), text[-4000:]
    assert re.search(rf"JOB {c['slurm_id']} ON \S+ CANCELLED", text), text[-4000:]  # the SLURM log, shown
    for path in c["members"]:
        assert f"output: {path}" in text and f"results/demo/logs/ablate_head/{STUDY}/{path.stem}.log" in text
    assert c["after_cancel"].get(c["half"]) != c["half_written"], "a half-written output was kept"
    for path in c["after_cancel"]:
        complete_json(c["work"] / path)  # (had the job finished before the cancel, its own output is back)
    assert c["rerun_code"] == 0, c["second"][-4000:]
    for path in c["members"]:
        complete_json(c["work"] / path)


def test_cancelled_group_job_keeps_what_its_finished_jobs_wrote(cancelled_group):
    """The jobs that finished before the cancel keep their outputs (the same files), and the rerun redoes only
    the others, leaving the kept ones untouched (mtimes)."""
    c = cancelled_group
    kept = {p: ino for p, ino in c["after_cancel"].items() if p in c["finished"]}
    assert kept == c["finished"], f"lost {sorted(map(str, set(c['finished']) - set(kept)))}"
    assert "output(s) of finished jobs of failed job groups" in c["first"]
    assert job_stats(c["second"]) == {"ablate_head": GROUP_SIZE - len(c["after_cancel"])}
    assert {p: c["after_rerun"][p] for p in c["kept_mtimes"]} == c["kept_mtimes"]


FULL = RESULTS / "full.json"


def slurm_log(text, slurm_id):
    match = re.search(rf"\(log: (\S+/{slurm_id}\.log)\)", text)
    return Path(match.group(1)) if match else None


def start_full_model_job(work, profile, config, cluster):
    """evaluate_full of the MNLI study (one sbatch job) in the background, from a finished demo without its
    full.json; returns (run, SLURM job id) once the job's own Snakemake has started the rule inside SLURM."""
    (work / FULL).unlink()
    run = Run(work, [FULL], profile, config, cluster)
    (slurm_id,) = wait_for("submission", lambda: list(submitted(run.text()).values()) or None, 120, run)

    def started():
        log = slurm_log(run.text(), slurm_id)
        return log and log.exists() and "rule evaluate_full:" in log.read_text(errors="replace")
    wait_for("evaluate_full running in SLURM", started, 300, run)
    return run, slurm_id


def assert_says_which_job_failed(text, rule, slurm_id, state):
    """The run names the rule, the SLURM job and its state, and where its logs are."""
    assert f"Error in rule {rule}" in text, text[-4000:]
    assert re.search(rf"SLURM-job '{slurm_id}' failed\S*.*SLURM status is: '{state}'", text), text[-4000:]
    assert re.search(rf"log: \S*\.snakemake/slurm_logs/\S+/{slurm_id}\.log", text), text[-4000:]
    assert f"results/demo/logs/{rule}/" in text, text[-4000:]


def assert_rerun_redoes_only(work, targets, profile, config, cluster, rules, untouched):
    before = mtimes(work, untouched)
    result, text = rerun(work, targets, profile, config, cluster)
    assert result.returncode == 0, text[-5000:]
    assert ran_jobs(text) == rules, text[-3000:]
    assert mtimes(work, untouched) == before
    return text


def test_cancelled_job_fails_the_run_and_its_half_written_output_is_redone(slurm_cluster, slurm_profile,
                                                                            demo_results, tmp_path):
    """scancel while evaluate_full runs, its output half written: the run fails with CANCELLED and the logs,
    the half-written file is not kept, and the rerun redoes evaluate_full alone."""
    work = fresh_copy(demo_results, tmp_path / "work")
    config = fault_config(tmp_path / "config.yaml")
    run, slurm_id = start_full_model_job(work, slurm_profile, config, slurm_cluster)
    write_half(work / FULL)
    subprocess.run(["scancel", slurm_id], env=cluster_env(slurm_cluster), check=True)
    assert run.wait() != 0
    text = run.text()
    assert scontrol_job(slurm_cluster, slurm_id)["JobState"] == "CANCELLED"
    assert_says_which_job_failed(text, "evaluate_full", slurm_id, "CANCELLED")
    assert not (work / FULL).exists(), "a half-written output was kept"
    untouched = [RESULTS / "importance.csv", Path("results/demo/models/mnli/config.json")]
    assert_rerun_redoes_only(work, [FULL], slurm_profile, config, slurm_cluster, {"evaluate_full": 1}, untouched)
    assert json.loads((work / FULL).read_text())["study"] == STUDY


def test_job_over_its_memory_request_is_killed_and_named(slurm_cluster, slurm_profile, demo_results, tmp_path):
    """evaluate_full asking for 200 MB: SLURM kills it, the run names its state and its SLURM log, which says
    why; nothing of it is kept."""
    work = fresh_copy(demo_results, tmp_path / "work")
    small = fault_config(tmp_path / "small.yaml", evaluate={"gpu": 0, "mem_mb": 200, "runtime": 10})
    (work / FULL).unlink()
    result = snakemake(work, str(FULL), "--profile", str(slurm_profile), configfile=small,
                       env=cluster_env(slurm_cluster), timeout=600)
    text = result.stdout + result.stderr
    assert result.returncode != 0, text[-4000:]
    (slurm_id,) = submitted(text).values()
    # With cgroups SLURM ends such a job OUT_OF_MEMORY; here (no cgroups: jobacct_gather's OverMemoryKill)
    # slurmstepd kills the job step and the job ends FAILED. Either way the run names the state, and the
    # job's SLURM log, which it names, says why.
    state = scontrol_job(slurm_cluster, slurm_id)["JobState"]
    assert state in ("OUT_OF_MEMORY", "FAILED"), state
    assert_says_which_job_failed(text, "evaluate_full", slurm_id, state)
    assert "exceeded memory limit" in slurm_log(text, slurm_id).read_text(), slurm_log(text, slurm_id).read_text()
    # and the run itself says so (headprune.io.slurm_logs, from the onerror handler): Snakemake shows no
    # SLURM log after an empty rule log
    said = text.split("What SLURM said about the jobs that failed", 1)[-1]
    assert f"{slurm_id}.log:" in said and "exceeded memory limit" in said, text[-4000:]
    assert not (work / FULL).exists()
    # (the rerun, with the config's memory again, is the cancelled job's: it redoes this job alone)


def test_job_whose_node_goes_away_fails_the_run_and_the_rerun_completes_it(slurm_cluster, slurm_profile,
                                                                          demo_results, tmp_path):
    """slurmd stopped while a group's sbatch job runs (one of its jobs finished): its next job step cannot
    start (srun: 'Communication connection failure'), the sbatch job fails, the node goes down; slurmd starts
    again and the node comes back. The run fails naming the group and showing the SLURM log; the jobs that
    finished keep their outputs and the rerun redoes the others. (Should the sbatch job end before the node
    goes, the run simply completes.)"""
    work, config, targets, run, slurm_id, members = start_group(tmp_path, demo_results, slurm_profile, slurm_cluster)
    wait_for("a finished job in the group", lambda: any((work / p).exists() for p in members), 300, run)
    finished = inodes(work, members)
    slurm_cluster.stop_daemon("slurmd")
    try:
        wait_for("the node down", lambda: slurm_cluster.node_state().startswith("down"), 120)
    finally:
        slurm_cluster.start_slurmd()
    code = run.wait()
    text = run.text()
    state = scontrol_job(slurm_cluster, slurm_id)["JobState"]
    if code != 0:
        assert state in ("FAILED", "NODE_FAIL"), state
        assert "Error in group ablation_mnli" in text, text[-4000:]
        assert re.search(rf"log: \S*\.snakemake/slurm_logs/\S+/{slurm_id}\.log", text), text[-4000:]
        kept = inodes(work, members)
        assert {p: kept.get(p) for p in finished} == finished, "the group's finished jobs lost their outputs"
        missing = GROUP_SIZE - len(kept)
        assert_rerun_redoes_only(work, targets, slurm_profile, config, slurm_cluster,
                                 {"ablate_head": missing} if missing else {}, list(kept))
    else:
        assert state == "COMPLETED", state
    for path in members:
        complete_json(work / path)


def test_requeued_job_runs_again_and_the_run_completes(slurm_cluster, slurm_profile, demo_results, tmp_path):
    """scontrol requeue of a group's sbatch job after two of its jobs finished: SLURM runs it again from the
    start, the run completes, and every output is complete."""
    work = fresh_copy(demo_results, tmp_path / "work")
    config = fault_config(tmp_path / "config.yaml")
    targets = [head_output(h) for h in HEADS[GROUP_SIZE:]]
    run = Run(work, targets, slurm_profile, config, slurm_cluster)
    (slurm_id,) = wait_for("submission", lambda: list(submitted(run.text()).values()) or None, 120, run)
    members = targets_of(slurm_cluster, slurm_id)
    wait_for("two finished jobs in the group", lambda: sum((work / p).exists() for p in members) >= 2, 300, run)
    subprocess.run(["scontrol", "requeue", slurm_id], env=cluster_env(slurm_cluster), check=True)
    # SLURM holds a requeued job back for a while (BeginTime); let it start again now
    wait_for("the job pending again", lambda: scontrol_job(slurm_cluster, slurm_id)["JobState"] == "PENDING", 60)
    subprocess.run(["scontrol", "update", f"JobId={slurm_id}", "StartTime=now"], env=cluster_env(slurm_cluster),
                   check=True)
    code = run.wait()
    text = run.text()
    record = scontrol_job(slurm_cluster, slurm_id)
    assert code == 0, text[-5000:]
    assert record["JobState"] == "COMPLETED" and int(record["Restarts"]) == 1, record
    for path in members:
        complete_json(work / path)
    result, text = rerun(work, targets, slurm_profile, config, slurm_cluster)
    assert result.returncode == 0 and "Nothing to be done" in text, text[-3000:]


def test_commits_bring_back_only_what_finished_jobs_wrote_in_this_run(tmp_path, monkeypatch):
    """headprune.io.commits without a cluster: a committed output removed by Snakemake comes back (same file,
    same mtime); an output never committed (a job killed mid-write) does not; onstart's clear() forgets
    commits of earlier runs."""
    from headprune.io import commits

    monkeypatch.chdir(tmp_path)
    finished, killed, earlier = Path("results/a.json"), Path("results/b.json"), Path("results/c.json")
    finished.parent.mkdir()
    earlier.write_text("{}")
    commits.commit([earlier, "results/missing.json"])
    commits.clear()  # onstart of the next run
    finished.write_text('{"done": 1}')
    mtime = finished.stat().st_mtime_ns
    assert commits.commit([finished, finished.parent]) == [finished]
    killed.write_text('{"half')
    for path in (finished, killed, earlier):
        path.unlink()  # Snakemake's cleanup of the failed group job
    assert commits.restore() == [finished]  # onerror
    assert finished.read_text() == '{"done": 1}' and finished.stat().st_mtime_ns == mtime
    assert not killed.exists() and not earlier.exists() and not commits.FOLDER.exists()


def test_slurm_logs_say_why_slurm_ended_a_job(tmp_path):
    """headprune.io.slurm_logs on SLURM logs as slurmstepd and srun write them: the reasons of this run's
    failed jobs, none from a log older than the run or from a job SLURM did not end."""
    import os

    from headprune.io import slurm_logs

    folder = tmp_path / ".snakemake" / "slurm_logs"
    oom = folder / "rule_evaluate_full" / "mnli" / "7.log"
    cancelled = folder / "group_ablation_mnli_ablate_head" / "8.log"
    fine = folder / "rule_importance" / "mnli" / "9.log"
    old = folder / "rule_importance" / "mnli" / "3.log"
    for path, text in [
        (oom, "host: vm\nrule evaluate_full:\nslurmstepd: error: StepId=7.0 exceeded memory limit (349396992 > "
              "209715200), being killed\nsrun: error: vm: task 0: Killed\n"),
        (cancelled, "rule ablate_head:\nslurmstepd: error: *** JOB 8 ON vm CANCELLED AT 2026-11-25T03:01:02 ***\n"),
        (fine, "rule importance:\nFinished job 0.\n"),
        (old, "slurmstepd: error: *** JOB 3 ON vm DUE TO TIME LIMIT ***\n")]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    os.utime(old, (1, 1))  # a log of an earlier run
    found = slurm_logs.reasons(since=1000, folder=folder)
    assert found == {
        oom: ["slurmstepd: error: StepId=7.0 exceeded memory limit (349396992 > 209715200), being killed",
              "srun: error: vm: task 0: Killed"],
        cancelled: ["slurmstepd: error: *** JOB 8 ON vm CANCELLED AT 2026-11-25T03:01:02 ***"]}
    report = slurm_logs.report(since=1000, folder=folder)
    assert report.startswith("What SLURM said") and f"    {oom}:" in report
    assert slurm_logs.report(since=1000, folder=tmp_path / "nothing") == ""


def test_the_tests_snakemake_asks_slurm_every_few_seconds():
    """tests/slurm_poll: under the SLURM tests' environment the executor's status interval is capped (the plugin's
    own growth, +10 s a query, would make the tests wait for the poll), and nowhere else."""
    from slurm_helpers import POLL, poll_env

    probe = ("from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor as R\n"
             "from types import SimpleNamespace\n"
             "e = SimpleNamespace()\n"
             "R.next_seconds_between_status_checks.fset(e, 42)\n"
             "print(e._next_seconds_between_status_checks)\n")
    capped = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **poll_env()}, capture_output=True,
                            text=True, check=True).stdout.split()
    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert float(*capped) == float(POLL["HEADPRUNE_TEST_MAX_STATUS_INTERVAL"]) and plain == ["42"]
