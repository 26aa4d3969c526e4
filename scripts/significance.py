"""One row per head: ablated score, delta to the full model, bootstrap (and t-test) p-values, on one test set; of a
screened study every head's row, those screened only empty, marked by ``verification``
(headprune.analyses.screening.mark_table)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.evaluation.runs import parse_head_name
from headprune.analyses.sweeps import ablation_table
from headprune.io import atomic
from headprune.workflow import load_evalset, logged, read_json

with logged(snakemake) as log:
    study, params = snakemake.params.study, snakemake.params.significance
    role = snakemake.wildcards.role
    evalset = load_evalset(params["eval"])
    full = read_json(snakemake.input.full)["roles"][role]
    ablated = {}
    for path in snakemake.input.heads:
        for name, roles in read_json(path)["heads"].items():
            ablated[parse_head_name(name)] = roles[role]
    table = ablation_table(evalset, full, ablated, study=study["name"], testset=full["testset"],
                           resamples=params["resamples"], seed=params["seed"], alpha=params["alpha"])
    screen = snakemake.input.get("screen") or []  # the screen of a screened Table 1 (a path, or a list of one)
    if screen:  # a screened Table 1: every head's row, marked verified, sampled or screened only
        import pandas as pd

        from headprune.analyses.screening import mark_table

        screen = pd.read_csv(screen if isinstance(screen, str) else screen[0])
        table = mark_table(table, screen, str(screen["screen_method"].iloc[0]))
    atomic.write_csv(table, snakemake.output[0], index=False)
    log.info("%s on %s: %d of %d heads significant at p < %s", study["name"], evalset.metric,
             int((table.significant == True).sum()), len(table), params["alpha"])  # noqa: E712 (empty when screened)
