"""Tables 2-3: one row per layer and attention type: the best single head's change on the test set."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.evaluation.runs import compare_to_full
from headprune.io import atomic
from headprune.workflow import load_evalset, logged, read_json

with logged(snakemake) as log:
    study, params = snakemake.params.study, snakemake.params.significance
    evalset = load_evalset(params["eval"])
    full = read_json(snakemake.input.full)["roles"]["test"]
    rows = []
    for kept in (layer for path in snakemake.input.layers for layer in read_json(path)["layers"]):
        rows.append({"study": study["name"], "testset": full["testset"], "attn_type": kept["attn_type"], "layer": kept["layer"],
                     "best_head": kept["best_head"], "selection_score": kept["selection_scores"][kept["best_head"]],
                     **compare_to_full(evalset, full, kept, resamples=params["resamples"], seed=params["seed"],
                                       alpha=params["alpha"])})
    table = pd.DataFrame(rows).sort_values(["attn_type", "layer"])
    atomic.write_csv(table, snakemake.output[0], index=False)
    log.info("%s: %d of %d layers change significantly with one head", study["name"], table.significant.sum(),
             len(table))
