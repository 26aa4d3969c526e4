"""Long-context retrieval: a language-modelling study's model scored on needle-in-a-haystack prompts
(``headprune.data.retrieval``): the share of greedy answers holding the needle's value, higher is better,
with Wu et al.'s ROUGE-1 recall of the needle beside it; significance by a paired bootstrap over items."""
from __future__ import annotations

import numpy as np

from headprune.evaluation.kinds import base
from headprune.io.config_error import ConfigError
from headprune.evaluation.kinds.language_modeling import (ScoresLanguageModel, ScoresLanguageModelPlan,
                                                          corpus_splits)


class Plan(ScoresLanguageModelPlan):
    """Its test sets are needle-in-a-haystack items cut from its language model's corpus splits, by role."""

    config_properties = {
        **ScoresLanguageModelPlan.config_properties,
        "context_lengths": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 8},
                            "description": "haystack lengths in tokens of the model (needle included)"},
        "depths": {"type": "array", "minItems": 1, "items": {"type": "number", "minimum": 0, "maximum": 100},
                   "description": "where the needle goes, in percent of the haystack (0: first)"},
        "needles_per_setting": {"type": "integer", "minimum": 1, "description": "items per (length, depth); default 1"},
        "haystack_split": {"type": "string", "description": "the corpus split eval items are cut from (default: the "
                           "model's eval_split); one head per layer cuts its selection items from selection_split"},
        "needle": {"type": "string", "description": "the needle sentence, with {value} (default 'The special magic "
                                                    "number is {value}.')"},
        "question": {"type": "string", "description": "asked after the haystack (default 'What is the special magic "
                                                      "number mentioned in the text?')"},
        "answer_prefix": {"type": "string", "description": "text the answer starts with, after the question or the "
                                                           "chat template's generation prompt (default none)"},
        "value_digits": {"type": "integer", "minimum": 1, "maximum": 18, "description": "digits of the value (default 5)"},
        "chat_template": {"type": "boolean", "description": "wrap the question in the tokenizer's chat template when "
                                                            "it has one (default true)"},
        "max_new_tokens": {"type": "integer", "minimum": 1, "description": "tokens decoded greedily per answer "
                                                                           "(default 32: instruct models restate the "
                                                                           "question first)"},
        "seed": {"$ref": "#/definitions/seed", "description": "items are drawn once from this seed (default 0)"}}
    config_required = ("model", "context_lengths", "depths")

    def check(self, pipeline, study, entry):
        super().check(pipeline, study, entry)
        lm = pipeline.models[entry["model"]]
        if "haystack_split" in entry:
            splits = corpus_splits(pipeline.corpora[lm["corpus"]])
            if entry["haystack_split"] not in splits:
                raise ConfigError(f"config: models.{study}.haystack_split is '{entry['haystack_split']}', "
                                  f"not one of corpora.{lm['corpus']}.splits {splits}")

    def evalset_name(self, study, role):
        if role == "eval":
            return study.entry.get("haystack_split", study.lm_split("eval_split"))
        return super().evalset_name(study, role)

    def evalset_spec(self, study, role, name):
        lengths = "/".join(map(str, study.retrieval["context_lengths"]))
        return {"kind": "retrieval", "items": f"{study.items_dir}/{name}.jsonl",
                "name": f"needle in a haystack, {name} split ({lengths}-token contexts)", "max_items": None}

    def eval_data(self, study, roles):
        return [study.items_dir]

    def eval_settings(self, study, bleu, rows):
        return {"batch_size": study.entry["batch_size"], "variant_batch_size": rows,
                "max_new_tokens": study.retrieval["max_new_tokens"]}

    def roles_params(self, study, roles):
        return {**super().roles_params(study, roles), "items": study.evalset_spec("eval"),
                "max_new_tokens": study.retrieval["max_new_tokens"]}

    def head_roles_inputs(self, study, inputs):
        return {**super().head_roles_inputs(study, inputs), "needles": study.items_dir}


class Kind(ScoresLanguageModel):
    name = "retrieval"
    study_side = Plan
    drawn_beside_perplexity = True
    wu_score = "retrieval"
    finds_retrieval_heads = True
    data_help = ("needle-in-a-haystack items (.jsonl, as the pipeline's make_retrieval_items writes them with the "
                 "model's tokenizer), scored by the share of answers that hold the needle's value")
    data_suffixes = (".jsonl",)

    def load_evalset(self, spec):
        from headprune.data.retrieval import read_items
        from headprune.evaluation.evalset import EvalSet

        items = read_items(spec["items"], spec.get("max_items"))
        return EvalSet("retrieval", [item["value"] for item in items], items, "retrieval")

    def row_positions(self, model, tokenizer, evalset, settings):
        # its longest prompt and the answer generated after it
        return max((len(item["prompt_ids"]) for item in evalset.sources), default=0) + settings.max_new_tokens

    def run_variants(self, model, tokenizer, evalset, gates_list, settings):
        from headprune.evaluation.retrieval import answer_variants

        return answer_variants(model, tokenizer, evalset.sources, gates_list, max_new_tokens=settings.max_new_tokens,
                               batch_size=settings.batch_size, variant_batch_size=settings.variant_batch_size,
                               progress=settings.progress)

    def score(self, evalset, outputs, bleu="detokenized"):
        from headprune.evaluation.retrieval import retrieval_accuracy

        return retrieval_accuracy(outputs, evalset.references)

    def scores_beside(self, evalset, outputs):
        """Wu et al.'s measure: the mean ROUGE-1 recall of the needle sentence in the answers."""
        from headprune.evaluation.retrieval import rouge1_recall

        return {"rouge1_recall": float(np.mean([rouge1_recall(item["needle"], f"{item.get('answer_prefix', '')} {answer}")
                                                for item, answer in zip(evalset.sources, outputs)]))}

    def evalset_from_file(self, path, tokenizer, options):
        from pathlib import Path

        evalset = self.load_evalset({"items": path, "max_items": options["max_items"]})
        return (evalset, f"{Path(path).stem} (needle in a haystack)",
                f"{len(evalset)} needle-in-a-haystack items: retrieval, scored by the answers that hold the value")

    def significance(self, evalset, full_outputs, ablated_outputs, *, resamples, seed):
        from headprune.evaluation.retrieval import paired_bootstrap_retrieval

        boot = paired_bootstrap_retrieval(full_outputs, ablated_outputs, evalset.references, n_resamples=resamples,
                                          seed=seed)
        return base.bootstrap_only(boot.p_value)
