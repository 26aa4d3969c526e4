"""How Table 4 times models (``headprune.analyses.speed``): stopwatches (CUDA events on a GPU, the clock after a
synchronize on the CPU), the ABBA runs over the same batches, memory (the GPU's peak, the KV cache's bytes), the
diagnostics of the GPU check (host over GPU time, the attention modules' share), the speedup's interval and the
machine's name."""
from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from headprune.models.heads import adapter_for

CONFIDENCE = 0.95  # of the speedup's interval


@dataclass
class Batch:
    """Model inputs of one batch (already on the device) and how many items it holds."""

    inputs: dict[str, torch.Tensor]
    size: int

    def to(self, device) -> "Batch":
        return Batch({k: v.to(device) for k, v in self.inputs.items()}, self.size)


# --------------------------------------------------------------------------- timing


def synchronizer(device) -> Callable[[], None]:
    """Waits for the GPU's queued work (CUDA runs asynchronously); nothing to wait for on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


# A stopwatch: start() returns stop(), which returns the seconds since start.
Stopwatch = Callable[[], Callable[[], float]]


def clock_stopwatch(clock: Callable[[], float] = time.perf_counter,
                    synchronize: Callable[[], None] = lambda: None) -> Stopwatch:
    """The host's clock, read after ``synchronize`` at both ends (the CPU; or a GPU timed from the host)."""
    def start():
        synchronize()
        began = clock()

        def stop():
            synchronize()
            return clock() - began
        return stop
    return start


def cuda_event_stopwatch(device) -> Stopwatch:
    """Two CUDA events on the device's current stream around the run: the GPU's own clock from the first to the
    last kernel queued between them, gaps waiting for the host included. The synchronize before keeps work
    queued earlier out; ``elapsed_time`` is in milliseconds."""
    device = torch.device(device)

    def start():
        torch.cuda.synchronize(device)
        stream = torch.cuda.current_stream(device)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(stream)

        def stop():
            end.record(stream)
            end.synchronize()
            return begin.elapsed_time(end) / 1000.0
        return stop
    return start


def stopwatch_for(device, clock: Callable[[], float] | None = None) -> tuple[Stopwatch, str]:
    """(stopwatch, its name for the ``timer`` column): CUDA events on a GPU, else (or given a ``clock``, as tests
    do) the clock after a synchronize."""
    device = torch.device(device)
    if device.type == "cuda" and clock is None:
        return cuda_event_stopwatch(device), "cuda events"
    return clock_stopwatch(clock or time.perf_counter, synchronizer(device)), "perf_counter"


# The allocator's peak (bytes, by device) from before gpu_memory_meter last reset it: a caller measuring the peak of
# a whole job around the timing (benchmarks/gpu_check.py) takes the larger of this and the allocator's.
PEAK_BEFORE_RESET: dict[torch.device, int] = {}


def gpu_memory_meter(device) -> Stopwatch | None:
    """start() -> stop() -> the most bytes allocated on the GPU while it ran, above what was allocated when it
    began (what the run itself needs: every model's weights stay on the GPU throughout); None on the CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return None

    def start():
        torch.cuda.synchronize(device)
        PEAK_BEFORE_RESET[device] = max(PEAK_BEFORE_RESET.get(device, 0), torch.cuda.max_memory_allocated(device))
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        return lambda: torch.cuda.max_memory_allocated(device) - base
    return start


def run_order(variants: Sequence[str], run: int) -> list[str]:
    """ABBA: the given order on even runs, reversed on odd runs."""
    return list(variants) if run % 2 == 0 else list(variants)[::-1]


@torch.no_grad()
def time_variants(steps: dict[str, Callable[[dict], object]], batches: Sequence[Batch], repeats: int,
                  warmup_batches: int = 2, clock: Callable[[], float] = time.perf_counter,
                  synchronize: Callable[[], None] = lambda: None,
                  done: Callable[[int], None] | None = None, stopwatch: Stopwatch | None = None,
                  memory: Stopwatch | None = None) -> list[dict]:
    """Time every variant over all ``batches``, ``repeats`` runs each, alternating variants; ``done(1)`` is
    told each timed run, after its clock stopped (a ``Progress``'s update).

    Returns one dict per (variant, run): run, position (within the run), items, seconds, items_per_s = items /
    seconds, peak_gpu_bytes (``memory``'s reading, NaN without one). The warmup (the first ``warmup_batches``
    batches, each variant) is run before and not timed.
    ``stopwatch`` (default: ``clock`` read after ``synchronize``) times a run.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    if not batches:
        raise ValueError("no batches to time")
    stopwatch = stopwatch or clock_stopwatch(clock, synchronize)
    items = sum(batch.size for batch in batches)
    for step in steps.values():
        for batch in batches[:warmup_batches]:
            step(batch.inputs)
    synchronize()
    rows = []
    for run in range(repeats):
        for position, name in enumerate(run_order(list(steps), run)):
            step = steps[name]
            peak = memory() if memory is not None else None  # reset outside the timed run
            stop = stopwatch()
            for batch in batches:
                step(batch.inputs)
            seconds = stop()
            if seconds <= 0:
                raise RuntimeError(f"{name}: run {run} took {seconds} s; the clock does not advance")
            rows.append({"variant": name, "run": run, "position": position, "items": items, "seconds": seconds,
                         "items_per_s": items / seconds,
                         "peak_gpu_bytes": float(peak()) if peak is not None else math.nan})
            if done is not None:
                done(1)
    return rows


def cache_bytes(cache) -> int:
    """Bytes held by a generation cache's key and value tensors: transformers 5's DynamicCache (``layers``, each
    with ``keys`` and ``values``), 4.x's ``key_cache``/``value_cache`` lists, an encoder-decoder cache (both of
    its caches), or the legacy tuple of (key, value) per layer."""
    if cache is None:
        return 0
    if hasattr(cache, "self_attention_cache"):
        return cache_bytes(cache.self_attention_cache) + cache_bytes(getattr(cache, "cross_attention_cache", None))
    if hasattr(cache, "layers"):
        tensors = [t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))]
    elif hasattr(cache, "key_cache"):
        tensors = [*cache.key_cache, *cache.value_cache]
    else:
        tensors = [t for layer in cache for t in layer]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


