"""Language modelling: a decoder-only LM scored by perplexity over fixed token windows of a corpus split
(lower is better); significance by a paired bootstrap over windows."""
from __future__ import annotations

from pathlib import Path

from headprune.evaluation.kinds import base
from headprune.io.config_error import ConfigError

# The splits of a language-modelling study's corpus, by role, and their defaults.
LM_SPLITS = {"eval_split": "test", "selection_split": "validation", "test_split": "test", "importance_split": "train"}


def corpus_splits(corpus: dict) -> list[str]:
    return list(corpus["files"]) if "files" in corpus else corpus.get("splits", ["train", "validation", "test"])


class Plan(base.Plan):
    """A language-modelling study's corpus splits by role, cut into windows of its tokens."""

    config_properties = {
        "corpus": {"type": "string", "description": "the corpora entry it is scored on"},
        "window": {"type": "integer", "minimum": 2, "default": 1024, "description": "tokens per perplexity window"},
        "eval_split": {"type": "string", "default": "test"},
        "selection_split": {"type": "string", "default": "validation", "description": "one head per layer: choose the head"},
        "test_split": {"type": "string", "default": "test", "description": "one head per layer: report the change"},
        "max_windows": {"type": ["integer", "null"], "minimum": 1, "default": None,
                        "description": "windows of each eval split (null: all)"},
        "importance_windows": {"type": ["integer", "null"], "minimum": 1, "default": 256,
                               "description": "windows of importance_split I_h (and gates) are estimated on (the "
                                              "first ones)"}}

    def check(self, pipeline, study, entry):
        if "corpus" not in entry:
            raise ConfigError(f"config: models.{study} is a language_modeling study: it needs 'corpus'")
        corpus = pipeline.corpora.get(entry["corpus"])
        if corpus is None:
            raise ConfigError(f"config: models.{study}.corpus names '{entry['corpus']}', which is not in corpora")
        splits = corpus_splits(corpus)
        for key, default in LM_SPLITS.items():
            if entry.get(key, default) not in splits:
                raise ConfigError(f"config: models.{study}.{key} is '{entry.get(key, default)}', "
                                  f"not one of corpora.{entry['corpus']}.splits {splits}")

    def evalset_name(self, study, role):
        if role == "ood":
            raise ConfigError(f"config: {study.name} is a language-modelling study: it has no out-of-domain set")
        return study.lm_split(f"{role}_split")

    def evalset_spec(self, study, role, name):
        # the name every table carries states the window, as the protocol asks
        return {"kind": "language_modeling", "windows": study.windows_file(name),
                "name": f"{name} ({study.entry['window']}-token windows)",
                "window": study.entry["window"], "max_items": study.entry.get("max_windows")}

    def eval_data(self, study, roles):
        return [study.windows_dir]

    def importance_data(self, study):
        return [study.windows_dir]

    def importance_spec(self, study):
        return self._windows_spec(study, study.entry["batch_size"], study.entry.get("importance_windows"))

    def train_spec(self, study, batch_size):
        return self._windows_spec(study.lm, batch_size, study.config["concrete"]["max_items"])

    def screen_evalset_spec(self, study, items):
        # the first ``items`` windows of the importance split, scored as the test set is (perplexity)
        split = study.lm_split("importance_split")
        return {"kind": "language_modeling", "windows": study.windows_file(split),
                "name": f"{split} ({study.entry['window']}-token windows, screen)", "window": study.entry["window"],
                "max_items": items}

    @staticmethod
    def _windows_spec(lm, batch_size, max_items):
        """Windows of the language model's importance split, as importance_batches reads them."""
        return {"kind": "language_modeling", "windows": lm.windows_file(lm.lm_split("importance_split")),
                "batch_size": batch_size, "max_items": max_items}

    def speed_settings(self, study, speed):
        return {"decode_tokens": speed.get("decode_tokens", 32)}

    def parse_text(self, study):
        # a language model's roles (previous-token, induction, sink, retrieval) are read from its windows
        raise ConfigError(f"{study.name}: a {self.name} study's head roles parse no text")

    def roles_params(self, study, roles):
        return {"windows": study.lm.evalset_spec("eval"), "items": None, "max_windows": roles["lm_windows"],
                "induction": roles["induction"], "batch_size": roles["batch_size"], "max_new_tokens": None,
                "kv_heads": study.lm.entry.get("kv_heads")}

    def head_roles_inputs(self, study, inputs):
        return {**inputs, "windows": study.lm.windows_dir}


