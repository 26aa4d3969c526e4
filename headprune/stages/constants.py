"""The data of the masking modes that put something in a switched-off head's place (rules/constants.smk): a
mode's file (its class's ``data``), made once per study on its importance data by its class's ``data_maker``."""
from __future__ import annotations

from headprune.models.masking import MODES


def params(study, word):
    """The settings of a mode's data (its class's ``data_settings`` of its config section)."""
    return {"mode": word, **MODES[word].data_settings(study.pipeline.mode_config(word))}
