"""Pruning curves: Figure 3 (one study, three orders), Figure 4 (attention types) or Figure 6 (GLUE tasks).

params.figure names the headprune.report.figures function; input.pruning are stacked pruning.csv tables,
input.full their studies' full.json (the model family in the panel titles); Figure 3 of a study of
experiments.recovery also input.recovery, its recovery.csv (the recovered models beside the curve).
"""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.workflow import logged, model_families

def paths(named):
    """A named input as a list: Snakemake gives one file as a str, a list of them as a list."""
    return [named] if isinstance(named, str) else list(named)


with logged(snakemake) as log:
    pruning = pd.concat([pd.read_csv(path) for path in paths(snakemake.input.pruning)], ignore_index=True)
    draw = getattr(figures, snakemake.params.figure)
    recovered = paths(snakemake.input.get("recovery", []))  # Figure 3 of a study of experiments.recovery
    extra = {"recovery": pd.concat(map(pd.read_csv, recovered), ignore_index=True)} if recovered else {}
    log.info("wrote %s", draw(pruning, snakemake.output.png, snakemake.output.pdf, dict(snakemake.params.style),
                              families=model_families(paths(snakemake.input.full)), **extra))
