"""Demo: a multiple-choice task in lm-evaluation-harness's YAML format (which number did the passage say), its
data as JSON lines beside it; a models entry of kind lm_eval names the YAML."""
from headprune.demo.lm_task import make_passkey_task
from headprune.workflow import logged

with logged(snakemake) as log:
    out = snakemake.output
    make_passkey_task(snakemake.input.corpus, out.task, items_per_split=snakemake.params.settings["items"],
                      seed=snakemake.params.seed)
    log.info("demo task %s written with %s", out.task, snakemake.params.settings["items"])
