"""Classification: an encoder fine-tuned on a GLUE-style task, scored by accuracy, F1 or MCC; significant
by the paper's paired t-test over examples (a paired bootstrap beside it)."""
from __future__ import annotations

import numpy as np

from headprune.evaluation import metrics, stats
from headprune.evaluation.kinds import base
from headprune.io.config_error import ConfigError


class Plan(base.VoitaRoles, base.Plan):
    """A GLUE task's splits by role, its training split the importance, screen and training data."""

    config_properties = {
        "finetune": {"type": ["boolean", "object"], "default": True,
                     "description": "fine-tune source on task with bert.finetune (an object: with these of its settings "
                                    "changed, e.g. {epochs: 5}); false: the source is fine-tuned already",
                     "additionalProperties": False,
                     "properties": {"epochs": {"type": "number", "exclusiveMinimum": 0},
                                    "lr": {"type": "number", "exclusiveMinimum": 0},
                                    "batch_size": {"type": "integer", "minimum": 1},
                                    "max_length": {"type": "integer", "minimum": 8},
                                    "seed": {"$ref": "#/definitions/seed"},
                                    "warmup_fraction": {"type": "number", "minimum": 0, "maximum": 1}}}}

    def check(self, pipeline, study, entry):
        if "task" not in entry:
            raise ConfigError(f"config: models.{study} is a classification study: it needs 'task'")
        if entry["task"] not in pipeline.glue:
            raise ConfigError(f"config: models.{study}.task names '{entry['task']}', which is not a glue entry")

    def finetuned(self, study):
        return study.entry.get("finetune", True) is not False

    def evalset_name(self, study, role):
        entry = study.pipeline.glue[study.task]
        key = {"eval": "eval_split", "ood": "ood_split", "selection": "selection_split", "test": "test_split"}[role]
        name = entry.get(key, {"eval": "dev", "selection": "train", "test": entry.get("eval_split", "dev")}.get(role))
        return study.named_set(role, f"glue.{study.task}", key, name)

    def evalset_spec(self, study, role, name):
        bert = study.config["bert"]
        # Tables 2-3 choose the head on 5000 training examples (a seeded subset), as the paper does.
        max_items = bert.get("selection_examples") if role == "selection" else None
        return {"kind": "classification", "tsv": f"{study.glue_dir}/{name}.tsv",
                "metric": study.pipeline.glue[study.task].get("metric", "accuracy"), "name": name,
                "max_items": max_items, "seed": bert["finetune"]["seed"]}

    def eval_data(self, study, roles):
        return [study.glue_dir]

    def eval_settings(self, study, bleu, rows):
        config = study.config
        in_models = study.name in study.pipeline.models
        return {"batch_size": study.entry.get("batch_size", 64) if in_models else config["bert"]["eval_batch_size"],
                "max_length": config["bert"]["finetune"]["max_length"], "variant_batch_size": rows}

    def importance_data(self, study):
        return [study.glue_dir]

    def importance_spec(self, study):
        bert = study.config["bert"]
        return {"kind": "classification", "tsv": _train_tsv(study), "batch_size": bert["finetune"]["batch_size"],
                "max_length": bert["finetune"]["max_length"], "max_items": bert.get("importance_examples"),
                "seed": bert["finetune"]["seed"]}

    def screen_evalset_spec(self, study, items):
        # a seeded subset of the training split (the importance data), scored as the test set is
        bert = study.config["bert"]
        return {"kind": "classification", "tsv": _train_tsv(study), "name": "train (screen)",
                "metric": study.pipeline.glue[study.task].get("metric", "accuracy"), "max_items": items,
                "seed": bert["finetune"]["seed"]}

    def train_spec(self, study, batch_size):
        concrete = study.config["concrete"]
        return {"kind": "classification", "tsv": _train_tsv(study), "batch_size": batch_size,
                "max_length": study.config["bert"]["finetune"]["max_length"], "max_items": concrete["max_items"],
                "seed": concrete["seed"]}

    def training_texts(self, train):
        from headprune.data.glue import read_glue_split

        return [text for pair in read_glue_split(train["tsv"])[0] for text in pair if text]

    def speed_settings(self, study, speed):
        return {"max_length": study.config["bert"]["finetune"]["max_length"],
                "padding": speed.get("padding", "max_length")}

    def parse_text(self, study):
        return [study.glue_dir]


