"""One row per head: ablated score, delta to the full model, bootstrap (and t-test) p-values."""
from pathlib import Path

import pandas as pd

from headprune.experiments import parse_head_name, significance
from headprune.workflow import load_evalset, logged, read_json

with logged(snakemake) as log:
    study, params = snakemake.params.study, snakemake.params.significance
    evalset = load_evalset(params["eval"])
    full = read_json(snakemake.input.full)
    rows = []
    for path in snakemake.input.heads:
        ablated = read_json(path)
        attn_type, layer, head = parse_head_name(ablated["head"])
        test = significance(evalset, full["outputs"], ablated["outputs"], resamples=params["resamples"],
                            seed=params["seed"])
        p = test["p_bootstrap"] if evalset.kind == "translation" else test["p_ttest"]
        rows.append({"study": study["name"], "attn_type": attn_type, "layer": layer, "head": head,
                     "metric": full["metric"], "score_full": full["score"], "score": ablated["score"],
                     "delta": ablated["score"] - full["score"], **test,
                     "significant": bool(p < params["alpha"]), "alpha": params["alpha"],
                     "n_resamples": params["resamples"]})
    table = pd.DataFrame(rows).sort_values(["attn_type", "layer", "head"])
    table.to_csv(snakemake.output[0], index=False)
    log.info("%s: %d of %d heads significant at p < %s", study["name"], table.significant.sum(), len(table),
             params["alpha"])
