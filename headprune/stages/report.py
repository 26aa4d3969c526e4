"""The scorecard (rules/report.smk): each claim of the paper tested on the tables of the experiments the config
runs, next to the paper's numbers."""
from __future__ import annotations

from headprune.experiments.kinds import kind_of
from headprune.stages import masking_modes, pruning, retrieval


def importance_pruning_tables(pipeline, studies, scopes):
    """The prune jobs' tables that hold the importance order within ``scopes``, for each study once."""
    return [pruning.table(pipeline.study(name), scope, joined) for name in dict.fromkeys(studies)
            for scope, joined in pruning.jobs(pipeline.study(name))
            if scope in scopes and "importance" in joined.split("+")]


def scorecard_inputs(pipeline):
    """The CSVs each claim is tested on, only those of the experiments the config runs (named lists)."""
    experiments, results = pipeline.config["experiments"], pipeline.results_dir
    return {
        "ablation": [f"{results}/{study}/eval/ablation.csv" for study in experiments.get("ablation", [])],
        "one_head": [f"{results}/{study}/one_head_per_layer.csv" for study in experiments.get("one_head_per_layer", [])],
        "pruning": importance_pruning_tables(
            pipeline, experiments.get("pruning", []) + experiments.get("glue_pruning", []), ["all"]),
        "attention_types": importance_pruning_tables(pipeline, experiments.get("attention_types", []),
                                                     kind_of("translation").attention_types),
        "dynamics": pipeline.dynamics.pruning_tables if pipeline.dynamics else [],  # in the order of scorecard_epochs
        "speed": [f"{pipeline.figures_dir}/{study.name}/table4.csv" for study in pipeline.speed_studies],
        "roles": [f"{results}/{study}/head_roles.csv" for study in experiments.get("retrieval_heads", [])
                  if retrieval.heads_source(pipeline.study(study)).name == study],
        "retrieval_heads": [f"{results}/{study}/retrieval_heads.csv" for study in experiments.get("retrieval_heads", [])],
        "masking_modes": [f"{results}/{study}/masking_modes/{mode}.csv" for study in experiments.get("masking_modes", [])
                          for mode in masking_modes.modes(pipeline.study(study))],
    }


def paper_models(pipeline):
    """The paper's model each study stands for (its numbers in headprune.experiments.scorecard.PAPER): WMT for
    the translation study, a glue study's GLUE task (None for a task of its own), IWSLT for Figure 5's."""
    models = {pipeline.translation_name: "WMT", **{task: pipeline.glue[task].get("task") for task in pipeline.glue},
              **{study: None for study in pipeline.models}}
    if pipeline.dynamics:
        models[pipeline.dynamics.name] = "IWSLT"
    return models
