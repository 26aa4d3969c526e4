"""Table 4: time the study's model with its least important heads physically removed against the full model
(and, as speed.variants asks, the uniform and stock variants).

input.model, input.data, input.importance; params.study, params.speed ({eval, settings});
output.runs (tidy, one row per variant, batch size and run), output.table_csv, output.table_md.
"""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.models.loading import pick_device
from headprune.analyses import table4
from headprune.evaluation.kinds import kind_of
from headprune.analyses.speed import SpeedSettings, speed_study
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch

with logged(snakemake) as log:  # noqa: F821 (snakemake is injected)
    threads_for_torch(snakemake)  # noqa: F821
    study, params, output = snakemake.params.study, snakemake.params.speed, snakemake.output  # noqa: F821
    device = pick_device(study["device"])
    model, tokenizer = load_study_model(study, device)
    evalset = load_evalset(params["eval"])
    settings = SpeedSettings(**params["settings"])
    importance = pd.read_csv(snakemake.input.importance)  # noqa: F821
    runs, facts = speed_study(study["name"], model, tokenizer, evalset, importance, settings, device, log)
    summary = table4.write(runs, facts, output.runs, output.table_csv, output.table_md, evalset_name=params["eval"]["name"],
                           kind=kind_of(study["kind"]))
    for row in summary.itertuples():
        log.info("%s batch %d: original %.1f +- %.1f, pruned %.1f +- %.1f %s/s (%+.1f%%, %g%% interval %+.1f%% to "
                 "%+.1f%%)", row.study, row.batch_size, row.original_mean, row.original_std, row.pruned_mean,
                 row.pruned_std, row.unit, row.speedup_percent, 100 * row.confidence, row.speedup_low, row.speedup_high)
