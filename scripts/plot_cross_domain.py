"""Figure 2: single-head ablation deltas out of domain against in domain, with Pearson's r."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.workflow import logged

with logged(snakemake) as log:
    paths = figures.figure2(pd.read_csv(snakemake.input.in_domain), pd.read_csv(snakemake.input.out_of_domain),
                            snakemake.output.csv, snakemake.output.png, snakemake.output.pdf,
                            dict(snakemake.params.style))
    log.info("wrote %s", paths)
