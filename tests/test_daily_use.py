"""Daily use: after a change, only what it touches reruns; a GLUE task is one config entry; one GPU per job.

The rerun tests dry-run (``snakemake -n``) against the finished demo (the session's ``demo_run``)
and read the scheduler's own 'Job stats' table. Snakemake 9 reruns a job when its ``params``,
its input files, its script (by mtime), its code or its software environment change (the
default ``--rerun-triggers``); so a setting reruns exactly the rules that pass it in ``params``
and what depends on their outputs. The expected sets are what ``--forcerun <rule>`` (that rule
and everything downstream of it) lists, so the tests follow the DAG as it grows.
"""
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from dry_run import DEMO_CONFIG, job_stats, planned_jobs, write_config

ROOT = Path(__file__).resolve().parents[1]
# Rules that come before pruning and the figures: a pruning or figure setting must not rerun them
# (data, models, fine-tuning or training, importance, the single-head ablation).
UPSTREAM = re.compile(r"^(demo_|fetch_|prepare_)|finetune|train|importance|evaluate|ablat|significance")


def upstream_rules(stats):
    return {rule for rule in stats if UPSTREAM.search(rule) and not rule.startswith("plot_")}


# --- helpers -------------------------------------------------------------------------------


def snakemake(workdir, *args, configfile=DEMO_CONFIG, snakefile=ROOT / "Snakefile", timeout=600, env=None):
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir),
               "--configfile", str(configfile), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def dry_run(workdir, *args, **kwargs):
    """(job stats {rule: count}, [(rule, wildcards)]) of a dry run; {} when there is nothing to do."""
    result = snakemake(workdir, "--dry-run", *args, **kwargs)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-5000:]
    return job_stats(text), planned_jobs(text)


def rules_in(smk):
    """{rule name: script path} for every rule of a rules file."""
    text = (ROOT / "rules" / smk).read_text()
    rules = {}
    for block in re.split(r"^(?=[ \t]*rule \w+:)", text, flags=re.M)[1:]:
        name = re.match(r"[ \t]*rule (\w+):", block).group(1)
        script = re.search(r'script:\s*\n\s*"([^"]+)"', block)
        rules[name] = str((ROOT / "rules" / script.group(1)).resolve()) if script else None
    return rules


@pytest.fixture(scope="module")
def finished_demo(demo_run):
    """The finished demo; a dry run of it has nothing to do (else every test below would mean nothing)."""
    stats, _ = dry_run(demo_run)
    assert stats == {}, f"the finished demo is not up to date: {stats}"
    return demo_run


# --- 3. rerun only what is stale ------------------------------------------------------------


def test_figure_script_change_reruns_only_that_figure(finished_demo, tmp_path):
    """A newer plot_ablation.py reruns Table 1 / Figure 1 of each study and nothing else."""
    figure_rules = rules_in("figures.smk")
    script = ROOT / "scripts" / "plot_ablation.py"
    using = {rule for rule, path in figure_rules.items() if path == str(script)}
    assert "plot_ablation" in using
    # A copy of the workflow (mtimes kept), so the change stays out of the checkout.
    workflow = tmp_path / "workflow"
    workflow.mkdir()
    for name in ("Snakefile", "rules", "scripts", "report", "envs"):
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, workflow / name)
        elif source.exists():
            shutil.copy2(source, workflow / name)
    copy = workflow / "scripts" / script.name
    copy.write_text(copy.read_text() + "\n# a change\n")
    later = time.time() + 5
    os.utime(copy, (later, later))

    stats, jobs = dry_run(finished_demo, snakefile=workflow / "Snakefile")
    expected, _ = dry_run(finished_demo, "--forcerun", *sorted(using))
    assert stats == expected
    assert set(stats) == using | {"all"}
    assert stats["plot_ablation"] == len(yaml.safe_load(DEMO_CONFIG.read_text())["experiments"]["ablation"])


def test_figure_style_change_reruns_only_figures(finished_demo, tmp_path):
    """figures.style reaches the figure jobs only: none of the computation reruns."""
    config = write_config(tmp_path / "config.yaml", lambda c: c["figures"]["style"].update(dpi=150))
    stats, _ = dry_run(finished_demo, configfile=config)
    figure_rules = set(rules_in("figures.smk")) | {rule for rule in list_rules(finished_demo) if rule.startswith("plot_")}
    assert {"plot_ablation", "plot_pruning"} <= set(stats)
    assert set(stats) <= figure_rules | {"all"}, f"a style change reran {set(stats) - figure_rules - {'all'}}"


def list_rules(workdir):
    result = snakemake(workdir, "--list-rules")
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split()


