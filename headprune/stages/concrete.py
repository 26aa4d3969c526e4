"""Voita et al.'s learned head gates (rules/concrete.smk): Hard Concrete gates trained under an L0 penalty, one
job per penalty, each model set beside I_h pruning and random pruning with as many heads."""
from __future__ import annotations

from headprune.stages.ablation import full_model_roles


def penalty_name(penalty):
    """A penalty as its job's wildcard: 0.05 -> '0.05', 1e-3 -> '0.001' (read back with float())."""
    return f"{penalty:g}"


def rows(study):
    """Every penalty's row, which concrete.csv collects."""
    return [f"{study.pipeline.results_dir}/{study.name}/concrete/{penalty_name(p)}.csv"
            for p in study.config["concrete"]["penalties"]]


def masking(study):
    """models.<study>.masking over concrete.masking (gates are real numbers: modes that take them)."""
    return study.masking(study.config["concrete"].get("masking", "zero"))


def masking_data(study) -> list[str]:
    return study.masking_data(masking(study))


def eval_data(study):
    return study.eval_data(full_model_roles(study))


def params(study, penalty):
    config, concrete = study.config, study.config["concrete"]
    return {"penalty": float(penalty), "train": study.train_spec(concrete["batch_size"]),
            **{key: concrete[key] for key in ("train_model", "steps", "lr", "model_lr", "temperature", "seed", "compare")},
            "eval": study.evalset_spec(), "settings": study.eval_settings(config["pruning"]["bleu"], masking(study)),
            "random_seed": config["pruning"]["random_seed"], "significance": config["significance"]}
