"""I_h and the scores beside it (rules/importance.smk): one importance job per study, on its importance data,
measured against the constant a mean or optimal masking puts in a head's place."""
from __future__ import annotations

from headprune.models.masking import MODES
from headprune.stages import constants as constants_stage


def settings(study) -> dict:
    """config.importance, and under a pruning masking that puts a constant in a head's place (mean, optimal) the
    constants I_h measures a head's change to (|(o_h - c_h) . dL/do_h|, the first-order change of the loss when
    the head becomes its constant)."""
    word = constants_stage.masking(study, "pruning")
    mode = MODES[word]
    constants = constants_stage.masking_data(study, word)[0] if mode.constant_output and mode.data else None
    return {**study.config["importance"], **({"constants": constants} if constants else {})}


def constants(study) -> list[str]:
    """The file of those constants, else nothing."""
    found = settings(study).get("constants")
    return [found] if found else []
