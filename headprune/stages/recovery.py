"""Recovery after pruning (rules/recovery.smk; issue #59): a study's model pruned in the importance order at each of
recovery.percents (its pruning curve's step at or below each, Figure 3), then trained a few steps by each of
recovery.methods (LoRA merged, full fine-tuning, distillation from the unpruned model) on its training data, bias
compensation beside them; one job per study writes <study>/recovery.csv and exports the recovered model at the cut
(the first percent) to <study>/recovered/."""
from __future__ import annotations

from headprune.io.config_error import ConfigError
from headprune.stages import pruning

EXPERIMENTS = ("recovery",)


def table(study) -> str:
    return f"{study.pipeline.results_dir}/{study.name}/recovery.csv"


def exported(study) -> str:
    return f"{study.pipeline.results_dir}/{study.name}/recovered"


def curve(study) -> dict[str, str]:
    """The prune job's table and per-step outputs that hold the importance order (whole model): its scores and the
    heads removed at each step."""
    scores = pruning.importance_tables(study, ["all"])[0]
    return {"curve": scores, "steps": scores.removesuffix(".csv") + ".outputs.json"}


def eval_data(study):
    return study.eval_data(("eval",))


def train_data(study):
    """The files the training items are drawn from: an LM's windows, a GLUE task's folder, the training bitext."""
    return study.plan.train_data(study)


def train_spec(study) -> dict:
    """The training items (headprune.workflow.load_evalset reads them): recovery.train_items windows of an LM's
    training split, a seeded subset of a GLUE task's train set, or the first sentence pairs of translation.train_sets;
    never the test set."""
    spec = study.plan.recovery_evalset_spec(study, study.config["recovery"]["train_items"])
    return {**spec, "name": spec["name"].replace("screen", "recovery").replace("(screen)", "(recovery)")}


def section_of(study) -> dict:
    """config.recovery with recovery.per_study.<study> over it."""
    section = study.config["recovery"]
    return {**section, **section["per_study"].get(study.name, {})}


def params(study) -> dict:
    section = section_of(study)
    return {"eval": study.evalset_spec(), "train": train_spec(study), "evaluation": pruning.settings(study),
            "percents": list(section["percents"]), "methods": list(section["methods"]), "export": section["export"],
            "settings": {"steps": section["steps"], "lr": section["lr"], "batch_size": section["batch_size"],
                         "seed": section["seed"], "lora_rank": section["lora"]["rank"],
                         "lora_alpha": section["lora"]["alpha"], "lora_targets": section["lora"]["targets"],
                         "temperature": section["distill"]["temperature"],
                         "distill_weight": section["distill"]["weight"]}}


def tables(pipeline) -> list[str]:
    return [table(study) for study in pipeline.experiment_studies("recovery")]


def targets(pipeline) -> list[str]:
    """recovery.csv and the exported model of each study of experiments.recovery."""
    return [path for study in pipeline.experiment_studies("recovery") for path in (table(study), exported(study))]


def report_inputs(pipeline) -> dict[str, list[str]]:
    return {"recovery": tables(pipeline)}


def check(pipeline):
    """A recovered study has a pruning curve in the importance order and training data; the method exported is one
    of those run."""
    section = pipeline.config["recovery"]
    if section["export"] not in section["methods"]:
        raise ConfigError(f"config: recovery.export is '{section['export']}', not one of recovery.methods "
                          f"{section['methods']}")
    for name in section["per_study"]:
        if name not in pipeline.study_names:
            raise ConfigError(f"config: recovery.per_study names '{name}', which is no study ({pipeline.study_names})")
    for study in pipeline.experiment_studies("recovery"):
        if not pruning.importance_tables(study, ["all"]):
            raise ConfigError(f"config: experiments.recovery names '{study.name}', which has no pruning curve in the "
                              "importance order: name it in experiments.pruning or glue_pruning too")
        try:
            train_spec(study)
        except ConfigError:
            raise ConfigError(f"config: experiments.recovery names '{study.name}', a {study.kind.name} study, which has "
                              "no training data of its own to recover on") from None
