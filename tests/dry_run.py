"""Reading what `snakemake --dry-run` prints, and writing demo configs to run it with (test helpers)."""
import re
from pathlib import Path

import yaml

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "demo" / "config.yaml"


def job_stats(text):
    """The scheduler's 'Job stats' table: {rule: count}, without the total (checked against the sum);
    {} when there is nothing to do."""
    if "Job stats:" not in text:
        assert "Nothing to be done" in text, text[-3000:]
        return {}
    stats = {}
    for line in text.split("Job stats:", 1)[1].splitlines()[3:]:
        fields = line.split()
        if len(fields) != 2:
            break
        stats[fields[0]] = int(fields[1])
    total = stats.pop("total")
    assert sum(stats.values()) == total, stats
    return stats


def planned_jobs(text, field="wildcards"):
    """[(rule, {key: value})] for every job a dry run lists: its wildcards, or its resources.

    A job in a group (rules/ablation.smk's `group:`) is listed indented under 'Group job <name>'."""
    jobs = []
    for block in re.split(r"^(?=[ \t]*(?:local)?rule \w+:)", text, flags=re.M)[1:]:
        rule = re.match(r"[ \t]*(?:local)?rule (\w+):", block).group(1)
        match = re.search(rf"^\s+{field}: (.*)$", block, flags=re.M)
        jobs.append((rule, dict(item.split("=", 1) for item in match.group(1).split(", ")) if match else {}))
    return jobs


def write_config(path, edit=lambda config: None, base=DEMO_CONFIG):
    """A copy of `base` (the demo config) changed by ``edit(config)``."""
    config = yaml.safe_load(Path(base).read_text())
    edit(config)
    Path(path).write_text(yaml.safe_dump(config, sort_keys=False))
    return path


WORKFLOW = ("Snakefile", "rules", "headprune", "scripts", "demo", "report", "envs", "config.yaml")


def copy_workflow(dest: Path) -> Path:
    """The workflow's files (what a dry run reads) copied into ``dest``, for a test that adds files to it."""
    import shutil

    root = DEMO_CONFIG.parents[1]
    dest.mkdir(parents=True)
    for name in WORKFLOW:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, dest / name)
    return dest
