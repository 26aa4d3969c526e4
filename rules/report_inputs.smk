"""Input functions of rules/report.smk: the CSVs the scorecard reads (only those of the experiments the
config runs) and the paper's model each study stands for (headprune.studies.Pipeline answers both)."""


def scorecard_inputs(wildcards):
    return PIPELINE.scorecard_inputs()


def scorecard_paper_models(wildcards):
    return PIPELINE.scorecard_paper_models()


def scorecard_epochs(wildcards):
    """The checkpoint epoch of each of the scorecard's dynamics tables (Figure 5's pruning curves)."""
    return DYNAMICS.epochs if DYNAMICS else []
