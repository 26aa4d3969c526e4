"""What runs when a run starts, succeeds or fails."""

import time

# When a run fails: what SLURM said about its failed jobs, from their SLURM logs written since the run
# started (headprune.io.slurm_logs), is printed. And a failed group's sbatch job makes Snakemake remove
# every output of the group, also of its jobs that had finished: those committed their outputs
# (headprune.io.commits, from headprune.workflow.logged), and a failed run puts them back, so the rerun
# redoes only the jobs that had not finished.
RUN_STARTED = time.time()


onstart:
    from headprune.io import commits

    commits.clear()
    # Snakemake's --max-jobs-per-timespan (default 100/1s) runs its scheduler again every timespan, and
    # every run of it stats each input of each ready job: 57 of the demo's ~650 CPU-seconds on 2 cores
    # (docs/performance.md). Jobs run here start far below 100 a second, so the limit never binds: a local
    # run drops it and schedules when a job ends. Cluster executors keep it.
    if workflow.local_exec and getattr(workflow.scheduler, "job_rate_limiter", None) is not None:
        workflow.scheduler.job_rate_limiter = None


onsuccess:
    from headprune.io import commits

    commits.clear()


onerror:
    from headprune.io import commits, slurm_logs

    said = slurm_logs.report(RUN_STARTED)
    if said:
        print(said)
    restored = commits.restore()
    if restored:
        print(f"Kept {len(restored)} output(s) of finished jobs of failed job groups (headprune.io.commits):\n"
              + "\n".join(f"    {path}" for path in restored))
