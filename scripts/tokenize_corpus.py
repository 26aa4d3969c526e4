"""Tokenize each corpus split a language model is scored on ONCE and save its windows (windows x window, .npy),
each starting with the BOS the tokenizer puts before a text, and beside each .npy (<split>.json) what that is."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from pathlib import Path

from headprune.evaluation.perplexity import load_prepended, save_windows
from headprune.io import atomic
from headprune.models.loading import load_tokenizer
from headprune.workflow import logged

with logged(snakemake) as log:
    tokenizer = load_tokenizer(snakemake.input.model)
    window = snakemake.params.tokenize["window"]
    with atomic.atomic_dir(snakemake.output[0]) as folder:  # the folder appears with every split, or not at all
        for split in snakemake.params.tokenize["splits"]:
            text = (Path(snakemake.input.corpus) / f"{split}.txt").read_text(encoding="utf-8")
            count = save_windows(tokenizer, text, window, folder / f"{split}.npy")
            prepended = load_prepended(folder / f"{split}.npy")
            start = (f"each starts with {tokenizer.convert_ids_to_tokens(prepended)} (ids {prepended}), then "
                     f"{window - len(prepended)} text tokens" if prepended
                     else "the tokenizer adds no BOS: nothing prepended")
            log.info("%s: %d windows of %d tokens, %s -> %s", split, count, window, start,
                     Path(snakemake.output[0]) / f"{split}.npy")
