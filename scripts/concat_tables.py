"""Stack CSV tables with the same columns into one."""
import pandas as pd

from headprune.workflow import logged

with logged(snakemake) as log:
    table = pd.concat([pd.read_csv(path) for path in snakemake.input], ignore_index=True)
    table.to_csv(snakemake.output[0], index=False)
    log.info("%d rows from %d tables", len(table), len(snakemake.input))
