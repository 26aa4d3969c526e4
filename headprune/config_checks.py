"""What the config's JSON schema cannot check: cross-references between its sections (a study an experiment
names, a test set a role names, a GLUE task's splits, a local download that is not there), each failing with a
ConfigError that names the key. ``headprune.studies.Pipeline`` runs them on itself before any job is planned. A
stage's own section is the stage's to check (its ``check``, ``headprune.stages``).

Torch-free: Snakemake imports it to plan the run.
"""
from __future__ import annotations

from pathlib import Path

from headprune import stages
from headprune.data.glue import GLUE_TASKS, glue_task_spec
from headprune.data.glue import _check_task as check_glue_task
from headprune.evaluation.kinds import kind_of
from headprune.io.config_error import ConfigError
from headprune.models.masking import MODES


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
    """Every check, section by section, then each stage's of its own section (``headprune.stages``)."""
    check_translation(pipeline)
    check_glue(pipeline)
    check_local_files(pipeline)
    check_experiments(pipeline)
    check_models(pipeline)
    stages.check(pipeline)


def check_translation(pipeline):
    """The test sets translation's roles and training name are among translation.testsets."""
    translation = pipeline.config["translation"]
    for key in ("importance_sets", "eval_set", "ood_set", "selection_set", "test_set", "train_sets"):
        if translation.get(key) is None:
            continue
        names = translation[key] if isinstance(translation[key], list) else [translation[key]]
        for name in names:
            if name not in translation["testsets"]:
                raise ConfigError(f"config: translation.{key} names '{name}', which is not in translation.testsets")


def check_glue(pipeline):
    """Each glue entry is a task: a built-in one or a whole spec, with the splits its roles name."""
    if pipeline.translation_name in pipeline.glue:
        raise ConfigError(f"config: glue task '{pipeline.translation_name}' has the same name as translation.name")
    for task, spec in pipeline.glue.items():
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


def check_experiments(pipeline):
    """Every experiment names studies of this config."""
    for experiment, studies in pipeline.config["experiments"].items():
        for study in studies:
            if study not in pipeline.study_names:
                raise ConfigError(f"config: experiments.{experiment} names '{study}', "
                                  f"which is neither translation.name nor a glue task ({pipeline.study_names})")


def check_models(pipeline):
    """Each models entry: a name of its own, its kind's checks, a masking and towers its kind takes."""
    models = pipeline.models
    for study in models:
        if study == pipeline.translation_name or study in pipeline.glue:
            raise ConfigError(f"config: models.{study} has the name of another study (translation.name or a glue task)")
    # a study scoring another study's model is checked once that study is
    for borrowing in (False, True):
        for study, entry in models.items():
            plan = kind_of(entry["kind"]).plan
            if plan.scores_another_study == borrowing:
                plan.check(pipeline, study, entry)
    for study, entry in models.items():
        word = entry.get("masking")
        if word is not None and MODES[word].language_models_only and not kind_of(entry["kind"]).language_model:
            raise ConfigError(f"config: models.{study}.masking is {word}, which only decoder-only language "
                              "models take (kind language_modeling or retrieval)")
        for tower in entry.get("towers", {}):
            if tower not in kind_of(entry["kind"]).towers:
                raise ConfigError(f"config: models.{study}.towers has {tower}, but {entry['kind']} studies are scored "
                                  f"on text, on which a {tower} tower never runs (its gates would change nothing): "
                                  "study a tower through the library, on inputs with its images or audio")
