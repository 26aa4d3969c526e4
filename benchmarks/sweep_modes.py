"""The masking modes (``--masking``, issue #32) of benchmarks/ablation_sweep.py: each mode's data (mean and
optimal constants, resample pool) computed and timed as the pipeline's head_constants job computes them, the study
as a worker evaluates it under a mode, and the modes' sweeps side by side against zero's."""
from __future__ import annotations

import time
from pathlib import Path

from sweep_worker import load_model


class _TimedSteps(list):
    """``optimal_constants``'s history, each step's entry stamped with the time it ended."""

    def append(self, entry):
        super().append({**entry, "time": time.perf_counter(), "cpu": time.process_time()})


def mode_data(study: dict, modes: list[str], folder: Path, device: str = "cpu", threads: int = 1,
              optimal: dict | None = None, resample_items: int = 64) -> dict:
    """The data of the modes among ``modes`` that need some (mean and optimal: a HeadConstants file, resample: a
    ResamplePool file), computed as the pipeline's head_constants job computes them (scripts/head_constants.py:
    headprune.scoring.constants on the batches of the study's "importance" entry, a kind's importance data,
    never its test set) in this process with ``threads`` torch threads, each timed apart. ``optimal``: the
    optimal constants' steps, lr, repeats and seed (config ``constants.optimal``; its defaults where left out).
    Returns per mode {"path", "seconds", "cpu"} (optimal also "steps", "per_step": the seconds of one step, and
    "before_steps": its statistics pass), and "load" (seconds to load the model and build the batches),
    "batches" and "data" (what the batches are). Nothing for modes that need no data."""
    import inspect

    import torch

    from headprune.evaluation.kinds import kind_of
    from headprune.models.masking import MODES
    from headprune.scoring.constants import DATA_MAKERS, DEFAULT_LR, DEFAULT_STEPS

    wanted = [mode for mode in modes if MODES[mode].data]
    if not wanted:
        return {}
    optimal = {"steps": DEFAULT_STEPS, "lr": DEFAULT_LR, "repeats": 1, "seed": 0, **(optimal or {})}
    settings = {**optimal, "items": resample_items}  # each mode's data_options take theirs
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        began = time.perf_counter()
        model, tokenizer = load_model(study, device)
        spec = study["importance"]
        batches = kind_of(spec["kind"]).importance_batches(tokenizer, spec, model)
        described = f"{spec.get('name', spec['kind'])} ({len(batches)} batches)"
        made = {"load": time.perf_counter() - began, "batches": len(batches), "data": described}
        folder.mkdir(parents=True, exist_ok=True)
        for mode in wanted:
            history = _TimedSteps()
            sync()
            began, began_cpu = time.perf_counter(), time.process_time()
            make = DATA_MAKERS[mode]  # as scripts/head_constants.py calls it
            steps_seen = {"history": history} if "history" in inspect.signature(make).parameters else {}
            data = make(model, batches, data=described, device=device, progress=False,
                        **MODES[mode].data_options(settings), **steps_seen)
            sync()
            ended = time.perf_counter()
            path = folder / f"{mode}.safetensors"
            data.save(path)
            entry = {"path": path, "seconds": ended - began, "cpu": time.process_time() - began_cpu}
            if steps_seen:  # a mode whose data is learned step by step (optimal)
                steps = len(history)
                # a step's time from the steps after the first (the first follows the statistics pass): with one
                # step, the whole less the mean's pass (the same statistics pass), where it was timed
                if steps > 1:
                    per_step = (history[-1]["time"] - history[0]["time"]) / (steps - 1)
                    per_step_cpu = (history[-1]["cpu"] - history[0]["cpu"]) / (steps - 1)
                else:
                    per_step = entry["seconds"] - made.get("mean", {}).get("seconds", 0.0) if steps else 0.0
                    per_step_cpu = entry["cpu"] - made.get("mean", {}).get("cpu", 0.0) if steps else 0.0
                rows = int(next(value for value in batches[0].values() if torch.is_tensor(value)).shape[0])
                entry.update(steps=steps, per_step=per_step, per_step_cpu=per_step_cpu,
                             before_steps=entry["seconds"] - steps * per_step,
                             rows=rows * int(optimal["repeats"]),
                             loss=(history[0]["loss"], history[-1]["loss"]) if history else None)
            made[mode] = entry
        del model
    finally:
        torch.set_num_threads(before)
    return made


