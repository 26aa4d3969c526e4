"""Snakemake script: Figure 5, the pruning curves of the checkpoint epochs in one table (CSV) and the
figure drawn from it. input.pruning (one table per epoch, in params.epochs' order); output.csv, png, pdf."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import logging
import sys

import pandas as pd

from headprune.report import figures
from headprune.io import atomic

# Snakemake runs this file in its own Python process: send everything, tracebacks included, to the log.
# (headprune.workflow.logged would import torch, which plotting does not need.)
sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

inputs, outputs, params = snakemake.input, snakemake.output, snakemake.params  # noqa: F821
tables = {int(epoch): pd.read_csv(path) for epoch, path in zip(params.epochs, inputs.pruning)}
atomic.write_csv(figures.figure5_table(tables), outputs.csv, index=False)
# Drawn from the CSV as written, so that every plotted number is the one in the file.
figures.figure5(pd.read_csv(outputs.csv), outputs.png, outputs.pdf, dict(params.style))
logging.info("figure 5 from %d epochs", len(tables))
