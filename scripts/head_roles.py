"""The role of every head (headprune.scoring.roles): positional, syntactic, rare-word or other, measured on the
parsed eval-set sources, with word counts from the study's training data; joined with each head's
importance, entropy and confidence (importance.csv). Heads without a role measured (decoder
attention: its queries are target words) are 'n/a'."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.data.datasets import read_glue_split, read_lines
from headprune.models.loading import pick_device
from headprune.data.parsing import text_frequencies
from headprune.scoring.roles import model_head_roles, read_conllu
from headprune.workflow import load_study_model, logged, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, p = snakemake.params.study, snakemake.params.roles
    device = pick_device(study["device"])
    model, tokenizer = load_study_model(study, device)
    sentences = read_conllu(snakemake.input.parses)
    train = p["train"]
    if train["kind"] == "translation":
        lines = [line for s in train["sets"] for line in read_lines(s["source"])[:train["max_items"]]]
    else:
        lines = [text for pair in read_glue_split(train["tsv"])[0] for text in pair if text]
    frequencies = text_frequencies(lines)
    log.info("%d parsed sentences; word counts from %d training texts (%d word types)", len(sentences), len(lines),
             len(frequencies))
    roles = model_head_roles(model, tokenizer, sentences, frequencies, batch_size=p["batch_size"], device=device,
                             top_k=p["frequent_words"], positional_threshold=p["positional_threshold"],
                             syntactic_margin=p["syntactic_margin"] / 100)
    scores = pd.read_csv(snakemake.input.importance)[["study", "attn_type", "layer", "head", "importance", "entropy",
                                                       "confidence"]]
    table = scores.merge(roles, on=["attn_type", "layer", "head"], how="left")
    table["role"] = table["role"].fillna("n/a")
    table.to_csv(snakemake.output[0], index=False)
    log.info("%s roles: %s", study["name"], table["role"].value_counts().to_dict())
