"""The role of every head, joined with each head's importance, entropy and confidence (importance.csv).

An encoder's heads (headprune.scoring.roles): positional, syntactic, rare-word or other, measured on the
parsed eval-set sources, with word counts from the study's training data. Heads without a role measured
(decoder attention: its queries are target words) are 'n/a'. A decoder-only language model's heads
(headprune.scoring.lm_roles): previous-token and sink scores on its eval windows, induction on repeated
random tokens and, for a retrieval study, Wu et al.'s retrieval score on its needle items. Also one row
per key/value head (head_roles_kv.csv: the largest score of the query heads reading it; every head is
its own under multi-head attention)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.evaluation.kinds import kind_of
from headprune.io import atomic
from headprune.models.loading import pick_device
from headprune.data.parsing import text_frequencies
from headprune.scoring.roles import model_head_roles, read_conllu
from headprune.workflow import load_study_model, logged, threads_for_torch


def language_model_roles(model, tokenizer, p, device, log):
    from headprune.data.retrieval import read_items
    from headprune.evaluation.perplexity import load_windows
    from headprune.evaluation.retrieval import value_found
    from headprune.scoring.lm_roles import model_lm_head_roles

    windows = load_windows(p["windows"]["windows"], p["max_windows"])
    items = read_items(p["items"]["items"]) if p["items"] else []

    def is_correct(answer, item):
        # Wu et al. count an item answered correctly when the answer's ROUGE-1 recall of the needle sentence is
        # above 0.5; an answer that restates the needle with a wrong value passes that (and every answer
        # passes it after an answer prefix), so here the value itself must be in the answer.
        return value_found(answer, item["value"])

    log.info("%d windows, %d induction sequences of 2 x %d tokens, %d needle items", len(windows),
             p["induction"]["sequences"], p["induction"]["length"], len(items))
    return model_lm_head_roles(model, tokenizer, windows, items, is_correct=is_correct,
                               induction_length=p["induction"]["length"], induction_count=p["induction"]["sequences"],
                               induction_seed=p["induction"]["seed"], max_new_tokens=p["max_new_tokens"] or 1,
                               batch_size=p["batch_size"], device=device)


def encoder_roles(model, tokenizer, p, device, log):
    sentences = read_conllu(snakemake.input.parses)
    train = p["train"]
    lines = kind_of(train["kind"]).plan.training_texts(train)
    frequencies = text_frequencies(lines)
    log.info("%d parsed sentences; word counts from %d training texts (%d word types)", len(sentences), len(lines),
             len(frequencies))
    return model_head_roles(model, tokenizer, sentences, frequencies, batch_size=p["batch_size"], device=device,
                            top_k=p["frequent_words"], positional_threshold=p["positional_threshold"],
                            syntactic_margin=p["syntactic_margin"] / 100)


with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, p = snakemake.params.study, snakemake.params.roles
    device = pick_device(study["device"])
    model, tokenizer = load_study_model(study, device)
    scores = pd.read_csv(snakemake.input.importance)[["study", "attn_type", "layer", "head", "importance", "entropy",
                                                       "confidence"]].assign(study=study["name"])
    if kind_of(study["kind"]).language_model:
        from headprune.scoring.lm_roles import lm_kv_head_table

        table = scores.merge(language_model_roles(model, tokenizer, p, device, log), on=["attn_type", "layer", "head"],
                             how="left")
        kv_heads = lm_kv_head_table(table)
    else:
        table = scores.merge(encoder_roles(model, tokenizer, p, device, log), on=["attn_type", "layer", "head"],
                             how="left")
        table["role"] = table["role"].fillna("n/a")
        kv_heads = table.assign(kv_head=table["head"], query_heads=table["head"].astype(str))
    atomic.write_csv(table, snakemake.output.heads, index=False)
    atomic.write_csv(kv_heads, snakemake.output.kv_heads, index=False)
    log.info("%s roles: %s", study["name"], table["role"].value_counts().to_dict())
