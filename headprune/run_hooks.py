"""What the workflow does when a run starts, succeeds or fails (rules/hooks.smk calls these).

- Every run: the outputs committed by finished cluster jobs (``headprune.io.commits``) are forgotten at the
  start and at success, and put back when a run fails; a failed run prints what SLURM said about its failed
  jobs (``headprune.io.slurm_logs``).
- A local run drops Snakemake's job rate limiter (``--max-jobs-per-timespan``, default 100 per second). With
  it, Snakemake runs its scheduler again every timespan whatever happened, and every run of the scheduler
  stats each input of each job that is ready: on the demo (2 cores, 188 jobs, often dozens ready) that was
  57 of its ~650 CPU-seconds. Jobs started here come far below 100 a second, so the limit never binds; without
  it the scheduler runs when a job ends. Cluster executors keep it (it paces sbatch).
"""
from __future__ import annotations


def on_start(workflow) -> None:
    from headprune.io import commits

    commits.clear()
    if drop_local_rate_limit(workflow):
        print("headprune: a local run: Snakemake schedules when a job ends, without its job rate limiter "
              "(headprune.run_hooks)")


def on_success() -> None:
    from headprune.io import commits

    commits.clear()


def on_error(run_started: float) -> None:
    from headprune.io import commits, slurm_logs

    said = slurm_logs.report(run_started)
    if said:
        print(said)
    restored = commits.restore()
    if restored:
        print(f"Kept {len(restored)} output(s) of finished jobs of failed job groups (headprune.io.commits):\n"
              + "\n".join(f"    {path}" for path in restored))


def drop_local_rate_limit(workflow) -> bool:
    """Switch off the job rate limiter of a local run's scheduler (Snakemake 9's ``JobScheduler.job_rate_limiter``,
    set before the first scheduling round); True if it did. A cluster run, or a Snakemake without that
    attribute, is left as it is."""
    scheduler = getattr(workflow, "scheduler", None)
    if not workflow.local_exec or getattr(scheduler, "job_rate_limiter", None) is None:
        return False
    scheduler.job_rate_limiter = None
    return True
