"""Evaluate a study's model on each of its test sets: whole, or with one head switched off.

The 'head' wildcard names the head (or, with ablation.heads_per_job > 1, several heads, each
ablated ALONE in turn). Writes, per head and test-set role, the score and the per-item outputs
(translations or predicted labels) that the significance tests compare. The model is loaded once.
"""
from headprune.experiments import EvalSettings, gates_without, parse_head_name, run, score
from headprune.models import pick_device
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch, write_json

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, evaluation = snakemake.params.study, snakemake.params.evaluation
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    settings = EvalSettings(**evaluation["settings"])
    evalsets = {role: load_evalset(spec) for role, spec in evaluation["roles"].items()}
    job = snakemake.wildcards.get("head")
    variants = job.split("+") if job else [None]  # None: the full model
    results = {}
    for head in variants:
        gates = gates_without(model, [parse_head_name(head)]) if head else None
        results[head or "full"] = {}
        for role, evalset in evalsets.items():
            outputs = run(model, tokenizer, evalset, gates, settings)
            value = score(evalset, outputs, settings.bleu)
            results[head or "full"][role] = {"testset": evaluation["roles"][role]["name"], "metric": evalset.metric,
                                             "score": value, "outputs": outputs}
            log.info("%s %s on %s (%s): %s = %.4f, %d items", study["name"], head or "full model",
                     evaluation["roles"][role]["name"], role, evalset.metric, value, len(evalset))
    if job:
        write_json(snakemake.output[0], {"study": study["name"], "heads": results})
    else:
        write_json(snakemake.output[0], {"study": study["name"], "head": None, "roles": results["full"]})
