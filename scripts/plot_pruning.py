"""Snakemake script: Figure 3 (and Figure 4 when the rule asks for it) from pruning.csv.

input.pruning; output.fig3_png, fig3_pdf, optionally fig4_png, fig4_pdf; params.style (dict).
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

pruning = pd.read_csv(inputs.pruning)
figures.figure3(pruning, outputs.fig3_png, outputs.fig3_pdf, style)
# Figure 4 (pruning within one attention type) exists only for encoder-decoder models.
if hasattr(outputs, "fig4_png"):
    figures.figure4(pruning, outputs.fig4_png, outputs.fig4_pdf, style)
