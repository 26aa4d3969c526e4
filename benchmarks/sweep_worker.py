"""One job of the single-head sweep, as the pipeline runs it, for benchmarks/ablation_sweep.py: ``worker`` loads a
study's model folder and evaluates its heads (or the full model) in one pass, timed; ``run_worker`` runs it as a
process of its own (ablation_sweep.py ``--worker``, the entry point) and reports its wall and CPU time."""
from __future__ import annotations

import functools
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()  # what "start" counts from in this process (a worker process: ablation_sweep.STARTED)
ENTRY = Path(__file__).with_name("ablation_sweep.py")  # the worker process's script (its --worker)


def worker(study: dict, heads: list[str], device: str, threads: int, batch_size: int, variant_batch_size: int,
           warm: bool = False, paired: bool = False, scores: bool = False, started: float | None = None) -> dict:
    """Load the model folder and evaluate each head off (or the full model) in one pass; times in seconds.
    ``warm``: evaluate once untimed first (caches, lazy initialization), then time three runs and report
    their median (a full-model evaluation of the demo's models takes 0.1-0.5 s: one run is noisy).
    ``paired``: then time one full-model evaluation too (``a_here``: a measured beside the job's own work, in
    the same process and minute, for a ratio that other work on a shared machine moves less). The study's
    "masking" (and "constants" or "pool", the files of ``mode_data``) is how a head is switched off, as the
    pipeline's EvalSettings say it; ``scores``: also report each variant's score, untimed (for tests).
    ``started``: the process's start (perf_counter; a worker process's, before its imports), that "start" counts
    from (default: this module's import)."""
    import torch

    from headprune.evaluation.runs import EvalSet, EvalSettings, gates_without, parse_head_name, run_variants
    from headprune.models.loading import load_causal_lm, load_classifier, load_translation
    from headprune.workflow import keep_freed_memory

    started = STARTED if started is None else started
    keep_freed_memory()  # as every pipeline job does (headprune.workflow.logged)
    torch.set_num_threads(threads)
    loaded = time.perf_counter()
    if study["kind"] == "translation":
        model, tokenizer = load_translation(study["folder"], device=device)
        from headprune.data.datasets import read_lines

        evalset = EvalSet("translation", read_lines(study["reference"]), read_lines(study["source"]), "bleu")
    elif study["kind"] in ("language_modeling", "retrieval", "lm_eval"):  # as workflow.load_evalset reads them
        model, tokenizer = load_causal_lm(study["folder"], device=device)
        if study["kind"] == "lm_eval":  # the task's requests built by lm-eval (headprune.evaluation.lm_tasks)
            from headprune.evaluation.kinds import kind_of

            evalset = kind_of("lm_eval").load_evalset({"kind": "lm_eval", "task": str(study["task"]),
                                                       "num_fewshot": 0, "limit": None, "fewshot_seed": 1234,
                                                       "metric": "acc"})
        elif study["kind"] == "language_modeling":
            from headprune.evaluation.perplexity import load_windows

            chunks = load_windows(study["windows"])
            evalset = EvalSet("language_modeling", chunks, chunks, "perplexity")
        else:
            from headprune.data.retrieval import read_items

            items = read_items(study["items"])
            evalset = EvalSet("retrieval", [item["value"] for item in items], items, "retrieval")
    else:
        model, tokenizer = load_classifier(study["folder"], device=device)
        from headprune.data.glue import read_glue_split

        pairs, labels = read_glue_split(study["tsv"])
        evalset = EvalSet("classification", labels, pairs, "accuracy")
    evaluated = time.perf_counter()
    gates = [None if head == "full" else gates_without(model, [parse_head_name(head)]) for head in heads]
    settings = EvalSettings(batch_size=batch_size, variant_batch_size=int(study.get("variant_batch_size",
                                                                                  variant_batch_size)),
                            **({"max_new_tokens": int(study["max_new_tokens"])} if "max_new_tokens" in study else {}),
                            masking=study.get("masking", "zero"))
    # one full-model evaluation, as a: the pipeline's own; for an lm-eval task, lm-eval's own HFLM
    full = functools.partial(hflm_evaluation, study, model, tokenizer) if study["kind"] == "lm_eval" else \
        functools.partial(run_variants, model, tokenizer, evalset, [None], settings)
    if warm:
        def median_of_3(run) -> tuple[float, float]:
            run()  # untimed: caches, lazy initialization
            times, cpu = [], []
            for _ in range(3):
                began, began_cpu = time.perf_counter(), time.process_time()
                run()
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - began)
                cpu.append(time.process_time() - began_cpu)
            return sorted(times)[1], sorted(cpu)[1]

        wall, cpu = median_of_3(full)
        report = {"start": loaded - started, "load": evaluated - loaded, "eval": wall, "eval_cpu": cpu,
                  "variants": len(gates), "heads": heads}
        if study["kind"] == "lm_eval":  # beside it, the project's own full evaluation (its requests batched)
            report["own"], report["own_cpu"] = median_of_3(
                functools.partial(run_variants, model, tokenizer, evalset, gates, settings))
        return report
    evaluated_cpu = time.process_time()
    outputs = run_variants(model, tokenizer, evalset, gates, settings)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    done, done_cpu = time.perf_counter(), time.process_time()
    report = {"start": loaded - started, "load": evaluated - loaded, "eval": done - evaluated,
              "eval_cpu": done_cpu - evaluated_cpu, "variants": len(outputs), "heads": heads}
    if paired:
        full()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        report["a_here"], report["a_here_cpu"] = time.perf_counter() - done, time.process_time() - done_cpu
    if scores:
        from headprune.evaluation.runs import score

        report["scores"] = [score(evalset, out, settings.bleu) for out in outputs]
    return report


