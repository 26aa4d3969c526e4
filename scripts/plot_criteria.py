"""The head criteria side by side: every pruning curve (criteria.png/.pdf) and the summary table (markdown)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.workflow import logged

with logged(snakemake) as log:
    curves, summary = pd.read_csv(snakemake.input.curves), pd.read_csv(snakemake.input.summary)
    log.info("wrote %s", figures.criteria_figure(curves, snakemake.output.png, snakemake.output.pdf,
                                                 dict(snakemake.params.style)))
    log.info("wrote %s", figures.criteria_table(summary, snakemake.output.md, snakemake.params.test_at))
