"""Table 4 (rules/speed.smk): the full and the pruned model timed on the eval set at several batch sizes, the
pruned one with the least important heads physically removed."""
from __future__ import annotations

from headprune.evaluation.kinds import kind_of
from headprune.io.config_error import ConfigError


def eval_data(study):
    """Only the eval set: newstest2013 (translation), the GLUE task's folder (its eval split), the LM's windows."""
    return study.plan.speed_data(study)


def params(study):
    """The eval set (the first/seeded speed.max_items items of it) and how to time it."""
    speed = study.config["speed"]
    evalset = study.evalset_spec()
    if speed.get("max_items") is not None:
        evalset["max_items"] = speed["max_items"]
    settings = {"batch_sizes": speed.get("batch_sizes", [1, 4, 16, 64]), "repeats": speed.get("repeats", 3),
                "prune_percent": speed.get("prune_percent", 50), "warmup_batches": speed.get("warmup_batches", 2),
                # the models timed: the full and the pruned one (Table 4), and on request uniform and stock
                "variants": list(speed.get("variants", ["original", "pruned"]))}
    if len(speed.get("engines", ())) > 1:  # llama.cpp too (a causal LM's variants as GGUF files); PyTorch alone
        settings["engines"] = list(speed["engines"])  # is the default, left out so that its jobs do not rerun
    settings.update(study.plan.speed_settings(study, speed))
    return {"eval": evalset, "settings": settings}


def table(pipeline, study) -> list[str]:
    return [f"{pipeline.figures_dir}/{study.name}/table4.{ext}" for ext in ("csv", "md")]


def targets(pipeline) -> list[str]:
    """Table 4 of each study of speed.studies."""
    return [path for study in pipeline.speed_studies for path in table(pipeline, study)]


def report_inputs(pipeline) -> dict[str, list[str]]:
    return {"speed": [table(pipeline, study)[0] for study in pipeline.speed_studies]}


def check(pipeline):
    """speed.studies names studies that load a model of their own."""
    models = pipeline.models
    for study in pipeline.config.get("speed", {}).get("studies", []):
        if study in models and kind_of(models[study]["kind"]).plan.scores_another_study:
            raise ConfigError(f"config: speed.studies names '{study}', a {models[study]['kind']} study: "
                              "time its language model")
        if study not in pipeline.study_names:
            raise ConfigError(f"config: speed.studies names '{study}', "
                              f"which is neither translation.name nor a glue task ({pipeline.study_names})")
