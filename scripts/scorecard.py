"""The scorecard of the paper's claims (headprune.report.scorecard) from this run's CSVs.

input: ablation, one_head, pruning, attention_types, dynamics, speed, and beyond the paper roles and
retrieval_heads (Wu et al.'s experiment), masking_modes (C1-C3 under each mode) and recovery (R1): the CSVs of each experiment the config runs (a list, empty when it runs none); params.epochs: the checkpoint epoch of each dynamics
table; params.paper_models; output.csv, output.md."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import scorecard
from headprune.analyses.masking_modes import as_scorecard_tables
from headprune.io import atomic
from headprune.workflow import logged

EXPERIMENTS = ("ablation", "one_head", "pruning", "attention_types", "dynamics", "speed", "roles", "retrieval_heads",
               "masking_modes", "recovery")


def stacked(paths, epochs=None):
    """Every CSV of one experiment in one table (they share their columns), each with its checkpoint
    epoch when ``epochs`` are given (Figure 5's curves); empty when there is none."""
    if not paths:
        return pd.DataFrame()
    tables = [pd.read_csv(path) for path in paths]
    if epochs is not None:
        tables = [table.assign(epoch=epoch) for table, epoch in zip(tables, epochs, strict=True)]
    return pd.concat(tables, ignore_index=True)


with logged(snakemake) as log:
    tables = {name: stacked(list(snakemake.input.get(name, [])), snakemake.params.epochs if name == "dynamics" else None)
              for name in EXPERIMENTS}
    # C1, C2 and C3 under each masking mode of experiments.masking_modes: a study per mode, "<study> (<mode> masking)"
    modes = as_scorecard_tables(tables.pop("masking_modes"))
    card = scorecard.scorecard(tables, dict(snakemake.params.paper_models), confidence=snakemake.params.confidence,
                               masking_modes=modes)
    atomic.write_csv(card, snakemake.output.csv, index=False)
    atomic.write_text(snakemake.output.md, scorecard.markdown(card))
    for r in card.itertuples():
        log.info("%s %s: %s (%s)", r.claim, r.study, r.verdict, r.this_run)
