"""The pipeline on a GPU, in one run (issue #33): what a user's GPU jobs do, checked and timed, in one summary.

1. tests: the gate, pruning, streaming and retrieval tests (TEST_FILES) on the device, in float32 and bfloat16,
   with eager and sdpa attention (tests/conftest.py's HEADPRUNE_TEST_* switches);
2. sweep: the single-head sweep's c/(N a) on the 100M Llama-layout benchmark model (benchmarks/ablation_sweep.py
   --model llama-100m: 270 heads), for perplexity, for retrieval and for a multiple-choice lm-evaluation-harness
   task (a: one evaluation by lm-eval's own HFLM), the jobs run as the pipeline runs them;
3. speed: Table 4's speedup with half of the heads physically removed, at batch sizes 1-64, for a BERT-base-sized
   model (benchmarks/speed.py) and the same Llama-layout model (prefill and decode tokens), in float32 and
   bfloat16;
4. screen (issue #40): a screened Table 1 on a Llama-3-8B-shaped model (random weights, bfloat16, 32 layers x 32
   heads = 1024 heads on 8 KV heads, Llama-3's vocabulary): one full evaluation, the gradient screens' pass, the
   exact screen, the screened sweep (top 20% + a 5% sample, ablated exactly) and its cost against the exhaustive
   sweep's (run too where SIZES says so, else scaled from the screened sweep by the layer model), the numbers
   configs/llama.yaml's GPU hours for exhaustive and screened studies are computed from;
5. table4 (issue #46): Table 4 with 95% intervals over paired runs (CUDA events), in bfloat16 with sdpa attention,
   at batch sizes 1-64, for a BERT-base-shaped model (examples) and a Llama-3-8B-shaped one cut to 8 of its 32
   layers (vocabulary 32768, so the layers keep their share of the weights; prefill and decode tokens): the full
   model against the free layout (a seeded random half of the heads), the uniform one (half of every layer's
   key/value groups) and the stock checkpoint of the uniform one (skipped for BERT, which no stock class holds
   with fewer heads), with each variant's KV cache after decoding, peak memory, host/GPU time of a forward
   (launch-bound near 1) and the attention modules' share of the time (``timing.attention_seconds``); and one
   decoding step's attention with the free layout's gather of keys and values against two ways without it;

with the peak GPU memory of each (torch.cuda.max_memory_allocated). Writes OUT/summary.json, OUT/summary.txt (the
table it prints) and OUT/log.txt (every part's own output); exits 1 when a test failed or a part broke.

    bash benchmarks/gpu_check.sh                 # on the GPU machine (installs the carried wheels first)
    python benchmarks/gpu_check.py --cpu         # the same on the CPU, small sizes, a few minutes (CI runs it)

Random weights throughout (nothing is downloaded): the numbers measure the machinery, not a model.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
TEST_FILES = ["tests/test_batched_gates.py", "tests/test_prune.py", "tests/test_streaming.py", "tests/test_retrieval.py"]
TEST_SETTINGS = [("float32", "eager"), ("float32", "sdpa"), ("bfloat16", "eager"), ("bfloat16", "sdpa")]
BATCH_SIZES = [1, 4, 16, 64]
PARTS = ["tests", "sweep", "speed", "screen", "table4"]
# Llama-3-8B's shape (config.json of meta-llama/Meta-Llama-3-8B), and a toy one of the same layout for the CPU form
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0)
LLAMA3_TOY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, max_position_embeddings=256)
# Table 4's shapes: bert-base-uncased's; Llama-3-8B's heads and widths in 8 of its 32 layers (the part's time and
# four copies in memory), its vocabulary cut to 32768 so that the embeddings weigh against 8 layers about as much
# as Llama-3-8B's against 32
BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072)
BERT_TOY = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
LLAMA3_8B_8_LAYERS = {**LLAMA3_8B, "num_hidden_layers": 8, "vocab_size": 32768}
TABLE4_VARIANTS = ["original", "pruned", "uniform", "stock"]

# The sizes of each part, on a GPU and in the CPU form (which checks that the script runs, in 2-4 minutes on 2
# cores; its numbers mean little). Tests: the settings run. Sweep: benchmarks/ablation_sweep.py's options
# for llama-100m. Speed: BERT (benchmarks/speed.py's --model) and the Llama model's windows. The CPU form runs
# one torch thread per process, as the demo's jobs do: on a shared 2-core machine two threads made a small
# matrix product 10 times slower than one.
SIZES = {
    "gpu": {"tests": TEST_SETTINGS, "test_timeout": 180, "threads": 4,
            "sweep": dict(vocab=8192, windows=4, window=512, context_lengths=[512, 1024], depths=[25, 75], needles=2,
                          max_new_tokens=16, questions=64, passage=256, choices=4, hflm_batch_size=32,
                          heads_per_job=[90], sample=1, threads=4, batch_size=100,
                          variant_batch_size={"language_modeling": 64, "retrieval": 128, "lm_eval": 512}),
            "bert": dict(model="bert", items=256, seq_len=128, repeats=3), "speed_dtypes": ["float32", "bfloat16"],
            "llama_speed": dict(batch_sizes=BATCH_SIZES, window=512, min_rows=8, decode_tokens=16, repeats=3),
            "screen": dict(shape=LLAMA3_8B, dtype="bfloat16", windows=8, window=512, screen_windows=2,
                           gradient_windows=8, batch_size=4, variant_batch_size=32, top_k="20%", sample="5%",
                           exhaustive=False),
            # about 2-3 minutes on an H200: a run is 24 batches of BERT; 2 batches (at least 8 windows of 512)
            # of prefill; at least 4 rows decoding 16 tokens
            "table4": dict(dtype="bfloat16", attention="sdpa", batch_sizes=BATCH_SIZES, repeats=6, warmup_batches=1,
                           models=[dict(name="bert-base", kind="bert", shape=BERT_BASE, seq_len=128, batches=24),
                                   dict(name="llama3-8b 8 layers", kind="llama", shape=LLAMA3_8B_8_LAYERS, window=512,
                                        prefill_batches=2, min_rows=8, decode_tokens=16, decode_rows=4)],
                           # one decoding step's attention, Llama-3-8B's heads: (batch, cache positions)
                           gather=dict(shape=LLAMA3_8B, cases=[(16, 512), (64, 512), (64, 2048), (64, 8192)],
                                       reps=50))},
    # in the CPU form the test settings that the main suite does not run (it runs float32 and each test's own
    # attention, mostly eager)
    "cpu": {"tests": [("bfloat16", "sdpa")], "test_timeout": 600, "threads": 1,
            "sweep": dict(vocab=512, windows=1, window=32, context_lengths=[48], depths=[50], needles=1,
                          max_new_tokens=2, questions=2, passage=8, choices=2, hflm_batch_size=8,
                          heads_per_job=[30], sample=1, threads=1, batch_size=100,
                          variant_batch_size={"language_modeling": 64, "retrieval": 64, "lm_eval": 512},
                          # the multiple-choice study within 40 s more: a smaller job, and no process per head
                          by_kind={"lm_eval": dict(heads_per_job=[9], skip_b=True)}),
            "bert": dict(model="tiny", items=64, seq_len=32, repeats=2), "speed_dtypes": ["float32"],
            "llama_speed": dict(batch_sizes=[1, 4], window=16, min_rows=2, decode_tokens=2, repeats=2),
            "screen": dict(shape=LLAMA3_TOY, dtype="float32", windows=4, window=32, screen_windows=2,
                           gradient_windows=2, batch_size=4, variant_batch_size=64, top_k="20%", sample="5%",
                           exhaustive=True),
            "table4": dict(dtype="float32", attention="sdpa", batch_sizes=[1, 4], repeats=3, warmup_batches=1,
                           models=[dict(name="bert-toy", kind="bert", shape=BERT_TOY, seq_len=16, batches=4),
                                   dict(name="llama3 toy", kind="llama", shape=LLAMA3_TOY, window=16,
                                        prefill_batches=2, min_rows=4, decode_tokens=2, decode_rows=2)],
                           gather=dict(shape=LLAMA3_TOY, cases=[(2, 32), (4, 128)], reps=5))},
}


def mib(n_bytes) -> float | None:
    return None if n_bytes is None else round(n_bytes / 2 ** 20, 1)


@contextlib.contextmanager
def peak_gpu_memory(device: str, into: dict):
    """Sets into["peak_gpu_mib"]: the most memory tensors held on the GPU while the block ran (None on the CPU)."""
    import torch

    from headprune.evaluation.timing import PEAK_BEFORE_RESET

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        PEAK_BEFORE_RESET.clear()  # Table 4's timing resets the peak before each run: it keeps the one before here
    try:
        yield
    finally:
        into["peak_gpu_mib"] = mib(max([torch.cuda.max_memory_allocated(), *PEAK_BEFORE_RESET.values()])) if cuda \
            else None


# --------------------------------------------------------------------------- 1. tests

# A child process runs pytest and reports its GPU memory peak (it is not the parent's to read).
PYTEST_CHILD = """
import json, sys
import pytest, torch
code = pytest.main(sys.argv[2:])
peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
with open(sys.argv[1], "w") as out:
    json.dump({"exit": int(code), "peak": peak}, out)
