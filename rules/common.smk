"""Config validation and the input functions every rule file uses.

What a study is (its kind, model, test sets by role, jobs and their parameters) is resolved once, in
Python, by headprune.studies.Pipeline; the input functions here only ask it.
"""
import functools

from headprune.config_schema import validate
from headprune.models.masking import MODES
from headprune.studies import ROLES, Pipeline, penalty_name


# The paper's config, unless one is given (--configfile demo/config.yaml): snakemake would
# otherwise merge the two, and the demo would inherit the paper's GLUE tasks.
if not config:

    configfile: "config.yaml"



validate(config)  # rules/schemas/config.schema.yaml and what the masking modes declare
PIPELINE = Pipeline(config)  # a config that cannot run stops here, before any job, naming its key

DATA = PIPELINE.data_dir
RESULTS = PIPELINE.results_dir
FIGURES = PIPELINE.figures_dir
ENV = "../envs/headprune.yaml"
TRANSLATION = PIPELINE.translation_name
STUDIES = PIPELINE.study_names
DYNAMICS = PIPELINE.dynamics  # Figure 5's IWSLT model, or None
MASKING_MODES = "|".join(MODES)  # the masking modes' words (headprune.models.masking, one class each)
DATA_MODES = "|".join(word for word, mode in MODES.items() if mode.data)  # those with a head_constants file


def study(wildcards):
    return PIPELINE.study(wildcards.study)


def asks(method, *args, wildcard=None):
    """An input or params function that asks the study of the job: study.<method>(*args[, the wildcard's value])."""
    return functools.partial(_ask, method, args, wildcard)


def _ask(method, args, wildcard, wildcards):
    return getattr(study(wildcards), method)(*args, *([wildcards[wildcard]] if wildcard else []))


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


# --- where things live -------------------------------------------------------------------


def windows_dir(study_name):
    return PIPELINE.windows_dir(study_name)


def fetched_model_folder(study_name):
    return PIPELINE.fetched_model_folder(study_name)


def translation_model_folder():
    return PIPELINE.translation_model_folder


def demo_testset_files():
    return PIPELINE.demo_testset_files


def study_model(wildcards):
    return study(wildcards).model_path


def study_of(wildcards):
    return study(wildcards).params


def study_eval_data(wildcards):
    """The test-set files a job reads, for every role it evaluates."""
    keys = wildcards.keys()
    s = study(wildcards)
    roles = (("selection", "test") if "layer" in keys else s.ablation_roles if "head" in keys
             else ("eval",) if "order" in keys else s.full_model_roles)
    return s.eval_data(roles)


def study_importance_data(wildcards):
    return study(wildcards).importance_data


def study_corpus_dir(wildcards):
    return study(wildcards).corpus_dir


def concrete_train_data(wildcards):
    return study(wildcards).train_data


def speed_eval_data(wildcards):
    return study(wildcards).speed_eval_data


def finetune_pretrained(wildcards):
    return study(wildcards).finetune_pretrained


def finetune_data(wildcards):
    return study(wildcards).glue_dir


def head_roles_inputs(wildcards):
    return study(wildcards).head_roles_inputs()


def retrieval_corpus_dir(wildcards):
    return study(wildcards).lm.corpus_dir


def side_by_side_inputs(wildcards):
    """Both scores of a retrieval study and of its language model: single-head ablation and pruning."""
    s = study(wildcards)
    return {f"{name}_{table}": f"{RESULTS}/{study_name}/{path}" for name, study_name in (("retrieval", s.name),
                                                                                         ("perplexity", s.lm.name))
            for table, path in (("ablation", "eval/ablation.csv"), ("pruning", "pruning.csv"))}


def head_maps_inputs(wildcards):
    """The single-head ablation of each study that scores this language model (itself first)."""
    return {name: f"{RESULTS}/{name}/eval/ablation.csv" for name in PIPELINE.head_map_studies()[wildcards.study]}


def parse_inputs(wildcards):
    """The eval set's source text, and the parser's model when stanza parses it."""
    parser = [PIPELINE.parser_dir] if config["roles"]["parser"] == "stanza" else []
    return {"text": study(wildcards).parse_text, "parser": parser}


# --- downloads that are files of this workflow (the demo's stand-ins for the internet) -----


def testset_local_sources(wildcards):
    return PIPELINE.testset_local_sources(wildcards.testset)


def glue_local_sources(wildcards):
    return PIPELINE.glue_local_sources(wildcards.task)


def corpus_local_sources(wildcards):
    return PIPELINE.corpus_local_sources(wildcards.corpus)


def pretrained_translation_local_sources(wildcards):
    return PIPELINE.pretrained_local_sources()["translation"]


def pretrained_local_sources(wildcards):
    return PIPELINE.pretrained_local_sources()["bert"]


def model_local_sources(wildcards):
    return PIPELINE.model_local_sources(wildcards.study)


# --- outputs a job waits for --------------------------------------------------------------


def ablation_outputs(wildcards):
    return [f"{RESULTS}/{wildcards.study}/ablation/{job}.json" for job in study(wildcards).ablation_jobs]


def screen_table(wildcards):
    """A screened study's screen.csv (ablation.strategy: screened), else nothing."""
    return study(wildcards).screen_table


