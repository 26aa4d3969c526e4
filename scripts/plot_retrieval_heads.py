"""Wu et al.'s experiment as a figure: retrieval accuracy and perplexity against K, the top-K retrieval heads
masked beside K random heads (mean and range over the random sets); the CSV holds every plotted number."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.io import atomic
from headprune.workflow import logged

with logged(snakemake) as log:
    table = figures.retrieval_heads_table(pd.read_csv(snakemake.input[0]))
    atomic.write_csv(table, snakemake.output.csv, index=False)
    log.info("wrote %s", figures.save_figure(figures.build_retrieval_heads_figure(table, dict(snakemake.params.style)),
                                             snakemake.output.png, snakemake.output.pdf, dict(snakemake.params.style)))