"""


def run_tests(device: str, dtype: str, attention: str, sizes: dict, log, scratch: Path) -> dict:
    junit, report = scratch / f"junit-{dtype}-{attention}.xml", scratch / f"pytest-{dtype}-{attention}.json"
    env = dict(os.environ, HEADPRUNE_TEST_DEVICE=device, HEADPRUNE_TEST_DTYPE=dtype,
               HEADPRUNE_TEST_ATTENTION=attention, OMP_NUM_THREADS=str(sizes["threads"]))
    timeout = sizes["test_timeout"]
    command = [sys.executable, "-c", PYTEST_CHILD, str(report), *TEST_FILES, "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}"]
    row = {"dtype": dtype, "attention": attention}
    began = time.perf_counter()
    log.write(f"\n=== tests on {device}, {dtype}, {attention} attention\n")
    try:
        subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        row["error"] = f"timed out after {timeout} s"
    row["seconds"] = round(time.perf_counter() - began, 1)
    if junit.exists():
        suite = ElementTree.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
        row.update(passed=counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"],
                   failed=counts["failures"] + counts["errors"], skipped=counts["skipped"],
                   failures=[f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
                             if case.find("failure") is not None or case.find("error") is not None])
    elif "error" not in row:
        row["error"] = "pytest wrote no report (see log.txt)"
    row["peak_gpu_mib"] = mib(json.loads(report.read_text())["peak"]) if report.exists() else None
    return row


# --------------------------------------------------------------------------- 2. the sweep


def import_benchmark(name: str):
    """benchmarks/NAME.py as a module (benchmarks/ is a folder of scripts, not a package)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def sweep_options(device: str, sizes: dict) -> SimpleNamespace:
    """benchmarks/ablation_sweep.py's options (its argparse namespace) for these sizes."""
    return SimpleNamespace(**{k: v for k, v in sizes.items() if k not in ("variant_batch_size", "by_kind")},
                           device=device, variant_batch_size=256, repeats=1, warm_start=False)


def llama_studies(device: str, sizes: dict, folder: Path) -> list[dict]:
    """The 100M Llama-layout model in ``folder`` and its perplexity, retrieval and multiple-choice studies
    (ablation_sweep's)."""
    studies = import_benchmark("ablation_sweep").llama_studies(folder, sweep_options(device, sizes))
    for study in studies:
        study["variant_batch_size"] = sizes["variant_batch_size"][study["kind"]]
    return studies


