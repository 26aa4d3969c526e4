"""The role of every head as a layer x head map (a language model's: one map per score), and the roles left
after each I_h pruning step."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.report import figures
from headprune.io import atomic
from headprune.workflow import logged

with logged(snakemake) as log:
    roles = pd.read_csv(snakemake.input.roles, keep_default_na=False, na_values=[""])
    style = dict(snakemake.params.style)
    if figures.is_language_model_roles(roles):  # previous-token, induction, sink and retrieval maps
        figures.save_figure(figures.build_lm_roles_figure(roles, style), snakemake.output.png, snakemake.output.pdf,
                            style)
    else:
        figures.head_roles_figure(roles, snakemake.output.png, snakemake.output.pdf, style)
    steps = figures.roles_by_step(roles, snakemake.params.step_percent)
    atomic.write_csv(steps, snakemake.output.steps, index=False)
    log.info("wrote %s", figures.roles_by_step_markdown(steps, snakemake.output.md))
