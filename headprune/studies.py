"""The config resolved into studies: what each study is, where its model and data live, how it is evaluated.

A study is one model scored one way: the translation model (BLEU), a glue task's fine-tuned BERT
(accuracy, F1 or MCC), or a ``models`` entry (any family, by config; a language model is scored by
perplexity, and a ``retrieval`` entry scores a language-modelling study's model on finding a needle in a
haystack). What differs between the ways is the study's kind (``headprune.evaluation.kinds``: one file
each, its test sets by role, its evaluation settings, its checks, in the kind's ``Plan``, which is
``study.plan``); a study asks its plan and never branches on its kind. ``Pipeline(config)`` checks what the JSON schema cannot (``headprune.config_checks``:
cross-references between sections; the message names the key) and answers what every stage asks of a study:
its kind and heads, its model folder, its test sets by role, its evaluation settings and resources. What each
stage's jobs read, are asked and write, and the tables and figures it makes by default, are the stage's own
(``headprune.stages``, one module per rules file; ``Pipeline.targets`` gathers theirs), so a new kind of scoring
is one file in ``headprune/evaluation/kinds`` and every experiment's rule reaches it.

Torch-free: Snakemake imports it to plan the run.
"""
from __future__ import annotations

import functools
from pathlib import Path

from headprune import stages
from headprune.config_checks import check_config
from headprune.data.glue import glue_task_spec
from headprune.evaluation.kinds import KINDS, kind_of  # noqa: F401 (KINDS: the config's kinds)
from headprune.io.config_error import ConfigError
from headprune.evaluation.kinds.language_modeling import LM_SPLITS
from headprune.io.download import local_source
from headprune.models.attention_types import TOWER_TYPES

# The test sets a study is evaluated on, by role: "eval" (Table 1, pruning), "ood" (cross-domain,
# Figure 2), "selection" and "test" (one head per layer, Tables 2-3).
ROLES = ("eval", "ood", "selection", "test")
# The rules whose jobs load a study's model -> the copies of its weights they hold (headprune.models.memory.job_mb):
# they ask SLURM for what they will use when the config names no mem_mb for them. Recovery trains every weight
# (gradients and Adam's two moments beside them) and distillation holds a teacher. Fine-tuning is not here: its
# study's model is what it writes (config.resources.finetune names its memory).
WEIGHT_COPIES = {"evaluate": 1, "ablate": 1, "importance": 1, "prune": 1, "speed": 1, "head_roles": 1,
                 "concrete_gates": 1, "recover": 5}
# A retrieval study's settings the config leaves out (rules/schemas/config.schema.yaml describes them).
RETRIEVAL_DEFAULTS = {"needles_per_setting": 1, "needle": "The special magic number is {value}.",
                      "question": "What is the special magic number mentioned in the text?", "answer_prefix": "",
                      "value_digits": 5, "chat_template": True, "max_new_tokens": 32, "seed": 0}


