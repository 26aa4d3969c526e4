"""A task a language model is judged on: a language-modelling study's model scored by one
lm-evaluation-harness task (HellaSwag, ARC, MMLU, LAMBADA, GSM8K, ... or a task YAML of the user's).

lm-evaluation-harness builds the requests (prompts, few-shot examples, choices, stop sequences) and
computes each item's metrics from the responses; the project computes the responses, for every gate
setting of a job at once (``headprune.evaluation.lm_tasks``). The study's score is one of the task's
metrics, aggregated as the task says; significance is a paired bootstrap over the task's items of that
aggregate. I_h is estimated on the task's own loss (``headprune.evaluation.lm_task_loss``: the gold answers
of a split the task is not scored on), or with ``importance_split: corpus`` on the language model's text;
the heads' roles are the language model's own.
"""
from __future__ import annotations

from pathlib import Path

from headprune.evaluation.kinds import base
from headprune.io.config_error import ConfigError
from headprune.evaluation.kinds.language_modeling import ScoresLanguageModel, ScoresLanguageModelPlan

FEWSHOT_SEED = 1234  # lm-evaluation-harness's own default


def task_file(task: str) -> Path | None:
    """A task named by its YAML file (a path), or None for a registry name."""
    return Path(task) if task.endswith((".yaml", ".yml")) else None


class Plan(ScoresLanguageModelPlan):
    """Its test sets are lm-evaluation-harness tasks, by role; I_h is estimated on a split of the task it is not
    scored on, or on its language model's text."""

    config_properties = {
        **ScoresLanguageModelPlan.config_properties,
        "num_fewshot": {"type": "integer", "minimum": 0, "description": "few-shot examples per prompt (default 0; a "
                        "task whose YAML says 0 stays 0, as in lm-eval)"},
        "limit": {"type": ["integer", "null"], "minimum": 1, "description": "the task's first items scored (null: all)"},
        "metric": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+(,[A-Za-z0-9_. -]+)?$",
                   "description": "the task's metric that is the study's score (acc, acc_norm, exact_match, "
                                  "'exact_match,strict-match' with a filter, word_perplexity): higher or lower is "
                                  "better as the task says"},
        "fewshot_seed": {"$ref": "#/definitions/seed", "description": "seed of the few-shot examples (default 1234, "
                                                                      "lm-eval's)"},
        "retrieval_study": {"type": "string", "minLength": 1, "description": "the retrieval study whose retrieval "
                            "heads Wu et al.'s experiment masks (default: the one of its model in "
                            "experiments.retrieval_heads)"},
        "selection_task": {"type": "string", "minLength": 1, "description": "the task one head per layer chooses its "
                                                                            "head on (default: the task itself)"},
        "importance_items": {"type": "integer", "minimum": 1, "description": "documents of importance_split I_h is "
                                                                             "estimated on (default 500, the first "
                                                                             "ones)"}}
    config_required = ("model", "task", "metric")

    def evalset_name(self, study, role):
        if role == "ood":
            raise ConfigError(f"config: {study.name} is scored on an lm-evaluation-harness task: it has no "
                                   "out-of-domain set")
        # Tables 2-3 choose a head on the selection set: the task's own items unless selection_task names others
        return study.entry.get("selection_task", study.entry["task"]) if role == "selection" else study.entry["task"]

    def evalset_spec(self, study, role, name):
        entry = study.entry
        shots = entry.get("num_fewshot", 0)
        label = task_file(name).stem if task_file(name) else name
        return {"kind": "lm_eval", "task": name, "num_fewshot": shots, "limit": entry.get("limit"),
                "fewshot_seed": entry.get("fewshot_seed", FEWSHOT_SEED), "metric": entry["metric"],
                "name": f"{label} ({shots}-shot)", "max_items": None}

    def eval_data(self, study, roles):
        return sorted({str(task_file(name)) for name in map(study.evalset_name, roles) if task_file(name)})

    def importance_study(self, study):
        return study.lm if study.entry.get("importance_split") == "corpus" else study

    def importance_data(self, study):
        if study.entry.get("importance_split") == "corpus":
            return study.lm.importance_data
        return study.eval_data(["eval"])

    def importance_spec(self, study):
        """The task's gold answers on ``importance_split`` (None: the task's training split, else its validation
        split, whichever it is not scored on), at most ``importance_items`` documents; or the language model's
        text (``importance_split: corpus``)."""
        entry = study.entry
        if entry.get("importance_split") == "corpus":
            return study.lm.importance_spec
        return {"kind": "lm_eval", "study": study.name, "task": entry["task"], "split": entry.get("importance_split"),
                "num_fewshot": entry.get("num_fewshot", 0), "fewshot_seed": entry.get("fewshot_seed", FEWSHOT_SEED),
                "max_items": entry.get("importance_items", 500), "batch_size": entry["batch_size"]}


