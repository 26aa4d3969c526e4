"""One study under each way of switching a head off, side by side (rules/masking_modes.smk): per mode the
single-head ablation, the importance-order pruning curve and one head per layer."""
from __future__ import annotations

from headprune.io.config_error import ConfigError
from headprune.models.masking import MODES
from headprune.stages import constants

EXPERIMENTS = ("masking_modes",)


def modes(study) -> list[str]:
    """The modes experiments.masking_modes compares this study under (config.masking_modes.modes)."""
    return list(study.config["masking_modes"]["modes"])


def tables(study) -> list[str]:
    """Each mode's sweep of the study, in the config's order."""
    return [f"{study.pipeline.results_dir}/{study.name}/masking_modes/{mode}.csv" for mode in modes(study)]


def roles(study):
    """The sets a mode's sweep reads: eval, and for a study of experiments.one_head_per_layer its selection and
    test sets (each layer reduced to one head under the mode: C2 per mode)."""
    return ["eval"] + (["selection", "test"] if study.takes_part_in("one_head_per_layer") else [])


def params(study, mode):
    """One mode's sweep: every head off alone, the importance-order pruning curve and (``roles``) one head per
    layer under that masking."""
    config = study.config
    one_head = {role: study.evalset_spec(role) for role in roles(study)[1:]}
    return {"mode": mode, "eval": study.evalset_spec(), "settings": constants.eval_settings(study, config["pruning"]["bleu"], word=mode),
            "step_percent": config["pruning"]["step_percent"], "importance": config["importance"],
            "significance": config["significance"], **({"one_head": one_head} if one_head else {})}


def inputs(study, mode):
    return {"model": study.model_path, "data": study.eval_data(roles(study)),
            "importance": study.importance_table, "masking": constants.masking_data(study, mode)}


def targets(pipeline) -> list[str]:
    """The modes side by side, per study of experiments.masking_modes."""
    studies = pipeline.config["experiments"].get("masking_modes", [])
    return [f"{pipeline.figures_dir}/{study}/{name}" for study in studies
            for name in ("masking_modes.png", "masking_modes.pdf", "masking_modes.csv", "masking_modes_summary.csv",
                         "masking_modes_correlations.csv")]


def report_inputs(pipeline) -> dict[str, list[str]]:
    """Each mode's sweep (the scorecard's C1-C3 under each mode)."""
    return {"masking_modes": [path for study in pipeline.experiment_studies("masking_modes") for path in tables(study)]}


def check(pipeline):
    """A mode only decoder-only language models take is compared on language-modelling studies only."""
    for study in pipeline.experiment_studies("masking_modes"):
        for word in modes(study):
            if MODES[word].language_models_only and not study.kind.language_model:
                raise ConfigError(f"config: masking_modes.modes has {word}, which only decoder-only language models "
                                  f"take, and experiments.masking_modes names '{study.name}'")
