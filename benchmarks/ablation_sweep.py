"""What the single-head ablation sweep costs against the work it does, from one run on one machine.

    (a) one full-model evaluation of the test set, in a warm process (the unit of real work; median of 3);
    (b) the sweep over all N heads, one process per head (load the model, evaluate one head);
    (c) the sweep as the pipeline runs it: one process per job of ``--heads-per-job`` heads, each
        loading the model folder once and evaluating its heads in batched gate variants
        (headprune.evaluation.runs.run_variants, as scripts/evaluate.py does); with ``--warm-start``
        also (c'), the same jobs forked from a warm server (headprune.warm, config ``warm_start``), as
        the demo runs them;

and the ratios b / (N a) and c / (N a): how much the sweep costs beyond N evaluations. (b) and (c)
time whole processes (start, imports, load, evaluation), as a job on a cluster pays them. With
``--sample`` only that many processes of each kind run, spread evenly over the heads and jobs (a head's
variant recomputes the layers from its own up, so the first jobs are the dearest), and their mean is
scaled to the whole sweep; each sampled job's line gives its layers, its time split and its cost per head.

    python benchmarks/ablation_sweep.py --demo results/demo-run        # a finished demo's models, CPU
    python benchmarks/ablation_sweep.py --model bert-base --device cuda --sample 8
    python benchmarks/ablation_sweep.py --model transformer-big --device cuda --sample 8
    python benchmarks/ablation_sweep.py --model llama-100m --heads-per-job 30 --sample 3 \
        --variant-batch-size language_modeling=4 retrieval=32 lm_eval=64   # perplexity, retrieval, multiple choice
    python benchmarks/ablation_sweep.py --model llama-100m --vocab 128256 --scores language_modeling \
        --heads-per-job 90 --sample 1 --variant-batch-size language_modeling=4   # Llama-3's vocabulary

``--demo DIR`` reads the demo's translation model folder and newstest2013 and its fine-tuned
MNLI-like model and dev set from a directory where the demo ran; ``--model`` builds a random-weight
model of that size with a synthetic vocabulary (nothing is downloaded), so the numbers measure the
machinery, not the model. ``llama-100m`` is a Llama-layout LM of SmolLM-135M's shape (30 layers of 9
query heads on 3 KV heads, N = 270) with an 8k vocabulary (``--vocab``: SmolLM's 49152 or Llama-3's 128256
for a real output layer; its share of a forward pass is printed), timed on three studies: perplexity over
512-token windows, needle-in-a-haystack retrieval (contexts of 512 and 1024 tokens, 16 greedy tokens per
answer: a random model never emits EOS, so every answer decodes all of them), and a multiple-choice
lm-evaluation-harness task (kind lm_eval: a local task YAML of ``--questions`` passages of ``--passage``
tokens with ``--choices`` endings each; HellaSwag's shape). For the task, (a) is one evaluation of the full
model by lm-eval itself (``simple_evaluate`` with its own ``HFLM`` over the loaded model, ``--hflm-batch-size``):
what a user running lm-eval once per head pays per head; the pipeline's own full evaluation is printed beside it.
``--model llama-tiny`` is the same layout at a toy size (2 layers of 4 query heads on 2 KV heads), for smoke runs.

``--masking MODE [MODE ...]`` (issue #32; default ``zero`` alone) times (a) and (c) under each masking mode
(headprune.models.masking) on the same study in one run, zero always among them as the reference, and prints per
mode a, c/(N a) and the mode's c over zero's c (and its jobs' evaluation time over zero's, which leaves out the
process start that both pay alike). For mean, optimal and resample it first computes the study's data as the
pipeline's head_constants job does (headprune.scoring.constants on data that is not the test set: the demo's
importance sets and MNLI training split; for ``--model``, a separate synthetic training split of the test set's
size, ``--constants-items``), timed in this process with ``--threads`` threads and printed in units of a: the
mean's one pass, the optimal constants' statistics pass and ``--optimal-steps`` Adam steps (seconds a step), the
resample pool's pass. The jobs read the files as the pipeline's do (EvalSettings masking, constants, pool).

    python benchmarks/ablation_sweep.py --model llama-100m --scores language_modeling --windows 2 --window 128 \
        --heads-per-job 27 --sample 1 --skip-b --masking zero mean optimal resample --optimal-steps 10
"""
from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the imports: a worker's time includes them, as a job's does

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

