"""A study's masking modes side by side (headprune.analyses.masking_modes): the stacked sweeps, a summary per
mode, the rank correlations of the heads' changes between modes, and the figure."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.analyses.masking_modes import compare_modes
from headprune.report.figures.modes import build_modes_figure
from headprune.io import atomic
from headprune.workflow import logged

with logged(snakemake) as log:
    runs = pd.concat([pd.read_csv(path) for path in snakemake.input], ignore_index=True)
    summary, correlations = compare_modes(runs, within=snakemake.params.within)
    atomic.write_csv(runs, snakemake.output.csv, index=False)
    atomic.write_csv(summary, snakemake.output.summary, index=False)
    atomic.write_csv(correlations.rename_axis("mode").reset_index(), snakemake.output.correlations, index=False)
    log.info("per mode:\n%s\nrank correlations of the heads' changes:\n%s", summary.round(3).to_string(),
             correlations.round(2).to_string())
    style = dict(snakemake.params.style)
    log.info("wrote %s", figures.save_figure(build_modes_figure(runs, summary, style), snakemake.output.png,
                                             snakemake.output.pdf, style))
