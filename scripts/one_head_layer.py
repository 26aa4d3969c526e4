"""Keep one head in one layer (each in turn) on the selection set; evaluate the best on the test set."""
from headprune.experiments import EvalSettings, gates_keeping_one, run, score
from headprune.models import pick_device
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch, write_json

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, evaluation = snakemake.params.study, snakemake.params.evaluation
    attn_type, layer = snakemake.wildcards.layer.rsplit("-", 1)
    layer = int(layer)
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    selection, test = load_evalset(evaluation["selection"]), load_evalset(evaluation["test"])
    settings = EvalSettings(**evaluation["settings"])
    selection_scores = []
    for head in range(study["heads"]):
        outputs = run(model, tokenizer, selection, gates_keeping_one(model, attn_type, layer, head), settings)
        selection_scores.append(score(selection, outputs, settings.bleu))
        log.info("%s %s layer %d, only head %d: %s = %.4f on the selection set", study["name"], attn_type, layer,
                 head, selection.metric, selection_scores[-1])
    best = max(range(len(selection_scores)), key=selection_scores.__getitem__)
    outputs = run(model, tokenizer, test, gates_keeping_one(model, attn_type, layer, best), settings)
    write_json(snakemake.output[0], {
        "study": study["name"], "attn_type": attn_type, "layer": layer, "metric": test.metric,
        "selection_scores": selection_scores, "best_head": best, "score": score(test, outputs, settings.bleu),
        "outputs": outputs,
    })
