"""Prune a study's model step by step in one or more orders; score every step of every order.

The 'order' wildcard names a criterion (headprune.analyses.criteria: importance, oracle, random, fisher,
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

from headprune.analyses.criteria import CRITERIA, criterion_order, importance_on_pruned, iterative_order
from headprune.evaluation.runs import EvalSettings, all_heads
from headprune.analyses.sweeps import pruning_tables
from headprune.io import atomic
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
    if ablation is not None:  # the oracle order stands on Table 1: say which kind (headprune.analyses.screening)
        from headprune.analyses.screening import ablated_rows, table_basis

        log.info("oracle order from a%s Table 1 (%d of %d heads ablated exactly%s)",
                 "n exhaustive" if table_basis(ablation) == "exhaustive" else " screened", len(ablated_rows(ablation)),
                 len(ablation), "" if table_basis(ablation) == "exhaustive" else "; the screened-only heads first, in "
                 "the screen's order")
    roles = pd.read_csv(snakemake.input.roles) if "roles" in snakemake.input.keys() else None
    criteria = params.get("criteria", {})
    heads = [h for h in all_heads(model) if attn_type in (None, h[0])]
    orders_of = {}
    for name in orders:
        if not CRITERIA[name].static:  # I_h re-estimated on the pruned model before every step (bertology)
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
                                    keep_entropy=criteria.get("keep_entropy", "low"), roles=roles)
        orders_of[name] = order
    started = time.perf_counter()
    table, step_outputs = pruning_tables(model, tokenizer, evalset, orders_of, step_percent=params["step_percent"],
                                         settings=settings, study=study["name"], scope=scope, total_heads=len(heads),
                                         layouts=params["layouts"])
    log.info("eval time %.2f s: %d orders, %d steps in all, scored", time.perf_counter() - started, len(orders_of),
             len(table))
    if ablation is not None and table_basis(ablation) != "exhaustive":  # the oracle order stands on a screened Table 1
        table["table1"] = ["screened" if CRITERIA[order].reads == "ablation" else "" for order in table["order"]]
    atomic.write_csv(table, snakemake.output.scores, index=False)
    if "outputs" in snakemake.output.keys():
        write_json(snakemake.output.outputs, {"study": study["name"], "scope": scope, "testset": params["eval"].get("name"),
                                              "metric": evalset.metric, "orders": step_outputs})
