"""Fetch the pretrained encoder (bert-base-uncased from the hub, or a model-folder tarball); safetensors only."""
from headprune.models.loading import fetch_pretrained
from headprune.workflow import logged

with logged(snakemake) as log:
    log.info("pretrained model in %s", fetch_pretrained(snakemake.params.pretrained, snakemake.output[0]))