def run_sweep(study: dict, device: str, sizes: dict, log) -> dict:
    """The study's a, b/(N a) and c/(N a) for each heads-per-job, as benchmarks/ablation_sweep.py measures them
    (one process per job), and on a GPU the memory peak of one job (the first, evaluated again in this process:
    the workers are other processes)."""
    import torch

    sweep = import_benchmark("ablation_sweep")
    sizes = {**sizes, **sizes.get("by_kind", {}).get(study["kind"], {})}  # a study's own sizes, where it has them
    row = {"study": study["name"], "variant_batch_size": study["variant_batch_size"], "peak_gpu_mib": None}
    began = time.perf_counter()
    log.write(f"\n=== sweep: {study['name']} on {device}\n")
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        result = sweep.sweep(study, sweep_options(device, sizes))
        n, a = result["heads"], result["a"]
        row.update(heads=n, a_seconds=round(a, 3),
                   b_over_n_a=None if result["b"] is None else round(result["b"] / (n * a), 3),
                   c_over_n_a={str(p["heads_per_job"]): round(p["c"] / (n * a), 3) for p in result["pipeline"]},
                   c_over_n_a_paired={str(p["heads_per_job"]): round(p["paired"], 3) for p in result["pipeline"]})
        if "own" in result:  # an lm-eval task: a is lm-eval's HFLM; the pipeline's own full evaluation beside it
            row["a_own_seconds"] = round(result["own"], 3)
        if device.startswith("cuda"):
            first_job = sweep_heads(study)[:sizes["heads_per_job"][0]]
            with peak_gpu_memory(device, row):
                sweep.worker(study, first_job, device, sizes["threads"], sizes["batch_size"],
                             study["variant_batch_size"])
            torch.cuda.empty_cache()
    row["seconds"] = round(time.perf_counter() - began, 1)
    return row


def sweep_heads(study: dict) -> list[str]:
    """The study's heads by name, in the sweep's order (its jobs take them in turn)."""
    from headprune.evaluation.runs import all_heads, head_name
    from headprune.models.loading import load_causal_lm

    model, _ = load_causal_lm(study["folder"])
    return [head_name(h) for h in all_heads(model)]


# --------------------------------------------------------------------------- 3. Table 4's speed


def speedup_row(model: str, summary, into: dict) -> list[dict]:
    """One row per unit: the speedup (%) at each batch size and the pruned = gated check."""
    rows = []
    for unit, group in summary.groupby("unit", sort=False):
        first = group.iloc[0]
        rows.append({"model": model, "dtype": first["dtype"], "unit": unit,
                     "speedup_percent": {str(int(r.batch_size)): round(float(r.speedup_percent), 1)
                                         for r in group.itertuples()},
                     "original_per_s": {str(int(r.batch_size)): round(float(r.original_mean), 1)
                                        for r in group.itertuples()},
                     "heads_pruned": int(first["heads_pruned"]), "heads_total": int(first["heads_total"]),
                     "check_agreement": float(first["check_agreement"]),
                     "check_max_abs_diff": float(first["check_max_abs_diff"]), **into})
    return rows


def bert_speed(device: str, dtype: str, sizes: dict, log) -> list[dict]:
    speed_benchmark = import_benchmark("speed")
    argv = ["--model", sizes["model"], "--device", device, "--dtype", dtype, "--items", str(sizes["items"]),
            "--seq-len", str(sizes["seq_len"]), "--repeats", str(sizes["repeats"]),
            "--batch-sizes", *map(str, BATCH_SIZES)]
    memory = {}
    log.write(f"\n=== speed: BERT ({sizes['model']}) on {device}, {dtype}\n")
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), peak_gpu_memory(device, memory):
        summary = speed_benchmark.main(argv)
    name = "bert-base" if sizes["model"] == "bert" else f"bert-{sizes['model']}"
    return speedup_row(name, summary, memory)


