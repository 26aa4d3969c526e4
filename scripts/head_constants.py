"""A masking mode's data for one study (headprune.scoring.constants): each head's mean output, or its optimal
constant (learned from the mean), or the resample donors, on the study's importance data; a safetensors file
the jobs read, and a CSV summary (one row per head)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.io import atomic
from headprune.models.loading import pick_device
from headprune.scoring.constants import mean_constants, optimal_constants, resample_pool
from headprune.workflow import importance_batches, load_study_model, logged, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, data, settings = snakemake.params.study, snakemake.params.data, snakemake.params.settings
    device = pick_device(study["device"])
    model, tokenizer = load_study_model(study, device)
    batches = importance_batches(tokenizer, data, model)
    described = f"{study['name']}'s importance data ({len(batches)} batches)"
    mode = settings["mode"]
    log.info("%s: %s masking's data from %s", study["name"], mode, described)
    if mode == "mean":
        made = mean_constants(model, batches, data=described, device=device)
    elif mode == "optimal":
        history: list = []
        made = optimal_constants(model, batches, steps=settings["steps"], lr=settings["lr"], repeats=settings["repeats"],
                                 seed=settings["seed"], data=described, device=device, history=history)
        if history:
            log.info("optimal constants: %d steps, loss %s -> %s", len(history), history[0], history[-1])
    else:
        made = resample_pool(model, batches, max_items=settings["items"], data=described, device=device)
    with atomic.atomic_path(snakemake.output.data) as tmp:
        made.save(tmp)  # safetensors
    if mode == "resample":  # the donors: tokens recorded per stream (source, target)
        summary = pd.DataFrame([{"stream": stream, "tokens": len(positions), "longest": int(positions.max()) + 1}
                                for stream, positions in made.positions.items()])
    else:
        summary = made.summary()
    summary.insert(0, "study", study["name"])
    summary.insert(1, "mode", mode)
    atomic.write_csv(summary, snakemake.output.summary, index=False)