if str(Path(__file__).resolve().parent) not in sys.path:  # benchmarks/ is no package: its modules import by name
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_modes import masked, mode_data, print_modes  # noqa: E402
from sweep_studies import LLAMA_SIZES, demo_studies, llama_studies, random_study  # noqa: E402
from sweep_worker import load_model, run_worker, worker, worker_study  # noqa: E402

# what benchmarks/gpu_check.py and tests/test_ablation_sweep_modes.py use of it
__all__ = ["llama_studies", "mode_data", "masked", "sweep", "worker", "worker_study"]


def spread(items: list, k: int) -> list:
    """``k`` of the items (all when k is 0 or at least their number), evenly spread: the middle one of each of k
    equal stretches. A job's cost depends on its heads' layers (a variant recomputes the layers from its head's
    up), so a sample of the first jobs only would be the dearest ones."""
    if not k or k >= len(items):
        return list(items)
    return [items[int((i + 0.5) * len(items) / k)] for i in range(k)]


def layer_range(heads: list[str]) -> str:
    from headprune.evaluation.runs import parse_head_name

    layers = sorted({parse_head_name(head)[1] for head in heads if head != "full"})
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"



def sweep(study: dict, args, time_b: bool = True) -> dict:
    import torch

    from headprune.evaluation.runs import all_heads, head_name

    model, _ = load_model(study, args.device)
    heads = [head_name(h) for h in all_heads(model)]
    del model
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    n = len(heads)

    # (a) the full model once, in a warm process
    full = run_worker(study, ["full"], args, warm=True)[1]
    # (b) one process per head (a sample spread over the layers)
    one = [] if getattr(args, "skip_b", False) or not time_b else \
        [run_worker(study, [head], args) for head in spread(heads, args.sample)]
    b = sum(wall for wall, _ in one) / len(one) * n if one else None
    b_cpu = sum(report["cpu"] for _, report in one) / len(one) * n if one else None
    # (c) the pipeline's jobs: heads_per_job heads each, evaluated in batched variants
    pipeline = []
    for forked in ([False, True] if args.warm_start else [False]):
        if forked:  # the server's own start is paid once per run, by the first job: not timed here
            run_worker(study, heads[:1], args, forked=True)
        for k in args.heads_per_job:
            jobs = [heads[i:i + k] for i in range(0, n, k)]
            # each job --repeats times, its median wall time kept: a demo job takes about a second, and one
            # run of it on a shared machine can be off by a third; each also times a full-model evaluation
            # after its own work (paired: a measured in the same process and minutes)
            timed = [sorted((run_worker(study, job, args, forked=forked, paired=True) for _ in range(args.repeats)),
                            key=lambda timing: timing[0])[args.repeats // 2] for job in spread(jobs, args.sample)]
            pipeline.append({"c": sum(wall for wall, _ in timed) / len(timed) * len(jobs), "jobs": len(jobs),
                             "c_cpu": sum(report["cpu"] for _, report in timed) / len(timed) * len(jobs),
                             "paired": sum(wall for wall, _ in timed)
                             / sum(len(report["heads"]) * report["a_here"] for _, report in timed),
                             "paired_cpu": sum(report["cpu"] for _, report in timed)
                             / sum(len(report["heads"]) * report["a_here_cpu"] for _, report in timed),
                             "heads_per_job": k, "measured": len(timed), "load": timed[-1][1]["load"],
                             "eval": timed[-1][1]["eval"], "forked": forked,
                             "sampled": [{"wall": wall, **report} for wall, report in timed]})
    return {"study": study["name"], "heads": n, "a": full["eval"], "a_cpu": full["eval_cpu"], "b": b, "b_cpu": b_cpu,
            "b_measured": len(one), "pipeline": pipeline,
            **({"own": full["own"], "own_cpu": full["own_cpu"]} if "own" in full else {})}


def variant_batch_sizes(values: list[str]) -> tuple[int, dict]:
    """--variant-batch-size: a plain number (every kind), and/or KIND=NUMBER for one kind."""
    default, by_kind = 256, {}
    for value in values:
        kind, _, number = value.rpartition("=")
        if kind:
            by_kind[kind] = int(number)
        else:
            default = int(number)
    return default, by_kind


def main():
    from headprune.models.masking import MASKING_WORDS, Zero

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, help="a directory where the demo ran")
    parser.add_argument("--model", choices=["bert-base", "transformer-big", *LLAMA_SIZES],
                        help="a random-weight model of this size (llama-100m: three studies, perplexity, retrieval and "
                             "multiple choice; llama-tiny: the same at a toy size)")
    parser.add_argument("--items", type=int, default=64, help="test items of the random model's test set")
    llama = parser.add_argument_group("llama-100m")
    llama.add_argument("--vocab", type=int, default=8192,
                       help="vocabulary size: the output layer's rows (byte-level BPE, tied embeddings; real ones: "
                            "49152 as SmolLM2, 128256 as Llama-3)")
    llama.add_argument("--windows", type=int, default=4, help="perplexity windows")
    llama.add_argument("--window", type=int, default=512, help="tokens per perplexity window")
    llama.add_argument("--context-lengths", type=int, nargs="+", default=[512, 1024], help="retrieval contexts")
    llama.add_argument("--depths", type=float, nargs="+", default=[25, 75], help="retrieval needle depths (%%)")
    llama.add_argument("--needles", type=int, default=2, help="retrieval items per (context length, depth)")
    llama.add_argument("--max-new-tokens", type=int, default=16, help="retrieval: tokens decoded per answer")
    llama.add_argument("--questions", type=int, default=16, help="multiple choice (lm_eval): questions")
    llama.add_argument("--passage", type=int, default=256, help="multiple choice: tokens of a question's passage")
    llama.add_argument("--choices", type=int, default=4, help="multiple choice: endings per question (2-8 words each)")
    llama.add_argument("--hflm-batch-size", type=int, default=16,
                       help="multiple choice: the batch_size of lm-eval's HFLM that times (a)")
    llama.add_argument("--scores", nargs="+", default=["language_modeling", "retrieval", "lm_eval"],
                       choices=["language_modeling", "retrieval", "lm_eval"],
                       help="the studies to time (all three by default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (the demo's jobs use 1)")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--heads-per-job", type=int, nargs="+", default=[4], help="ablation.heads_per_job: one or more")
    parser.add_argument("--variant-batch-size", nargs="+", default=["256"], metavar="[KIND=]ROWS",
                        help="(gate setting, item) rows per forward or generate() (EvalSettings.variant_batch_size): "
                             "a number for every kind, KIND=ROWS for one (e.g. retrieval=32); with --demo, the demo "
                             "config's ablation.variant_batch_size of each study's kind unless KIND=ROWS is given")
    parser.add_argument("--sample", type=int, default=0,
                        help="processes of each kind actually run, spread over the heads and jobs (0: all)")
    parser.add_argument("--repeats", type=int, default=1, help="(c): runs of each job, the median kept")
    parser.add_argument("--skip-b", action="store_true", help="do not time (b), one process per head")
    modes = parser.add_argument_group("masking modes (issue #32)")
    modes.add_argument("--masking", nargs="+", default=["zero"], choices=MASKING_WORDS, metavar="MODE",
                       help=f"time (a) and (c) under each of these masking modes ({', '.join(MASKING_WORDS)}) on the "
                            "same study, zero always among them (first) as the reference; (b) under the first only")
    modes.add_argument("--optimal-steps", type=int, default=200,
                       help="optimal constants: Adam steps (config constants.optimal.steps)")
    modes.add_argument("--optimal-lr", type=float, default=0.05, help="optimal constants: learning rate")
    modes.add_argument("--optimal-repeats", type=int, default=1, help="optimal constants: copies of a batch per step")
    modes.add_argument("--optimal-seed", type=int, default=0, help="optimal constants: seed")
    modes.add_argument("--resample-items", type=int, default=64, help="resample: items recorded (constants.resample)")
    modes.add_argument("--constants-items", type=int,
                       help="--model: items of the synthetic training split the modes' data are computed on "
                            "(default: as many as the test set)")
    modes.add_argument("--constants-batch-size", type=int,
                       help="--model: its batch size (default 32 sentences or pairs, 4 windows)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--heads", help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--paired", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warm-start", action="store_true", help="also time (c) with jobs forked from a warm server")
    parser.add_argument("--forked", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    default_rows, rows_by_kind = variant_batch_sizes(args.variant_batch_size)
    args.variant_batch_size = default_rows

    if args.worker and args.forked:
        from types import SimpleNamespace

        from headprune import warm

        warm.start(SimpleNamespace(config={"warm_start": True, "device": args.device}))  # runs on in the fork
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args.heads.split("+"), args.device, args.threads,
                                args.batch_size, args.variant_batch_size, args.warm, args.paired, started=STARTED)))
        return
    if bool(args.demo) == bool(args.model):
        parser.error("give --demo DIR or --model SIZE")
    # the paper's zero masking is always measured, first: the reference of the modes' ratios
    modes = [Zero.word] + [mode for mode in dict.fromkeys(args.masking) if mode != Zero.word]
    with tempfile.TemporaryDirectory(prefix="ablation-sweep-") as scratch:
        if args.demo:
            studies = demo_studies(args.demo)
        elif args.model in LLAMA_SIZES:
            studies = [study for study in llama_studies(Path(scratch), args) if study["kind"] in args.scores]
        else:
            studies = [random_study(args.model, Path(scratch), args.items, train_items=args.constants_items,
                                    train_batch_size=args.constants_batch_size or 32)]
        for study in studies:
            if study["kind"] in rows_by_kind:
                study["variant_batch_size"] = rows_by_kind[study["kind"]]
        print(f"device {args.device}, {args.threads} thread(s) per process, batch size {args.batch_size}, "
              f"{os.cpu_count()} cores" + (f", masking modes {' '.join(modes)}" if len(modes) > 1 else ""))
        for number, study in enumerate(studies):
            if len(modes) == 1:
                print_sweep(study, sweep(study, args), args)
                continue
            optimal = {"steps": args.optimal_steps, "lr": args.optimal_lr, "repeats": args.optimal_repeats,
                       "seed": args.optimal_seed}
            data = mode_data(study, modes, Path(scratch) / f"modes-{number}", args.device, args.threads,
                             optimal=optimal, resample_items=args.resample_items)
            results = {}
            for mode in modes:
                results[mode] = sweep(masked(study, mode, data), args, time_b=mode == modes[0])
                print_sweep(study, results[mode], args, mode)
            print_modes(study, results, data)


