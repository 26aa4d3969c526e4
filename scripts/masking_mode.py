"""One study under one masking mode: every head switched off alone (paired test against the full model) and the
importance-order pruning curve (headprune.experiments.masking_modes.mode_sweep); one row per head and per step."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.experiments.criteria import criterion_order
from headprune.experiments.masking_modes import mode_sweep
from headprune.experiments.runs import EvalSettings, all_heads
from headprune.io import atomic
from headprune.models.loading import pick_device
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, p = snakemake.params.study, snakemake.params.sweep
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    evalset, settings = load_evalset(p["eval"]), EvalSettings(**p["settings"])
    order = criterion_order("importance", pd.read_csv(snakemake.input.importance), all_heads(model),
                            estimator=p["importance"]["estimator"], normalize=p["importance"]["normalize"])
    test = p["significance"]
    table = mode_sweep(model, tokenizer, evalset, settings, order, mode=p["mode"], study=study["name"],
                       step_percent=p["step_percent"], resamples=test["resamples"], seed=test["seed"],
                       alpha=test["alpha"])
    atomic.write_csv(table, snakemake.output[0], index=False)
    heads = table[table["experiment"] == "single head"]
    log.info("%s under %s masking: %d of %d heads significant", study["name"], p["mode"],
             int(heads["significant"].sum()), len(heads))
