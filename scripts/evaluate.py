"""Evaluate a study's model on each of its test sets: whole, or with one head switched off.

A screened study's one ablation job (rule ablate_screened) reads its heads from the screen (screen.csv): the
verified and the sampled. The 'head' wildcard names the head (or, with ablation.heads_per_job > 1, a run of heads
'first..last', listed in params: each is ablated ALONE, and they share one pass over each test set). Writes, per head and test-set role, the
score and the per-item outputs (translations or predicted labels) that the significance tests
compare. The model is loaded once.
"""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import time

from headprune.evaluation.runs import EvalSettings, gates_without, parse_head_name, scored_variants
from headprune.models.loading import pick_device
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch, write_json

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, evaluation = snakemake.params.study, snakemake.params.evaluation
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    settings = EvalSettings(**evaluation["settings"])
    evalsets = {role: load_evalset(spec) for role, spec in evaluation["roles"].items()}
    job = snakemake.wildcards.get("head")
    variants = evaluation["heads"] if job else [None]  # None: the full model
    if "screen" in snakemake.input.keys():  # a screened Table 1: the heads its screen picked, each alone
        import pandas as pd

        from headprune.evaluation.runs import head_name
        from headprune.analyses.screening import heads_to_ablate

        job = "screened"
        screen = snakemake.input.screen
        variants = [head_name(head) for head in heads_to_ablate(pd.read_csv(screen if isinstance(screen, str)
                                                                            else screen[0]))]
        log.info("%s: %d heads picked by the screen (%s)", study["name"], len(variants), snakemake.input.screen)
    gates_list = [gates_without(model, [parse_head_name(head)]) if head else None for head in variants]
    results = {head or "full": {} for head in variants}
    for role, evalset in evalsets.items():
        started = time.perf_counter()
        # the score (averaged over resample draws, EvalSettings.draws) and the per-item outputs the tests compare
        scored = scored_variants(model, tokenizer, evalset, gates_list, settings)
        log.info("eval time %.2f s: %d setting(s) on %s", time.perf_counter() - started, len(variants),
                 evaluation["roles"][role]["name"])
        for head, result in zip(variants, scored):
            draw_scores = result.pop("draw_scores")
            results[head or "full"][role] = {"testset": evaluation["roles"][role]["name"], "metric": evalset.metric,
                                             **result, **({"draw_scores": draw_scores} if len(draw_scores) > 1 else {})}
            log.info("%s %s on %s (%s): %s = %.4f, %d items", study["name"], head or "full model",
                     evaluation["roles"][role]["name"], role, evalset.metric, result["score"], len(evalset))
    if job:
        write_json(snakemake.output[0], {"study": study["name"], "heads": results})
    else:
        write_json(snakemake.output[0], {"study": study["name"], "family": model.config.model_type, "head": None,
                                         "roles": results["full"]})