def llama_speed(device: str, dtype: str, folder: Path, sizes: dict, log) -> list[dict]:
    """Table 4 for the sweep's Llama-layout model: a seeded random half of its heads removed; prefill (whole
    windows) and decode tokens per second, as rules/speed.smk times a language model."""
    import random

    import torch

    from headprune.analyses import speed, table4
    from headprune.evaluation.runs import all_heads
    from headprune.models.loading import load_causal_lm

    memory = {}
    log.write(f"\n=== speed: Llama layout on {device}, {dtype}\n")
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), peak_gpu_memory(device, memory):
        model, _ = load_causal_lm(folder, device=device, dtype=dtype)
        heads = all_heads(model)
        removed = random.Random(0).sample(heads, len(heads) // 2)
        pruned = speed.pruned_copy(model, removed)
        g = torch.Generator().manual_seed(0)
        batch_sizes = sizes["batch_sizes"]
        windows = torch.randint(1, model.config.vocab_size, (max(batch_sizes + [sizes["min_rows"]]), sizes["window"]),
                                generator=g).tolist()
        settings = speed.SpeedSettings(batch_sizes=batch_sizes, repeats=sizes["repeats"], prune_percent=50.0,
                                       decode_tokens=sizes["decode_tokens"])
        # as many rows as the batch size, and at least min_rows: throughput is per token, and batch size 1 over all
        # 64 windows would take most of the run
        batches = {(unit, b): speed.lm_inputs(windows[:max(b, sizes["min_rows"])], b, unit, settings.decode_tokens)
                   for unit in speed.UNITS["lm"] for b in batch_sizes}
        check = speed.check_pruned_equals_gated(model, pruned, removed,
                                                [b.to(device) for b in batches["prefill tokens", max(batch_sizes)]],
                                                logits=True)
        runs = speed.measure({"original": model, "pruned": pruned}, batches, settings, "llama", device)
        runs.insert(0, "study", "gpu_check_llama")
        summary = table4.summarize(runs, {"heads_pruned": len(removed), "prune_percent": 50.0, **check})
        print(table4.table4_markdown(summary, "random windows", chosen="at random (seeded)"))
        del model, pruned
    return speedup_row("llama-100m", summary, memory)


# --------------------------------------------------------------------------- 4. a screened Table 1


def layer_units(heads, layers: int) -> float:
    """benchmarks/screening.py's layer model of a sweep's cost: a head of layer l costs layers - l + 1 units."""
    return float(sum(layers - layer + 1 for _, layer, _ in heads))


def screen_check(device: str, sizes: dict, log) -> list[dict]:
    """A screened Table 1 on a random-weight model of ``sizes["shape"]``: seconds of one full evaluation (a), of the
    gradient screens' one pass, of the exact screen, of the screened sweep; the exhaustive sweep's seconds, measured
    (sizes["exhaustive"]) or scaled from the screened sweep by the layer model; the screened study's cost as a
    fraction of the exhaustive one's."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from headprune.analyses import screening as sc
    from headprune.evaluation.perplexity import window_batches
    from headprune.evaluation.runs import EvalSet, EvalSettings, all_heads, scored_variants
    from headprune.analyses.sweeps import single_head_sweep

    row = {"study": "llama3-8b shape" if sizes["shape"] is LLAMA3_8B else "llama3 toy shape", "dtype": sizes["dtype"]}
    log.write(f"\n=== screen: {row['study']} on {device}, {sizes['dtype']}\n")

    def timed(run):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        began = time.perf_counter()
        out = run()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return out, time.perf_counter() - began

    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), peak_gpu_memory(device, row):
        dtype = getattr(torch, sizes["dtype"])
        torch.manual_seed(0)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)  # built in its dtype, on its device: 8B parameters never pass through float32
        try:
            with torch.device(device):
                model = LlamaForCausalLM(LlamaConfig(**sizes["shape"], attn_implementation="sdpa")).eval()
        finally:
            torch.set_default_dtype(previous)
        heads = all_heads(model)
        layers = model.config.num_hidden_layers
        g = torch.Generator().manual_seed(1)
        count = sizes["windows"] + max(sizes["screen_windows"], sizes["gradient_windows"])
        ids = torch.randint(1, model.config.vocab_size, (count, sizes["window"]), generator=g).tolist()
        test = EvalSet("language_modeling", ids[:sizes["windows"]], ids[:sizes["windows"]], "perplexity")
        screen_ids = ids[sizes["windows"]:]
        screen_set = EvalSet("language_modeling", screen_ids[:sizes["screen_windows"]],
                             screen_ids[:sizes["screen_windows"]], "perplexity")
        settings = EvalSettings(batch_size=sizes["batch_size"], variant_batch_size=sizes["variant_batch_size"],
                                progress=False)
        scored_variants(model, None, test, [None], settings)  # warm-up
        _, a = timed(lambda: scored_variants(model, None, test, [None], settings))
        gradient, t_gradient = timed(lambda: sc.gradient_screens(
            model, window_batches(screen_ids[:sizes["gradient_windows"]], sizes["batch_size"])))
        exact, t_exact = timed(lambda: sc.exact_screen(model, None, screen_set, settings))
        screen = sc.screen_scores(exact, "exact")
        top_k = sc.head_count(sizes["top_k"], len(heads))
        sample = sc.head_count(sizes["sample"], len(heads) - top_k)
        table, t_screened = timed(lambda: sc.screened_sweep(model, None, test, screen, top_k=top_k, sample=sample,
                                                            method="exact", settings=settings, resamples=100))
        ablated = sc.heads_to_ablate(sc.select_heads(screen, top_k, sample, 0))
        scale = layer_units(heads, layers) / layer_units(ablated, layers)
        if sizes["exhaustive"]:
            _, t_exhaustive = timed(lambda: single_head_sweep(model, None, test, settings, resamples=100))
            how = "measured"
        else:
            t_exhaustive, how = t_screened * scale, "scaled by the layer model"
        del model
    row.update(heads=len(heads), layers=layers, windows=sizes["windows"], window=sizes["window"],
               a_seconds=round(a, 3), gradient_screen_seconds=round(t_gradient, 3),
               exact_screen_seconds=round(t_exact, 3), screened_sweep_seconds=round(t_screened, 3),
               heads_ablated=len(ablated), exhaustive_seconds=round(t_exhaustive, 3), exhaustive_is=how,
               exhaustive_over_n_a=round(t_exhaustive / (len(heads) * a), 3),
               screened_cost_exact=round((t_exact + t_screened) / t_exhaustive, 3),
               screened_cost_gradient=round((t_gradient + t_screened) / t_exhaustive, 3),
               layer_model_scale=round(scale, 3), verified=int((table.verification == sc.VERIFIED).sum()))
    return [row]


# --------------------------------------------------------------------------- 5. Table 4 with intervals


def table4_model(spec: dict, device: str, dtype: str, attention: str):
    """A random-weight model of ``spec``'s shape, built in its dtype on its device (an 8B never passes through
    float32 on the host), and a seeded random importance table (the free layout's heads: a random half)."""
    import pandas as pd
    import torch
    from transformers import BertConfig, BertForSequenceClassification, LlamaConfig, LlamaForCausalLM

    from headprune.evaluation.runs import all_heads

    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):
            if spec["kind"] == "bert":
                model = BertForSequenceClassification(BertConfig(**spec["shape"], num_labels=3,
                                                                 attn_implementation=attention))
            else:
                model = LlamaForCausalLM(LlamaConfig(**spec["shape"], pad_token_id=0, attn_implementation=attention))
    finally:
        torch.set_default_dtype(previous)
    heads = all_heads(model)
    scores = torch.randperm(len(heads), generator=torch.Generator().manual_seed(0)).tolist()
    importance = pd.DataFrame([{"attn_type": t, "layer": layer, "head": h, "importance": float(score)}
                               for (t, layer, h), score in zip(heads, scores)])
    return model.eval(), importance


