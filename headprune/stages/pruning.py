"""Figures 3, 4 and 6 and the criteria compared (rules/pruning.smk): heads pruned in a criterion's order,
10% a step, in prune jobs of pruning.orders_per_job orders each, and the criteria side by side."""
from __future__ import annotations

from headprune.analyses.criteria import CRITERIA, reference_order
from headprune.io.config_error import ConfigError
from headprune.stages import constants
from headprune.stages.ablation import full_model_roles

EXPERIMENTS = ("pruning", "glue_pruning", "attention_types", "criteria")


def criteria(study):
    """The head criteria compared (experiments.criteria): criteria.per_study.<study>, else criteria.compare."""
    if not study.takes_part_in("criteria"):
        return []
    section = study.config["criteria"]
    return list(section.get("per_study", {}).get(study.name, section["compare"]))


def orders(study):
    """Figure 3 prunes in every order of pruning.orders; Figure 6 (the paper's Appendix B) in the
    importance order only, so a glue_pruning task needs no single-head ablation."""
    found = list(study.config["pruning"]["orders"]) if study.takes_part_in("pruning") else []
    if study.takes_part_in("glue_pruning") and reference_order() not in found:
        found.insert(0, reference_order())
    return found


def scopes(study):
    """'all' (global pruning: Figures 3 and 6, and the criteria compared) and, with
    experiments.attention_types, each type (Figure 4)."""
    everything = orders(study)
    everything += [criterion for criterion in criteria(study) if criterion not in everything]
    found = {"all": everything} if everything else {}
    if study.takes_part_in("attention_types"):
        found.update({t: [reference_order()] for t in study.attention_types})
    return found


def jobs(study):
    """(scope, orders) of every prune job: pruning.orders_per_job orders each, joined by '+'. A criterion that
    waits for the whole single-head ablation (the oracle) has a job of its own, so the others need not wait."""
    size = study.config["pruning"].get("orders_per_job", 1)
    found = []
    for scope, scope_orders in scopes(study).items():
        waiting = [order for order in scope_orders if CRITERIA[order].waits_for_ablation]
        ready = [order for order in scope_orders if not CRITERIA[order].waits_for_ablation]
        found += [(scope, "+".join(ready[i:i + size])) for i in range(0, len(ready), size)]
        found += [(scope, order) for order in waiting]
    return found


def table(study, scope, joined_orders):
    return f"{study.pipeline.results_dir}/{study.name}/pruning/{scope}/{joined_orders}.csv"


def tables(study):
    """Every prune job's table, which pruning.csv collects."""
    return [table(study, scope, joined) for scope, joined in jobs(study)]


def criteria_jobs(study):
    """The global prune jobs that hold a criterion compared on this study."""
    return [joined for scope, joined in jobs(study) if scope == "all" and set(joined.split("+")) & set(criteria(study))]


def settings(study):
    return constants.eval_settings(study, study.config["pruning"]["bleu"], "pruning")


def masking_data(study) -> list[str]:
    """The file the pruning's masking reads, else nothing."""
    return constants.masking_data(study, constants.masking(study, "pruning"))


def eval_data(study):
    return study.eval_data(("eval",))


def inputs(study, joined_orders):
    """What a prune job reads beyond the model and test set: importance.csv, and what its criteria read
    (each criterion's ``reads``, headprune.analyses.criteria): the head roles, the single-head ablation, the
    importance data."""
    results = f"{study.pipeline.results_dir}/{study.name}"
    where = {"roles": f"{results}/head_roles.csv", "ablation": f"{results}/eval/ablation.csv",
             "importance_data": study.importance_data}
    found = {"importance": study.importance_table}
    for reads in _reads(joined_orders):
        found[reads] = where[reads]
    return found


def _reads(joined_orders) -> list[str]:
    """What a prune job's criteria read besides its model, test set and importance.csv."""
    return [CRITERIA[order].reads for order in joined_orders.split("+") if CRITERIA[order].reads]


def params(study, joined_orders):
    config = study.config
    pruning = config["pruning"]
    return {"eval": study.evalset_spec(), "settings": settings(study),
            "step_percent": pruning["step_percent"], "layouts": pruning["layouts"], "random_seed": pruning["random_seed"],
            "importance": config["importance"], "criteria": config["criteria"]["combined"],
            **({"importance_data": study.importance_spec} if "importance_data" in _reads(joined_orders) else {})}


def criteria_inputs(study):
    """The prune jobs' scores and per-step outputs that hold a study's criteria (scope 'all')."""
    folder = f"{study.pipeline.results_dir}/{study.name}/pruning/all"
    found = criteria_jobs(study)
    return {"scores": [f"{folder}/{joined}.csv" for joined in found],
            "outputs": [f"{folder}/{joined}.outputs.json" for joined in found]}


def criteria_eval_data(study):
    """compare_criteria's test-set files: every role the full model is evaluated on (its paired tests)."""
    return study.eval_data(full_model_roles(study))


def criteria_params(study):
    config = study.config
    return {"criteria": criteria(study), "eval": study.evalset_spec(), "bleu": config["pruning"]["bleu"],
            "within": config["criteria"]["within"], "test_at": config["criteria"]["test_at"],
            "significance": config["significance"]}


def importance_tables(study, scopes) -> list[str]:
    """The prune jobs' tables of a study that hold the importance order within ``scopes``."""
    return [table(study, scope, joined) for scope, joined in jobs(study)
            if scope in scopes and reference_order() in joined.split("+")]


def report_inputs(pipeline) -> dict[str, list[str]]:
    """The importance order's pruning of every study once (the scorecard's C3), and per attention type of its
    model's kind (C4)."""
    experiments = pipeline.config["experiments"]
    pruned = dict.fromkeys(experiments.get("pruning", []) + experiments.get("glue_pruning", []))
    by_type = dict.fromkeys(experiments.get("attention_types", []))
    return {"pruning": [path for name in pruned for path in importance_tables(pipeline.study(name), ["all"])],
            "attention_types": [path for study in map(pipeline.study, by_type)
                                for path in importance_tables(study, study.kind.attention_types)]}


def check(pipeline):
    """Figure 6 is for glue tasks."""
    for study in pipeline.experiment_studies("glue_pruning"):
        if study.name in pipeline.models and study.kind.language_model:
            raise ConfigError(f"config: experiments.glue_pruning names '{study.name}', a language-modelling study "
                              "(glue tasks only)")
    if pipeline.translation_name in pipeline.config["experiments"].get("glue_pruning", []):
        raise ConfigError(f"config: experiments.glue_pruning names '{pipeline.translation_name}', the translation "
                          "study; Figure 6 is for glue tasks (Figure 3 draws the translation model's pruning)")