class Kind(base.Kind):
    name = "classification"
    study_side = Plan
    attention_types = ["enc_self"]
    timed_as = "encoder classifier ({family})"
    timed_outputs = "predictions"
    decisive_p = "p_ttest"
    model_kind = "classification"
    data_help = ("a GLUE-format TSV (.tsv: header text_a<TAB>text_b<TAB>label, integer labels), scored by --metric: "
                 f"{', '.join(metrics.CLASSIFICATION_METRICS)} (default: accuracy)")
    data_suffixes = (".tsv",)

    def load_evalset(self, spec):
        from headprune.data.datasets import subset
        from headprune.data.glue import read_glue_split
        from headprune.evaluation.evalset import EvalSet

        pairs, labels = read_glue_split(spec["tsv"])
        keep = subset(list(range(len(labels))), spec.get("max_items"), spec.get("seed", 0))
        return EvalSet("classification", [labels[i] for i in keep], [pairs[i] for i in keep], spec["metric"])

    def run_variants(self, model, tokenizer, evalset, gates_list, settings):
        from headprune.data.batching import classification_batches
        from headprune.evaluation.evaluate import predict_classes_variants

        batches = classification_batches(tokenizer, evalset.sources, None, settings.batch_size, settings.max_length)
        return predict_classes_variants(model, batches, gates_list, variant_batch_size=settings.variant_batch_size,
                                        progress=settings.progress).tolist()

    def score(self, evalset, outputs, bleu="detokenized"):
        return metrics.classification_score(evalset.metric, outputs, evalset.references)

    def significance(self, evalset, full_outputs, ablated_outputs, *, resamples, seed):
        boot = stats.paired_bootstrap_metric(full_outputs, ablated_outputs, evalset.references, evalset.metric,
                                             n_resamples=resamples, seed=seed)
        gold = np.asarray(evalset.references)
        ttest = stats.paired_t_test(np.asarray(full_outputs) == gold, np.asarray(ablated_outputs) == gold)
        return {"p_bootstrap": boot.p_value, "p_ttest": ttest.p_value}

    def scoring_batches(self, tokenizer, evalset, batch_size, max_length):
        from headprune.data.batching import classification_batches

        return classification_batches(tokenizer, evalset.sources, evalset.references, batch_size, max_length)

    def importance_batches(self, tokenizer, data, model=None):
        from headprune.data.batching import classification_batches
        from headprune.data.datasets import subset
        from headprune.data.glue import read_glue_split

        pairs, labels = read_glue_split(data["tsv"])
        keep = subset(list(range(len(pairs))), data["max_items"], data["seed"])
        return classification_batches(tokenizer, [pairs[i] for i in keep], [labels[i] for i in keep],
                                      data["batch_size"], data["max_length"])

    def evalset_from_file(self, path, tokenizer, options):
        from pathlib import Path

        from headprune.data.glue import read_glue_split
        from headprune.evaluation.evalset import EvalSet

        metric = options["metric"] or "accuracy"
        if metric not in metrics.CLASSIFICATION_METRICS:
            raise ValueError(f"--metric {metric}: not a classification metric ({', '.join(metrics.CLASSIFICATION_METRICS)})")
        pairs, labels = read_glue_split(path)  # as analyses.sweeps.evalset_from_tsv
        limit = options["max_items"]
        evalset = EvalSet("classification", labels[:limit], pairs[:limit], metric)
        return evalset, Path(path).stem, f"a GLUE-format TSV, {len(evalset)} examples: classification, scored by {metric}"

    def load_model(self, path, device, study, options):
        from headprune.models.loading import load_classifier

        return load_classifier(path, device)


def _train_tsv(study) -> str:
    return f"{study.glue_dir}/{study.pipeline.glue[study.task].get('train_split', 'train')}.tsv"
