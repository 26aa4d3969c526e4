"""Config validation and the generic helpers every rule file uses.

What a study is (its kind, model, test sets by role, evaluation settings) is resolved once, in Python, by
headprune.studies.Pipeline; what each stage's jobs read, are asked and write is that stage's module,
headprune/stages/<stage>.py beside rules/<stage>.smk. The rules files call them through the helpers
here, stage_answer(stages.<stage>.<function>, ...) and study_attribute("<attribute>") for a job of one study and
of_pipeline(<function>, ...) for a job of the whole run.
"""
import functools

from headprune import stages
from headprune.config_schema import validate
from headprune.analyses.criteria import CRITERIA
from headprune.models.masking import MODES
from headprune.studies import ROLES, Pipeline


# The paper's config, unless one is given (--configfile demo/config.yaml): snakemake would
# otherwise merge the two, and the demo would inherit the paper's GLUE tasks.
if not config:

    configfile: "config.yaml"



validate(config)  # rules/schemas/config.schema.yaml, each stage's beside it, and what the masking modes declare
PIPELINE = Pipeline(config)  # a config that cannot run stops here, before any job, naming its key

DATA = PIPELINE.data_dir
RESULTS = PIPELINE.results_dir
FIGURES = PIPELINE.figures_dir
ENV = "../envs/headprune.yaml"
TRANSLATION = PIPELINE.translation_name
STUDIES = PIPELINE.study_names
MASKING_MODES = "|".join(MODES)  # the masking modes' words (headprune.models.masking, one class each)
DATA_MODES = "|".join(word for word, mode in MODES.items() if mode.data)  # those with a head_constants file
CRITERION = "|".join(CRITERIA)  # the criteria's words (headprune.analyses.criteria)


def study(wildcards):
    return PIPELINE.study(wildcards.study)


def stage_answer(function, *args, wildcard=None):
    """An input or params function of a job of one study: function(the study, *args[, the wildcard's value]),
    a function of the stage that owns the job (headprune.stages)."""
    return functools.partial(_stage_answer, function, args, wildcard)


def _stage_answer(function, args, wildcard, wildcards):
    return function(study(wildcards), *args, *([wildcards[wildcard]] if wildcard else []))


def study_attribute(attribute):
    """An input or params function: an attribute of the job's study (its model_path, importance_data, ...)."""
    return functools.partial(_study_attribute, attribute)


def _study_attribute(attribute, wildcards):
    return getattr(study(wildcards), attribute)


def of_pipeline(function, *args, wildcard=None):
    """An input or params function of a job of the whole run: function(*args[, the wildcard's value])."""
    return functools.partial(_of_pipeline, function, args, wildcard)


def _of_pipeline(function, args, wildcard, wildcards):
    return function(*args, *([wildcards[wildcard]] if wildcard else []))


study_model = study_attribute("model_path")  # the model a job loads
study_params = study_attribute("params")  # everything about the study that reruns its jobs when it changes


# --- resources ---------------------------------------------------------------------------


def resource(rule_name, key):
    """config.resources.<rule>.<key>, falling back to config.resources.default."""
    return PIPELINE.resource(rule_name, key)


def study_resource(rule_name, key):
    """As resource(), for the jobs of one study, with models.<study>.resources over config.resources."""
    return functools.partial(resource_of_study, rule_name, key)


def resource_of_study(rule_name, key, wildcards):
    return study(wildcards).resource(rule_name, key)


def rule_threads(rule_name, default):
    return PIPELINE.rule_threads(rule_name, default)
