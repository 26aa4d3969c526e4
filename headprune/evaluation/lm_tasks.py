"""Any lm-evaluation-harness task as a study's score: lm-eval does the task, this project the model's work.

lm-evaluation-harness (EleutherAI, ``lm_eval``) defines each task: its documents, prompts, few-shot
examples, choices, stop sequences, answer filters and metrics. ``load_task`` builds a task's requests with
lm-eval's own code, as ``lm_eval.simple_evaluate`` does (its seeds, its few-shot override, its ``limit``),
and ``item_metrics`` hands responses back to lm-eval (``apply_filters``, then ``process_results`` per
document), so a document's metrics are what ``simple_evaluate(..., log_samples=True)`` logs for it
(tests/test_lm_tasks.py compares them). No prompt, metric or answer extraction is written here. A group
(MMLU's kind) is its tasks' documents one after the other, scored by a metric the group averages over its
tasks weighted by their sizes: the mean over all its documents.

What is done here is the model's work, for every gate setting of a job at once (``evaluate_variants``):

- the requests become tokens in lm-eval's own ``HFLM`` (a subclass that only tokenizes: ``_encode_pair``
  with its trailing-space rule, ``tok_encode``'s BOS rule, an empty context's prefix token, the rolling
  windows of ``loglikelihood_rolling``, ``generate_until``'s contexts left-truncated to leave room for
  ``max_gen_toks``), and are read as HFLM reads them (cut to the last ``max_length`` tokens);
- ``loglikelihood`` (multiple choice, LAMBADA-style, each window of ``loglikelihood_rolling``): requests
  that read the same tokens share one row (the choices of a one-token answer, as HFLM's logits cache shares
  them); rows that read the same context before their first scored position (the choices of one question)
  share it: each setting computes the context once and every choice goes on from its keys and values;
  the settings share the full model's layers below their first masked head (``shared_layers``, as
  ``perplexity.window_nll_variants`` does), contexts and choices included; only the positions a request scores go
  through the output layer;
- ``generate_until``: greedy decoding of every setting together, the prompt shared below each setting's
  first masked layer (``retrieval._greedy_variants``), each row stopping at the model's EOS, at one of the
  task's stop strings, or after ``max_gen_toks`` tokens; the text is decoded and cut as HFLM cuts it.

A document's responses (per request, in lm-eval's order) are JSON-serialisable: ``[logprob, is_greedy]``
for a log-likelihood, a float for a rolling log-likelihood, a string for a generation. Only greedy
generation is done: a task that samples (``do_sample``, a temperature) is refused.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import StoppingCriteria

from headprune.evaluation.loglikelihoods import loglikelihood_variants  # noqa: F401 (its API too)

log = logging.getLogger(__name__)

OUTPUT_TYPES = ("multiple_choice", "loglikelihood", "loglikelihood_rolling", "generate_until")
# simple_evaluate's defaults: python's random and numpy are seeded before the tasks are built (a task's
# process_docs may shuffle), the few-shot sampler with its own seed
_RANDOM_SEED, _NUMPY_SEED = 0, 1234
# generation settings that greedy decoding takes (anything else would sample or search)
_GREEDY_KEYS = {"until", "max_gen_toks", "do_sample", "temperature"}


class TaskError(ValueError):
    """A task that cannot be a study's score: unknown, data not readable, a metric it does not produce, an
    output or generation it has that is not supported. The message names the task."""


# --- the task ------------------------------------------------------------------------------------


@dataclass
class LMTask:
    """An lm-eval task, or a group of tasks (MMLU's kind), with its requests built: ``docs`` (the documents
    evaluated, in lm-eval's order: a group's tasks one after the other) and, per document, its requests
    (lm-eval ``Instance`` objects, in their ``idx`` order) and the index of its task in ``tasks``."""

    name: str
    tasks: list  # the lm_eval.api.task.Task objects: the task alone, or a group's tasks
    docs: list
    requests: list[list] = field(repr=False)
    doc_task: list[int] = field(repr=False)
    group: object = None  # the lm-eval Group, for a group

    @property
    def output_type(self) -> str:
        return self.tasks[0].OUTPUT_TYPE

    @property
    def metrics(self) -> list[str]:
        """The metrics a study may be scored by, named as lm-eval's results table names them less ",none":
        ``acc``, or ``exact_match,strict-match`` for a metric after the filter "strict-match". A group's
        are those of its ``aggregate_metric_list`` that it weights by size over tasks that average them per
        document (then the group's score is the mean over all its documents, as for MMLU)."""
        if self.group is None:
            (task,) = self.tasks
            return [_metric_name(metric, name) for name in _filters(task) for metric in task.aggregation()]
        from lm_eval.api.metrics import mean

        names = []
        for config in self.group.aggregate_metric_list or []:
            filters = config.filter_list or sorted({name for task in self.tasks for name in _filters(task)})
            if config.weight_by_size and config.aggregation == "mean" and all(
                    task.aggregation().get(config.metric) is mean for task in self.tasks):
                names += [_metric_name(config.metric, name) for name in filters
                          if all(name in _filters(task) for task in self.tasks)]
        return names

    def check_metric(self, metric: str) -> str:
        """``metric`` as ``metrics`` names it (``acc,none`` is ``acc``); a TaskError if the task does not produce it."""
        name = metric[:-len(",none")] if metric.endswith(",none") else metric
        if name not in self.metrics:
            what = "group" if self.group is not None else "task"
            raise TaskError(f"lm-eval {what} {self.name!r} does not produce the metric {metric!r}; "
                            f"it produces {', '.join(self.metrics) or 'none a study can use'}")
        return name

    def higher_is_better(self, metric: str) -> bool:
        base, _ = _split_metric(self.check_metric(metric))
        return bool(self.tasks[0].higher_is_better()[base])


def _filters(task) -> list[str]:
    """The task's filter pipelines (one metric value per metric and filter; "none" when it has none)."""
    return [f.name for f in getattr(task, "_filters", [])] or ["none"]


def _metric_name(metric: str, filter_name: str) -> str:
    return metric if filter_name == "none" else f"{metric},{filter_name}"


def _split_metric(name: str) -> tuple[str, str]:
    base, _, filter_name = name.partition(",")
    return base, filter_name or "none"


@functools.lru_cache(maxsize=4)
def _task_manager(include_path: str | None, include_defaults: bool):
    """lm-eval's index of tasks (indexing its ~15,000 task files takes 10-40 s: once per process)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include_path, include_defaults=include_defaults)


@contextlib.contextmanager
def _seeded_as_simple_evaluate():
    """python's and numpy's random as simple_evaluate seeds them; the caller's states afterwards."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    random.seed(_RANDOM_SEED)
    np.random.seed(_NUMPY_SEED)
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def load_task(task: str, *, include_path: str | None = None, num_fewshot: int | None = None,
              limit: int | float | None = None, fewshot_seed: int = 1234, split=None) -> LMTask:
    """The lm-eval task ``task`` with its requests built as ``simple_evaluate(tasks=[task],
    num_fewshot=num_fewshot, limit=limit, fewshot_random_seed=fewshot_seed)`` builds them (``limit``:
    documents per task, as there).

    ``task`` is a name of lm-eval's registry ("hellaswag", or a group: "mmlu"; also searched in
    ``include_path``) or the path of a task YAML (its folder is then the include path, and lm-eval's own
    tasks are not indexed). A task's data is read by ``datasets`` (offline: ``HF_DATASETS_OFFLINE=1`` and a
    cached or local copy). Raises TaskError (naming the task) for an unknown task, data that cannot be
    read, a tag, a group mixing output types, and what ``evaluate_variants`` cannot do (an output type,
    sampled generation, images or audio).

    ``split``: the documents of another split of the task's dataset than the one lm-eval evaluates (its test
    split, else its validation split), e.g. "train" to estimate I_h on (``headprune.evaluation.lm_task_loss``),
    or a function of each lm-eval task object that names it (None: the task has none); few-shot examples come
    from where the task takes them, as ever."""
    is_path = str(task).endswith((".yaml", ".yml")) or "/" in str(task)
    if is_path:
        path = Path(task).expanduser().resolve()
        if not path.is_file():
            raise TaskError(f"lm-eval task {task!r}: no such task YAML file ({path})")
        spec, manager = str(path), _task_manager(str(path.parent), False)
    else:
        spec, manager = task, _task_manager(str(include_path) if include_path else None, True)
        if include_path and spec in _task_manager(str(include_path), False).all_tasks:
            manager = _task_manager(str(include_path), False)  # the user's own task: lm-eval's need no index
    with _seeded_as_simple_evaluate(), _quiet_lm_eval():
        try:
            loaded = manager.load([spec])
        except KeyError as error:
            where = f" nor in {include_path}" if include_path else ""
            raise TaskError(f"lm-eval task {task!r} is unknown: not a task of lm-evaluation-harness's "
                            f"registry{where}, nor a task YAML file") from error
        except (OSError, ConnectionError) as error:  # a data file missing, no network and no cached copy
            raise TaskError(f"lm-eval task {task!r}: its data cannot be read (offline, a local copy or the "
                            f"datasets cache is needed): {type(error).__name__}: {error}") from error
        except Exception as error:  # datasets' and lm-eval's own errors are many
            raise TaskError(f"lm-eval task {task!r} cannot be loaded: {type(error).__name__}: {error}") from error
        tasks, groups = loaded["tasks"], loaded["groups"]
        group = groups.get(task) if groups else None
        if group is None and len(tasks) != 1:
            raise TaskError(f"lm-eval task {task!r} is a tag or a collection of {len(tasks)} tasks: name one task "
                            f"or group ({', '.join(sorted(tasks)[:5])}{', ...' if len(tasks) > 5 else ''})")
        for lm_task in tasks.values():
            _check_supported(task, lm_task)
            if split is not None:
                _evaluate_split(task, lm_task, split)
        if len({lm_task.OUTPUT_TYPE for lm_task in tasks.values()}) > 1:
            raise TaskError(f"lm-eval group {task!r} mixes output types "
                            f"({', '.join(sorted({t.OUTPUT_TYPE for t in tasks.values()}))}): name one of its tasks")
        docs, requests, doc_task = [], [], []
        for k, lm_task in enumerate(tasks.values()):
            for doc, instances in _build_requests(task, lm_task, num_fewshot, limit, fewshot_seed):
                docs.append(doc)
                requests.append(instances)
                doc_task.append(k)
    name = group.name if group is not None else next(iter(tasks))
    return LMTask(name=name, tasks=list(tasks.values()), docs=docs, requests=requests, doc_task=doc_task, group=group)


def _build_requests(task: str, lm_task, num_fewshot, limit, fewshot_seed) -> list[tuple[dict, list]]:
    """(document, its requests) of one lm-eval task, built as simple_evaluate and evaluate build them."""
    from lm_eval.evaluator_utils import get_sample_size

    # simple_evaluate's few-shot override: a task whose config says 0 keeps 0; None becomes 0
    if num_fewshot is not None:
        if lm_task.get_config("num_fewshot") != 0:
            lm_task.set_config(key="num_fewshot", value=num_fewshot)
    elif lm_task.get_config("num_fewshot") is None:
        lm_task.set_config(key="num_fewshot", value=0)
    lm_task.set_fewshot_seed(seed=fewshot_seed)
    limit = get_sample_size(lm_task, limit)
    try:
        lm_task.build_all_requests(limit=limit, rank=0, world_size=1)
    except Exception as error:
        raise TaskError(f"lm-eval task {task!r}: the requests of {lm_task.task_name!r} cannot be built: "
                        f"{type(error).__name__}: {error}") from error
    docs = [doc for _, doc in lm_task.doc_iterator(rank=0, limit=limit, world_size=1)]
    requests: list[list] = [[] for _ in docs]
    for instance in lm_task.instances:
        requests[instance.doc_id].append(instance)
    for instances in requests:
        instances.sort(key=lambda instance: instance.idx)
    return list(zip(docs, requests))


def eval_split(lm_task) -> str:
    """The split lm-eval evaluates a task on: its test split, else its validation split."""
    return lm_task.config.test_split or lm_task.config.validation_split


def _evaluate_split(task: str, lm_task, split) -> None:
    """Make lm-eval build the task's requests from ``split`` (its ``eval_docs`` read the test split)."""
    if callable(split):
        split = split(lm_task)
        if split is None:
            raise TaskError(f"lm-eval task {task!r}: {lm_task.task_name!r} has no split besides the one it is "
                            f"scored on ({eval_split(lm_task)!r})")
    available = list(getattr(lm_task, "dataset", None) or [])
    if split not in available:
        raise TaskError(f"lm-eval task {task!r}: {lm_task.task_name!r} has no split {split!r} "
                        f"(its data has {', '.join(map(repr, available)) or 'none'})")
    lm_task.config.test_split = split


def _check_supported(task: str, lm_task) -> None:
    from lm_eval.models.utils import normalize_gen_kwargs

    if lm_task.OUTPUT_TYPE not in OUTPUT_TYPES:
        raise TaskError(f"lm-eval task {task!r}: output type {lm_task.OUTPUT_TYPE!r} is not supported "
                        f"(supported: {', '.join(OUTPUT_TYPES)})")
    if getattr(lm_task, "MULTIMODAL", False):
        raise TaskError(f"lm-eval task {task!r} reads images or audio: only text tasks are supported")
    if lm_task.OUTPUT_TYPE == "generate_until":
        settings = dict(lm_task.get_config("generation_kwargs") or {})
        kwargs = normalize_gen_kwargs(settings)
        others = sorted(set(kwargs) - _GREEDY_KEYS)
        if kwargs.get("do_sample") or kwargs.get("temperature") or others:
            besides = f", not {', '.join(others)}" if others else ""
            raise TaskError(f"lm-eval task {task!r} generates with {settings}: only greedy generation is "
                            f"supported (do_sample false, temperature 0{besides})")


@contextlib.contextmanager
def _quiet_lm_eval():
    """lm-eval's INFO and WARNING lines (one per document built, one per model wrapped) and its bar over the
    documents whose requests it builds (carriage returns in a job's log) kept out; the job logs its own progress."""
    import lm_eval.api.task

    logger = logging.getLogger("lm_eval")
    before, bar = logger.level, lm_eval.api.task.tqdm
    logger.setLevel(logging.ERROR)
    lm_eval.api.task.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        logger.setLevel(before)
        lm_eval.api.task.tqdm = bar


# --- metrics: lm-eval's ----------------------------------------------------------------------------


def item_metrics(task: LMTask, doc_responses: list) -> list[dict]:
    """Per document, its metrics from its responses (one gate setting's ``evaluate_variants``), as
    ``simple_evaluate`` computes them: each request's responses (``repeats`` of them) through the task's
    filters, then ``process_results``. Keys as ``LMTask.metrics`` names them; a value is a number, or for a
    corpus-level metric (perplexities, BLEU) what lm-eval's aggregation takes (e.g. (loglikelihood, words))."""
    if len(doc_responses) != len(task.docs):
        raise ValueError(f"lm-eval task {task.name!r}: {len(doc_responses)} documents' responses for "
                         f"{len(task.docs)} documents")
    for instances, responses in zip(task.requests, doc_responses):
        if len(responses) != len(instances):
            raise ValueError(f"lm-eval task {task.name!r}: {len(responses)} responses for a document of "
                             f"{len(instances)} requests")
        for instance, response in zip(instances, responses):
            instance.resps = [_as_lm_eval(instance.request_type, response)] * (instance.repeats or 1)
    per_item: list[dict] = [{} for _ in task.docs]
    with _quiet_lm_eval():
        for lm_task in task.tasks:
            lm_task.apply_filters()
        for metrics, doc, instances, k in zip(per_item, task.docs, task.requests, task.doc_task):
            for filter_name in _filters(task.tasks[k]):
                results = task.tasks[k].process_results(doc, [instance.filtered_resps[filter_name]
                                                              for instance in instances])
                metrics.update({_metric_name(metric, filter_name): value for metric, value in results.items()})
    return per_item


def _as_lm_eval(request_type: str, response):
    """A stored response as HFLM returns it: a log-likelihood is a (logprob, is_greedy) tuple."""
    return (float(response[0]), bool(response[1])) if request_type == "loglikelihood" else response


def aggregate(task: LMTask, metric: str, per_item: list[dict]) -> float:
    """lm-eval's aggregation of ``metric`` over documents' ``item_metrics`` (a mean, a perplexity, ...); for a
    group, the mean over its documents (its tasks' means weighted by their sizes, as lm-eval weighs them)."""
    from lm_eval.api.metrics import mean

    name = task.check_metric(metric)
    base, _ = _split_metric(name)
    aggregation = mean if task.group is not None else task.tasks[0].aggregation()[base]
    return float(aggregation([metrics[name] for metrics in per_item]))


# --- requests as tokens: lm-eval's HFLM, used as a tokenizer only ------------------------------------


@functools.cache
def _tokenizing_hflm_class():
    from lm_eval.models.huggingface import HFLM

    class TokenizingHFLM(HFLM):
        """HFLM whose ``_loglikelihood_tokens`` keeps the (context tokens, continuation tokens) it is given
        instead of running the model: what HFLM's ``loglikelihood`` and ``loglikelihood_rolling`` would score."""

        def _loglikelihood_tokens(self, requests, disable_tqdm=False, override_bs=None):
            self.scored.extend((list(context), list(continuation)) for _, context, continuation in requests)
            return [(0.0, False)] * len(requests)

    return TokenizingHFLM


def _tokenizer_of(model, tokenizer, max_length: int | None):
    """lm-eval's HFLM over the model and tokenizer (it sets a missing pad token, as it does when it evaluates)."""
    with _quiet_lm_eval():
        hflm = _tokenizing_hflm_class()(pretrained=model, tokenizer=tokenizer, batch_size=1, max_length=max_length)
    if hflm.backend != "causal":
        raise ValueError(f"lm-eval tasks are scored on causal (decoder-only) LMs; {type(model).__name__} is "
                         f"{hflm.backend}")
    hflm.scored = []
    return hflm


def _scored_pairs(hflm, instances: list) -> list[list[tuple[list[int], list[int]]]]:
    """Per request, the (context, continuation) token pairs HFLM scores for it: one for a ``loglikelihood``
    request, one per window for a ``loglikelihood_rolling`` one."""
    pairs = []
    with _quiet_lm_eval():
        for instance in instances:
            hflm.scored = []
            if instance.request_type == "loglikelihood":
                hflm.loglikelihood([instance], disable_tqdm=True)
            else:
                hflm.loglikelihood_rolling([instance], disable_tqdm=True)
            pairs.append(hflm.scored)
    return pairs


# --- the model's work ------------------------------------------------------------------------------


@torch.no_grad()
def evaluate_variants(model, tokenizer, task: LMTask, gates_list: list, *, batch_size: int,
                      variant_batch_size: int, progress: bool = True,
                      max_length: int | None = None) -> list[list]:
    """Per gate setting (None: every head on), per document of ``task``, the document's responses: per
    request, ``[logprob, is_greedy]`` (loglikelihood, each choice of multiple_choice), the summed log-likelihood
    of its windows (loglikelihood_rolling) or the generated text (generate_until), as lm-eval's HFLM over
    the model under ``gated(model, gates)`` (masked as its ``masked_as`` block says) gives them
    (``item_metrics`` turns them into metrics). ``max_length``: HFLM's (None: the model's positions, as HFLM
    reads them from its config).

    ``batch_size`` input rows (or prompts) go together; up to ``variant_batch_size`` rows (a batch repeated
    once per gate setting) go through the model together."""
    model.eval()
    hflm = _tokenizer_of(model, tokenizer, max_length)
    instances = [instance for per_doc in task.requests for instance in per_doc]
    if task.output_type == "generate_until":
        responses = _generate_variants(model, hflm, instances, gates_list, batch_size=batch_size,
                                       variant_batch_size=variant_batch_size, progress=progress)
    else:
        pairs = _scored_pairs(hflm, instances)
        flat = [pair for per_request in pairs for pair in per_request]
        scored = loglikelihood_variants(model, flat, gates_list, max_length=hflm.max_length, batch_size=batch_size,
                                        variant_batch_size=variant_batch_size, progress=progress)
        responses = []
        for per_pair in scored:
            per_request, start = [], 0
            for instance, windows in zip(instances, pairs):
                mine = per_pair[start:start + len(windows)]
                start += len(windows)
                if instance.request_type == "loglikelihood":
                    per_request.append(list(mine[0]))
                else:  # HFLM's loglikelihood_rolling: the windows' log-likelihoods summed
                    per_request.append(sum(logprob for logprob, _ in mine))
            responses.append(per_request)
    # per setting, per document: its requests' responses in order
    out = []
    for per_request in responses:
        it = iter(per_request)
        out.append([[next(it) for _ in per_doc] for per_doc in task.requests])
    return out


# --- generate_until ---------------------------------------------------------------------------------


def _generate_variants(model, hflm, instances: list, gates_list: list, *, batch_size: int, variant_batch_size: int,
                       progress: bool) -> list[list[str]]:
    """Per gate setting, per ``generate_until`` request: the generated text as HFLM's ``generate_until`` gives
    it (greedy; its context left-truncated to ``max_length - max_gen_toks`` tokens; decoded without special
    tokens and cut at the first stop string, the EOS token's text among them)."""
    from lm_eval.models.utils import postprocess_generated_text

    from headprune.evaluation.retrieval import _greedy_variants
    from headprune.evaluation.shared_layers import first_masked_layer, layer_stack, variant_progress
    from headprune.models.loading import attention_backend

    device = model.get_input_embeddings().weight.device
    prompts = _prompts(hflm, instances)
    # the model's own end of text, as generate() reads it when HFLM calls it
    eos = model.generation_config.eos_token_id
    stops = [int(t) for t in (eos if isinstance(eos, (list, tuple)) else [eos]) if t is not None]
    pad = hflm.tokenizer.pad_token_id if hflm.tokenizer.pad_token_id is not None else (stops[0] if stops else 0)
    stack = layer_stack(model)
    layers = len(stack) if stack is not None else 0
    firsts = [first_masked_layer(gates, layers) if stack is not None else 0 for gates in gates_list]
    # prompts of one length and one token budget decode together (no padding: the prompt is shared below
    # each setting's first masked layer)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (ids, _, max_gen_toks) in enumerate(prompts):
        groups.setdefault((len(ids), max_gen_toks), []).append(i)
    batches = [indices[start:start + batch_size] for _, indices in sorted(groups.items(), reverse=True)
               for start in range(0, len(indices), batch_size)]
    out: list[list] = [[None] * len(prompts) for _ in gates_list]
    with variant_progress("lm-eval generation", len(gates_list), len(prompts), "requests", enabled=progress,
                          log=log) as counter, attention_backend(model, "sdpa"):
        for batch in batches:
            ids = torch.tensor([prompts[i][0] for i in batch], dtype=torch.long, device=device)
            until = [prompts[i][1] for i in batch]
            stop_strings = _StopStrings(hflm.tokenizer, until, ids.shape[1])
            generated = _greedy_variants(model, ids, gates_list, firsts, stack, max_new_tokens=prompts[batch[0]][2],
                                         stops=stops, pad=pad, variant_batch_size=variant_batch_size,
                                         done=counter.update, stopping_criteria=[stop_strings])
            for v, per_item in enumerate(generated):
                for i, stop, tokens in zip(batch, until, per_item):
                    out[v][i] = postprocess_generated_text(hflm.tok_decode(tokens), stop, None)
    return out


def _prompts(hflm, instances: list) -> list[tuple[list[int], list[str], int]]:
    """Per ``generate_until`` request, as HFLM's ``generate_until`` reads it: (its context's token ids, left-truncated
    to ``max_length - max_gen_toks``, its stop strings, the EOS token's text among them, its ``max_gen_toks``)."""
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

    eos_text = hflm.tok_decode(hflm.eot_token_id, skip_special_tokens=False)
    prompts = []
    with _quiet_lm_eval():
        for instance in instances:
            context, settings = instance.args
            kwargs = normalize_gen_kwargs(settings, hflm.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
            max_gen_toks = kwargs.pop("max_gen_toks")
            if hflm.max_length <= max_gen_toks:
                raise ValueError(f"max_gen_toks {max_gen_toks} leaves no room for a context in "
                                 f"{hflm.max_length} tokens")
            ids, _ = hflm.tok_batch_encode([context], left_truncate_len=hflm.max_length - max_gen_toks,
                                           truncation=hflm.truncation)
            prompts.append((ids[0].tolist(), until, max_gen_toks))
    return prompts


def longest_row(model, tokenizer, task: LMTask, max_length: int | None = None) -> int:
    """The tokens of the longest row ``evaluate_variants`` puts through the model for ``task``: a
    (context + continuation) pair as HFLM cuts it to ``max_length`` + 1 tokens less the last (a rolling
    log-likelihood's window is one such pair), or a generation's truncated prompt and its ``max_gen_toks``."""
    hflm = _tokenizer_of(model, tokenizer, max_length)
    instances = [instance for per_doc in task.requests for instance in per_doc]
    if task.output_type == "generate_until":
        return max((len(ids) + max_gen_toks for ids, _, max_gen_toks in _prompts(hflm, instances)), default=1)
    pairs = [pair for per_request in _scored_pairs(hflm, instances) for pair in per_request]
    return max((min(len(context) + len(continuation) - 1, hflm.max_length) for context, continuation in pairs),
               default=1)


class _StopStrings(StoppingCriteria):
    """A generate() stopping criterion per row: a row is done once its new tokens, decoded without special
    tokens, hold one of its stop strings (rows are variant-major: row r is prompt r % prompts). HFLM's own
    criterion stops the batch when every row has; either way the text is cut at the first stop string."""

    def __init__(self, tokenizer, until: list[list[str]], prompt_length: int):
        self.tokenizer, self.until, self.prompt_length = tokenizer, until, prompt_length

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_length:], skip_special_tokens=True)
        done = [any(stop and stop in text for stop in self.until[r % len(self.until)]) for r, text in enumerate(texts)]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
