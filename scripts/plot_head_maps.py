"""A language model's heads under every score it is judged by, a map per study side by side (head_maps.csv: each
head's single-head ablation cost; head_maps_correlations.csv: the rank correlations between the scores)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.report.figures.head_maps import build_head_maps_figure, head_maps_table, rank_correlations
from headprune.io import atomic
from headprune.workflow import logged

with logged(snakemake) as log:
    table = head_maps_table({study: pd.read_csv(path) for study, path in snakemake.input.items()})
    atomic.write_csv(table, snakemake.output.csv, index=False)
    correlations = rank_correlations(table)
    atomic.write_csv(correlations.rename_axis("study").reset_index(), snakemake.output.correlations, index=False)
    log.info("rank correlations of the heads' costs:\n%s", correlations.round(2).to_string())
    style = dict(snakemake.params.style)
    figure = build_head_maps_figure(table, snakemake.wildcards.study, style)
    log.info("wrote %s", figures.save_figure(figure, snakemake.output.png, snakemake.output.pdf, style))
