"""Convert the fetched fairseq checkpoint once into a model folder (config.json, model.safetensors, tokenizer)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import time

from headprune.models.loading import convert_translation_checkpoint
from headprune.workflow import logged

with logged(snakemake) as log:
    src_lang, tgt_lang = snakemake.params.languages
    started = time.perf_counter()
    folder = convert_translation_checkpoint(snakemake.input[0], snakemake.output[0], src_lang, tgt_lang)
    log.info("converted %s into %s in %.1f s", snakemake.input[0], folder, time.perf_counter() - started)
