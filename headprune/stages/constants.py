"""The data of the masking modes that put something in a switched-off head's place (rules/constants.smk): a
mode's file (its class's ``data``), made once per study on its importance data by its class's ``data_maker``. Every
stage whose jobs mask that way reads it from here: where it is (``masking_data``). And the one place a study's
masking is resolved from the config (``masking``: the override over the experiment's word) and put in its jobs'
evaluation settings (``eval_settings``)."""
from __future__ import annotations

from headprune.models.masking import MODES, default_word


def params(study, word):
    """The settings of a mode's data (its class's ``data_settings`` of its config section)."""
    return {"mode": word, **MODES[word].data_settings(MODES[word].section(study.config))}


def masking_data(study, word) -> list[str]:
    """The file a masking mode reads (mean, optimal: the heads' constants; resample: their donors), made by the
    head_constants job of the study whose importance data this study's I_h is estimated on; [] for others."""
    if MODES[word].data is None:
        return []
    owner = study.plan.importance_study(study)
    return [f"{study.pipeline.results_dir}/{owner.name}/head_constants/{word}.safetensors"]


def masking(study, experiment: str) -> str:
    """How ``study``'s ``experiment`` (its config section: ablation, pruning, concrete, retrieval_heads) switches a
    head off: models.<study>.masking over <experiment>.masking, else the paper's (``masking.DEFAULT``). The one
    place a study's masking is resolved."""
    return study.entry.get("masking", default_word(study.config[experiment].get("masking")))


def masking_key(study, experiment: str) -> str:
    """The config key ``masking`` read, for an error that names it."""
    return f"models.{study.name}.masking" if "masking" in study.entry else f"{experiment}.masking"


def eval_settings(study, bleu: str, experiment: str | None = None, *, word: str | None = None) -> dict:
    """The study's evaluation settings (headprune.evaluation.runs.EvalSettings's fields) under the masking of its
    ``experiment`` (``masking``), or under the mode ``word`` (a sweep of modes), or, with neither, the paper's (a
    full model, no head off): the kind's fields with the mode's word and what the mode reads, its settings and its
    data file, which the job's EvalSettings makes a mode object of."""
    word = word or (masking(study, experiment) if experiment else default_word(None))
    mode = MODES[word]
    settings = {**mode.settings_from_config(mode.section(study.config)),
                **({mode.data: masking_data(study, word)[0]} if mode.data else {})}
    # the word alone where the mode has nothing more (the paper's zero: its jobs' params as they were)
    masking_param = {"word": word, **settings} if settings else word
    fields = list(study.plan.eval_settings(study, bleu, study.variant_rows).items())
    # just before variant_batch_size, where the kinds always had it: a job's params (Snakemake compares their
    # repr) stay as they were, and no finished job reruns
    at = [key for key, _ in fields].index("variant_batch_size")
    return dict(fields[:at] + [("masking", masking_param)] + fields[at:])