class Kind(ScoresLanguageModel):
    name = "lm_eval"
    study_side = Plan
    wu_score = "task"  # Wu et al.'s experiment scored on the task: do the retrieval heads matter for it?
    data_help = ("an lm-evaluation-harness task's YAML (.yaml), scored by --metric, one the task computes (default: "
                 "acc), with --num-fewshot examples (default: 0)")
    data_suffixes = (".yaml", ".yml")

    def load_evalset(self, spec):
        from headprune.evaluation.lm_tasks import load_task
        from headprune.evaluation.evalset import EvalSet

        file = task_file(spec["task"])
        task = load_task(str(file) if file else spec["task"], num_fewshot=spec["num_fewshot"], limit=spec["limit"],
                         fewshot_seed=spec["fewshot_seed"])
        metric = _checked_metric(task, spec)
        docs = list(task.docs)
        return EvalSet("lm_eval", list(range(len(docs))), docs, metric, task=task)

    def run_variants(self, model, tokenizer, evalset, gates_list, settings):
        from headprune.evaluation.lm_tasks import evaluate_variants

        return evaluate_variants(model, tokenizer, evalset.task, gates_list, batch_size=settings.batch_size,
                                 variant_batch_size=settings.variant_batch_size, progress=settings.progress)

    def row_positions(self, model, tokenizer, evalset, settings):
        from headprune.evaluation.lm_tasks import longest_row

        # its requests as HFLM tokenizes them: few-shot contexts make rows far longer than a sentence
        return longest_row(model, tokenizer, evalset.task)

    def score(self, evalset, outputs, bleu="detokenized"):
        from headprune.evaluation.lm_tasks import aggregate, item_metrics

        return float(aggregate(evalset.task, evalset.metric, item_metrics(evalset.task, outputs)))

    def significance(self, evalset, full_outputs, ablated_outputs, *, resamples, seed):
        from headprune.evaluation import stats
        from headprune.evaluation.lm_tasks import aggregate, item_metrics

        task, metric = evalset.task, evalset.metric
        # each item's metrics once; a resample aggregates them as the task does (a mean, a perplexity, ...)
        full, ablated = ([items[metric] for items in item_metrics(task, outputs)]
                         for outputs in (full_outputs, ablated_outputs))

        def aggregated(values, _items):
            return float(aggregate(task, metric, [{metric: value} for value in values]))

        boot = stats.paired_bootstrap(aggregated, full, ablated, evalset.references, n_resamples=resamples, seed=seed)
        return base.bootstrap_only(boot.p_value)

    def evalset_from_file(self, path, tokenizer, options):
        shots = options["num_fewshot"] or 0
        evalset = self.load_evalset({"task": str(path), "num_fewshot": shots, "limit": options["max_items"],
                                     "fewshot_seed": FEWSHOT_SEED, "metric": options["metric"] or "acc"})
        return (evalset, f"{Path(path).stem} ({shots}-shot)",
                f"an lm-evaluation-harness task, {len(evalset)} documents: lm_eval, scored by {evalset.metric}")

    def importance_batches(self, tokenizer, data, model=None):
        from headprune.evaluation.lm_task_loss import importance_split, task_loss_batches
        from headprune.evaluation.lm_tasks import TaskError, load_task

        file = task_file(data["task"])
        try:
            task = load_task(str(file) if file else data["task"], num_fewshot=data["num_fewshot"],
                             limit=data["max_items"], fewshot_seed=data["fewshot_seed"],
                             split=data["split"] or importance_split)
        except TaskError as error:
            raise TaskError(f"{data['study']}: {error}; head importance is estimated on a split the task is not "
                            f"scored on: set models.{data['study']}.importance_split (a split of its data, or "
                            "'corpus': the language model's text)") from error
        return task_loss_batches(model, tokenizer, task, data["batch_size"])


def _checked_metric(task, spec) -> str:
    """The config's metric as the task names it ("acc,none" is "acc"), once it is one the task computes and the
    pipeline ranks it the way the task says it should."""
    from headprune.evaluation.lm_tasks import TaskError
    from headprune.evaluation.metrics import better_sign

    metric = task.check_metric(spec["metric"])
    if task.higher_is_better(metric) != (better_sign(metric) > 0):
        raise TaskError(f"task {spec['task']}: its metric {metric} is "
                        f"{'higher' if task.higher_is_better(metric) else 'lower'} is better, which "
                        "headprune.evaluation.metrics.METRICS does not say: register a Metric class for it "
                        f"(better = {1 if task.higher_is_better(metric) else -1})")
    return metric