def table4_batches(model, spec: dict, batch_sizes: list[int]) -> dict:
    """{(unit, batch size): batches} of random token ids: BERT ``batches`` batches of ``seq_len`` tokens a run; an
    LM's prefill ``prefill_batches`` batches (``min_rows`` windows at least), its decoding ``decode_rows`` rows at
    least (one batch from batch size ``decode_rows`` on)."""
    import torch

    from headprune.analyses import speed
    from headprune.evaluation import timing

    g = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    if spec["kind"] == "bert":
        batches = {}
        for b in batch_sizes:
            ids = torch.randint(5, vocab, (spec["batches"], b, spec["seq_len"]), generator=g)
            batches["examples", b] = [timing.Batch({"input_ids": x, "attention_mask": torch.ones_like(x),
                                                   "token_type_ids": torch.zeros_like(x)}, b) for x in ids]
        return batches
    rows = max(max(spec["prefill_batches"] * b for b in batch_sizes), spec["min_rows"], spec["decode_rows"])
    windows = torch.randint(1, vocab, (rows, spec["window"]), generator=g).tolist()
    prefill = {("prefill tokens", b): speed.lm_inputs(windows[:max(spec["prefill_batches"] * b, spec["min_rows"])], b,
                                                      "prefill tokens") for b in batch_sizes}
    decode = {("decode tokens", b): speed.lm_inputs(windows[:max(b, spec["decode_rows"])], b, "decode tokens",
                                                    spec["decode_tokens"]) for b in batch_sizes}
    return {**prefill, **decode}


def table4_diagnostics(variants: dict, batches: dict, spec: dict, device: str) -> dict:
    """{(unit, variant): (attention modules' seconds / all seconds, host/GPU time of a forward)} of one pass at the
    largest batch size (host/GPU: None when decoding, or on the CPU; ``timing.host_over_gpu``)."""
    from headprune.analyses import speed
    from headprune.evaluation import timing

    shares = {}
    for unit in dict.fromkeys(unit for unit, _ in batches):
        largest = max(b for u, b in batches if u == unit)
        on_device = [batch.to(device) for batch in batches[unit, largest]]
        for name, variant in variants.items():
            step = (speed.decode_step(variant.model, spec["decode_tokens"]) if unit == "decode tokens"
                    else speed.classify_step(variant.model))
            attention, total = timing.attention_seconds(variant.model, step, on_device, device)
            host = None if unit == "decode tokens" else timing.host_over_gpu(step, on_device, device)
            shares[unit, name] = (attention / total, host)
    return shares


def table4_one(spec: dict, device: str, sizes: dict, log) -> list[dict]:
    """Table 4 for one model: every variant timed (``speed.measure``), checked against the gated model, with
    intervals; one row per (unit, variant)."""
    import torch

    from headprune.analyses import speed, table4
    from headprune.evaluation import timing

    memory = {}
    log.write(f"\n=== table4: {spec['name']} on {device}, {sizes['dtype']}, {sizes['attention']}\n")
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), peak_gpu_memory(device, memory):
        model, importance = table4_model(spec, device, sizes["dtype"], sizes["attention"])
        variants, skipped = speed.build_variants(model, None, importance, TABLE4_VARIANTS, 50.0, device)
        batches = table4_batches(model, spec, sizes["batch_sizes"])
        family = "bert" if spec["kind"] == "bert" else "llama"
        unit = next(iter(batches))[0]  # the check: logits on the first unit's largest batch, 8 rows of it
        check_batch = batches[unit, max(sizes["batch_sizes"])][0]
        check_batch = timing.Batch({k: v[:8] for k, v in check_batch.inputs.items()}, min(8, check_batch.size))
        checks = speed.check_variants(variants, [check_batch.to(device)], logits=True)
        settings = speed.SpeedSettings(batch_sizes=sizes["batch_sizes"], repeats=sizes["repeats"],
                                       warmup_batches=sizes["warmup_batches"], prune_percent=50.0,
                                       decode_tokens=spec.get("decode_tokens", 32), variants=list(variants))
        runs = speed.measure({name: v.model for name, v in variants.items()}, batches, settings, family, device)
        runs.insert(0, "study", spec["name"])
        summary = table4.summarize(runs, {"prune_percent": 50.0, **checks, "skipped": skipped})
        shares = table4_diagnostics(variants, batches, spec, device)
        print(table4.table4_markdown(summary, "random inputs", chosen="at random (seeded)"))
        del model, variants
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return table4_rows(spec["name"], runs, summary, shares, skipped, memory)


def _number(value, digits: int = 2):
    """A float for the summary's JSON, rounded; None for a NaN (not measured)."""
    value = float(value)
    return None if value != value else round(value, digits)


