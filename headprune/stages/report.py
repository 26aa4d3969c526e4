"""The scorecard (rules/report.smk): each claim of the paper tested on the tables of the experiments the config
runs, next to the paper's numbers. What it reads of each stage is that stage's (``report_inputs``, asked through
``headprune.stages``), so a stage's share of the scorecard is written where its tables are."""
from __future__ import annotations

import headprune.stages
from headprune.stages import dynamics


def scorecard_inputs(pipeline) -> dict[str, list[str]]:
    """The CSVs each claim is tested on, only those of the experiments the config runs (named lists)."""
    return headprune.stages.report_inputs(pipeline)


def paper_models(pipeline):
    """The paper's model each study stands for (its numbers in each claim's ``paper``, headprune.report.claims): WMT for
    the translation study, a glue study's GLUE task (None for a task of its own), and those a stage makes of its
    own (IWSLT for Figure 5's)."""
    return {pipeline.translation_name: "WMT", **{task: pipeline.glue[task].get("task") for task in pipeline.glue},
            **{study: None for study in pipeline.models}, **headprune.stages.scorecard_models(pipeline)}


def epochs(pipeline) -> list[int]:
    """The checkpoint epoch of each of Figure 5's tables (the scorecard's "dynamics" input), in their order."""
    return dynamics.epochs(pipeline)


def targets(pipeline) -> list[str]:
    return [f"{pipeline.figures_dir}/scorecard.csv", f"{pipeline.figures_dir}/scorecard.md"]
