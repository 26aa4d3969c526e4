"""What the config's JSON schema cannot check: cross-references between its sections (a study an experiment
names, a test set a role names, a GLUE task's splits, a local download that is not there), each failing with a
ConfigError that names the key. ``headprune.studies.Pipeline`` runs them on itself before any job is planned.

Torch-free: Snakemake imports it to plan the run.
"""
from __future__ import annotations

from pathlib import Path

from headprune.data.glue import GLUE_TASKS, glue_task_spec
from headprune.data.glue import _check_task as check_glue_task
from headprune.experiments.kinds import kind_of
from headprune.experiments.kinds.base import ConfigError
from headprune.models.masking import MODES
from headprune.stages import ablation as ablation_stage
from headprune.stages import retrieval


def check_local_files(pipeline):
    """A download that is a path in this workflow must be there already, or be one the demo's rules make
    (under <data_dir>/upstream)."""
    def downloads(node, key):
        if isinstance(node, dict):
            if isinstance(node.get("url"), str) and "://" not in node["url"]:
                yield key, node["url"]
            for name, value in node.items():
                if name != "demo":
                    yield from downloads(value, f"{key}.{name}" if key else str(name))

    upstream = f"{pipeline.data_dir}/upstream/"
    for key, path in downloads(pipeline.config, ""):
        if Path(path).exists():
            continue
        if "demo" not in pipeline.config:
            raise ConfigError(f"config: {key}.url is '{path}', a local file that is not there (and no demo "
                              "section makes it)")
        if not path.startswith(upstream):
            raise ConfigError(f"config: {key}.url is '{path}', a local file that is not there and that the demo "
                              f"does not make (it writes under data_dir's upstream/, {upstream})")

def check_config(pipeline):
    config, translation, glue, models = pipeline.config, pipeline.config["translation"], pipeline.glue, pipeline.models
    for key in ("importance_sets", "eval_set", "ood_set", "selection_set", "test_set"):
        if translation.get(key) is None:
            continue
        names = translation[key] if isinstance(translation[key], list) else [translation[key]]
        for name in names:
            if name not in translation["testsets"]:
                raise ConfigError(f"config: translation.{key} names '{name}', which is not in translation.testsets")
    if pipeline.translation_name in glue:
        raise ConfigError(f"config: glue task '{pipeline.translation_name}' has the same name as translation.name")
    for task, spec in glue.items():
        if "task" in spec and spec["task"] not in GLUE_TASKS:
            raise ConfigError(f"config: glue.{task}.task is '{spec['task']}', not one of {sorted(GLUE_TASKS)}")
        if "task" not in spec and not ({"url", "files"} & set(spec)):
            raise ConfigError(f"config: glue.{task} needs either 'task' (a built-in GLUE task) or 'url' or 'files'")
        try:
            splits = check_glue_task(glue_task_spec(spec, task))
        except ValueError as error:
            if "task" not in spec:  # without a built-in task, the entry must give the whole spec
                raise ConfigError(f"config: glue.{task}.task is not set (a built-in GLUE task: "
                                  f"{', '.join(sorted(GLUE_TASKS))}), and the entry alone is not a task: {error}") from None
            raise ConfigError(f"config: glue.{task}: {error}") from None
        for key in ("eval_split", "ood_split", "selection_split", "test_split", "train_split"):
            if key in spec and spec[key] not in splits:
                raise ConfigError(f"config: glue.{task}.{key} is '{spec[key]}', not one of its splits {sorted(splits)}")
    check_local_files(pipeline)
    for experiment, studies in config["experiments"].items():
        for study in studies:
            if study not in pipeline.study_names:
                raise ConfigError(f"config: experiments.{experiment} names '{study}', "
                                  f"which is neither translation.name nor a glue task ({pipeline.study_names})")
    for name in translation.get("train_sets", []):
        if name not in translation["testsets"]:
            raise ConfigError(f"config: translation.train_sets names '{name}', which is not in translation.testsets")
    for study, entry in models.items():
        if study == pipeline.translation_name or study in glue:
            raise ConfigError(f"config: models.{study} has the name of another study (translation.name or a glue task)")
    # a study scoring another study's model is checked once that study is
    for borrowing in (False, True):
        for study, entry in models.items():
            if kind_of(entry["kind"]).scores_another_study == borrowing:
                kind_of(entry["kind"]).check(pipeline, study, entry)
    for experiment, why in (("cross_domain", "no out-of-domain corpus"), ("glue_pruning", "glue tasks only")):
        for study in config["experiments"].get(experiment, []):
            if study in models and kind_of(models[study]["kind"]).language_model:
                raise ConfigError(f"config: experiments.{experiment} names '{study}', a language-modelling study ({why})")
    for study in config["experiments"].get("retrieval_heads", []):
        kind = models.get(study, {}).get("kind")
        if kind is None or kind_of(kind).wu_score is None:
            raise ConfigError(f"config: experiments.retrieval_heads names '{study}', which is neither a retrieval "
                              "study nor a task (a models entry of kind retrieval or lm_eval)")
        retrieval.heads_source(pipeline.study(study))  # a task's retrieval study is there
    for study in config["experiments"].get("concrete", []):
        word = pipeline.study(study).masking(config["concrete"].get("masking", "zero"))
        if not MODES[word].real_gates:
            key = f"models.{study}.masking" if "masking" in models.get(study, {}) else "concrete.masking"
            raise ConfigError(f"config: {key} is {word}, which takes gates 0 or 1 only, and experiments.concrete "
                              f"names '{study}': Voita's Hard Concrete gates are real numbers in [0, 1] "
                              f"({', '.join(word for word, mode in MODES.items() if mode.real_gates)} masking)")
    for study in config["experiments"].get("masking_modes", []):
        for word in config["masking_modes"]["modes"]:
            if MODES[word].language_models_only and not pipeline.study(study).scoring.language_model:
                raise ConfigError(f"config: masking_modes.modes has {word}, which only decoder-only language models "
                                  f"take, and experiments.masking_modes names '{study}'")
    for study, entry in models.items():
        word = entry.get("masking")
        if word is not None and MODES[word].language_models_only and not kind_of(entry["kind"]).language_model:
            raise ConfigError(f"config: models.{study}.masking is {word}, which only decoder-only language "
                              "models take (kind language_modeling or retrieval)")
    for study, entry in models.items():
        for tower in entry.get("towers", {}):
            if tower not in kind_of(entry["kind"]).towers:
                raise ConfigError(f"config: models.{study}.towers has {tower}, but {entry['kind']} studies are scored "
                                  f"on text, on which a {tower} tower never runs (its gates would change nothing): "
                                  "study a tower through the library, on inputs with its images or audio")
    _check_screen(pipeline, config)
    if pipeline.translation_name in config["experiments"].get("glue_pruning", []):
        raise ConfigError(f"config: experiments.glue_pruning names '{pipeline.translation_name}', the translation study; "
                          "Figure 6 is for glue tasks (Figure 3 draws the translation model's pruning)")
    for study in config.get("speed", {}).get("studies", []):
        if study in models and kind_of(models[study]["kind"]).scores_another_study:
            raise ConfigError(f"config: speed.studies names '{study}', a {models[study]['kind']} study: "
                              "time its language model")
        if study not in pipeline.study_names:
            raise ConfigError(f"config: speed.studies names '{study}', "
                              f"which is neither translation.name nor a glue task ({pipeline.study_names})")