def print_sweep(study: dict, r: dict, args, mode: str | None = None):
    """One study's sweep as ``sweep`` measured it (under masking ``mode``, where modes are compared)."""
    n, a, a_cpu = r["heads"], r["a"], r["a_cpu"]
    rows = study.get("variant_batch_size", args.variant_batch_size)
    about = [f"{r['heads']} heads", f"variant batch size {rows}"]
    about += [study[key] for key in ("params", "output_layer") if key in study]
    about += [f"masking {mode}"] if mode else []
    print(f"\n{r['study']} ({', '.join(about)}); ratios by wall time [by CPU time]")
    label = "(a) one full-model evaluation" + (" by lm-eval's HFLM" if study["kind"] == "lm_eval" else "")
    print(f"  {label:39}{a:8.2f} s    N a = {n * a:8.1f} s    [CPU {a_cpu:.2f} s]")
    if "own" in r:
        print(f"      the pipeline's own full-model evaluation: {r['own']:.2f} s [CPU {r['own_cpu']:.2f} s], "
              f"{a / r['own']:.1f}x faster than HFLM's [{a_cpu / r['own_cpu']:.1f}x]")
    if r["b"] is not None:
        print(f"  (b) one process per head               {r['b']:8.1f} s    b / (N a) = {r['b'] / (n * a):.2f}"
              f" [{r['b_cpu'] / (n * a_cpu):.2f}]    ({r['b_measured']} processes run)")
    for p in r["pipeline"]:
        label = "(c') warm start" if p["forked"] else "(c) pipeline   "
        cpu = "" if p["forked"] else f" [{p['c_cpu'] / (n * a_cpu):.2f}]"  # a forked job's CPU is the server's
        print(f"  {label}, {p['heads_per_job']:2d} heads per job ({p['jobs']:3d} jobs) {p['c']:8.1f} s    "
              f"c / (N a) = {p['c'] / (n * a):.2f}{cpu}    ({p['measured']} jobs run; one job: "
              f"load {p['load']:.2f} s, eval {p['eval']:.1f} s)")
        paired_cpu = "" if p["forked"] else f" [{p['paired_cpu']:.2f}]"
        print(f"      paired with a full-model evaluation in each job's process (a_job): c / (N a_job) = "
              f"{p['paired']:.2f}{paired_cpu}")
        for job in p["sampled"]:
            per, rest = len(job["heads"]), job["wall"] - job["start"] - job["load"] - job["eval"]
            line = (f"      {layer_range(job['heads']):>13}: {job['wall']:6.1f} s = start {job['start']:4.1f}"
                    f" + load {job['load']:4.2f} + eval {job['eval']:6.1f} + rest {rest:3.1f}; "
                    f"a_job {job['a_here']:5.2f} s; job / (heads a) = {job['wall'] / (per * a):.2f}, "
                    f"/ (heads a_job) = {job['wall'] / (per * job['a_here']):.2f}")
            if not p["forked"]:
                line += (f"; by CPU: job {job['cpu'] / (per * a_cpu):.2f}, "
                         f"eval {job['eval_cpu'] / (per * a_cpu):.2f}")
            print(line)



if __name__ == "__main__":
    main()
