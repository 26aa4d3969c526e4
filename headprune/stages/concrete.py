"""Voita et al.'s learned head gates (rules/concrete.smk): Hard Concrete gates trained under an L0 penalty, one
job per penalty, each model set beside I_h pruning and random pruning with as many heads."""
from __future__ import annotations

from headprune.io.config_error import ConfigError
from headprune.models.masking import MODES
from headprune.stages import constants
from headprune.stages.ablation import full_model_roles


EXPERIMENTS = ("concrete",)


def penalty_name(penalty):
    """A penalty as its job's wildcard: 0.05 -> '0.05', 1e-3 -> '0.001' (read back with float())."""
    return f"{penalty:g}"


def rows(study):
    """Every penalty's row, which concrete.csv collects."""
    return [f"{study.pipeline.results_dir}/{study.name}/concrete/{penalty_name(p)}.csv"
            for p in study.config["concrete"]["penalties"]]


def masking_data(study) -> list[str]:
    return constants.masking_data(study, constants.masking(study, "concrete"))


def eval_data(study):
    return study.eval_data(full_model_roles(study))


def params(study, penalty):
    config, concrete = study.config, study.config["concrete"]
    return {"penalty": float(penalty), "train": study.train_spec(concrete["batch_size"]),
            **{key: concrete[key] for key in ("train_model", "steps", "lr", "model_lr", "temperature", "seed", "compare")},
            "eval": study.evalset_spec(), "settings": constants.eval_settings(study, config["pruning"]["bleu"], "concrete"),
            "random_seed": config["pruning"]["random_seed"], "significance": config["significance"]}


def targets(pipeline) -> list[str]:
    """concrete.csv and its figure, per study of experiments.concrete."""
    results, figures = pipeline.results_dir, pipeline.figures_dir
    return [path for study in pipeline.config["experiments"].get("concrete", [])
            for path in (f"{results}/{study}/concrete.csv", f"{figures}/{study}/concrete.png",
                         f"{figures}/{study}/concrete.pdf")]


def check(pipeline):
    """Gates are real numbers in [0, 1]: a study of experiments.concrete is masked by a mode that takes them."""
    for study in pipeline.experiment_studies("concrete"):
        word = constants.masking(study, "concrete")
        if not MODES[word].real_gates:
            raise ConfigError(f"config: {constants.masking_key(study, 'concrete')} is {word}, which takes gates 0 or 1 "
                              f"only, and experiments.concrete names '{study.name}': Voita's Hard Concrete gates are "
                              "real numbers in [0, 1] "
                              f"({', '.join(word for word, mode in MODES.items() if mode.real_gates)} masking)")
