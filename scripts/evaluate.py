"""Evaluate a study's model on its test set, whole or with one head switched off (wildcard 'head').

Writes the score and the per-item outputs (translations or predicted labels) that
the significance tests compare.
"""
from headprune.experiments import EvalSettings, gates_without, parse_head_name, run, score
from headprune.models import pick_device
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch, write_json

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, evaluation = snakemake.params.study, snakemake.params.evaluation
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    evalset = load_evalset(evaluation["eval"])
    head = snakemake.wildcards.get("head")
    gates = gates_without(model, [parse_head_name(head)]) if head else None
    settings = EvalSettings(**evaluation["settings"])
    outputs = run(model, tokenizer, evalset, gates, settings)
    value = score(evalset, outputs, settings.bleu)
    log.info("%s %s: %s = %.4f on %d items", study["name"], head or "full model", evalset.metric, value, len(evalset))
    write_json(snakemake.output[0], {"study": study["name"], "head": head, "metric": evalset.metric,
                                     "score": value, "outputs": outputs})