def test_pruning_setting_change_reruns_pruning_and_what_follows(finished_demo, tmp_path):
    """pruning.step_percent reruns every pruning job and what depends on it, not fine-tuning or ablation."""
    config = write_config(tmp_path / "config.yaml", lambda c: c["pruning"].update(step_percent=20))
    stats, _ = dry_run(finished_demo, configfile=config)
    # Every job of the pruning rules, and everything downstream of them:
    # (roles_by_step follows the I_h pruning steps, so plot_head_roles takes pruning.step_percent too; so does
    # each masking mode's sweep, which prunes in the importance order at those steps)
    pruning_rules = [rule for rule in list_rules(finished_demo)
                     if "prune" in rule or "pruning" in rule or rule in ("plot_head_roles", "masking_mode")]
    downstream, _ = dry_run(finished_demo, "--forcerun", *pruning_rules)
    assert stats["prune"] == downstream["prune"]
    assert not upstream_rules(stats), f"a pruning setting reran {upstream_rules(stats)}"
    assert set(stats) <= set(downstream) and all(stats[rule] <= downstream[rule] for rule in stats), (stats, downstream)


# --- 4. a GLUE task is one config entry ------------------------------------------------------


def ablation_jobs_per_bert_study(config):
    """One single-head ablation job per head, or per ablation.heads_per_job heads."""
    heads = config["bert"]["layers"] * config["bert"]["heads"]
    per_job = config.get("ablation", {}).get("heads_per_job", 1)
    return -(-heads // per_job)


def add_task(config, name, entry):
    config["glue"][name] = entry
    for experiment in ("ablation", "pruning"):
        config["experiments"][experiment].append(name)


def test_one_glue_entry_adds_the_whole_study(finished_demo, tmp_path):
    """A new study of the demo's SST-2-like task (published by the demo, used only by Figure 6 so far):
    one glue entry, named in experiments, and nothing else."""
    entry = {"task": "SST-2", "url": "data/demo/upstream/glue/SST-2.zip", "sha256": None}
    config = write_config(tmp_path / "config.yaml", lambda c: add_task(c, "sentiment", entry))
    demo = yaml.safe_load(DEMO_CONFIG.read_text())
    stats, jobs = dry_run(finished_demo, configfile=config)
    # Its data was published by the demo rule already: nothing upstream of the new task reruns.
    expected = {"prepare_glue": 1, "finetune": 1, "importance": 1, "evaluate_full": 1,
                "ablate_head": ablation_jobs_per_bert_study(demo),
                # orders_per_job orders a job; the oracle order, which waits for the ablation, alone
                "prune": -(-(len(demo["pruning"]["orders"]) - 1) // demo["pruning"].get("orders_per_job", 1)) + 1,
                "collect_pruning": 1, "plot_ablation": 1, "plot_pruning": 1}
    for rule, count in expected.items():
        assert stats.get(rule) == count, (rule, stats)
    assert stats.get("significance", 0) >= 1
    # Every job is the new task's, except the default target and the figures and scorecard that draw every
    # study together.
    for rule, wildcards in jobs:
        if wildcards:
            assert "sentiment" in wildcards.values(), (rule, wildcards)
        else:
            assert rule in ("all", "scorecard") or rule.startswith("plot_"), rule


def readme_glue_entries():
    """The YAML blocks of the README's 'Adding a GLUE task' section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Adding a GLUE task", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    return [yaml.safe_load(block)["glue"] for block in blocks]


def test_readme_glue_entries_plan_their_jobs(tmp_path):
    """What the README tells a user to write for RTE and QNLI validates and plans that task's study."""
    entries = {name: spec for block in readme_glue_entries() for name, spec in block.items()}
    assert {"rte", "qnli"} <= set(entries)
    demo = yaml.safe_load(DEMO_CONFIG.read_text())
    for name in ("rte", "qnli"):
        entry = entries[name]
        config = write_config(tmp_path / f"{name}.yaml", lambda c: add_task(c, name, entry))
        stats, jobs = dry_run(tmp_path / "empty", configfile=config)
        study_jobs = {rule for rule, wildcards in jobs if name in wildcards.values()}
        assert {"prepare_glue", "finetune", "importance", "ablate_head", "prune", "plot_ablation",
                "plot_pruning"} <= study_jobs, (name, study_jobs)
        assert sum(1 for rule, w in jobs if rule == "ablate_head" and w.get("study") == name) == \
            ablation_jobs_per_bert_study(demo)


# --- 1. the local profile: one GPU per job ------------------------------------------------------


CLAIM = textwrap.dedent("""
    import os, sys, time
    from headprune.models.gpus import claim_gpus, NoFreeGPU
    try:
        got = claim_gpus(count=int(sys.argv[1]), lock_dir=sys.argv[2], wait=float(sys.argv[3]), poll=0.1)
    except NoFreeGPU as error:
        print("NOFREE", error, flush=True)
        sys.exit(3)
    print("GOT", got, os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
    time.sleep(float(sys.argv[4]))
""")


def claim_in_process(lock_dir, count=2, wait=0.0, hold=30.0):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    return subprocess.Popen([sys.executable, "-c", CLAIM, str(count), str(lock_dir), str(wait), str(hold)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_parallel_jobs_get_different_gpus_and_a_third_is_refused(tmp_path):
    first, second = claim_in_process(tmp_path), claim_in_process(tmp_path)
    try:
        lines = [first.stdout.readline().split(), second.stdout.readline().split()]
        assert [line[0] for line in lines] == ["GOT", "GOT"], lines
        assert sorted(line[-1] for line in lines) == ["0", "1"]  # CUDA_VISIBLE_DEVICES of each
        third = claim_in_process(tmp_path, hold=0)
        out, _ = third.communicate(timeout=60)
        assert third.returncode == 3 and "all 2 GPUs are claimed" in out and "--resources gpu=2" in out, out
        # A waiting job gets the GPU a finished job gives back (the lock dies with its process).
        waiting = claim_in_process(tmp_path, wait=30, hold=0)
        time.sleep(1)
        first.kill()
        first.wait()
        out, _ = waiting.communicate(timeout=60)
        assert waiting.returncode == 0 and out.split()[-1] == lines[0][-1], out
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


def test_claim_leaves_scheduler_choice_alone(monkeypatch, tmp_path):
    from headprune.models import gpus

    monkeypatch.setattr(gpus, "_held", {})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert gpus.claim_gpus(count=4, lock_dir=tmp_path) is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert gpus.claim_gpus(count=4, lock_dir=tmp_path) is None
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    monkeypatch.delenv("SLURM_JOB_ID")
    assert gpus.claim_gpus(count=0, lock_dir=tmp_path) is None  # no GPU: nothing to claim
    # A job that declares gpu=0 sees no GPU, and never takes one from a GPU job.
    assert gpus.claim_gpus(0, count=4, lock_dir=tmp_path) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert not list(tmp_path.glob("*.lock"))


def test_pick_device_claims_before_cuda_starts(monkeypatch, tmp_path):
    from headprune.models import gpus
    from headprune.models.loading import pick_device

    calls = []
    monkeypatch.setattr(gpus, "claim_gpus", lambda n=None, **kw: calls.append(n))
    assert pick_device("cpu").type == "cpu" and calls == []
    pick_device("auto")
    assert calls == [None]  # the job's own gpu resource decides how many


def test_snakemake_jobs_claim_as_many_gpus_as_their_gpu_resource(tmp_path):
    """In a real script: job, the claim reads the job's `gpu` resource; two GPU jobs get two devices."""
    (tmp_path / "claim.py").write_text(textwrap.dedent("""
        import os, pathlib, time
        from headprune.models.gpus import claim_gpus, job_gpus
        claim_gpus(count=2, lock_dir=snakemake.params.locks)
        if job_gpus():  # hold the GPU until the other GPU job has claimed one too
            marks = pathlib.Path("marks")
            marks.mkdir(exist_ok=True)
            (marks / str(os.getpid())).touch()
            deadline = time.time() + 120
            while len(list(marks.iterdir())) < 2 and time.time() < deadline:
                time.sleep(0.1)
        with open(snakemake.output[0], "w") as out:
            out.write(f"{job_gpus()} {os.environ['CUDA_VISIBLE_DEVICES']!r}")
    """))
    (tmp_path / "Snakefile").write_text(textwrap.dedent("""
        rule all:
            input: "gpu_a.txt", "gpu_b.txt", "cpu.txt"
        rule gpu_job:
            output: "gpu_{name}.txt"
            params: locks="locks"
            resources: gpu=1
            script: "claim.py"
        rule cpu_job:
            output: "cpu.txt"
            params: locks="locks"
            resources: gpu=0
            script: "claim.py"
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    result = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "3", "--resources", "gpu=2",
                             "--directory", str(tmp_path), "--snakefile", str(tmp_path / "Snakefile")],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    gpu_jobs = sorted((tmp_path / f"gpu_{name}.txt").read_text() for name in "ab")
    assert gpu_jobs == ["1 '0'", "1 '1'"]
    assert (tmp_path / "cpu.txt").read_text() == "0 ''"


def test_local_profile_limits_gpu_jobs():
    profile = yaml.safe_load((ROOT / "profiles" / "local" / "config.yaml").read_text())
    assert isinstance(profile["resources"]["gpu"], int) and profile["resources"]["gpu"] >= 1
    assert "executor" not in profile