def table4_rows(name: str, runs, summary, shares: dict, skipped: dict, memory: dict) -> list[dict]:
    """One row per (unit, variant) for the summary: items/s (the original) or the speedup and its interval (the
    others) by batch size; at the largest batch size the KV cache, the peak memory of a run, host/GPU time and the
    attention modules' share."""
    from headprune.analyses import speed, table4

    rows = []
    first = summary.iloc[0]
    for unit, table in summary.groupby("unit", sort=False):
        largest = table.loc[table["batch_size"].idxmax()]
        at_largest = runs[(runs["unit"] == unit) & (runs["batch_size"] == largest["batch_size"])]
        for variant in [speed.ORIGINAL, *table4.timed_variants(summary)]:
            stats = ["mean"] if variant == speed.ORIGINAL else ["speedup_percent", "speedup_low", "speedup_high"]
            mine = at_largest[at_largest["variant"] == variant]
            kv = _number(largest[speed.column(variant, "kv_cache_bytes")])
            rows.append({
                "model": name, "unit": unit, "variant": variant, "dtype": first["dtype"], "timer": first["timer"],
                "runs": int(first["runs"]), "heads": int(mine["heads"].iloc[0]),
                "heads_total": int(first["heads_total"]),
                "by_batch": {str(int(r["batch_size"])): [_number(r[speed.column(variant, k)]) for k in stats]
                             for _, r in table.iterrows()},
                "check_agreement": None if variant == speed.ORIGINAL else
                _number(first[speed.column(variant, "check_agreement")], 4),
                "kv_cache_mib": None if kv is None else round(kv / 2 ** 20, 3),
                "run_peak_mib": _number(largest[speed.column(variant, "peak_gpu_mib")], 1),
                "attention_share": _number(shares[unit, variant][0], 3),
                "host_over_gpu": None if shares[unit, variant][1] is None else _number(shares[unit, variant][1]),
                **memory})
        rows += [{"model": name, "unit": unit, "variant": v, "skipped": why} for v, why in skipped.items()]
    return rows


