"""Prune a study's model step by step in one order (importance, oracle or random); score each step.

With a scope other than "all", only heads of that attention type are pruned (Figure 4).
"""
import time

import pandas as pd

from headprune.experiments import (EvalSettings, all_heads, gates_without, importance_order, oracle_order,
                                   pruning_steps, random_order, run_variants, score)
from headprune.models import pick_device
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, params, order_name = snakemake.params.study, snakemake.params.pruning, snakemake.wildcards.order
    scope = snakemake.wildcards.get("scope", "all")
    attn_type = None if scope == "all" else scope
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    evalset = load_evalset(params["eval"])
    settings = EvalSettings(**params["settings"])
    if order_name == "importance":
        order = importance_order(pd.read_csv(snakemake.input.importance), attn_type)
    elif order_name == "oracle":
        order = oracle_order(pd.read_csv(snakemake.input.ablation), attn_type)
    else:
        heads = [h for h in all_heads(model) if attn_type in (None, h[0])]
        order = random_order(heads, params["random_seed"])
    steps = pruning_steps(order, params["step_percent"])
    started = time.perf_counter()
    outputs = run_variants(model, tokenizer, evalset, [gates_without(model, removed) for _, removed in steps], settings)
    log.info("eval time %.2f s: %d pruning steps", time.perf_counter() - started, len(steps))
    rows = []
    for (percent, removed), step_outputs in zip(steps, outputs):
        value = score(evalset, step_outputs, settings.bleu)
        log.info("%s %s %s: %.0f%% pruned (%d heads): %s = %.4f", study["name"], scope, order_name, percent, len(removed),
                 evalset.metric, value)
        rows.append({"study": study["name"], "order": order_name, "scope": scope, "step": len(rows),
                     "percent_pruned": percent, "heads_pruned": len(removed), "score": value,
                     "metric": evalset.metric})
    pd.DataFrame(rows).to_csv(snakemake.output[0], index=False)
