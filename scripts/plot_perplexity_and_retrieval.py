"""A language model's two scores side by side: each head switched off alone (perplexity change against
retrieval change) and the pruning curves of every order both studies prune in."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.io import atomic
from headprune.workflow import logged

with logged(snakemake) as log:
    read = {name: pd.read_csv(path) for name, path in snakemake.input.items()}
    table = figures.perplexity_and_retrieval_table(read["retrieval_ablation"], read["perplexity_ablation"],
                                                    read["retrieval_pruning"], read["perplexity_pruning"])
    atomic.write_csv(table, snakemake.output.csv, index=False)
    style = dict(snakemake.params.style)
    figure = figures.build_perplexity_and_retrieval_figure(table, snakemake.wildcards.study, style)
    log.info("wrote %s", figures.save_figure(figure, snakemake.output.png, snakemake.output.pdf, style))