def gather_check(device: str, dtype: str, shape: dict, cases: list[tuple[int, int]], reps: int) -> list[dict]:
    """One decoding step's attention at (batch, cache positions) ``cases``, in ms (CUDA events on a GPU), three
    ways for half of ``shape``'s query heads kept: free (a seeded random half: every kv head still read, unevenly,
    so headprune_attention gathers keys and values per query head, index_select over the whole cache, then runs
    SDPA on as many kv heads as query heads), uniform (half of the kv groups whole: SDPA's grouped-query path, no
    copy) and padded (the free layout's queries padded to its largest group, zeros where a head was removed,
    SDPA's grouped-query path on the kept kv heads, the kept heads' outputs picked: what headprune_attention could
    do instead of the gather)."""
    import torch
    import torch.nn.functional as F

    from headprune.evaluation import timing

    heads, kv, dim = shape["num_attention_heads"], shape["num_key_value_heads"], shape.get("head_dim") or \
        shape["hidden_size"] // shape["num_attention_heads"]
    group = heads // kv
    kept = sorted(torch.randperm(heads, generator=torch.Generator().manual_seed(0))[:heads // 2].tolist())
    index = torch.tensor([h // group for h in kept], device=device)
    largest = int(torch.bincount(index, minlength=kv).max())
    slots = torch.tensor([int((index[:i] == index[i]).sum()) for i in range(len(kept))], device=device)
    padded_at = index * largest + slots  # where each kept head's query goes among kv * largest
    options = dict(device=device, dtype=getattr(torch, dtype))
    rows = []
    for batch, positions in cases:
        q = torch.randn(batch, len(kept), 1, dim, **options)
        k, v = (torch.randn(batch, kv, positions, dim, **options) for _ in range(2))
        k_half, v_half = k[:, :kv // 2].contiguous(), v[:, :kv // 2].contiguous()

        def free():
            return F.scaled_dot_product_attention(q, k.index_select(1, index), v.index_select(1, index))

        def uniform():
            return F.scaled_dot_product_attention(q, k_half, v_half, enable_gqa=True)

        def padded():
            full = q.new_zeros(batch, kv * largest, 1, dim).index_copy_(1, padded_at, q)
            return F.scaled_dot_product_attention(full, k, v, enable_gqa=True).index_select(1, padded_at)
        times = {}
        for name, step in (("free", free), ("uniform", uniform), ("padded", padded)):
            for _ in range(3):
                step()
            stop = timing.stopwatch_for(device)[0]()
            for _ in range(reps):
                step()
            times[name] = round(1000 * stop() / reps, 4)
        assert torch.allclose(free().float(), padded().float(), atol=2e-2)  # the padded path computes the same
        rows.append({"batch": batch, "positions": positions, "heads": heads, "kv_heads": kv, "heads_kept": len(kept),
                     "largest_group": largest, **{f"{k}_ms": t for k, t in times.items()}})
    return rows


def table4_text(rows: list[dict], batch_sizes: list[int]) -> list[str]:
    """The table4 part's lines of the summary table."""
    timed = next((row for row in rows if "by_batch" in row), {})
    lines = ["", f"Table 4 with 95% intervals over {timed.get('runs', '?')} paired runs ({timed.get('timer', '?')}): "
             "items/s of the full model, speedup % (interval) of the others; at the largest batch size: KV cache "
             "and a run's peak MiB; host/GPU time of a forward (GPU, not decoding: near 1, launch-bound); the "
             "attention modules' share of the time",
             f"  {'model':19} {'unit':14} {'variant':8} {'heads':>9} " + " ".join(f"{b:>21}" for b in batch_sizes)
             + f" {'check':>6} {'KV MiB':>8} {'peak MiB':>8} {'host/GPU':>8} {'attn':>5}"]
    for row in rows:
        if "error" in row:
            lines.append(f"  {row['model']:19} ERROR: {row['error']}")
            continue
        if "skipped" in row:
            lines.append(f"  {row['model']:19} {row['unit']:14} {row['variant']:8} skipped: {row['skipped']}")
            continue

        def cell(b):
            value = row["by_batch"].get(str(b))
            if value is None:
                return f"{'-':>21}"
            if len(value) == 1:
                return f"{value[0]:>19.1f}/s"
            point, low, high = value
            return f"{point:+21.1f}" if low is None else f"{point:+6.1f} ({low:+.1f},{high:+.1f})".rjust(21)
        check = "" if row["check_agreement"] is None else f"{100 * row['check_agreement']:5.1f}%"
        kv = "-" if row["kv_cache_mib"] is None else f"{row['kv_cache_mib']:.2f}"
        peak = "-" if row["run_peak_mib"] is None else f"{row['run_peak_mib']:.0f}"
        host = "-" if row["host_over_gpu"] is None else f"{row['host_over_gpu']:.2f}"
        heads = f"{row['heads']:>4}/{row['heads_total']:<4}"
        lines.append(f"  {row['model']:19} {row['unit']:14} {row['variant']:8} {heads} "
                     + " ".join(cell(b) for b in batch_sizes)
                     + f" {check:>6} {kv:>8} {peak:>8} {host:>8} {row['attention_share']:5.2f}")
    return lines


# --------------------------------------------------------------------------- the summary


def text_table(summary: dict) -> str:
    """The summary as text: a section per part that ran."""
    lines = [f"GPU check{' (CPU form)' if summary['cpu_form'] else ''}, {summary['date']}, {summary['device']}, "
             f"torch {summary['torch']}, transformers {summary['transformers']}, Python {summary['python']}: "
             f"{summary['seconds']:.0f} s, {'all passed' if summary['ok'] else 'FAILED'}"]
    for key, section in (("tests", tests_text), ("sweep", sweep_text), ("speed", speed_text),
                         ("screen", screen_text)):
        if summary.get(key):
            lines += ["", *section(summary[key])]
    if summary.get("table4"):
        lines += table4_text(summary["table4"], summary.get("table4_batch_sizes", BATCH_SIZES))
    if summary.get("table4_gather"):
        lines += gather_text(summary["table4_gather"])
    return "\n".join(lines) + "\n"


def _memory(row) -> str:
    return "-" if row.get("peak_gpu_mib") is None else f"{row['peak_gpu_mib']:.0f}"


def tests_text(rows: list[dict]) -> list[str]:
    lines = [f"Tests ({', '.join(Path(f).name for f in TEST_FILES)})",
             f"  {'dtype':9} {'attention':9} {'passed':>6} {'failed':>6} {'skipped':>7} {'seconds':>8} "
             f"{'peak GPU MiB':>12}"]
    for row in rows:
        if "passed" in row:
            lines.append(f"  {row['dtype']:9} {row['attention']:9} {row['passed']:6d} {row['failed']:6d} "
                         f"{row['skipped']:7d} {row['seconds']:8.1f} {_memory(row):>12}")
        lines += [f"    FAILED {name}" for name in row.get("failures", [])]
        if "error" in row:
            lines.append(f"  {row['dtype']:9} {row['attention']:9} ERROR: {row['error']}")
    return lines


def sweep_text(rows: list[dict]) -> list[str]:
    lines = ["Single-head sweep on the Llama-layout model (c: the pipeline's jobs; paired: a timed in each job)",
             f"  {'study':26} {'heads':>5} {'a (s)':>7} {'b/(N a)':>8} {'c/(N a) [heads a job: ratio]':>30} "
             f"{'paired':>8} {'peak GPU MiB':>12}"]
    for row in rows:
        if "error" in row:
            lines.append(f"  {row['study']:26} ERROR: {row['error']}")
            continue
        c = ", ".join(f"{k}: {v:.2f}" for k, v in row["c_over_n_a"].items())
        paired = ", ".join(f"{v:.2f}" for v in row["c_over_n_a_paired"].values())
        b = "-" if row["b_over_n_a"] is None else f"{row['b_over_n_a']:.2f}"
        lines.append(f"  {row['study']:26} {row['heads']:5d} {row['a_seconds']:7.2f} {b:>8} "
                     f"{c:>30} {paired:>8} {_memory(row):>12}")
    return lines


def speed_text(rows: list[dict]) -> list[str]:
    lines = ["Table 4: speedup with half of the heads removed, by batch size (check: pruned = gated)",
             f"  {'model':12} {'dtype':9} {'unit':15} " + " ".join(f"{b:>7}" for b in BATCH_SIZES)
             + f" {'check':>6} {'peak GPU MiB':>12}"]
    for row in rows:
        if "error" in row:
            lines.append(f"  {row['model']:12} {row['dtype']:9} ERROR: {row['error']}")
            continue
        cells = " ".join(f"{row['speedup_percent'][str(b)]:+6.1f}%" if str(b) in row["speedup_percent"] else
                         f"{'-':>7}" for b in BATCH_SIZES)
        lines.append(f"  {row['model']:12} {row['dtype']:9} {row['unit']:15} {cells} "
                     f"{100 * row['check_agreement']:5.1f}% {_memory(row):>12}")
    return lines


def screen_text(rows: list[dict]) -> list[str]:
    lines = ["Screened Table 1 (issue #40): seconds; costs as fractions of the exhaustive sweep",
             f"  {'model':18} {'dtype':9} {'heads':>5} {'a':>7} {'gradient':>8} {'exact':>7} {'screened':>8} "
             f"{'exhaustive':>10} {'cost exact':>10} {'cost grad':>9} {'peak GPU MiB':>12}"]
    for row in rows:
        if "error" in row:
            lines.append(f"  {row['study']:18} ERROR: {row['error']}")
            continue
        lines.append(f"  {row['study']:18} {row['dtype']:9} {row['heads']:5d} {row['a_seconds']:7.2f} "
                     f"{row['gradient_screen_seconds']:8.2f} {row['exact_screen_seconds']:7.2f} "
                     f"{row['screened_sweep_seconds']:8.2f} {row['exhaustive_seconds']:10.2f} "
                     f"{row['screened_cost_exact']:10.3f} {row['screened_cost_gradient']:9.3f} {_memory(row):>12}"
                     + ("" if row["exhaustive_is"] == "measured" else "  (exhaustive scaled by the layer model)"))
    return lines


def gather_text(rows: list[dict]) -> list[str]:
    first = next((row for row in rows if "error" not in row), {})
    lines = ["", f"One decoding step's attention, ms, {first.get('heads_kept', '?')} of {first.get('heads', '?')} "
             f"query heads kept on {first.get('kv_heads', '?')} kv heads: free (a random half; keys/values gathered "
             "per query head), uniform (half of the kv groups), padded (free, its queries padded to its largest "
             f"group, {first.get('largest_group', '?')}: no gather)",
             f"  {'batch':>5} {'positions':>9} {'free':>9} {'uniform':>9} {'padded':>9}"]
    for row in rows:
        if "error" in row:
            lines.append(f"  ERROR: {row['error']}")
            continue
        lines.append(f"  {row['batch']:5d} {row['positions']:9d} {row['free_ms']:9.3f} {row['uniform_ms']:9.3f} "
                     f"{row['padded_ms']:9.3f}")
    return lines


def part(rows: list, what: dict, log, run):
    """Run one part; a part that breaks leaves a row with its error (the others still run)."""
    try:
        rows.extend(run())
    except Exception as error:  # noqa: BLE001 - the summary says what broke, the log has the traceback
        traceback.print_exc(file=log)
        rows.append({**what, "error": f"{type(error).__name__}: {error}"[:500]})


def run_table4(summary: dict, device: str, sizes: dict, log, save) -> None:
    """The table4 part: each model's Table 4, then one decoding step's attention three ways; saved after each."""
    for spec in sizes["models"]:
        print(f"table4: {spec['name']}, {', '.join(TABLE4_VARIANTS)} ...", flush=True)
        part(summary["table4"], {"model": spec["name"]}, log, lambda: table4_one(spec, device, sizes, log))
        save()
    print("table4: one decoding step's attention, free (gathered) against uniform and padded ...", flush=True)
    gather = sizes["gather"]
    part(summary["table4_gather"], {"batch": "-"}, log,
         lambda: gather_check(device, sizes["dtype"], gather["shape"], gather["cases"], gather["reps"]))
    save()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU with small sizes (CI's form)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu_check",
                        help="where summary.json, summary.txt and log.txt go (default: results/gpu_check)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS)
    args = parser.parse_args(argv)

    import torch
    import transformers

    from headprune.workflow import quiet_library_progress_bars

    quiet_library_progress_bars()  # no carriage-return bars from transformers in the output (as in every job)
    started = time.perf_counter()
    if not args.cpu and not torch.cuda.is_available():
        parser.error("no GPU visible to torch: run on a GPU machine, or give --cpu")
    device, sizes = ("cpu", SIZES["cpu"]) if args.cpu else ("cuda:0", SIZES["gpu"])
    torch.set_num_threads(sizes["threads"])
    from headprune.evaluation.timing import device_name

    summary = {"date": datetime.date.today().isoformat(), "device": device_name(device), "cpu_form": args.cpu,
               "torch": torch.__version__, "transformers": transformers.__version__,
               "python": platform.python_version(), "tests": [], "sweep": [], "speed": [], "screen": [], "table4": [],
               "table4_batch_sizes": sizes["table4"]["batch_sizes"], "table4_gather": []}
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> str:
        """The summary so far (after each part: a run stopped at a time limit keeps what it finished)."""
        summary["seconds"] = round(time.perf_counter() - started, 1)
        summary["ok"] = not any("error" in row or row.get("failed")
                                for rows in (summary["tests"], summary["sweep"], summary["speed"], summary["screen"],
                                             summary["table4"], summary["table4_gather"])
                                for row in rows)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        table = text_table(summary)
        (args.out / "summary.txt").write_text(table)
        return table

    with open(args.out / "log.txt", "w", buffering=1) as log, \
            tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        scratch = Path(scratch)
        if "tests" in args.parts:
            for dtype, attention in sizes["tests"]:
                print(f"tests: {dtype}, {attention} attention ...", flush=True)
                part(summary["tests"], {"dtype": dtype, "attention": attention}, log,
                     lambda: [run_tests(device, dtype, attention, sizes, log, scratch)])
                save()
        studies = []
        if "sweep" in args.parts or "speed" in args.parts:
            print("the Llama-layout model ...", flush=True)
            part(summary["sweep"], {"study": "llama-100m"}, log,
                 lambda: studies.extend(llama_studies(device, sizes["sweep"], scratch / "llama")) or [])
        if "sweep" in args.parts:
            for study in studies:
                print(f"sweep: {study['name']} ...", flush=True)
                part(summary["sweep"], {"study": study["name"]}, log,
                     lambda: [run_sweep(study, device, sizes["sweep"], log)])
                save()
        if "speed" in args.parts:
            for dtype in sizes["speed_dtypes"]:
                print(f"speed: BERT and the Llama-layout model, {dtype} ...", flush=True)
                part(summary["speed"], {"model": "bert", "dtype": dtype}, log,
                     lambda: bert_speed(device, dtype, sizes["bert"], log))
                if studies:
                    part(summary["speed"], {"model": "llama-100m", "dtype": dtype}, log,
                         lambda: llama_speed(device, dtype, studies[0]["folder"], sizes["llama_speed"], log))
                save()
        if "screen" in args.parts:
            print("screen: a screened Table 1 on a Llama-3-8B-shaped model ...", flush=True)
            part(summary["screen"], {"study": "llama3 shape"}, log, lambda: screen_check(device, sizes["screen"], log))
            save()
        if "table4" in args.parts:
            run_table4(summary, device, sizes["table4"], log, save)
    table = save()
    print("\n" + table + f"\n(summary.json, summary.txt and log.txt in {args.out})")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
