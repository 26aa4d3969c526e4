"""Every head criterion's pruning curve side by side (criteria.csv), and a summary per criterion:
largest % pruned within criteria.within points of the full model, area under the curve, and a
paired bootstrap test against I_h at criteria.test_at % pruned (criteria_summary.csv)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.analyses.criteria import summarize
from headprune.analyses.layouts import free_layout
from headprune.io import atomic
from headprune.workflow import load_evalset, logged, read_json

with logged(snakemake) as log:
    study, params = snakemake.params.study, snakemake.params.comparison
    criteria = params["criteria"]
    scores = free_layout(pd.concat([pd.read_csv(path) for path in snakemake.input.scores], ignore_index=True))
    curves = (scores[scores["order"].isin(criteria)].rename(columns={"order": "criterion"})
              [["study", "criterion", "step", "percent_pruned", "heads_pruned", "heads_left", "score", "metric"]])
    curves = curves.set_index("criterion").loc[criteria].reset_index()  # the config's order
    outputs = {}
    for path in snakemake.input.outputs:
        for criterion, steps in read_json(path)["orders"].items():
            outputs[criterion] = [step["outputs"] for step in steps]
    evalset = load_evalset(params["eval"])
    test = params["significance"]
    summary = summarize(curves, outputs, evalset, within=params["within"], test_at=params["test_at"],
                        resamples=test["resamples"], seed=test["seed"], alpha=test["alpha"])
    summary.insert(0, "study", study["name"])
    atomic.write_csv(curves, snakemake.output.curves, index=False)
    atomic.write_csv(summary, snakemake.output.summary, index=False)
    for row in summary.itertuples():
        log.info("%s %s: %.0f%% pruned within %s points, AUC %.4f", study["name"], row.criterion,
                 row.largest_percent_within, params["within"], row.area_under_curve)
