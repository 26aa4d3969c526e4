"""What every kind of score answers (``headprune.evaluation.kinds``), in two classes: ``Kind``, the evaluation side,
which a job calls with a model and a set (runs, analyses, the command line), and ``Plan``, the workflow side, which
``headprune.studies.Study`` and ``headprune.stages`` call with a study (``study.plan``) to learn what its jobs read
and are told. A kind's file holds both; its ``Kind`` names its ``Plan`` (``study_side``).

Both are abstract: what a kind must give is an abstract method (or one of ``REQUIRED_ATTRIBUTES``), so that a
new kind states each answer instead of inheriting a language model's or an encoder's. The defaults left
here hold for every kind alike; what a group of kinds shares is a mixin it opts into (``VoitaRoles``) or the classes
it extends (``language_modeling.Kind``, ``language_modeling.Plan``)."""
from __future__ import annotations

import abc

from headprune.io.config_error import ConfigError


class Kind(abc.ABC):
    """The evaluation side of a kind: how a job loads, runs and scores a model on a set of this kind."""

    name: str
    study_side: type[Plan]  # its workflow side: what a study of this kind reads and is told (``self.plan``)
    attention_types: list[str]  # the heads a study of this kind has, by what its model is scored on
    # Table 4's words for the model timed ({family}: its model type) and for what the pruned model's check compares
    timed_as: str
    timed_outputs: str
    # The kind of model its studies load: a headprune.models.loading.LOADERS name (``kinds.load_model``)
    model_kind: str
    REQUIRED_ATTRIBUTES = ("name", "study_side", "attention_types", "timed_as", "timed_outputs", "model_kind")
    language_model = False  # a decoder-only LM: its heads' roles are its own (headprune.scoring.lm_roles)
    decisive_p = "p_bootstrap"  # the p-value that decides significance (compare_to_full)
    # Drawn against its language model's perplexity, head by head and step by step (perplexity_and_retrieval)
    drawn_beside_perplexity = False
    # Its score's name in Wu et al.'s experiment (retrieval_heads.csv's columns); None: the experiment does not
    # take a study of this kind
    wu_score: str | None = None
    # Its head_roles.csv scores each head's retrieval (Wu et al.): the heads their experiment masks on a study
    # of this kind, and on a task of the same language model
    finds_retrieval_heads = False
    # The towers ("vision", "audio") whose inputs its evaluation sets carry, so that a study of this kind may study
    # their heads (models.<study>.towers): none yet, as every kind scores text, on which a tower never runs
    towers: tuple[str, ...] = ()
    # What the command line's --data holds for this kind (headprune score/sweep/prune), and the file endings taken for
    # it where --kind does not say
    data_help: str = ""
    data_suffixes: tuple[str, ...] = ()

    def __init__(self):
        missing = [attribute for attribute in self.REQUIRED_ATTRIBUTES if not hasattr(self, attribute)]
        if missing:
            raise TypeError(f"kind {type(self).__module__}.{type(self).__qualname__} does not say its "
                            f"{', '.join(missing)}")
        self.plan = self.study_side(self)  # one per kind, as the kind (``kind_of``)

    # --- evaluation: a job's model work and scores ----------------------------------------------

    @abc.abstractmethod
    def load_evalset(self, spec: dict):
        """An EvalSet from the dict ``evalset_spec`` builds."""

    @abc.abstractmethod
    def run_variants(self, model, tokenizer, evalset, gates_list: list, settings) -> list[list]:
        """Per-item outputs of the model under each gate setting (None: all heads on), in one pass over the set."""

    @abc.abstractmethod
    def score(self, evalset, outputs: list, bleu: str = "detokenized") -> float:
        """The study's score of ``outputs`` (BLEU, accuracy or the task's metric, perplexity, ...)."""

    def scores_beside(self, evalset, outputs: list) -> dict:
        """Scores reported next to the main one."""
        return {}

    @abc.abstractmethod
    def significance(self, evalset, full_outputs: list, ablated_outputs: list, *, resamples: int, seed: int) -> dict:
        """{"p_bootstrap", "p_ttest"} of the change from the full model's outputs to the ablated ones."""

    def row_positions(self, model, tokenizer, evalset, settings) -> int:
        """The tokens of the longest row a pass over ``evalset`` holds, which its batches are sized by
        (``headprune.evaluation.runs.rows_that_fit``): ``settings.max_length``, where sentences and pairs are cut."""
        return settings.max_length

    def scoring_batches(self, tokenizer, evalset, batch_size: int, max_length: int) -> list[dict]:
        """Batches with labels to score heads on (``headprune.analyses.sweeps.evalset_batches``)."""
        raise ValueError(f"no scoring batches for a {self.name} set (score heads on its language model's text)")

    @abc.abstractmethod
    def importance_batches(self, tokenizer, data: dict, model=None) -> list[dict]:
        """The batches I_h is estimated on, from ``importance_spec``'s or ``train_spec``'s dict."""

    def evalset_from_file(self, path, tokenizer, options: dict) -> tuple:
        """(EvalSet, its name in the tables, a line saying what it holds) of ``path``, the command line's --data;
        ``options``: its window, metric (None: the kind's default), max_items, num_fewshot. A file that cannot be
        read so raises ValueError, which the command line shows naming --data."""
        raise ValueError(f"the command line scores no {self.name} study: run it from a config")

    @abc.abstractmethod
    def load_model(self, path, device, study: dict, options: dict):
        """(model, tokenizer) of a study of this kind (``headprune.workflow.load_study_model``)."""


