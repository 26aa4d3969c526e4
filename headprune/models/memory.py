"""Batches sized from the memory there is (issue #57): the rows of a forward pass that fit a budget.

A row is one (gate setting, window) of a batched evaluation, or one window of a gradient pass. What a row holds
is counted from the model's config, a little over what the code holds (``row_bytes``): without gradients one
layer's activations at a time (its hidden states, its MLP's, and its attention weights where they are formed
whole), and the outputs of the layers a gate variant replays (``headprune.evaluation.shared_layers``: every layer
below its first masked head, held at once); with gradients every layer's, kept for the backward pass. The
logits are held a chunk at a time (``lm_head.LOGITS_AT_ONCE``, three times: the logits, their float copy and
the log-softmax), a fixed cost. ``MARGIN`` covers what the count leaves out (the allocator's slack, Python).

The budget (``free_bytes``) is ``max_memory`` less what is already held, or unless told a headroom that grows with
the weights, and never more than is free: on a GPU ``torch.cuda.mem_get_info``; on the host, MemAvailable of
/proc/meminfo (psutil's ``available`` where /proc is not). A pipeline job is told its maximum once, the memory its
rule asked for (``limit_job_to``, from Snakemake's ``mem_mb``), and a rule asks for what its job will use
(``job_mb``): the weights, once or more where it trains them, Python and torch's own, and the same headroom. Everything above ``free_bytes`` imports no torch: the workflow plans
with it.
"""
from __future__ import annotations

import json
import math
import os
import re
import struct
from pathlib import Path

MARGIN = 1.5  # each row counted half as large again
FIXED_SLACK = 64 << 20  # the allocator's and Python's own, beside the logits' chunk
# Unless told a maximum, an evaluation uses at most this much beside what it holds (the weights), or this many
# times its weights if more: batches grow with the model, not with whatever memory the machine has free
HEADROOM = 3 << 29  # 1.5 GB
HEADROOM_PER_WEIGHT = 1.5
PROCESS = 1 << 30  # what a job holds before its model: Python, torch, transformers, the tokenizer, the data
JOB_MAXIMUM: int | None = None  # a pipeline job's memory (limit_job_to): the budget when no max_memory is given
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8,
               "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GB": 1 << 30,
         "T": 1 << 40, "TB": 1 << 40}


def parse_size(value: str) -> int:
    """Bytes of "8GB", "512MB", "1.5G" (binary units), or a plain number of bytes.

    >>> parse_size("8GB"), parse_size("512 MB"), parse_size("1.5g")
    (8589934592, 536870912, 1610612736)
    """
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(value))
    unit = found.group(2).upper().removesuffix("IB").removesuffix("I") if found else None
    if found is None or (unit not in UNITS and unit + "B" not in UNITS):
        raise ValueError(f"{value!r} is not a size (e.g. 8GB, 512MB)")
    return int(float(found.group(1)) * UNITS.get(unit, UNITS.get(unit + "B")))


def gigabytes(size: int) -> str:
    return f"{size / (1 << 30):.1f} GB"


def _text_config(model):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def row_bytes(model, positions: int, *, gradients: bool = False) -> int:
    """Bytes one row of ``positions`` tokens holds in a forward pass (and its backward, ``gradients``), MARGIN in."""
    config = _text_config(model)
    hidden = int(getattr(config, "hidden_size", None) or getattr(config, "d_model", 0) or 0)
    inner = int(getattr(config, "intermediate_size", None) or getattr(config, "d_ff", None) or 4 * hidden)
    heads = int(getattr(config, "num_attention_heads", None) or getattr(config, "encoder_attention_heads", 1))
    layers = int(getattr(config, "num_hidden_layers", None) or getattr(config, "num_layers", 1))
    width = next((p.element_size() for p in model.parameters() if p.is_floating_point()), 4)
    # attention weights: the scores and their softmax; kept for the backward pass, the returned maps too
    layer = positions * (6 * hidden + 3 * inner) + (3 if gradients else 2) * heads * positions * positions
    held = layers * layer if gradients else layer
    return int(MARGIN * width * held)


def fixed_bytes() -> int:
    """What an evaluation holds whatever its rows: a chunk of logits three times over, and slack."""
    from headprune.models.lm_head import LOGITS_AT_ONCE

    return 3 * 4 * LOGITS_AT_ONCE + FIXED_SLACK


