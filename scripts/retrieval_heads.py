"""Wu et al. (2025)'s experiment: mask the top-K heads by retrieval score (head_roles.csv of the retrieval study
that finds them) and, against them, K random heads (several seeded sets) for each K; the study's own score
(retrieval accuracy, or a task's metric: do the retrieval heads matter for it?) and its language model's
perplexity for every setting, each with a paired bootstrap test against the full model. One row per (K,
selection, set); columns <score>, <score>_full, p_<score>, significant_<score> per score. The heads are masked as
models.<study>.masking or retrieval_heads.masking says (zero by default, as Wu et al. mask them); under resample
masking each score is averaged over constants.resample.draws and tested on the first draw."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import random
import time

import pandas as pd

from headprune.evaluation.runs import (EvalSettings, all_heads, compare_to_full, gates_without, head_name,
                                        scored_variants)
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
    built = [EvalSettings(**entry["settings"]) for entry in p["scores"]]  # each mode once, kept for the rows' word
    for entry, eval_settings in zip(p["scores"], built):
        name = entry["name"]
        evalset = load_evalset(entry["eval"])
        started = time.perf_counter()
        scored = scored_variants(model, tokenizer, evalset, gates, eval_settings)
        log.info("%s: %d settings on %d items in %.2f s under %s masking", name, len(gates), len(evalset),
                 time.perf_counter() - started, eval_settings.masking.word)
        test = {key: p["significance"][key] for key in ("resamples", "seed", "alpha")}
        results[name] = ([compare_to_full(evalset, scored[0], result, **test) for result in scored], evalset.metric)
    rows = []
    masking = built[0].masking.word
    for i, (selection, k, seed, masked) in enumerate(settings[1:], start=1):
        row = {"study": study["name"], "k": k, "selection": selection, "seed": seed,
               "heads": " ".join(head_name(h) for h in masked), "masking": masking}
        for name, (compared, metric) in results.items():
            c = compared[i]
            row.update({name: c["score"], f"{name}_full": c["score_full"], f"p_{name}": c["p_bootstrap"],
                        f"significant_{name}": c["significant"]})
            if name == "task":
                row["task_metric"] = metric
        rows.append(row)
        log.info("K=%d %s (set %d): %s", k, selection, seed,
                 ", ".join(f"{name} {compared[i]['score']:.3f} (full {compared[i]['score_full']:.3f})"
                           for name, (compared, _) in results.items()))
    atomic.write_csv(pd.DataFrame(rows), snakemake.output[0], index=False)
