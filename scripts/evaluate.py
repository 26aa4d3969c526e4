"""Evaluate a study's model on each of its test sets, whole or with one head switched off (wildcard 'head').

Writes, per test-set role, the score and the per-item outputs (translations or predicted
labels) that the significance tests compare. The model is loaded once for all test sets.
"""
from headprune.experiments import EvalSettings, gates_without, parse_head_name, run, score
from headprune.models import pick_device
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch, write_json

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, evaluation = snakemake.params.study, snakemake.params.evaluation
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    head = snakemake.wildcards.get("head")
    gates = gates_without(model, [parse_head_name(head)]) if head else None
    settings = EvalSettings(**evaluation["settings"])
    results = {}
    for role, spec in evaluation["roles"].items():
        evalset = load_evalset(spec)
        outputs = run(model, tokenizer, evalset, gates, settings)
        results[role] = {"testset": spec["name"], "metric": evalset.metric,
                         "score": score(evalset, outputs, settings.bleu), "outputs": outputs}
        log.info("%s %s on %s (%s): %s = %.4f, %d items", study["name"], head or "full model", spec["name"], role,
                 evalset.metric, results[role]["score"], len(evalset))
    write_json(snakemake.output[0], {"study": study["name"], "head": head, "roles": results})
