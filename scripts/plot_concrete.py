"""Hard Concrete gates against I_h and random pruning at the same number of heads kept (concrete.png/.pdf)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.workflow import logged

with logged(snakemake) as log:
    figures.concrete_figure(pd.read_csv(snakemake.input[0]), snakemake.output.png, snakemake.output.pdf,
                            dict(snakemake.params.style))