class Study:
    """One model scored one way, with everything its jobs need to know."""

    def __init__(self, pipeline: Pipeline, name: str):
        self.pipeline, self.name = pipeline, name
        config = pipeline.config
        self.entry = pipeline.models.get(name, {})  # its models entry, if it is one
        if name == pipeline.translation_name:
            kind, self.arch, self.section = "translation", config["translation"], "translation"
        elif name in pipeline.glue:
            kind, self.arch, self.section = "classification", config["bert"], "bert"
        else:
            kind, self.arch, self.section = self.entry["kind"], self.entry, f"models.{name}"
        self.kind = kind_of(kind)  # how its model is scored (its name: kind.name), what a job of it runs
        self.plan = self.kind.plan  # what it reads and its jobs are told: its kind's workflow side
        # a retrieval study scores the model of a language-modelling study: its architecture, its corpus
        self.lm = pipeline.study(self.entry["model"]) if self.plan.scores_another_study else self
        if self.lm is not self:
            self.arch, self.section = self.lm.arch, self.lm.section

    def __repr__(self):
        return f"Study({self.name!r}, kind={self.kind.name!r})"

    @property
    def config(self):
        return self.pipeline.config

    def takes_part_in(self, experiment):
        return self.name in self.config["experiments"].get(experiment, [])

    @property
    def experiments(self):
        """The experiments (config experiments.<name>) that name this study, in the config's order."""
        return [experiment for experiment, names in self.config["experiments"].items() if self.name in names]

    # --- the model --------------------------------------------------------------------------

    @property
    def task(self):
        """The glue entry whose data a classification study uses."""
        return self.name if self.name in self.pipeline.glue else self.entry["task"]

    @property
    def towers(self) -> dict:
        """The towers of its model studied beside the language model (models.<study>.towers of the study whose model
        it scores): {"vision": {"layers": ..., "heads": ...}}."""
        return self.lm.entry.get("towers", {})

    @property
    def attention_types(self):
        return list(self.kind.attention_types) + [TOWER_TYPES[tower] for tower in self.towers]

    def shape(self, attn_type) -> tuple[int, int]:
        """(layers, heads) of an attention type: a tower's own, else the model's."""
        arch = next((self.towers[t] for t in self.towers if TOWER_TYPES[t] == attn_type), self.arch)
        return arch["layers"], arch["heads"]

    @property
    def heads(self):
        """Every head of the model as 'attn_type-layer-head', known from the config alone."""
        return [f"{t}-{layer}-{head}" for t in self.attention_types
                for layer in range(self.shape(t)[0]) for head in range(self.shape(t)[1])]

    @property
    def layers(self):
        """Every attention layer of the model as 'attn_type-layer'."""
        return [f"{t}-{layer}" for t in self.attention_types for layer in range(self.shape(t)[0])]

    @property
    def fetched_model_folder(self):
        return self.pipeline.fetched_model_folder(self.name)

    @property
    def finetuned_by_pipeline(self):
        """Every glue task (fine-tuned from bert.pretrained), and a classification models entry with
        finetune: true (from its source)."""
        return self.name in self.pipeline.glue or self.plan.finetuned(self)

    @property
    def model_path(self):
        if self.lm is not self:
            return self.lm.model_path
        if self.name == self.pipeline.translation_name:
            return self.pipeline.translation_model_folder
        if self.finetuned_by_pipeline:
            return f"{self.pipeline.results_dir}/models/{self.name}"
        return self.fetched_model_folder

    @property
    def params(self):
        """Everything about the study that should rerun its jobs when it changes (what load_study_model reads)."""
        config = self.config
        return {"name": self.name, "kind": self.kind.name, "model": self.model_path, "section": self.section,
                "src_lang": config["translation"]["src_lang"], "tgt_lang": config["translation"]["tgt_lang"],
                "layers": self.arch["layers"], "heads": self.arch["heads"], "device": config["device"],
                **{key: self.lm.entry[key] for key in ("kv_heads", "dtype", "src_code", "tgt_code", "source_prefix", "towers")
                   if key in self.lm.entry}}

    def resource(self, rule_name, key):
        """models.<study>.resources.<rule> (or .default) over config.resources.<rule> (or .default), so one
        large model's jobs can ask for more GPUs, memory and time than the rest; a retrieval study takes its
        language model's, under its own. A job that loads the model and has no mem_mb of its rule's asks for what
        it will use (``memory_estimate``) rather than config.resources.default's."""
        resources, own = self.config["resources"], self.entry.get("resources", {})
        lm = self.lm.entry.get("resources", {}) if self.lm is not self else {}  # a retrieval study runs its LM's model
        told = {**resources.get(rule_name, {}), **lm.get("default", {}), **lm.get(rule_name, {}),
                **own.get("default", {}), **own.get(rule_name, {})}
        if key == "mem_mb" and key not in told and rule_name in WEIGHT_COPIES:
            estimate = self.memory_estimate(WEIGHT_COPIES[rule_name])
            if estimate:
                return estimate
        return {**resources["default"], **told}.get(key, 0 if key == "gpu" else None)

    def memory_estimate(self, copies: int) -> int | None:
        """The megabytes a job of this study's model asks SLURM for where the config names none for its rule
        (``headprune.models.memory.job_mb``); None before the model is on disk (a dry run: the default's)."""
        from headprune.models.memory import job_mb, parameters_on_disk

        parameters = parameters_on_disk(self.model_path)
        return job_mb(parameters, self.lm.entry.get("dtype", "float32"), copies=copies) if parameters else None

    # --- data -------------------------------------------------------------------------------

    @property
    def glue_dir(self):
        return self.pipeline.glue_dir(self.task)

    @property
    def corpus_dir(self):
        return self.pipeline.corpus_dir(self.entry["corpus"])

    @property
    def windows_dir(self):
        """tokenize_corpus writes here each corpus split a language model uses, tokenized once and cut into
        its windows (windows_file); the jobs take the folder as their input."""
        return self.pipeline.windows_dir(self.lm.name)

    def windows_file(self, split):
        return f"{self.windows_dir}/{split}.npy"

    def lm_split(self, key):
        return self.lm.entry.get(key, LM_SPLITS[key])

    @property
    def retrieval(self):
        """A retrieval study's settings, defaults filled in."""
        return {**RETRIEVAL_DEFAULTS, **{key: self.entry[key] for key in (*RETRIEVAL_DEFAULTS, "context_lengths", "depths")
                                          if key in self.entry}}

    @property
    def items_dir(self):
        """make_retrieval_items writes here the needle-in-a-haystack items of each split a role uses
        ({split}.jsonl, token ids of the model), once, so that every job scores the same items."""
        return f"{self.pipeline.data_dir}/retrieval/{self.name}"

    @property
    def lm_needed_splits(self):
        """The splits of a language model's corpus that some role of it uses (each tokenized once)."""
        return sorted({self.lm_split(key) for key in LM_SPLITS})

    def evalset_name(self, role):
        """The test set (translation), split (GLUE) or corpus split (language modelling) that plays ``role``."""
        return self.plan.evalset_name(self, role)

    def named_set(self, role, section, key, name):
        """``name``, the set config ``section.key`` gives the ``role`` evaluation, which it must give."""
        if name is None:
            raise ConfigError(f"config: {section}.{key} is needed for the '{role}' evaluation of {self.name}")
        return name

    def evalset_spec(self, role="eval"):
        """What a script needs to build the test set of ``role`` (headprune.workflow.load_evalset)."""
        return self.plan.evalset_spec(self, role, self.evalset_name(role))

    def eval_data(self, roles):
        """The files a job reads to evaluate on ``roles``."""
        return self.plan.eval_data(self, roles)

    @property
    def variant_rows(self) -> int:
        """How many rows (examples x gate settings) one forward pass of an ablation or pruning job takes."""
        return self.config["ablation"].get("variant_batch_size", {}).get(self.kind.name)  # None: what fits (runs.py)

    @property
    def importance_table(self):
        """importance.csv: a retrieval study prunes by its language model's (I_h estimated on perplexity), a task
        by its own (on its gold answers) unless its I_h is the language model's (importance_split: corpus)."""
        return f"{self.pipeline.results_dir}/{self.plan.importance_study(self).name}/importance.csv"

    @property
    def importance_data(self):
        """The files I_h is estimated on."""
        return self.plan.importance_data(self)

    @property
    def importance_spec(self):
        """The data I_h is estimated on: newstest2009-12 for translation, the training split for BERT, the
        first importance_windows windows of a language model's importance split."""
        return self.plan.importance_spec(self)

    @property
    def train_data(self):
        """The training data files (gates, roles): translation.train_sets, the GLUE task's folder, or the
        windows of a language model's importance split."""
        return self.plan.train_data(self)

    def train_spec(self, batch_size):
        """The training data as headprune.workflow.importance_batches reads it (config.concrete's items)."""
        return self.plan.train_spec(self, batch_size)


