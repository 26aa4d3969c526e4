"""Table 1 and Figure 1 from one study's in-domain ablation.csv, and beside Table 1 what it stands on (exhaustive, or
screened with the bound on what it may have missed: headprune.analyses.screening)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.workflow import logged, model_families

with logged(snakemake) as log:
    ablation = pd.read_csv(snakemake.input.ablation)
    out = snakemake.output
    family = model_families([snakemake.input.full])[snakemake.wildcards.study]
    figures.table1(ablation, out.table_csv, out.table_md, attn_type=snakemake.params.attn_type, family=family,
                   out_bound_csv=out.bound_csv, confidence=snakemake.params.confidence)
    figures.figure1(ablation, out.fig_png, out.fig_pdf, dict(snakemake.params.style), out_bins_csv=out.bins_csv,
                    family=family)
    log.info("Table 1 and Figure 1 of %s written", snakemake.wildcards.study)
