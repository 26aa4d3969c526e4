"""Train Hard Concrete head gates under one L0 penalty (headprune.scoring.concrete), switch off the heads whose gate
closed, and evaluate that model next to I_h and random pruning with as many heads kept.

A gate acts as the study's masking says (concrete.masking, models.<study>.masking over it): zero, Voita's g o_h;
mean and optimal, g o_h + (1 - g) c_h; resample, its donors' outputs in place of c_h (one draw in training, the
scores averaged over constants.resample.draws). The closed heads are switched off by that masking (under zero this
is the pruned model, under mean and optimal the pruned model with bias compensation: both tested equal).

Writes one row (concrete/<penalty>.csv: heads kept per attention type, scores, paired bootstrap of
the gates against each order), the gates of every head (.heads.csv) and the training log
(.training.csv). With concrete.train_model the compared orders prune the original model, not the
one trained with the gates.
"""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import time

import pandas as pd

from headprune.analyses.criteria import criterion_order
from headprune.evaluation.runs import EvalSettings, all_heads, gates_without, scored_variants, significance
from headprune.io import atomic
from headprune.models.loading import pick_device
from headprune.scoring.concrete import closed_heads, kept_heads_table, train_gates
from headprune.workflow import importance_batches, load_evalset, load_study_model, logged, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, p = snakemake.params.study, snakemake.params.concrete
    device = pick_device(study["device"])
    model, tokenizer = load_study_model(study, device)
    batches = importance_batches(tokenizer, p["train"], model)
    started = time.perf_counter()
    settings = EvalSettings(**p["settings"])
    gates, training = train_gates(model, batches, penalty=p["penalty"], steps=p["steps"], lr=p["lr"],
                                  train_model=p["train_model"], model_lr=p["model_lr"], seed=p["seed"],
                                  temperature=p["temperature"], device=device, masking=settings.masking)
    log.info("train time %.2f s: %d steps on %d batches, penalty %g, %s", time.perf_counter() - started, p["steps"],
             len(batches), p["penalty"], "gates and model" if p["train_model"] else "gates only")
    heads = kept_heads_table(gates)
    heads.insert(0, "penalty", p["penalty"])
    heads.insert(0, "study", study["name"])
    atomic.write_csv(heads, snakemake.output.heads, index=False)
    training.insert(0, "penalty", p["penalty"])
    atomic.write_csv(training, snakemake.output.training, index=False)

    evalset = load_evalset(p["eval"])
    if p["train_model"]:  # the orders prune the model as it was, not as the gates trained it
        original, _ = load_study_model(study, device)
    else:
        original = model
    every_head = all_heads(original)
    kept = int(heads.kept.sum())
    removed = len(every_head) - kept
    importance = pd.read_csv(snakemake.input.importance)
    orders = {name: criterion_order(name, importance, every_head, seed=p["random_seed"])[:removed]
              for name in p["compare"]}
    closed = [(t, layer, h) for t, layers in closed_heads(gates).items() for layer, hs in layers.items() for h in hs]
    started = time.perf_counter()
    # scores averaged over resample draws (EvalSettings.draws); the tests compare the first draw's outputs
    compared = [None] + [gates_without(original, order) for order in orders.values()]
    if original is model:  # the gates' model: the closed heads switched off, in the same pass
        full, *compared, gated = scored_variants(model, tokenizer, evalset, compared + [gates_without(model, closed)],
                                                 settings)
    else:
        full, *compared = scored_variants(original, tokenizer, evalset, compared, settings)
        gated, = scored_variants(model, tokenizer, evalset, [gates_without(model, closed)], settings)
    log.info("eval time %.2f s: full model, Hard Concrete, %s", time.perf_counter() - started, ", ".join(orders))

    test = p["significance"]
    row = {"study": study["name"], "penalty": p["penalty"], "train_model": p["train_model"], "steps": p["steps"],
           "heads_total": len(every_head), "heads_kept": kept, "metric": evalset.metric,
           "testset": p["eval"].get("name"), "masking": settings.masking.word, "score_full": full["score"],
           "score_concrete": gated["score"]}
    for attn_type, group in heads.groupby("attn_type", sort=False):
        row[f"kept_{attn_type}"] = int(group.kept.sum())
        row[f"kept_{attn_type}_per_layer"] = " ".join(str(int(n)) for n in group.groupby("layer").kept.sum())
    for name, result in zip(orders, compared):
        row[f"score_{name}"] = result["score"]
        # compare-mt's paired bootstrap: the share of resamples the better of the two does not win
        result = significance(evalset, gated["outputs"], result["outputs"], resamples=test["resamples"],
                              seed=test["seed"])
        row[f"p_vs_{name}"] = result["p_bootstrap"]
        row[f"significant_vs_{name}"] = bool(result["p_bootstrap"] < test["alpha"])
    row["alpha"] = test["alpha"]
    log.info("%s penalty %g: %d of %d heads kept; %s", study["name"], p["penalty"], kept, len(every_head),
             ", ".join(f"{k} = {v:.4g}" for k, v in row.items() if k.startswith("score_")))
    atomic.write_csv(pd.DataFrame([row]), snakemake.output.row, index=False)
