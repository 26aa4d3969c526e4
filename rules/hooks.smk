"""What runs when a run starts, succeeds or fails: headprune.run_hooks.

A failed run prints what SLURM said about its failed jobs (their SLURM logs written since the run started), and
puts back the outputs of finished jobs of failed job groups (headprune.io.commits). A local run drops Snakemake's
job rate limiter, whose every-second rescheduling cost the demo a tenth of its CPU time.
"""
import time

from headprune import run_hooks

RUN_STARTED = time.time()


onstart:
    run_hooks.on_start(workflow)


onsuccess:
    run_hooks.on_success()


onerror:
    run_hooks.on_error(RUN_STARTED)
