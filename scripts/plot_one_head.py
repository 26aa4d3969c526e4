"""Tables 2-3: the change when each layer keeps only its best head."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.workflow import logged, model_families

with logged(snakemake) as log:
    family = model_families([snakemake.input.full])[snakemake.wildcards.study]
    log.info("wrote %s", figures.one_head_table(pd.read_csv(snakemake.input.table), snakemake.output.csv,
                                                snakemake.output.md, family))
