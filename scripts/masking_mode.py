"""One study under one masking mode: every head switched off alone (paired test against the full model), the
importance-order pruning curve and, for a study of experiments.one_head_per_layer, each layer reduced to its best
head (headprune.analyses.masking_modes.mode_sweep); one row per head, per step and per layer."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.analyses.criteria import criterion_order
from headprune.analyses.masking_modes import mode_sweep
from headprune.evaluation.runs import EvalSettings, all_heads
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
    one_head = (load_evalset(p["one_head"]["selection"]), load_evalset(p["one_head"]["test"])) \
        if "one_head" in p else None  # a study of experiments.one_head_per_layer: C2 under the mode
    table = mode_sweep(model, tokenizer, evalset, settings, order, mode=p["mode"], study=study["name"],
                       step_percent=p["step_percent"], resamples=test["resamples"], seed=test["seed"],
                       alpha=test["alpha"], one_head=one_head)
    atomic.write_csv(table, snakemake.output[0], index=False)
    for experiment, rows in table[table["experiment"] != "pruning"].groupby("experiment", sort=False):
        log.info("%s under %s masking, %s: %d of %d significant", study["name"], p["mode"], experiment,
                 int(rows["significant"].astype(bool).sum()), len(rows))
