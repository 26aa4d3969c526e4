"""The data of the masking modes that put something in a switched-off head's place (rules/constants.smk): a
mode's file (its class's ``data``), made once per study on its importance data by its class's ``data_maker``. Every
stage whose jobs mask that way reads it from here: where it is (``masking_data``) and the evaluation settings that
name it (``eval_settings``)."""
from __future__ import annotations

from headprune.models.masking import MODES, default_word


def params(study, word):
    """The settings of a mode's data (its class's ``data_settings`` of its config section)."""
    return {"mode": word, **MODES[word].data_settings(study.pipeline.mode_config(word))}


def masking_data(study, word) -> list[str]:
    """The file a masking mode reads (mean, optimal: the heads' constants; resample: their donors), made by the
    head_constants job of the study whose importance data this study's I_h is estimated on; [] for others."""
    if MODES[word].data is None:
        return []
    owner = study.scoring.importance_study(study)
    return [f"{study.pipeline.results_dir}/{owner.name}/head_constants/{word}.safetensors"]


def eval_settings(study, bleu, masking: str | None = None):
    """The study's evaluation settings under ``masking`` (a config word; None: the paper's), with the file its mode
    reads."""
    masking = default_word(masking)
    return study.eval_settings(bleu, masking, masking_data(study, masking))
