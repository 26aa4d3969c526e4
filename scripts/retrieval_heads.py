"""Wu et al. (2025)'s experiment: mask the top-K heads by retrieval score (head_roles.csv) and, against them,
K random heads (several seeded sets) for each K; retrieval accuracy and perplexity of every setting, each
with a paired bootstrap test against the full model. One row per (K, selection, set)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import random
import time

import pandas as pd

from headprune.experiments.runs import (EvalSettings, all_heads, compare_to_full, gates_without, head_name,
                                        run_variants, score)
from headprune.io import atomic
from headprune.models.loading import pick_device
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, p = snakemake.params.study, snakemake.params.experiment
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    roles = pd.read_csv(snakemake.input.roles)
    # the highest retrieval scores first; a head without a score (no item answered correctly) last
    ranked = roles.assign(_score=roles["retrieval"].fillna(-1.0)).sort_values("_score", ascending=False, kind="stable")
    top = [(r.attn_type, int(r.layer), int(r.head)) for r in ranked.itertuples()]
    heads = all_heads(model)
    settings = [("full", 0, 0, [])]
    for k in p["k"]:
        settings.append(("top", k, 0, top[:k]))
        settings += [("random", k, seed, random.Random(seed).sample(heads, k)) for seed in range(p["random_sets"])]
    gates = [gates_without(model, masked) if masked else None for *_, masked in settings]
    results = {}
    for name, spec, evaluation in (("retrieval", p["retrieval"], p["retrieval_settings"]),
                                   ("perplexity", p["perplexity"], p["perplexity_settings"])):
        evalset, eval_settings = load_evalset(spec), EvalSettings(**evaluation)
        started = time.perf_counter()
        outputs = run_variants(model, tokenizer, evalset, gates, eval_settings)
        log.info("%s: %d settings on %d items in %.2f s", name, len(gates), len(evalset), time.perf_counter() - started)
        full = {"outputs": outputs[0], "score": score(evalset, outputs[0])}
        test = {key: p["significance"][key] for key in ("resamples", "seed", "alpha")}
        results[name] = [compare_to_full(evalset, full, {"outputs": out, "score": score(evalset, out)}, **test)
                         for out in outputs]
    rows = []
    for i, (selection, k, seed, masked) in enumerate(settings[1:], start=1):
        r, q = results["retrieval"][i], results["perplexity"][i]
        rows.append({"study": study["name"], "k": k, "selection": selection, "seed": seed,
                     "heads": " ".join(head_name(h) for h in masked),
                     "retrieval": r["score"], "retrieval_full": r["score_full"], "p_retrieval": r["p_bootstrap"],
                     "significant_retrieval": r["significant"],
                     "perplexity": q["score"], "perplexity_full": q["score_full"], "p_perplexity": q["p_bootstrap"],
                     "significant_perplexity": q["significant"]})
        log.info("K=%d %s (set %d): retrieval %.3f (full %.3f), perplexity %.3f (full %.3f)", k, selection, seed,
                 r["score"], r["score_full"], q["score"], q["score_full"])
    atomic.write_csv(pd.DataFrame(rows), snakemake.output[0], index=False)
