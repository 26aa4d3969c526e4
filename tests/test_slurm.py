"""profiles/slurm on a real SLURM cluster: one node on 127.0.0.1, started for these tests (tests/slurm_cluster.py).

The cluster tests need Debian's SLURM (slurmctld slurmd slurm-client munge) and root; without
them they are skipped with the reason. CI (.ci/run) installs the packages and sets
HEADPRUNE_REQUIRE_SLURM=1, which turns that skip into a failure.

The part of the demo that runs under SLURM is the single-head ablation of the MNLI study
(Table 1: the full model, the head ablation jobs, the significance tests), its one head per layer
(Tables 2-3) and its head importance: the jobs a cluster is for. They start from the session's
local demo run (its fine-tuned model, copied with the data), run through sbatch, and must give the
local run's numbers exactly. The ablation jobs (ablate_head, one_head_layer) go several to an
sbatch job (the job group `ablation_{study}`, group-components in the profile).
"""
import json
import math
import re
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dry_run import DEMO_CONFIG, planned_jobs, write_config
from slurm_cluster import PARTITION
from slurm_helpers import (PROFILE, ROOT, cluster_env, copy_run, jobs_in_sbatch_job, module_cluster,  # noqa: F401
                           scontrol_job, snakemake, submitted, time_limit, write_test_profile)

STUDY = "mnli"
# The rules of the part that runs under SLURM (and everything downstream of them among the targets).
SLURM_PART = ("importance", "evaluate_full", "ablate_head", "one_head_layer")
# The job group of a study's ablation jobs (rules/ablation.smk), as the profile's group-components names it.
GROUP = "ablation_{study}"
GROUPED_RULES = ("ablate_head", "one_head_layer")
# The rules of that part whose jobs load the study's model and whose resources name no mem_mb: they ask SLURM for
# the memory their jobs will use (headprune.models.memory.job_mb), not resources.default's
LOADS_THE_MODEL = ("importance", "evaluate_full")


# --- 1. the profile (no cluster needed) -----------------------------------------------------


def test_profile_sets_partition_and_account_in_one_place():
    from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options

    text = (PROFILE / "config.yaml").read_text()
    profile = yaml.safe_load(text)
    assert profile["executor"] == "slurm"
    assert {"slurm_partition", "slurm_account"} <= set(profile["default-resources"])
    # the one place: nowhere else in the profile
    assert len(re.findall(r"^\s*slurm_partition:", text, flags=re.M)) == 1
    assert len(re.findall(r"^\s*slurm_account:", text, flags=re.M)) == 1
    # mem_mb, runtime and gpu come from config.yaml, not from the profile
    for key in ("mem_mb", "runtime", "gpu", "mem_mb_per_cpu"):
        assert key not in profile["default-resources"], key
    extras = [profile["default-resources"].get("slurm_extra", "")] + \
             [r.get("slurm_extra", "") for r in (profile.get("set-resources") or {}).values()]
    for extra in filter(None, extras):
        for pattern, name in get_forbidden_slurm_options().items():
            assert not re.search(pattern, extra), f"slurm_extra sets the plugin-managed {name}"
    readme = (ROOT / "README.md").read_text().split("## Running on SLURM", 1)[1].split("\n## ", 1)[0]
    for word in ("profiles/slurm/config.yaml", "slurm_partition", "slurm_account", "profiles/local",
                 "group-components", GROUP):
        assert word in readme, word


def test_profile_groups_a_studys_ablation_jobs_and_sizes_groups_for_jobs_in_series():
    """The group the rules name gets group-components > 1; each job takes the one group_slot of its group job,
    a limit per group job (local scope), so that Snakemake sizes a group for its jobs run one after another."""
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert profile["group-components"][GROUP] > 1
    smk = (ROOT / "rules" / "ablation.smk").read_text()
    for rule in GROUPED_RULES:
        block = smk.split(f"rule {rule}:", 1)[1].split("\nrule ", 1)[0]
        assert re.search(rf'group:\s*\n\s*"{re.escape(GROUP)}"', block), rule
    assert smk.count("group:") == len(GROUPED_RULES)
    assert profile["default-resources"]["group_slot"] == 1
    assert profile["resources"] == {"group_slot": 1}
    assert profile["set-resource-scopes"] == {"group_slot": "local"}


def group_members(text):
    """[(group name, [(rule, wildcards)])] for every 'Group job' a dry run lists: its jobs are indented, up to
    the next job or group (a time stamp at the start of a line) or the end of the plan."""
    groups = []
    headers = list(re.finditer(r"Group job (\S+) \(jobs in lexicogr\. order\):\n", text))
    for header, following in zip(headers, headers[1:] + [None]):
        body = text[header.end():following.start() if following else len(text)]
        body = re.split(r"^(?:\[|(?:local)?rule |Job stats|This was a dry-run)", body, maxsplit=1, flags=re.M)[0]
        groups.append((header.group(1), planned_jobs(body)))
    return groups