def hflm_evaluation(study: dict, model, tokenizer) -> dict:
    """One evaluation of the full model on the study's lm-eval task by lm-eval itself, as a user runs it on a
    loaded model: ``simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=...))``, in sdpa
    attention (transformers' default, and the pipeline's for log-likelihoods). Not counted: indexing the task
    folder (once per process; lm-eval's command line indexes its ~15,000 task files, 10-40 s, on every run)
    and simple_evaluate's report of the environment (``pip list`` in a subprocess, about 5 s a call)."""
    import lm_eval.evaluator
    from lm_eval.models.huggingface import HFLM

    from headprune.evaluation.lm_tasks import _quiet_lm_eval, _task_manager
    from headprune.models.loading import attention_backend

    lm_eval.evaluator.add_env_info = lambda results: None
    task = Path(study["task"])
    manager = _task_manager(str(task.parent), False)
    with _quiet_lm_eval(), attention_backend(model, "sdpa"):
        return lm_eval.evaluator.simple_evaluate(
            model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=int(study["hflm_batch_size"])),
            tasks=[str(task)], task_manager=manager, num_fewshot=0, bootstrap_iters=0)


def worker_study(study: dict) -> dict:
    """The study as a worker process gets it (JSON, every value a string but the masking's fields): without the
    modes' training data."""
    return {key: value if key == "masking" else str(value) for key, value in study.items()
            if key != "importance" and value is not None}


def run_worker(study: dict, heads: list[str], args, warm: bool = False, forked: bool = False,
               paired: bool = False) -> tuple[float, dict]:
    """Wall time of one worker process (``forked``: one that hands its work to the warm server), and what it
    reported, with the process's CPU time (user and system) as "cpu"; with ``paired``, its full-model
    evaluation after the job's (``worker``) is not counted. (A forked worker's CPU time is its child's in
    the warm server, which this process does not see: only its wall time is comparable.)"""
    command = [sys.executable, str(ENTRY), "--worker", json.dumps(worker_study(study)),
               "--heads", "+".join(heads), "--device", args.device, "--threads", str(args.threads),
               "--batch-size", str(args.batch_size), "--variant-batch-size", str(args.variant_batch_size)] \
        + (["--warm"] if warm else []) + (["--forked"] if forked else []) + (["--paired"] if paired else [])
    began, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wall, after = time.perf_counter() - began, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"worker failed:\n{result.stderr[-3000:]}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    report["cpu"] = (after.ru_utime - children.ru_utime + after.ru_stime - children.ru_stime
                     - report.get("a_here_cpu", 0.0))
    return wall - report.get("a_here", 0.0), report



def load_model(study: dict, device: str):
    """(model, tokenizer) of a study's model folder, as the worker loads it."""
    from headprune.models.loading import load_causal_lm, load_classifier, load_translation

    load = {"translation": load_translation, "language_modeling": load_causal_lm, "retrieval": load_causal_lm,
            "lm_eval": load_causal_lm}.get(study["kind"], load_classifier)
    return load(study["folder"], device=device)