class Kind(base.Kind):
    name = "language_modeling"
    study_side = Plan
    attention_types = ["dec_self"]
    timed_as = "causal LM ({family})"
    timed_outputs = "next-token predictions"
    language_model = True
    model_kind = "language_modeling"
    data_help = "a text corpus (.txt), scored by perplexity over windows of --window tokens"
    data_suffixes = (".txt",)

    def load_evalset(self, spec):
        from headprune.evaluation.perplexity import load_windows
        from headprune.evaluation.evalset import EvalSet

        chunks = load_windows(spec["windows"], spec.get("max_items"))
        return EvalSet("language_modeling", chunks, chunks, "perplexity")

    def row_positions(self, model, tokenizer, evalset, settings):
        # its longest window
        return max(map(len, evalset.sources), default=0) or settings.max_length

    def run_variants(self, model, tokenizer, evalset, gates_list, settings):
        from headprune.evaluation.perplexity import window_batches, window_nll_variants

        return window_nll_variants(model, window_batches(evalset.sources, settings.batch_size), gates_list,
                                   variant_batch_size=settings.variant_batch_size, progress=settings.progress)

    def score(self, evalset, outputs, bleu="detokenized"):
        from headprune.evaluation.perplexity import perplexity

        return perplexity(outputs)

    def significance(self, evalset, full_outputs, ablated_outputs, *, resamples, seed):
        from headprune.evaluation.perplexity import paired_bootstrap_perplexity

        boot = paired_bootstrap_perplexity(full_outputs, ablated_outputs, n_resamples=resamples, seed=seed)
        return base.bootstrap_only(boot.p_value)

    def scoring_batches(self, tokenizer, evalset, batch_size, max_length):
        from headprune.evaluation.perplexity import window_batches

        return window_batches(evalset.sources, batch_size)

    def importance_batches(self, tokenizer, data, model=None):
        from headprune.evaluation.perplexity import load_windows, window_batches

        return window_batches(load_windows(data["windows"], data["max_items"]), data["batch_size"])

    def evalset_from_file(self, path, tokenizer, options):
        from headprune.evaluation.evalset import EvalSet
        from headprune.evaluation.perplexity import windows

        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"not UTF-8 text ({error})") from None
        window = options["window"]
        chunks = windows(tokenizer, text, window, options["max_items"])  # as analyses.sweeps.evalset_from_text
        return (EvalSet("language_modeling", chunks, chunks, "perplexity"), f"{Path(path).stem} ({window}-token windows)",
                f"a text corpus: language modelling, perplexity over {len(chunks)} windows of {window} tokens")

    def load_model(self, path, device, study, options):
        from headprune.models.loading import load_causal_lm

        return load_causal_lm(path, device, **options)


class ScoresLanguageModelPlan(Plan):
    """A study that scores the model of a language_modeling study (its ``model:``) another way: that study's
    architecture, corpus, importance (I_h on its text) and resources are its own."""

    scores_another_study = True
    config_properties = {"model": {"type": "string", "description": "the language_modeling study whose model (and "
                                                                    "corpus) it scores"}}
    config_required = ("model",)

    def screen_evalset_spec(self, study, items):
        # its own score on data that is not its test set would need items of its own kind: none yet
        return base.Plan.screen_evalset_spec(self, study, items)

    def check(self, pipeline, study, entry):
        lm = pipeline.models.get(entry["model"], {})
        if lm.get("kind") != "language_modeling":
            raise ConfigError(f"config: models.{study}.model names '{entry['model']}', which is not a "
                                   "language_modeling entry of models")

    def importance_data(self, study):
        return study.lm.importance_data

    def importance_spec(self, study):
        return study.lm.importance_spec


class ScoresLanguageModel(Kind):
    """A kind that scores the model of a language_modeling study (its ``model:``) another way
    (``ScoresLanguageModelPlan``)."""

    study_side = ScoresLanguageModelPlan
    data_suffixes = ()  # a text corpus is its language model's

    def scoring_batches(self, tokenizer, evalset, batch_size, max_length):
        return base.Kind.scoring_batches(self, tokenizer, evalset, batch_size, max_length)
