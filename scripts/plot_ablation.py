"""Snakemake script: Table 1 and Figure 1 from one study's ablation.csv.

input.ablation; output.table_csv, table_md, fig_png, fig_pdf, bins_csv;
params.style (dict), params.attn_type (Table 1's attention type), optional params.bins.
"""
import logging
import sys

import pandas as pd

from headprune import figures

# Snakemake runs this file in its own Python process: send everything, tracebacks included, to the log.
sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

inputs, outputs, params = snakemake.input, snakemake.output, snakemake.params  # noqa: F821
style = dict(params.style)
bins = getattr(params, "bins", None) or figures.DEFAULT_HISTOGRAM_BINS

ablation = pd.read_csv(inputs.ablation)
figures.table1(ablation, outputs.table_csv, outputs.table_md, attn_type=params.attn_type)
figures.figure1(ablation, outputs.fig_png, outputs.fig_pdf, style, out_bins_csv=outputs.bins_csv, bins=int(bins))