def one_head_outputs(wildcards):
    return {"layers": [f"{RESULTS}/{wildcards.study}/one_head/{job}.json" for job in study(wildcards).one_head_jobs],
            "full": f"{RESULTS}/{wildcards.study}/full.json"}


def importance_table(wildcards):
    return study(wildcards).importance_table


def pruning_inputs(wildcards):
    """What a prune job reads beyond the model and test set: importance.csv, the single-head ablation
    for the oracle order, the importance data for the iterative criterion, the head roles for the
    retrieval criterion."""
    orders = wildcards.order.split("+")
    inputs = {"importance": importance_table(wildcards)}
    if "retrieval" in orders:
        inputs["roles"] = f"{RESULTS}/{wildcards.study}/head_roles.csv"
    if "oracle" in orders:
        inputs["ablation"] = f"{RESULTS}/{wildcards.study}/eval/ablation.csv"
    if "iterative" in orders:
        inputs["importance_data"] = study_importance_data(wildcards)
    return inputs


def pruning_order_tables(wildcards):
    s = study(wildcards)
    return [s.pruning_table(scope, orders) for scope, orders in s.pruning_jobs]


def criteria_inputs(wildcards):
    """The prune jobs' scores and per-step outputs that hold a study's criteria (scope 'all')."""
    jobs = study(wildcards).criteria_jobs
    return {"scores": [f"{RESULTS}/{wildcards.study}/pruning/all/{orders}.csv" for orders in jobs],
            "outputs": [f"{RESULTS}/{wildcards.study}/pruning/all/{orders}.outputs.json" for orders in jobs]}


def cross_domain_inputs(wildcards):
    return {"in_domain": f"{RESULTS}/{wildcards.study}/eval/ablation.csv",
            "out_of_domain": f"{RESULTS}/{wildcards.study}/ood/ablation.csv"}


def glue_pruning_full(wildcards):
    """Figure 6's studies' full-model results (their model family titles the panels)."""
    return [f"{RESULTS}/{s.name}/full.json" for s in PIPELINE.experiment_studies("glue_pruning")]


def glue_pruning_tables(wildcards):
    return PIPELINE.glue_pruning_tables()


def concrete_rows(wildcards):
    return [f"{RESULTS}/{wildcards.study}/concrete/{penalty_name(p)}.csv" for p in config["concrete"]["penalties"]]


def all_figures(wildcards):
    """Every table and figure the configured experiments produce (the default target)."""
    return PIPELINE.targets()


# --- rule parameters (what should rerun a job when it changes) ----------------------------


def testset_params(wildcards):
    return config["translation"]["testsets"][wildcards.testset]


def glue_params(wildcards):
    return PIPELINE.glue_task_spec(wildcards.task)


def corpus_params(wildcards):
    return config["corpora"][wildcards.corpus]


def fetch_model_params(wildcards):
    return config["models"][wildcards.study]["source"]


def tokenize_params(wildcards):
    return study(wildcards).tokenize_params()


def finetune_params(wildcards):
    return study(wildcards).finetune_params()


def importance_params(wildcards):
    return study(wildcards).importance_spec


def full_eval_params(wildcards):
    return study(wildcards).full_eval_params()


def ablation_eval_params(wildcards):
    return study(wildcards).ablation_eval_params(wildcards.head)


def significance_params(wildcards):
    return study(wildcards).significance_params(wildcards.role)


def one_head_params(wildcards):
    return study(wildcards).one_head_params(wildcards.layer)


def one_head_significance_params(wildcards):
    return study(wildcards).significance_params("test")


def pruning_params(wildcards):
    return study(wildcards).pruning_params(wildcards.order)


def criteria_params(wildcards):
    return study(wildcards).criteria_params()


def speed_params(wildcards):
    return study(wildcards).speed_params()


def concrete_params(wildcards):
    return study(wildcards).concrete_params(wildcards.penalty)


def parse_params(wildcards):
    return study(wildcards).parse_params()


def roles_params(wildcards):
    return study(wildcards).roles_params()


def retrieval_items_params(wildcards):
    return study(wildcards).retrieval_items_params()


def retrieval_heads_params(wildcards):
    return study(wildcards).retrieval_heads_params()


def table1_attention_type(wildcards):
    """Table 1 shows the encoder self-attention (the paper's); a decoder-only LM's is its only type."""
    return study(wildcards).attention_types[0]


def figure_style(wildcards):
    return config["figures"]["style"]


# --- Figure 5: training dynamics (rules/dynamics.smk) --------------------------------------


def dynamics_local_sources(wildcards):
    return DYNAMICS.local_sources


def dynamics_model(wildcards):
    return DYNAMICS.checkpoint(wildcards.epoch)


def dynamics_study(wildcards):
    return DYNAMICS.study_params(wildcards.epoch)


def dynamics_importance_data(wildcards):
    return DYNAMICS.importance_data


def dynamics_eval_data(wildcards):
    return DYNAMICS.eval_data


def dynamics_importance_params(wildcards):
    return DYNAMICS.importance_params()


def dynamics_pruning_params(wildcards):
    return DYNAMICS.pruning_params()
