"""Each stage of the workflow owns its jobs: one module per rules file (``rules/<stage>.smk`` beside
``headprune/stages/<stage>.py``), holding what that stage's jobs read (inputs), are asked (params) and write
(paths), as functions of a study (``headprune.studies.Study``: a study's identity, its model, its evaluation
sets). The rules call these functions directly through ``rules/common.smk``'s ``stage_answer``; a study never
asks a stage, so a stage changes in its one module.

A stage is found, not listed: every module of this package is one (``STAGES``, in the order of their names), the
Snakefile includes each one's rules file, and what the whole run asks of the stages is answered here from what
each module declares, every declaration optional:

- ``EXPERIMENTS``: the experiments it owns (config ``experiments.<name>``, each a list of studies);
- ``targets(pipeline)``: the tables and figures it writes that the run makes by default;
- ``report_inputs(pipeline)``: what the scorecard (rules/report.smk) reads of it, named lists of CSVs;
- ``scorecard_models(pipeline)``: the paper's model each study of its own stands for (the scorecard's);
- ``check(pipeline)``: what the schema cannot check of its config section, a ConfigError naming the key.

Its config section's schema is ``rules/schemas/<stage>.schema.yaml`` where it has one
(``headprune.config_schema``). A new stage is then four files: its rules file, this module, its script and its
schema section (docs/layout.md).

Torch-free, as the studies: Snakemake imports it to plan the run.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

from headprune.io.registry import Registry

STAGES: Registry = Registry("stage", check=inspect.ismodule)
for _found in pkgutil.iter_modules(__path__):
    if not _found.name.startswith("_"):
        STAGES.add(_found.name, f"{__name__}:{_found.name}")  # imported on first use, through __getattr__


def __getattr__(name):
    """``stages.<stage>`` (the rules' spelling) imports that stage's module the first time it is asked for."""
    if name in STAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def rules_files() -> list[str]:
    """Every stage's rules file, relative to the Snakefile."""
    return [f"rules/{name}.smk" for name in STAGES]


def experiments() -> list[str]:
    """Every experiment a stage owns (config experiments.<name>), stage by stage."""
    return [experiment for stage in STAGES.values() for experiment in getattr(stage, "EXPERIMENTS", ())]


def targets(pipeline) -> list[str]:
    """The run's default target: every stage's."""
    return [path for stage in STAGES.values() if hasattr(stage, "targets") for path in stage.targets(pipeline)]


def report_inputs(pipeline) -> dict[str, list[str]]:
    """What the scorecard reads, each stage's named lists together."""
    found: dict[str, list[str]] = {}
    for name, stage in STAGES.items():
        for key, paths in (stage.report_inputs(pipeline) if hasattr(stage, "report_inputs") else {}).items():
            if key in found:
                raise ValueError(f"stage {name!r} gives the scorecard's input {key!r}, which another stage gives")
            found[key] = paths
    return found


def scorecard_models(pipeline) -> dict:
    """The paper's model of each study a stage makes beside the config's (Figure 5's IWSLT model)."""
    return {study: model for stage in STAGES.values() if hasattr(stage, "scorecard_models")
            for study, model in stage.scorecard_models(pipeline).items()}


def check(pipeline) -> None:
    """Every stage's checks of its config section."""
    for stage in STAGES.values():
        if hasattr(stage, "check"):
            stage.check(pipeline)
