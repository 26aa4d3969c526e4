"""One GPU per job on a workstation: claim a free device index with a file lock, before CUDA starts.

Snakemake's ``--resources gpu=N`` (profiles/local) caps how many GPU jobs run at once, but it
never tells a job WHICH GPU to use, so every job would pick device 0. ``claim_gpus()`` fixes
that: the job takes an exclusive ``fcntl`` lock on ``<lock dir>/gpu<i>.lock`` for the first free
index ``i`` and sets ``CUDA_VISIBLE_DEVICES=i``, so ``cuda`` in that process is GPU ``i``. The
kernel drops the lock when the process exits, however it exits (a crash or ``kill -9`` too), so
there is nothing to clean up and no stale claim.

Nothing is claimed (the environment is left alone) when
- ``CUDA_VISIBLE_DEVICES`` is already set: SLURM (``--gpus``) or the user chose the device;
- the job runs under SLURM (``SLURM_JOB_ID``): the scheduler decides what the job may see;
- the machine has no GPU.

How many GPUs a job takes is its Snakemake ``gpu`` resource (read from the ``snakemake`` object
of a ``script:`` job), else 1. A job with ``gpu=0`` gets ``CUDA_VISIBLE_DEVICES=""``: a rule
that declares no GPU runs on the CPU and never takes a device from a GPU job.

When every GPU is claimed, the job waits up to ``HEADPRUNE_GPU_WAIT`` seconds (default 0:
no waiting) for one to be released, then raises ``NoFreeGPU`` naming the processes that hold
them. With the local profile this does not happen inside one run (``--resources gpu=N`` with N
the number of GPUs); it does when two runs, or other programs using these locks, share the GPUs.

Environment:
  HEADPRUNE_GPU_LOCK_DIR  where the lock files live (default: <tmp>/headprune-gpus-<uid>)
  HEADPRUNE_GPU_COUNT     how many GPUs the machine has (default: nvidia-smi --list-gpus)
  HEADPRUNE_GPU_WAIT      seconds to wait for a free GPU (default 0)
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The open lock files of this process: closing one (or exiting) releases its GPU.
_held: dict[int, object] = {}


class NoFreeGPU(RuntimeError):
    """Every GPU on the machine is claimed by another job."""


def default_lock_dir() -> Path:
    return Path(os.environ.get("HEADPRUNE_GPU_LOCK_DIR") or Path(tempfile.gettempdir()) / f"headprune-gpus-{os.getuid()}")


def gpu_count() -> int:
    """GPUs on this machine, counted without initializing CUDA in this process."""
    if os.environ.get("HEADPRUNE_GPU_COUNT"):
        return int(os.environ["HEADPRUNE_GPU_COUNT"])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "--list-gpus"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


def job_gpus(default: int = 1) -> int:
    """The ``gpu`` resource of the Snakemake job running this process (a ``script:`` job), else ``default``."""
    job = getattr(sys.modules.get("__main__"), "snakemake", None)
    resources = getattr(job, "resources", None)
    value = getattr(resources, "gpu", None) if resources is not None else None
    try:
        return int(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _try_lock(lock_dir: Path, index: int):
    handle = open(lock_dir / f"gpu{index}.lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def _holders(lock_dir: Path, count: int) -> str:
    names = []
    for index in range(count):
        try:
            pid = (lock_dir / f"gpu{index}.lock").read_text().strip() or "?"
        except OSError:
            pid = "?"
        names.append(f"GPU {index}: pid {pid}")
    return ", ".join(names)


def claim_gpus(n: int | None = None, *, count: int | None = None, lock_dir=None, wait: float | None = None,
               poll: float = 0.5) -> list[int] | None:
    """Claim ``n`` free GPUs for this process and make them its only visible devices.

    Returns the claimed indices (``[]`` for a job with ``gpu=0``), or None when nothing was
    claimed because the device choice is not ours (CUDA_VISIBLE_DEVICES or SLURM) or there is
    no GPU. Calling it again in the same process returns the same claim.
    """
    if _held:
        return sorted(_held)
    if "CUDA_VISIBLE_DEVICES" in os.environ or "SLURM_JOB_ID" in os.environ:
        return None
    count = gpu_count() if count is None else count
    if count <= 0:
        return None
    n = job_gpus() if n is None else n
    if n <= 0:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return []
    if n > count:
        raise NoFreeGPU(f"this job asks for {n} GPUs but the machine has {count}")
    _warn_if_cuda_started()
    lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    wait = float(os.environ.get("HEADPRUNE_GPU_WAIT", "0")) if wait is None else wait
    deadline = time.monotonic() + wait
    while True:
        claimed = {}
        for index in range(count):
            handle = _try_lock(lock_dir, index)
            if handle is not None:
                claimed[index] = handle
                if len(claimed) == n:
                    break
        if len(claimed) == n:
            _held.update(claimed)
            # nvidia-smi numbers GPUs in PCI bus order; make CUDA use the same numbering.
            os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in sorted(claimed))
            return sorted(claimed)
        for handle in claimed.values():
            handle.close()
        if time.monotonic() >= deadline:
            raise NoFreeGPU(f"all {count} GPUs are claimed by other jobs ({_holders(lock_dir, count)}; locks in "
                            f"{lock_dir}). Run at most {count} GPU jobs at once (snakemake --resources gpu={count}, "
                            f"profiles/local) or set HEADPRUNE_GPU_WAIT=<seconds> to wait for one.")
        time.sleep(poll)


def release_gpus() -> None:
    """Give the claimed GPUs back before the process exits (exiting does it too)."""
    for handle in _held.values():
        handle.close()
    _held.clear()


def _warn_if_cuda_started() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        import warnings

        warnings.warn("CUDA was initialized before a GPU was claimed: CUDA_VISIBLE_DEVICES set now has no effect "
                      "in this process", RuntimeWarning, stacklevel=3)
