"""The scorecard of the paper's claims (headprune.report.scorecard): one row per claim and study, first in the
HTML report.

Its inputs are the CSVs of the experiments this config runs; a claim whose experiment the config does
not run gets a row saying "not run". Snakemake's report lists the result categories in lexicographic
order (its menu sorts them with JavaScript's localeCompare; snakemake PR #2449), so the category
"Claims scorecard" comes before "Figure ..." and "Table ..." (tests/test_scorecard.py keeps it first).
The workflow description (report/workflow.rst), the report's front page, points to it. Its inputs and params
are headprune.stages.report's.
"""




report: "../report/workflow.rst"


rule scorecard:
    input:
        unpack(of_pipeline(stages.report.scorecard_inputs, PIPELINE)),
    output:
        csv=f"{FIGURES}/scorecard.csv",
        md=report(f"{FIGURES}/scorecard.md", caption="../report/scorecard.rst", category="Claims scorecard"),
    params:
        paper_models=stages.report.paper_models(PIPELINE),
        epochs=stages.report.epochs(PIPELINE),
        confidence=config["ablation"]["screen"]["confidence"],
    log:
        f"{RESULTS}/logs/scorecard.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/scorecard.py"
