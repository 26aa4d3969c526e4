"""Prune a study's model step by step in one or more orders; score every step of every order.

The 'order' wildcard names a criterion (headprune.experiments.criteria: importance, oracle, random, fisher,
entropy_low, iterative, ...) or, with pruning.orders_per_job > 1, several joined by '+'. Every
step of every order is one gate setting, and all of them share one pass over the test set
(identical settings are evaluated once). With a scope other than "all", only heads of that
attention type are pruned (Figure 4). Writes the scores (one row per order and step) and the
per-item outputs of every step (the criteria comparison tests them against I_h).
"""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import time

import pandas as pd

from headprune.experiments.criteria import criterion_order, importance_on_pruned, iterative_order
from headprune.experiments.runs import EvalSettings, all_heads, gates_without, pruning_steps, run_variants, score
from headprune.models.loading import pick_device
from headprune.workflow import (importance_batches, load_evalset, load_study_model, logged, threads_for_torch,
                                write_json)


with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, params = snakemake.params.study, snakemake.params.pruning
    orders = snakemake.wildcards.order.split("+")
    scope = snakemake.wildcards.get("scope", "all")
    attn_type = None if scope == "all" else scope
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    evalset = load_evalset(params["eval"])
    settings = EvalSettings(**params["settings"])
    importance = pd.read_csv(snakemake.input.importance)
    ablation = pd.read_csv(snakemake.input.ablation) if "ablation" in snakemake.input.keys() else None
    criteria = params.get("criteria", {})
    heads = [h for h in all_heads(model) if attn_type in (None, h[0])]
    steps = {}
    for name in orders:
        if name == "iterative":  # I_h re-estimated on the pruned model before every step (bertology)
            started = time.perf_counter()
            estimate = importance_on_pruned(model, importance_batches(tokenizer, params["importance_data"], model),
                                            estimator=params["importance"]["estimator"],
                                            normalize=params["importance"]["normalize"])
            order = iterative_order(estimate, heads, params["step_percent"])
            log.info("iterative order: I_h re-estimated before each step in %.2f s", time.perf_counter() - started)
        else:
            order = criterion_order(name, importance, heads, attn_type=attn_type, ablation=ablation, seed=params["random_seed"],
                                    estimator=params.get("importance", {}).get("estimator", "token"),
                                    normalize=params.get("importance", {}).get("normalize", True),
                                    entropy_weight=criteria.get("entropy_weight", 0.5),
                                    keep_entropy=criteria.get("keep_entropy", "low"))
        steps[name] = pruning_steps(order, params["step_percent"])
    # One gate setting per distinct set of removed heads: every order starts from the full model.
    settings_of = {}
    for name, order_steps in steps.items():
        for _, removed in order_steps:
            settings_of.setdefault(frozenset(removed), len(settings_of))
    started = time.perf_counter()
    outputs = run_variants(model, tokenizer, evalset, [gates_without(model, removed) for removed in settings_of],
                           settings)
    log.info("eval time %.2f s: %d distinct settings for %d orders x %d steps", time.perf_counter() - started,
             len(settings_of), len(steps), len(next(iter(steps.values()))))
    rows, step_outputs = [], {}
    scores = {}
    for name, order_steps in steps.items():
        step_outputs[name] = []
        for step, (percent, removed) in enumerate(order_steps):
            index = settings_of[frozenset(removed)]
            if index not in scores:
                scores[index] = score(evalset, outputs[index], settings.bleu)
            log.info("%s %s %s: %.0f%% pruned (%d heads): %s = %.4f", study["name"], scope, name, percent,
                     len(removed), evalset.metric, scores[index])
            rows.append({"study": study["name"], "order": name, "scope": scope, "step": step,
                         "percent_pruned": percent, "heads_pruned": len(removed), "heads_left": len(heads) - len(removed),
                         "score": scores[index], "metric": evalset.metric})
            step_outputs[name].append({"percent_pruned": percent, "removed": ["-".join(map(str, h)) for h in removed],
                                       "outputs": outputs[index]})
    pd.DataFrame(rows).to_csv(snakemake.output.scores, index=False)
    if "outputs" in snakemake.output.keys():
        write_json(snakemake.output.outputs, {"study": study["name"], "scope": scope, "testset": params["eval"].get("name"),
                                              "metric": evalset.metric, "orders": step_outputs})