@torch.no_grad()
def kv_cache_bytes(model, inputs: dict, decode_tokens: int) -> int:
    """The KV cache's bytes after greedy generation of ``decode_tokens`` tokens from ``inputs`` (``decode_step``'s
    generation): prompt + decode_tokens - 1 positions (the last token generated is never fed back)."""
    out = model.generate(**inputs, max_new_tokens=decode_tokens, min_new_tokens=decode_tokens, do_sample=False,
                         num_beams=1, max_length=None, return_dict_in_generate=True)
    return cache_bytes(out.past_key_values)


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@torch.no_grad()
def host_over_gpu(step: Callable[[dict], object], batches: Sequence[Batch], device) -> float | None:
    """Sum over ``batches`` of the host's time to issue one batch's forward over the GPU's time to run it (CUDA
    events), each batch alone after a synchronize: near 1 (or above), the GPU waited for the Python launching its
    kernels (launch-bound), and fewer FLOPs do not shorten it; well below 1, the GPU is the bottleneck. None on
    the CPU. Only for a single forward: generate() synchronizes every token, and a long run fills CUDA's launch
    queue, which makes the host wait for the GPU whichever is slower."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    host = gpu = 0.0
    for batch in batches:
        stop = cuda_event_stopwatch(device)()
        began = time.perf_counter()
        step(batch.inputs)
        host += time.perf_counter() - began
        gpu += stop()
    return host / gpu


@torch.no_grad()
def attention_seconds(model, step: Callable[[dict], object], batches: Sequence[Batch], device) -> tuple[float, float]:
    """(seconds inside the attention modules, seconds in all) of one pass of ``step`` over ``batches``: what
    share of a forward the heads' own layers take, which bounds what removing heads can gain. An attention module
    is the one owning a site's q/k/v projections (BERT's output projection is outside it, Llama's inside). Hooks
    stamp each module's call: CUDA events on a GPU (read after the pass, no synchronize inside it), the clock on
    the CPU. A diagnostic (benchmarks/gpu_check.py), not Table 4's timing: the hooks add their own cost."""
    cuda = torch.device(device).type == "cuda"
    modules = {id(site.attention): site.attention for site in adapter_for(model).sites(model)}

    def stamp():
        if not cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def between(a, b) -> float:
        return a.elapsed_time(b) / 1000.0 if cuda else b - a

    calls: list[list] = []
    handles = [h for m in modules.values() for h in (
        m.register_forward_pre_hook(lambda module, args: calls.append([stamp(), None])),
        m.register_forward_hook(lambda module, args, output: calls[-1].__setitem__(1, stamp())))]
    try:
        synchronizer(device)()
        began = stamp()
        for batch in batches:
            step(batch.inputs)
        ended = stamp()
        synchronizer(device)()
    finally:
        for handle in handles:
            handle.remove()
    return sum(between(a, b) for a, b in calls), between(began, ended)


# --------------------------------------------------------------------------- the interval


def speedup_interval(ratios: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The speedup's interval in percent from paired ratios (variant / original items per second, one per run):
    Student's t-interval of the mean log ratio, mean +- t(n - 1) s / sqrt(n), mapped back by 100 (exp(.) - 1).
    (NaN, NaN) with fewer than two pairs."""
    from scipy.stats import t

    logs = [math.log(r) for r in ratios]
    n = len(logs)
    if n < 2:
        return math.nan, math.nan
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = float(t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n)
    return 100.0 * (math.exp(mean - half) - 1.0), 100.0 * (math.exp(mean + half) - 1.0)


# --------------------------------------------------------------------------- the machine


def cpu_name(cpuinfo: str | None = None) -> str:
    """The CPU model: 'model name' in /proc/cpuinfo (Linux), else platform.processor() or the architecture."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("model name", "hardware", "cpu model") and value.strip():
            return " ".join(value.split())
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device) -> str:
    """'NVIDIA H200' for a GPU (torch.cuda.get_device_name), the CPU model for the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple {platform.processor() or 'GPU'} (mps)"
    return cpu_name()


def environment(model, device) -> dict:
    """What the speed depends on besides the model's size, recorded in every row."""
    device = torch.device(device)
    return {"device": device_name(device), "device_type": device.type, "torch_threads": torch.get_num_threads(),
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "attn_implementation": getattr(model.config, "_attn_implementation", None) or "eager",
            "torch_version": torch.__version__}
