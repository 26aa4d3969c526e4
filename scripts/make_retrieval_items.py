"""Needle-in-a-haystack items of a retrieval study, made ONCE from a seed (headprune.data.retrieval): for each
corpus split a role uses, haystacks cut from the split's text, a random value hidden at every configured
depth of every configured context length (in tokens of the model), and the question after it."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import zlib
from pathlib import Path

from headprune.data.retrieval import make_items, write_items
from headprune.io import atomic
from headprune.models.loading import load_tokenizer
from headprune.workflow import logged

with logged(snakemake) as log:
    tokenizer = load_tokenizer(snakemake.input.model)
    s = snakemake.params.settings
    with atomic.atomic_dir(snakemake.output[0]) as folder:  # the folder appears with every split, or not at all
        for split in s["splits"]:
            text = (Path(snakemake.input.corpus) / f"{split}.txt").read_text(encoding="utf-8")
            items = make_items(tokenizer, text, context_lengths=s["context_lengths"], depths=s["depths"],
                               needles_per_setting=s["needles_per_setting"],
                               seed=s["seed"] + zlib.crc32(split.encode()),  # each split its own values
                               needle=s["needle"], question=s["question"], answer_prefix=s["answer_prefix"],
                               value_digits=s["value_digits"], chat_template=s["chat_template"])
            for item in items:  # the answer's start, which the prompt gives: ROUGE-1 reads it as part of the answer
                item["answer_prefix"] = s["answer_prefix"]
            write_items(items, folder / f"{split}.jsonl")
            log.info("%s: %d items (%s-token contexts, depths %s) -> %s", split, len(items), s["context_lengths"],
                     s["depths"], Path(snakemake.output[0]) / f"{split}.jsonl")