def test_ablation_jobs_are_grouped_per_study(tmp_path):
    """Dry run through the profile, one job per head: each sbatch job takes up to N ablation jobs of ONE study,
    and every other job stays alone."""
    size = yaml.safe_load((PROFILE / "config.yaml").read_text())["group-components"][GROUP]
    config = write_config(tmp_path / "config.yaml", lambda c: c["ablation"].update(heads_per_job=1))
    result = snakemake(tmp_path / "work", "--dry-run", "--profile", str(PROFILE), configfile=config)
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    planned = planned_jobs(text)
    grouped = [(rule, wildcards) for rule, wildcards in planned if rule in GROUPED_RULES]
    groups = group_members(text)
    assert len(grouped) > 2 * size
    assert sorted(repr(job) for _, members in groups for job in members) == sorted(map(repr, grouped))
    per_study = {}
    for name, members in groups:
        studies = {wildcards["study"] for _, wildcards in members}
        assert len(studies) == 1 and name == GROUP.format(study=studies.pop()), (name, members)
        assert 1 <= len(members) <= size and {rule for rule, _ in members} <= set(GROUPED_RULES)
        per_study.setdefault(name, []).append(len(members))
    for name, sizes in per_study.items():
        assert len(sizes) == math.ceil(sum(sizes) / size), (name, sizes)


def test_every_job_takes_gpu_memory_and_runtime_from_config(tmp_path):
    """Dry run with made-up resources: every job (but the target rule `all`) shows the config's values."""
    def edit(config):
        config["resources"] = {"default": {"gpu": 0, "mem_mb": 1234, "runtime": 77},
                               "finetune": {"gpu": 1, "mem_mb": 4321, "runtime": 99}}
    config = write_config(tmp_path / "config.yaml", edit)
    result = snakemake(tmp_path / "work", "--dry-run", configfile=config)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = [(rule, res) for rule, res in planned_jobs(result.stdout + result.stderr, "resources") if rule != "all"]
    assert len(jobs) > 20
    for rule, resources in jobs:
        expected = ("4321", "99", "1") if rule == "finetune" else ("1234", "77", "0")
        assert (resources.get("mem_mb"), resources.get("runtime"), resources.get("gpu", "0")) == expected, \
            (rule, resources)


# --- 2. a real cluster --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm_cluster():
    yield from module_cluster()


@pytest.fixture(scope="module")
def slurm_profile(tmp_path_factory):
    """profiles/slurm with the one edit a user makes (partition; this cluster has no accounts), and test speed."""
    return write_test_profile(tmp_path_factory.mktemp("profile"))


