"""Table 1 and Tables 2-3 (rules/ablation.smk): every head switched off alone, exhaustively or screened
(ablation.strategy), the full model, the significance tests, and one head per layer."""
from __future__ import annotations

from headprune.io.config_error import ConfigError
from headprune.stages import constants

EXPERIMENTS = ("ablation", "cross_domain", "one_head_per_layer")


def chunk_name(items):
    """A job's name for a run of consecutive items: the item itself, or 'first..last' (a file name
    listing them all would pass the file system's 255 characters)."""
    return items[0] if len(items) == 1 else f"{items[0]}..{items[-1]}"


def chunk_items(items, name):
    """The items a chunk_name stands for."""
    first, _, last = name.partition("..")
    if first not in items or (last and last not in items):
        raise ValueError(f"'{name}' does not name a run of {items[:2]}...")
    return items[items.index(first):items.index(last or first) + 1]


def chunks(items, size):
    return [chunk_name(items[i:i + size]) for i in range(0, len(items), size)]


def roles(study):
    """Test sets every single-head ablation job evaluates on: in domain, and out of domain for Figure 2."""
    return ["eval"] + (["ood"] if study.takes_part_in("cross_domain") else [])


def full_model_roles(study):
    """Test sets the full model is evaluated on: those of the ablation, and the test set of Tables 2-3."""
    return roles(study) + (["test"] if study.takes_part_in("one_head_per_layer") else [])


def screened(study) -> bool:
    """Whether this study's Table 1 is screened (ablation.per_study.<study>, else ablation.strategy: screened;
    headprune.analyses.screening)."""
    ablation = study.config["ablation"]
    return ablation.get("per_study", {}).get(study.name, ablation.get("strategy", "exhaustive")) == "screened"


def jobs(study):
    """The single-head ablation jobs: one per head ('enc_self-0-3'), or with ablation.heads_per_job > 1
    a run of heads per job ('enc_self-0-0..enc_self-1-3'), each still evaluated with only that head off.
    A screened study (ablation.strategy: screened) has one job, 'screened': the heads its screen picks."""
    if screened(study):
        return ["screened"]
    return chunks(study.heads, study.config["ablation"].get("heads_per_job", 1))


def job_heads(study, job):
    return chunk_items(study.heads, job)


def outputs(study):
    """Every ablation job's file, which the table of the study's single-head ablation collects."""
    return [f"{study.pipeline.results_dir}/{study.name}/ablation/{job}.json" for job in jobs(study)]


def screen_table(study) -> list[str]:
    """The screen of a screened study (every head's screen score and whether it is verified, sampled or
    screened only), else nothing."""
    return [f"{study.pipeline.results_dir}/{study.name}/screen.csv"] if screened(study) else []


def settings(study):
    """The ablation's evaluation settings: its masking (models.<study>.masking over ablation.masking)."""
    return constants.eval_settings(study, study.config["ablation"]["bleu"], "ablation")


def masking_data(study) -> list[str]:
    """The file the ablation's masking reads, else nothing."""
    return constants.masking_data(study, constants.masking(study, "ablation"))


def screen_params(study):
    """What the screen job needs: the method and its counts, the data it screens on (never the test set), the
    ablation's evaluation settings (masking and the file it reads). The config's ablation.screen, its defaults
    filled in by the schema."""
    from headprune.analyses.screening import SCREENS

    screen = study.config["ablation"]["screen"]
    params = {**screen, "settings": settings(study), "data": study.importance_spec}
    if SCREENS[screen["method"]].needs_screen_set:
        params["screen_set"] = study.plan.screen_evalset_spec(study, screen["items"])
    return params


def eval_data(study):
    """The files an ablation job reads: its test sets, by role."""
    return study.eval_data(roles(study))


def full_eval_data(study):
    """The files the full model's evaluation reads: every role it is evaluated on."""
    return study.eval_data(full_model_roles(study))


def one_head_eval_data(study):
    """The files a one-head-per-layer job reads: its selection and test sets."""
    return study.eval_data(("selection", "test"))


