"""Download a GLUE(-style) task and write its splits as text_a/text_b/label TSVs."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.data.glue import prepare_glue_task
from headprune.workflow import logged

with logged(snakemake) as log:
    rows = prepare_glue_task(snakemake.params.spec, snakemake.params.raw, snakemake.output[0])
    log.info("%s: %s", snakemake.wildcards.task, rows)
