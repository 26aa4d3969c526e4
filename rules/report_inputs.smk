"""Input functions of rules/report.smk: the scorecard's targets, the CSVs it reads (only those of the
experiments the config runs) and the paper's model each study stands for."""


def scorecard_targets():
    return [f"{FIGURES}/scorecard.csv", f"{FIGURES}/scorecard.md"]


def importance_pruning_tables(studies, scopes):
    """The prune jobs' tables that hold the importance order within ``scopes`` (a study's jobs:
    pruning_jobs), for each study once."""
    return [f"{RESULTS}/{study}/pruning/{scope}/{orders}.csv" for study in dict.fromkeys(studies)
            for scope, orders in pruning_jobs(study) if scope in scopes and "importance" in orders.split("+")]


def scorecard_inputs(wildcards):
    """The CSVs each claim is tested on, only those of the experiments the config runs (named lists)."""
    experiments = config["experiments"]
    return {
        "ablation": [f"{RESULTS}/{study}/eval/ablation.csv" for study in experiments.get("ablation", [])],
        "one_head": [f"{RESULTS}/{study}/one_head_per_layer.csv"
                     for study in experiments.get("one_head_per_layer", [])],
        "pruning": importance_pruning_tables(experiments.get("pruning", []) + experiments.get("glue_pruning", []),
                                             ["all"]),
        "attention_types": importance_pruning_tables(experiments.get("attention_types", []),
                                                     ATTENTION_TYPES["translation"]),
        "dynamics": dynamics_pruning_tables() if DYNAMICS else [],  # in the order of scorecard_epochs
        "speed": [f"{FIGURES}/{study}/table4.csv" for study in speed_studies()],
    }


def scorecard_paper_models(wildcards):
    """The paper's model each study stands for (its numbers in headprune.experiments.scorecard.PAPER): WMT for the
    translation study, a glue study's GLUE task (None for a task of its own), IWSLT for Figure 5's."""
    models = {TRANSLATION: "WMT", **{task: GLUE[task].get("task") for task in GLUE}, **{study: None for study in MODELS}}
    if DYNAMICS:
        models[DYN] = "IWSLT"
    return models


def scorecard_epochs(wildcards):
    """The checkpoint epoch of each of the scorecard's dynamics tables (Figure 5's pruning curves)."""
    return dynamics_epochs() if DYNAMICS else []