def full_eval_params(study):
    return {"roles": {role: study.evalset_spec(role) for role in full_model_roles(study)},
            "settings": constants.eval_settings(study, study.config["ablation"]["bleu"])}


def job_params(study, job):
    return {"heads": job_heads(study, job), "roles": {role: study.evalset_spec(role) for role in roles(study)},
            "settings": settings(study)}


def screened_params(study):
    """The screened ablation job's: as an ablation job's, its heads read from the screen."""
    return {"heads": [], "roles": {role: study.evalset_spec(role) for role in roles(study)},
            "settings": settings(study)}


def significance_params(study, role):
    return {"eval": study.evalset_spec(role), **study.config["significance"]}


def one_head_jobs(study):
    """One head per layer jobs: one per layer ('enc_dec-1'), or ablation.layers_per_job layers each
    ('enc_self-0..enc_dec-1'), each layer still handled alone."""
    return chunks(study.layers, study.config["ablation"].get("layers_per_job", 1))


def one_head_job_layers(study, job):
    return chunk_items(study.layers, job)


def one_head_params(study, job):
    return {"layers": one_head_job_layers(study, job), "selection": study.evalset_spec("selection"),
            "test": study.evalset_spec("test"), "settings": settings(study)}


def one_head_outputs(study):
    results = f"{study.pipeline.results_dir}/{study.name}"
    return {"layers": [f"{results}/one_head/{job}.json" for job in one_head_jobs(study)],
            "full": f"{results}/full.json"}


def report_inputs(pipeline) -> dict[str, list[str]]:
    """Table 1's and Tables 2-3's tables (the scorecard's C1 and C2)."""
    experiments, results = pipeline.config["experiments"], pipeline.results_dir
    return {"ablation": [f"{results}/{study}/eval/ablation.csv" for study in experiments.get("ablation", [])],
            "one_head": [f"{results}/{study}/one_head_per_layer.csv"
                         for study in experiments.get("one_head_per_layer", [])]}


def check(pipeline):
    for study in pipeline.experiment_studies("cross_domain"):
        if study.name in pipeline.models and study.kind.language_model:
            raise ConfigError(f"config: experiments.cross_domain names '{study.name}', a language-modelling study "
                              "(no out-of-domain corpus)")
    check_screen(pipeline)


def check_screen(pipeline):
    """A screened Table 1 (ablation.strategy or ablation.per_study: screened): its study names, its counts, and a
    screen each study whose Table 1 is made can run."""
    from headprune.analyses.screening import GRADIENT_MASKINGS, SCREENS, head_count

    config = pipeline.config
    ablation = config.get("ablation", {})
    for name in ablation.get("per_study", {}):
        if name not in pipeline.study_names:
            raise ConfigError(f"config: ablation.per_study names '{name}', which is not a study "
                              f"({pipeline.study_names})")
    screen = ablation.get("screen", {})  # its defaults filled in by the schema
    experiments = config["experiments"]
    with_table1 = dict.fromkeys(name for key in ("ablation", "cross_domain", "pruning", "criteria", "attention_types")
                                for name in experiments.get(key, []))
    for study_name in with_table1:
        study = pipeline.study(study_name)
        if not screened(study):
            continue
        heads = len(study.heads)
        try:
            top_k = head_count(screen["top_k"], heads, "ablation.screen.top_k")
            head_count(screen["sample"], heads - top_k, "ablation.screen.sample")
        except ValueError as error:
            raise ConfigError(f"config: {error}") from None
        masking = constants.masking(study, "ablation")
        if SCREENS[screen["method"]].gradient and masking not in GRADIENT_MASKINGS:
            key = constants.masking_key(study, "ablation")
            raise ConfigError(f"config: ablation.screen.method is {screen['method']}, a gradient screen, which needs "
                              f"{', '.join(GRADIENT_MASKINGS[:-1])} or {GRADIENT_MASKINGS[-1]} masking; {key} is {masking} (use the exact screen)")
        screen_params(study)  # a kind without a screen set refuses the exact screen here, naming the key