def host_rss() -> int:
    """This process's resident memory now."""
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def host_available() -> int:
    """The host's memory available to a new allocation (MemAvailable; psutil's where /proc/meminfo is not)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import psutil

    return int(psutil.virtual_memory().available)


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def free_bytes(model, device=None, max_memory: int | None = None) -> int:
    """The memory an evaluation of ``model`` on ``device`` may use beside what is held: with ``max_memory``, that
    less what is held (this process's resident memory, or the GPU's allocated), else ``HEADROOM`` (at least
    ``HEADROOM_PER_WEIGHT`` times the weights): the peak grows with the weights, not with the vocabulary, the
    window or the variants; and never more than is free (the GPU's free memory, the host's available)."""
    import torch

    device = torch.device(device or "cpu")
    on_gpu = device.type == "cuda"
    free = torch.cuda.mem_get_info(device)[0] if on_gpu else host_available()
    if max_memory is None and not on_gpu:
        max_memory = JOB_MAXIMUM  # the host memory the job's rule asked for (SLURM's --mem)
    if max_memory is None:
        return min(free, max(HEADROOM, int(HEADROOM_PER_WEIGHT * weight_bytes(model))))
    return min(free, max_memory - (torch.cuda.memory_allocated(device) if on_gpu else host_rss()))


def rows_that_fit(model, positions: int, budget: int, *, gradients: bool = False) -> int:
    """How many rows of ``positions`` tokens fit in ``budget`` bytes (0: not even one)."""
    return max(0, (budget - fixed_bytes()) // row_bytes(model, positions, gradients=gradients))


def sized(model, positions: int, budget: int, wanted: int | None, default: int, what: str, *,
          gradients: bool = False) -> int:
    """``wanted`` rows (set by hand), or, unset, ``default`` or fewer: as many as fit in ``budget``. A hand-set
    number that does not fit is refused with one line that says what does (``ValueError``)."""
    fits = rows_that_fit(model, positions, budget, gradients=gradients)
    if wanted is None:
        if fits < 1:
            raise ValueError(f"not even one row of {positions} tokens fits in the {gigabytes(budget)} free "
                             f"(about {gigabytes(fixed_bytes() + row_bytes(model, positions, gradients=gradients))} "
                             "needed): give more memory or a shorter window")
        return min(default, fits)
    if wanted > fits:
        raise ValueError(f"{what} {wanted}: about {gigabytes(fixed_bytes() + wanted * row_bytes(model, positions, gradients=gradients))} "
                         f"needed at {positions} tokens a row, {gigabytes(budget)} free: at most {fits} fit")
    return wanted


# --- a pipeline job's memory (no torch: the workflow plans with it) -----------------------------------------------


def limit_job_to(mem_mb) -> None:
    """A job's evaluations size their batches within ``mem_mb`` megabytes (the memory its rule asked for);
    None or 0: within the headroom, as outside the pipeline."""
    global JOB_MAXIMUM
    JOB_MAXIMUM = int(mem_mb) << 20 if mem_mb else None


def parameters_on_disk(folder) -> int | None:
    """How many parameters the weights in a model folder hold: counted from the safetensors headers (no weight is
    read), else from the pickled files' sizes at 4 bytes a parameter; None where there are no weights (yet)."""
    folder = Path(folder)
    files = [folder] if folder.is_file() else sorted(f for pattern in WEIGHT_FILES for f in folder.glob(pattern))
    if not files:
        return None
    count = 0
    for path in files:
        if path.suffix != ".safetensors":
            count += path.stat().st_size // 4
            continue
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        count += sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
    return count


def job_mb(parameters: int, dtype: str = "float32", *, copies: int = 1) -> int:
    """The megabytes a job of a model of ``parameters`` in ``dtype`` asks for: Python and torch's own, ``copies``
    of the weights (4 where it trains them all: weights, gradients, Adam's two moments; 5 with a teacher), and the
    headroom its batches are sized to (``free_bytes``), rounded up to 100 MB.

    >>> job_mb(135_000_000)  # SmolLM2-135M in float32: 1 GB + 0.54 GB of weights + 1.5 GB of headroom
    3100
    """
    weights = parameters * DTYPE_BYTES[dtype]
    headroom = max(HEADROOM, int(HEADROOM_PER_WEIGHT * weights))
    total = PROCESS + copies * weights + headroom
    return 100 * math.ceil(total / (100 << 20))