class Plan(abc.ABC):
    """The workflow side of a kind: what a study of it is checked for, reads and is told (``study`` is a
    ``headprune.studies.Study``; ``Study.plan`` is its kind's)."""

    # A study of this kind scores the model of another study (its ``model:``, a language_modeling entry):
    # that study's architecture, corpus, importance and resources are its own.
    scores_another_study = False
    # Its part of a ``models`` entry's schema (``headprune.config_schema`` merges every kind's in): the keys only
    # studies of this kind read, with their JSON schema, and the keys an entry of this kind must give beside
    # ``kind``. A key two kinds read alike is described alike by both; the schema file describes the keys of all.
    config_properties: dict = {}
    config_required: tuple[str, ...] = ("source", "layers", "heads")  # a model of its own: where, and its shape

    def __init__(self, kind: Kind):
        self.kind = kind  # its evaluation side (whose name it answers to)

    @property
    def name(self) -> str:
        return self.kind.name

    def check(self, pipeline, study: str, entry: dict):
        """Raise ConfigError, naming the key, where a ``models`` entry of this kind cannot run."""

    def finetuned(self, study) -> bool:
        """Whether the pipeline fine-tunes a ``models`` entry of this kind before studying it."""
        return False

    @abc.abstractmethod
    def evalset_name(self, study, role: str) -> str:
        """The test set, split or corpus split that plays ``role`` (eval, ood, selection, test)."""

    @abc.abstractmethod
    def evalset_spec(self, study, role: str, name: str) -> dict:
        """What a script needs to build the test set ``name`` of ``role`` (``load_evalset``)."""

    @abc.abstractmethod
    def eval_data(self, study, roles: list[str]) -> list[str]:
        """The files a job reads to evaluate on ``roles``."""

    def eval_settings(self, study, bleu: str, rows: int) -> dict:
        """How the model is evaluated (``headprune.evaluation.runs.EvalSettings``'s fields) but its masking, which
        ``headprune.stages.constants.eval_settings`` adds: ``rows`` is ``variant_batch_size``."""
        return {"batch_size": study.entry["batch_size"], "variant_batch_size": rows}

    def importance_study(self, study):
        """The study whose importance.csv ranks this study's heads: its own, or its language model's."""
        return study.lm

    @abc.abstractmethod
    def importance_data(self, study) -> list[str]:
        """The files I_h is estimated on."""

    @abc.abstractmethod
    def importance_spec(self, study) -> dict:
        """The data I_h is estimated on (``importance_batches`` reads it)."""

    def screen_evalset_spec(self, study, items: int) -> dict:
        """The set the exact screen of a screened Table 1 ablates every head on (``load_evalset`` reads it): ``items``
        items of the importance data, never the test set. A kind without one refuses, naming the key."""
        raise ConfigError(f"config: ablation.screen.method 'exact' needs a screen set drawn from the importance data, "
                          f"which {self.name} studies ({study.name}) do not have; use first_order, fisher or importance")

    def train_data(self, study) -> list[str]:
        """The training data files (gates, roles, recovery)."""
        return study.importance_data

    def recovery_evalset_spec(self, study, items: int) -> dict:
        """The items recovery after pruning trains on (``load_evalset`` reads them): ``items`` of the training data
        in ``train_data``, never the test set; where that is the importance data, the screen's draw of it."""
        return self.screen_evalset_spec(study, items)

    @abc.abstractmethod
    def train_spec(self, study, batch_size: int) -> dict:
        """The training data as ``importance_batches`` reads it (config.concrete's items)."""

    def speed_data(self, study) -> list[str]:
        """What the speed job reads: the eval set only."""
        return study.eval_data(["eval"])

    @abc.abstractmethod
    def speed_settings(self, study, speed: dict) -> dict:
        """What this kind adds to the speed job's settings."""

    @abc.abstractmethod
    def parse_text(self, study) -> list[str]:
        """The eval set's source text, which the roles' parser reads."""

    @abc.abstractmethod
    def roles_params(self, study, roles: dict) -> dict:
        """What the head_roles job is told."""

    @abc.abstractmethod
    def head_roles_inputs(self, study, inputs: dict) -> dict:
        """What the head_roles job reads, beside the model and importance table in ``inputs``."""


class VoitaRoles(abc.ABC):
    """The head roles of an encoder's heads (Voita et al.: positional, syntactic, rare words), for the plans whose
    eval set has source sentences to parse: the head_roles job reads their parses and the training data (a mixin of
    a ``Plan``; the job reads the texts through ``kind_of(train["kind"]).plan.training_texts``)."""

    @abc.abstractmethod
    def training_texts(self, train: dict) -> list[str]:
        """The texts of ``train_spec``'s training data whose word counts the rare-word role reads."""

    def roles_params(self, study, roles: dict) -> dict:
        return {"train": study.train_spec(roles["batch_size"]),
                **{key: roles[key] for key in ("frequent_words", "positional_threshold", "syntactic_margin",
                                               "batch_size")}}

    def head_roles_inputs(self, study, inputs: dict) -> dict:
        return {**inputs, "parses": f"{study.pipeline.results_dir}/{study.name}/roles/source.conllu",
                "train": study.train_data}


def bootstrap_only(p_value: float) -> dict:
    """A significance result with the paired bootstrap's p alone (the paper's t-test is for classification)."""
    return {"p_bootstrap": p_value, "p_ttest": float("nan")}