def _check_screen(pipeline, config):
    """A screened Table 1 (ablation.strategy or ablation.per_study: screened): its study names, its counts, and a
    screen each study whose Table 1 is made can run."""
    from headprune.experiments.screening import DEFAULT_SCREEN, GRADIENT_MASKINGS, head_count

    ablation = config.get("ablation", {})
    for name in ablation.get("per_study", {}):
        if name not in pipeline.study_names:
            raise ConfigError(f"config: ablation.per_study names '{name}', which is not a study "
                              f"({pipeline.study_names})")
    screen = {**DEFAULT_SCREEN, **ablation.get("screen", {})}
    experiments = config["experiments"]
    with_table1 = dict.fromkeys(name for key in ("ablation", "cross_domain", "pruning", "criteria", "attention_types")
                                for name in experiments.get(key, []))
    for study_name in with_table1:
        study = pipeline.study(study_name)
        if not ablation_stage.screened(study):
            continue
        heads = len(study.heads)
        try:
            top_k = head_count(screen["top_k"], heads, "ablation.screen.top_k")
            head_count(screen["sample"], heads - top_k, "ablation.screen.sample")
        except ValueError as error:
            raise ConfigError(f"config: {error}") from None
        masking = study.masking(ablation.get("masking", "zero"))
        if screen["method"] != "exact" and masking not in GRADIENT_MASKINGS:
            key = f"models.{study_name}.masking" if "masking" in study.entry else "ablation.masking"
            raise ConfigError(f"config: ablation.screen.method is {screen['method']}, a gradient screen, which needs "
                              f"{', '.join(GRADIENT_MASKINGS[:-1])} or {GRADIENT_MASKINGS[-1]} masking; {key} is {masking} (use the exact screen)")
        ablation_stage.screen_params(study)  # a kind without a screen set refuses the exact screen here, naming the key