class Pipeline:
    """A validated config (rules/schemas/config.schema.yaml, defaults filled in) resolved into its studies,
    their jobs and the run's targets. Raises ConfigError, naming the key, for a config that cannot run."""

    def __init__(self, config: dict):
        self.config = config
        self.data_dir, self.results_dir = config["data_dir"], config["results_dir"]
        self.figures_dir = f"{self.results_dir}/figures"
        self.translation_name = config["translation"]["name"]
        self.glue = config["glue"]
        self.models = config.get("models", {})  # any model by config: one study each
        self.corpora = config.get("corpora", {})
        self.study_names = [self.translation_name, *self.glue, *self.models]
        check_config(self)

    @classmethod
    def from_file(cls, path, schema=None):
        """Read a config file, validate it against the schema (defaults filled in, as Snakemake does) and
        resolve it."""
        import yaml

        from headprune.config_schema import SCHEMA_FILE, validate

        config = yaml.safe_load(Path(path).read_text())
        validate(config, schema or SCHEMA_FILE)
        return cls(config)

    @functools.cache
    def study(self, name) -> Study:
        if name not in self.study_names:
            raise KeyError(f"'{name}' is not a study of this config ({self.study_names})")
        return Study(self, name)

    @property
    def studies(self) -> list[Study]:
        return [self.study(name) for name in self.study_names]

    def experiment_studies(self, experiment) -> list[Study]:
        return [self.study(name) for name in self.config["experiments"].get(experiment, [])]

    @property
    def speed_studies(self) -> list[Study]:
        """Studies whose inference speed is timed with 50% of heads removed (config speed.studies)."""
        return [self.study(name) for name in self.config.get("speed", {}).get("studies", [])]

    def resource(self, rule_name, key):
        """config.resources.<rule>.<key>, falling back to config.resources.default."""
        merged = {**self.config["resources"]["default"], **self.config["resources"].get(rule_name, {})}
        return merged.get(key, 0 if key == "gpu" else None)

    def rule_threads(self, rule_name, default):
        """config.resources.<rule>.threads, else the rule's own default (Snakemake caps it at --cores;
        SLURM gets it as --cpus-per-task)."""
        return self.config["resources"].get(rule_name, {}).get("threads", default)

    # --- where things live ------------------------------------------------------------------

    def testset_files(self, name):
        t = self.config["translation"]
        return [f"{self.data_dir}/testsets/{name}.{t['src_lang']}", f"{self.data_dir}/testsets/{name}.{t['tgt_lang']}"]

    @property
    def translation_model_folder(self):
        """The fairseq checkpoint converted once into a model folder that every job loads fast."""
        return f"{self.data_dir}/checkpoints/{self.translation_name}.model"

    @property
    def translation_train_sets(self):
        t = self.config["translation"]
        return t.get("train_sets", t["importance_sets"])

    def fetched_model_folder(self, study):
        """Where fetch_model puts a models entry's source (hub snapshot or extracted tarball)."""
        return f"{self.data_dir}/models/{study}"

    def glue_dir(self, task):
        """prepare_glue writes every split of a task into this folder: {split}.tsv."""
        return f"{self.data_dir}/glue/{task}"

    def glue_task_spec(self, task):
        return glue_task_spec(self.glue[task], task)

    def corpus_dir(self, corpus):
        """fetch_corpus writes each split of a corpus here as {split}.txt."""
        return f"{self.data_dir}/corpora/{corpus}"

    def windows_dir(self, study):
        return f"{self.data_dir}/windows/{study}"

    @property
    def parser_dir(self):
        return f"{self.data_dir}/parser/{self.config['roles']['stanza']['lang']}"

    # --- downloads that are files of this workflow (the demo's) ------------------------------

    def testset_local_sources(self, testset):
        spec = self.config["translation"]["testsets"][testset]
        return [p for key in ("source", "reference") if key in spec for p in local_source(spec[key])]

    def glue_local_sources(self, task):
        spec = self.glue_task_spec(task)
        sources = local_source(spec) if "url" in spec else []
        return sources + [p for f in spec.get("files", {}).values() for p in local_source(f)]

    def corpus_local_sources(self, corpus):
        spec = self.corpora[corpus]
        return [p for f in (spec["files"].values() if "files" in spec else [spec]) for p in local_source(f)]

    def model_local_sources(self, study):
        source = self.models[study]["source"]
        return local_source(source) if "url" in source else []

    def pretrained_local_sources(self):
        """The fairseq translation checkpoint's and bert.pretrained's downloads, where they are local files."""
        pretrained = self.config["bert"]["pretrained"]
        return {"translation": local_source(self.config["translation"]["checkpoint"]),
                "bert": local_source(pretrained) if "url" in pretrained else []}

    # --- the run's outputs ------------------------------------------------------------------

    def targets(self):
        """Every table and figure the configured experiments produce (the default target): each stage's."""
        return stages.targets(self)
