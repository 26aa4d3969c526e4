"""The SLURM tests' Snakemake polls the cluster at most every HEADPRUNE_TEST_MAX_STATUS_INTERVAL seconds.

snakemake-executor-plugin-slurm waits 10 s longer before each status query that finds no job finished (up to
180 s, hard-coded): right for a real cluster, where jobs take hours, but a test of a job that ends after a minute
would then mostly wait for the poll (a cancelled or finished job noticed up to 40 s late). Only when and how often
Snakemake asks changes; what it asks, what SLURM answers and what Snakemake does with it stay the plugin's own.
On the tests' PYTHONPATH only (tests/slurm_helpers.cluster_env).
"""
import os

_cap = os.environ.get("HEADPRUNE_TEST_MAX_STATUS_INTERVAL")
if _cap:
    from snakemake_interface_executor_plugins.executors import remote as _remote

    _interval = _remote.RemoteExecutor.next_seconds_between_status_checks

    def _capped(self, value, _cap=float(_cap)):
        _interval.fset(self, None if value is None else min(value, _cap))

    _remote.RemoteExecutor.next_seconds_between_status_checks = _interval.setter(_capped)