def test_ablation_study_runs_through_sbatch_and_equals_the_local_run(slurm_cluster, slurm_profile, demo_run,
                                                                       tmp_path):
    local = demo_run / "results" / "demo" / STUDY
    tables = sorted(p.relative_to(demo_run) for p in local.rglob("ablation.csv"))
    assert tables, f"no ablation table in {local}"
    one_head = Path(f"results/demo/{STUDY}/one_head_per_layer.csv")
    assert (demo_run / one_head).exists(), f"no {one_head} in {demo_run}"
    targets = [str(p) for p in tables] + [str(one_head), f"results/demo/{STUDY}/importance.csv"]
    work = copy_run(demo_run, tmp_path / "work")
    # Resources of our own (distinct for the ablation jobs), to see them arrive in SLURM; the demo's
    # thread counts stay (torch sums in another order on another number of threads). The ablation
    # jobs (ablate_head, one_head_layer) go to SLURM in groups of up to `size` (the profile's value).
    config = write_config(tmp_path / "config.yaml", lambda c: c["resources"].update(
        default={"gpu": 0, "mem_mb": 1800, "runtime": 9}, ablate={"gpu": 0, "mem_mb": 1500, "runtime": 7}))
    args = [*targets, "--profile", str(slurm_profile), "--forcerun", *SLURM_PART]

    plan = snakemake(work, *args, "--dry-run", configfile=config, env=cluster_env(slurm_cluster))
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = [rule for rule, _ in planned_jobs(plan.stdout + plan.stderr, "resources")]
    demo = yaml.safe_load(DEMO_CONFIG.read_text())
    heads = demo["bert"]["layers"] * demo["bert"]["heads"]
    assert planned.count("ablate_head") == -(-heads // demo["ablation"].get("heads_per_job", 1))
    assert planned.count("one_head_layer") == -(-demo["bert"]["layers"] // demo["ablation"].get("layers_per_job", 1))
    assert {"evaluate_full", "significance", "importance", "one_head_significance"} <= set(planned)
    assert not {"finetune", "demo_classification", "prepare_glue"} & set(planned), planned
    size = yaml.safe_load((slurm_profile / "config.yaml").read_text())["group-components"][GROUP]
    grouped = [rule for rule in planned if rule in GROUPED_RULES]
    alone = [rule for rule in planned if rule not in GROUPED_RULES]

    started, submitted_at = time.monotonic(), time.time()
    result = snakemake(work, *args, configfile=config, env=cluster_env(slurm_cluster))
    elapsed = time.monotonic() - started
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-6000:] + slurm_cluster.logs("slurmctld")
    print(f"{len(planned)} SLURM jobs in {elapsed:.0f} s")

    # Every job went through sbatch, and SLURM ran it to completion with the config's resources: the
    # ablation jobs up to `size` to an sbatch job, every other job alone. A group's jobs run one after
    # another, and it asks for that: the sum of their runtimes, the memory and CPUs of one.
    jobs = submitted(text)
    assert len(jobs) == len(alone) + math.ceil(len(grouped) / size) < len(planned), (jobs, planned)
    from headprune.models.memory import job_mb, parameters_on_disk
    from headprune.studies import Pipeline

    model = work / Pipeline.from_file(config).study(STUDY).model_path
    estimate = f"{job_mb(parameters_on_disk(model))}M"
    assert estimate != "1800M"
    print(f"{len(planned)} jobs in {len(jobs)} sbatch jobs")
    rules = []
    for slurm_id in jobs.values():
        record = scontrol_job(slurm_cluster, slurm_id)
        assert record["JobState"] == "COMPLETED" and record["Partition"] == PARTITION, record
        ran = jobs_in_sbatch_job(slurm_cluster, slurm_id)
        rules += ran
        if set(ran) & set(GROUPED_RULES):
            assert set(ran) <= set(GROUPED_RULES) and 1 <= len(ran) <= size, ran
            assert record["Comment"].startswith(f"rule_{GROUP.format(study=STUDY)}_"), record
            assert record["TimeLimit"] == time_limit(7 * len(ran)) and record["MinMemoryNode"] == "1500M", record
            assert record["MinCPUsNode"] == "1", record  # the CPUs of one job, not their sum
        else:
            assert len(ran) == 1, ran
            # a job that loads the model, with no mem_mb of its rule's, asks for its estimate; the others the default
            memory = estimate if ran[0] in LOADS_THE_MODEL else "1800M"
            assert record["TimeLimit"] == "00:09:00" and record["MinMemoryNode"] == memory, record
    assert sorted(rules) == sorted(planned)
    assert len(list((work / ".snakemake" / "slurm_logs").rglob("*.log"))) == len(jobs)

    # The same numbers as the local run.
    for path in tables + [one_head, Path(f"results/demo/{STUDY}/importance.csv")]:
        assert (work / path).stat().st_mtime > (demo_run / path).stat().st_mtime  # recomputed, not copied
        pd.testing.assert_frame_equal(pd.read_csv(work / path), pd.read_csv(demo_run / path), check_exact=True)
    recomputed = {folder: [p for p in (work / local.relative_to(demo_run) / folder).glob("*.json")
                           if p.stat().st_mtime >= submitted_at] for folder in ("ablation", "one_head")}
    assert len(recomputed["ablation"]) == planned.count("ablate_head")
    assert len(recomputed["one_head"]) == planned.count("one_head_layer")
    for path in recomputed["ablation"] + recomputed["one_head"]:
        original = demo_run / path.relative_to(work)
        assert json.loads(path.read_text()) == json.loads(original.read_text()), path.name


def test_failed_slurm_job_fails_the_run_and_shows_the_rule_log(slurm_cluster, slurm_profile, tmp_path):
    """A GLUE archive whose sha256 does not match: prepare_glue fails inside SLURM, the run fails, its log is shown."""
    work = tmp_path / "work"
    archive = work / "upstream" / "broken.zip"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"not the archive the checksum names")
    config = write_config(tmp_path / "config.yaml", lambda c: c["glue"].update(
        broken={"task": "SST-2", "url": "upstream/broken.zip", "sha256": "0" * 64}))
    result = snakemake(work, "data/demo/glue/broken", "--profile", str(slurm_profile), configfile=config,
                       env=cluster_env(slurm_cluster), timeout=600)
    text = result.stdout + result.stderr
    assert result.returncode != 0, text[-3000:]
    (slurm_id,) = submitted(text).values()
    assert scontrol_job(slurm_cluster, slurm_id)["JobState"] == "FAILED"
    assert "Error in rule prepare_glue" in text
    log = work / "results" / "demo" / "logs" / "prepare_glue" / "broken.log"
    assert "sha256 mismatch" in log.read_text()
    # --show-failed-logs (profiles/slurm): the rule's log is printed in the run's own output
    assert f"Logfile {log.relative_to(work)}" in text and "sha256 mismatch" in text, text[-3000:]
