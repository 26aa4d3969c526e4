"""Why SLURM ended a failed job, in the run's own output (issue #25).

Snakemake prints a failed job's rule log, and the SLURM executor the job's state, but not always why: a
job killed for its memory ends FAILED where cgroups are off, and Snakemake stops showing logs at the first
empty one; for a failed job group it drops the plugin's message altogether. What SLURM says lies in the
sbatch job's own log (``.snakemake/slurm_logs/...``): slurmstepd's "exceeded memory limit", "CANCELLED",
"DUE TO TIME LIMIT", srun's connection failures. ``reasons(since)`` collects those lines from the logs
written during this run; the workflow's ``onerror`` handler prints them.

Imports only the standard library.
"""
from __future__ import annotations

import re
from pathlib import Path

FOLDER = Path(".snakemake") / "slurm_logs"  # the executor plugin's default log folder, under the workdir

# What SLURM and its tools write when they end a job or a step for a reason of their own.
REASON = re.compile(r"slurmstepd: error:.*|\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED.*|srun: error:.*"
                    r"|.*(?:exceeded memory limit|[Oo]ut [Oo]f [Mm]emory|oom[-_]kill|NODE_FAIL|DUE TO TIME LIMIT"
                    r"|DUE TO PREEMPTION|DUE TO NODE FAILURE).*")


def reasons(since: float, folder: Path = FOLDER, limit: int = 5) -> dict[Path, list[str]]:
    """{SLURM log: its lines that say why SLURM ended the job} for the logs changed at or after ``since``
    (a time.time()), at most ``limit`` lines each."""
    found = {}
    if not Path(folder).is_dir():
        return found
    for log in sorted(Path(folder).rglob("*.log")):
        try:
            if log.stat().st_mtime < since:
                continue
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        said = [line.strip() for line in lines if REASON.fullmatch(line.strip())]
        if said:
            found[log] = said[:limit]
    return found


def report(since: float, folder: Path = FOLDER) -> str:
    """The lines of ``reasons`` as the run prints them ('' when SLURM said nothing)."""
    found = reasons(since, folder)
    if not found:
        return ""
    out = ["What SLURM said about the jobs that failed (their SLURM logs):"]
    for log, lines in found.items():
        out.append(f"    {log}:")
        out += [f"        {line}" for line in lines]
    return "\n".join(out)
