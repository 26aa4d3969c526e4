"""Download a language-modelling corpus (WikiText-2 raw) and write each split as the text the protocol tokenizes."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.data.wikitext import prepare_corpus
from headprune.workflow import logged

with logged(snakemake) as log:
    sizes = prepare_corpus(snakemake.params.spec, snakemake.params.raw, snakemake.output[0])
    log.info("%s: characters per split %s", snakemake.wildcards.corpus, sizes)
