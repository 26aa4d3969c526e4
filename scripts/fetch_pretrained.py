"""Fetch a model folder (bert-base-uncased, a models entry) from the hub or a model-folder tarball; safetensors only."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.models.loading import fetch_pretrained
from headprune.workflow import logged

with logged(snakemake) as log:
    log.info("pretrained model in %s", fetch_pretrained(snakemake.params.pretrained, snakemake.output[0]))
