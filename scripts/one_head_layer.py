"""Keep one head in one layer (each in turn) on the selection set; evaluate the best on the test set."""
import time

from headprune.experiments import EvalSettings, gates_keeping_one, run, run_variants, score
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
    keeping = [gates_keeping_one(model, attn_type, layer, head) for head in range(study["heads"])]
    started = time.perf_counter()
    selection_scores = [score(selection, outputs, settings.bleu)
                        for outputs in run_variants(model, tokenizer, selection, keeping, settings)]
    log.info("eval time %.2f s: %d settings on the selection set", time.perf_counter() - started, len(keeping))
    for head, value in enumerate(selection_scores):
        log.info("%s %s layer %d, only head %d: %s = %.4f on the selection set", study["name"], attn_type, layer,
                 head, selection.metric, value)
    best = max(range(len(selection_scores)), key=selection_scores.__getitem__)
    outputs = run(model, tokenizer, test, keeping[best], settings)
    write_json(snakemake.output[0], {
        "study": study["name"], "attn_type": attn_type, "layer": layer, "metric": test.metric,
        "selection_scores": selection_scores, "best_head": best, "score": score(test, outputs, settings.bleu),
        "outputs": outputs,
    })
