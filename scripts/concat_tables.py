"""Stack CSV tables with the same columns into one."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.io import atomic
from headprune.workflow import logged

with logged(snakemake) as log:
    table = pd.concat([pd.read_csv(path) for path in snakemake.input], ignore_index=True)
    atomic.write_csv(table, snakemake.output[0], index=False)
    log.info("%d rows from %d tables", len(table), len(snakemake.input))
