"""Hard Concrete gates against I_h and random pruning at the same number of heads kept (concrete.png/.pdf)."""
import pandas as pd

from headprune.experiments import figures
from headprune.workflow import logged

with logged(snakemake) as log:
    figures.concrete_figure(pd.read_csv(snakemake.input[0]), snakemake.output.png, snakemake.output.pdf,
                            dict(snakemake.params.style))
