"""Long-context retrieval (rules/retrieval.smk): needle-in-a-haystack items made once per study, Wu et al.'s
experiment (the top-K retrieval heads masked against K random heads) and the retrieval score beside perplexity."""
from __future__ import annotations

from headprune.evaluation.kinds import kind_of
from headprune.io.config_error import ConfigError
from headprune.stages import constants

EXPERIMENTS = ("retrieval_heads",)


def items_params(study):
    splits = sorted({study.evalset_name(role) for role in ("eval", "selection", "test")})
    return {"splits": splits, **study.retrieval}


def corpus_dir(study):
    """The language model's corpus, whose text the haystacks are cut from."""
    return study.lm.corpus_dir


def heads_source(study):
    """The retrieval study whose heads' retrieval scores (head_roles.csv) rank the heads Wu et al.'s
    experiment masks: the study itself, or for a task the retrieval study of the same language model that
    experiments.retrieval_heads names (``retrieval_study`` chooses among several)."""
    if study.kind.finds_retrieval_heads:
        return study
    listed = [study.pipeline.study(name) for name in study.config["experiments"].get("retrieval_heads", [])]
    found = [other for other in listed if other.kind.finds_retrieval_heads and other.lm.name == study.lm.name]
    chosen = study.entry.get("retrieval_study")
    if chosen is not None:
        found = [other for other in found if other.name == chosen]
    if len(found) != 1:
        which = (f"models.{study.name}.retrieval_study is '{chosen}', which is not" if chosen is not None else
                 f"{len(found)} are" if found else "none is")
        raise ConfigError(f"config: experiments.retrieval_heads names '{study.name}', scored on the heads a "
                          f"retrieval study of its language model '{study.lm.name}' finds; {which} one of "
                          "experiments.retrieval_heads (name one with retrieval_study)")
    return found[0]


def heads_masking(study):
    """How Wu et al.'s experiment masks the K heads (both scores): models.<study>.masking over
    retrieval_heads.masking (zero by default, as Wu et al. mask them)."""
    return constants.masking(study, "retrieval_heads")


def heads_params(study):
    """Wu et al.'s experiment: the top-K heads by retrieval score masked, against K random heads, scored by
    the study's own score (retrieval accuracy; a task's metric) and by its language model's perplexity."""
    settings, bleu = study.config["retrieval_heads"], study.config["pruning"]["bleu"]
    heads, masking = len(study.heads), heads_masking(study)
    scores = [{"name": study.kind.wu_score, "eval": study.evalset_spec("eval"),
               "settings": constants.eval_settings(study, bleu, word=masking)},
              {"name": "perplexity", "eval": study.lm.evalset_spec("eval"),
               "settings": constants.eval_settings(study.lm, bleu, word=masking)}]
    return {"k": [k for k in settings["k"] if k <= heads], "random_sets": settings["random_sets"],
            "heads_from": heads_source(study).name, "scores": scores, "significance": study.config["significance"]}


def heads_inputs(study):
    source, masking = heads_source(study), heads_masking(study)
    return {"model": study.model_path, "eval": study.eval_data(["eval"]), "windows": study.lm.windows_dir,
            "roles": f"{study.pipeline.results_dir}/{source.name}/head_roles.csv",
            "masking": list(dict.fromkeys(constants.masking_data(study, masking) + constants.masking_data(study.lm, masking)))}


def side_by_side_inputs(study):
    """Both scores of a retrieval study and of its language model: single-head ablation and pruning."""
    results = study.pipeline.results_dir
    return {f"{name}_{table}": f"{results}/{study_name}/{path}"
            for name, study_name in (("retrieval", study.name), ("perplexity", study.lm.name))
            for table, path in (("ablation", "eval/ablation.csv"), ("pruning", "pruning.csv"))}


def scored_side_by_side(pipeline) -> list:
    """Retrieval studies whose language model is ablated and pruned with them: one figure shows both scores."""
    experiments = pipeline.config["experiments"]
    both = set(experiments["ablation"]) & set(experiments["pruning"])
    return [study for study in pipeline.studies
            if study.kind.drawn_beside_perplexity and {study.name, study.lm.name} <= both]


def targets(pipeline) -> list[str]:
    """Wu et al.'s experiment per study of experiments.retrieval_heads, and retrieval beside perplexity."""
    figures = pipeline.figures_dir
    found = [f"{figures}/{study}/{name}" for study in pipeline.config["experiments"].get("retrieval_heads", [])
             for name in ("retrieval_heads.png", "retrieval_heads.pdf", "retrieval_heads.csv")]
    for study in scored_side_by_side(pipeline):
        found += [f"{figures}/{study.name}/perplexity_and_retrieval.{ext}" for ext in ("png", "pdf", "csv")]
    return found


def report_inputs(pipeline) -> dict[str, list[str]]:
    """The retrieval scores of the heads a retrieval study finds itself, and Wu et al.'s experiment."""
    results, studies = pipeline.results_dir, pipeline.experiment_studies("retrieval_heads")
    return {"roles": [f"{results}/{study.name}/head_roles.csv" for study in studies
                      if heads_source(study).name == study.name],
            "retrieval_heads": [f"{results}/{study.name}/retrieval_heads.csv" for study in studies]}


def check(pipeline):
    """experiments.retrieval_heads names studies with a score of their own to mask the heads under, each of which
    finds its retrieval heads or has one retrieval study to take them from."""
    for name in pipeline.config["experiments"].get("retrieval_heads", []):
        kind = pipeline.models.get(name, {}).get("kind")
        if kind is None or kind_of(kind).wu_score is None:
            raise ConfigError(f"config: experiments.retrieval_heads names '{name}', which is neither a retrieval "
                              "study nor a task (a models entry of kind retrieval or lm_eval)")
        heads_source(pipeline.study(name))
