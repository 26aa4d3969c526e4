"""Keep one head in one layer (each in turn) on the selection set; evaluate the best on the test set.

The 'layer' wildcard names one layer ('enc_self-0') or, with ablation.layers_per_job > 1, a run of
layers ('enc_self-0..enc_dec-1', listed in params), each handled alone: every (layer, head) setting shares one pass over the
selection set, and every layer's best head one pass over the test set.
"""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import time

from headprune.evaluation.metrics import better_sign
from headprune.evaluation.runs import EvalSettings, gates_keeping_one, scored_variants
from headprune.models.heads import head_shape
from headprune.models.loading import pick_device
from headprune.workflow import load_evalset, load_study_model, logged, threads_for_torch, write_json

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, evaluation = snakemake.params.study, snakemake.params.evaluation
    layers = [(attn_type, int(layer)) for attn_type, layer in
              (name.rsplit("-", 1) for name in evaluation["layers"])]
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    selection, test = load_evalset(evaluation["selection"]), load_evalset(evaluation["test"])
    settings = EvalSettings(**evaluation["settings"])
    shape = head_shape(model)  # a studied tower has heads of its own count
    keeping = {(attn_type, layer): [gates_keeping_one(model, attn_type, layer, head)
                                    for head in range(shape[attn_type][1])] for attn_type, layer in layers}
    started = time.perf_counter()
    # scores averaged over resample draws (EvalSettings.draws); the test set's per-item outputs are the first draw's
    scored = scored_variants(model, tokenizer, selection, [g for gates in keeping.values() for g in gates], settings)
    log.info("eval time %.2f s: %d settings on the selection set", time.perf_counter() - started, len(scored))
    selection_scores = {key: [scored.pop(0)["score"] for _ in gates] for key, gates in keeping.items()}
    sign = better_sign(selection.metric)  # the best head: the highest BLEU or accuracy, the lowest perplexity
    best = {key: max(range(len(values)), key=lambda head: sign * values[head]) for key, values in selection_scores.items()}
    for (attn_type, layer), values in selection_scores.items():
        for head, value in enumerate(values):
            log.info("%s %s layer %d, only head %d: %s = %.4f on the selection set", study["name"], attn_type, layer,
                     head, selection.metric, value)
    started = time.perf_counter()
    tested = scored_variants(model, tokenizer, test, [keeping[key][best[key]] for key in keeping], settings)
    log.info("eval time %.2f s: %d best heads on the test set", time.perf_counter() - started, len(tested))
    write_json(snakemake.output[0], {"study": study["name"], "layers": [
        {"attn_type": attn_type, "layer": layer, "metric": test.metric,
         "selection_scores": selection_scores[attn_type, layer], "best_head": best[attn_type, layer],
         "score": result["score"], "outputs": result["outputs"]}
        for (attn_type, layer), result in zip(keeping, tested)]})