def masked(study: dict, mode: str, data: dict) -> dict:
    """The study as a worker evaluates it under masking ``mode``, with its data file from ``mode_data``."""
    from headprune.models.masking import MODES

    data_file = MODES[mode].data
    return {**study, "masking": {"word": mode, **({data_file: str(data[mode]["path"])} if data_file else {})}}


def mode_ratios(results: dict) -> list[dict]:
    """Per mode and (c) setting (heads per job, forked): c / (N a) and the ratios to zero's measurement of the
    same setting in the same run: c, c by CPU time, and the sampled jobs' evaluation time alone (the same jobs in
    every mode: ``spread`` picks them), by wall and CPU time."""
    zero = results["zero"]
    rows = []
    for mode, r in results.items():
        n = r["heads"]
        for p, z in zip(r["pipeline"], zero["pipeline"]):
            rows.append({"mode": mode, "heads_per_job": p["heads_per_job"], "forked": p["forked"], "a": r["a"],
                         "a_cpu": r["a_cpu"], "c_over_Na": p["c"] / (n * r["a"]),
                         "c_over_Na_cpu": p["c_cpu"] / (n * r["a_cpu"]), "paired": p["paired"],
                         "paired_cpu": p["paired_cpu"], "paired_ratio": p["paired"] / z["paired"],
                         "paired_ratio_cpu": p["paired_cpu"] / z["paired_cpu"],
                         "c_ratio": p["c"] / z["c"], "c_ratio_cpu": p["c_cpu"] / z["c_cpu"],
                         "eval_ratio": sum(job["eval"] for job in p["sampled"])
                         / sum(job["eval"] for job in z["sampled"]),
                         "eval_ratio_cpu": sum(job["eval_cpu"] for job in p["sampled"])
                         / sum(job["eval_cpu"] for job in z["sampled"])})
    return rows


def print_modes(study: dict, results: dict, data: dict):
    """The modes side by side, and what their data cost, in full evaluations a (zero's a of this run)."""
    print(f"\n{study['name']}: the masking modes side by side (ratios to zero's, measured in this run) "
          "[by CPU time]")
    print("  (paired: c / (N a_job), a_job timed in each job's process after its work; the ratios: the mode's "
          "c, paired c and jobs' evaluation time over zero's)")
    print(f"  {'mode':10}{'heads a job':>13}{'a (s)':>8}{'c/(N a)':>15}{'paired':>15}{'c / zero':>15}"
          f"{'paired / zero':>15}{'eval / zero':>15}")
    for row in mode_ratios(results):
        label = f"{row['heads_per_job']}{' forked' if row['forked'] else ''}"

        def pair(name):
            cpu = "" if row["forked"] else f" [{row[name + '_cpu']:.2f}]"  # a forked job's CPU is the server's
            return f"{row[name]:.2f}{cpu}"

        print(f"  {row['mode']:10}{label:>13}{row['a']:8.2f}{pair('c_over_Na'):>15}{pair('paired'):>15}"
              f"{pair('c_ratio'):>15}{pair('paired_ratio'):>15}{pair('eval_ratio'):>15}")
    if not data:
        return
    a, a_cpu = results["zero"]["a"], results["zero"]["a_cpu"]
    print(f"  the modes' data, on {data['data']}, computed in one process (a = zero's a, {a:.2f} s "
          f"[CPU {a_cpu:.2f} s]); loading the model and the batches {data['load']:.2f} s")
    for mode, entry in data.items():
        if not isinstance(entry, dict):  # load, batches, data
            continue
        line = f"    {mode:9}{entry['seconds']:8.2f} s = {entry['seconds'] / a:6.2f} a [{entry['cpu'] / a_cpu:.2f} a]"
        if "steps" in entry:  # learned step by step (optimal)
            line += (f": {entry['steps']} steps of {entry['rows']} rows, {entry['per_step']:.3f} s a step "
                     f"= {entry['per_step'] / a:.2f} a [{entry['per_step_cpu'] / a_cpu:.2f} a], after a statistics "
                     f"pass of {entry['before_steps']:.2f} s")
            if entry["loss"]:
                line += f"; loss {entry['loss'][0]:.4g} -> {entry['loss'][1]:.4g}"
        print(line)

