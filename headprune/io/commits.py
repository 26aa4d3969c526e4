"""What a finished cluster job wrote survives the failure of its job group (issue #25).

Under SLURM a study's ablation jobs run several to an sbatch job (the job group ``ablation_{study}``,
profiles/slurm). When that sbatch job fails (cancelled, out of memory, its node lost, one of its jobs
failing), Snakemake 9 cleans the group up as one job: it removes the outputs of every job in it, also of
those that had finished, and records each as done before removing it. A per-job commit keeps that work:

- ``commit(outputs)``: a cluster job whose script succeeded hard-links each output file into
  ``.snakemake/headprune-finished/`` (same path below it; a copy with its mtime if a link cannot be made);
  headprune.workflow.logged() calls it when the script ends without an exception;
- ``restore()``: the workflow's ``onerror`` handler (rules/hooks.smk, headprune.run_hooks) links back every
  committed output Snakemake removed: the same file, its mtime unchanged, so the rerun takes it as done and redoes only
  the jobs that had not finished;
- ``clear()``: ``onstart`` and ``onsuccess`` empty the folder, so only this run's commits are ever restored.

A job killed mid-run commits nothing: its half-written output (removed by Snakemake) never comes back.

Imports only the standard library and headprune.io.atomic.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from headprune.io.atomic import atomic_path

FOLDER = Path(".snakemake") / "headprune-finished"


def _link(source: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest) as tmp:
        try:
            os.link(source, tmp)
        except OSError:  # another file system, or links not allowed: a copy with the same mtime
            shutil.copy2(source, tmp)


def commit(outputs, folder: Path = FOLDER) -> list[Path]:
    """Keep each output file (relative to the working directory) of a finished job; returns those kept."""
    kept = []
    for output in map(Path, outputs):
        if output.is_absolute() or not output.is_file():
            continue  # folders stay as they are (no grouped rule writes one)
        _link(output, folder / output)
        kept.append(output)
    return kept


def restore(folder: Path = FOLDER) -> list[Path]:
    """Put back every committed output that is missing now (removed with its failed group); then clear."""
    restored = []
    if folder.is_dir():
        for kept in sorted(folder.rglob("*")):
            if not kept.is_file() or kept.name.startswith("."):
                continue
            output = kept.relative_to(folder)
            if not output.exists():
                _link(kept, output)
                restored.append(output)
    clear(folder)
    return restored


def clear(folder: Path = FOLDER) -> None:
    shutil.rmtree(folder, ignore_errors=True)
