"""A task's own loss: the negative log-likelihood of each document's gold answer after its prompt, as
lm-evaluation-harness builds them. I_h and the other gradient criteria estimated on it rank a language
model's heads by what the task needs rather than by what its corpus's perplexity needs (issue #31).

The gold answer of a document, by the task's output type:

- ``multiple_choice``: the request of the gold choice (lm-eval's ``doc_to_target``: an index, or the choice's
  text; the first of several golds), its context and `` choice`` as lm-eval scores it;
- ``loglikelihood`` (LAMBADA): its one request;
- ``loglikelihood_rolling`` (WikiText): every window lm-eval scores, whole;
- ``generate_until`` (GSM8K): the prompt, then the target delimiter and ``doc_to_target`` (the reference
  answer with its reasoning, where the dataset has one): what a model that answers right would write.

The requests become tokens exactly as lm-eval's ``HFLM`` tokenizes them for scoring
(``lm_tasks._scored_pairs``). The documents are those of a split the task does not evaluate on
(``importance_split``): estimating I_h on the eval items would rank the heads by the very items it is
then scored on.
"""
from __future__ import annotations

import logging

import torch

from headprune.evaluation.lm_tasks import LMTask, TaskError, _quiet_lm_eval, _scored_pairs, _tokenizer_of, eval_split

log = logging.getLogger(__name__)


def importance_split(lm_task) -> str | None:
    """The split I_h is estimated on when the config names none: the task's training split, else its validation
    split, whichever lm-eval does not evaluate on (None: it has no other)."""
    evaluated = eval_split(lm_task)
    for split in (lm_task.config.training_split, lm_task.config.validation_split):
        if split and split != evaluated:
            return split
    return None


def gold_instances(task: LMTask) -> list:
    """Per document, the lm-eval log-likelihood requests whose continuations are its gold answer (one, or
    a rolling request's one)."""
    from lm_eval.api.instance import Instance

    chosen = []
    for doc, instances, k in zip(task.docs, task.requests, task.doc_task):
        lm_task = task.tasks[k]
        kind = lm_task.OUTPUT_TYPE
        if kind in ("loglikelihood", "loglikelihood_rolling"):
            chosen.append(instances[0])
        elif kind == "multiple_choice":
            gold = lm_task.doc_to_text(doc) if lm_task.multiple_input else lm_task.doc_to_target(doc)
            gold = gold[0] if isinstance(gold, list) else gold
            if isinstance(gold, str):
                choices = lm_task.doc_to_choice(doc)
                gold = choices.index(gold) if gold in choices else -1
            if not 0 <= gold < len(lm_task.doc_to_choice(doc)) and not lm_task.multiple_input:
                raise TaskError(f"lm-eval task {task.name!r}: a document's gold answer {gold!r} is not one of its "
                                "choices")
            chosen.append(next(instance for instance in instances if instance.idx == gold))
        else:  # generate_until: the prompt, then the reference answer
            target = lm_task.doc_to_target(doc)
            if lm_task.config.doc_to_choice is not None:
                target = lm_task.doc_to_choice(doc)[target]
            target = target[0] if isinstance(target, list) else target
            context = instances[0].args[0]
            chosen.append(Instance(request_type="loglikelihood", doc=doc, idx=0,
                                   arguments=(context, f"{lm_task.config.target_delimiter}{target}")))
    return chosen


def task_loss_batches(model, tokenizer, task: LMTask, batch_size: int, max_length: int | None = None) -> list[dict]:
    """Batches (input_ids, attention_mask, labels) whose loss is the task's: each document's gold continuation
    after its context, the context's positions not scored (label -100); sequences cut to their last
    ``max_length`` tokens (HFLM's; None: the model's), sorted by length so that batches pad little (right
    padding)."""
    hflm = _tokenizer_of(model, tokenizer, max_length)
    with _quiet_lm_eval():
        pairs = [pair for per_request in _scored_pairs(hflm, gold_instances(task)) for pair in per_request]
    if not pairs:
        raise TaskError(f"lm-eval task {task.name!r}: no documents to estimate head importance on")
    sequences = []
    for context, continuation in pairs:
        ids = (context + continuation)[-hflm.max_length:]
        scored = min(len(continuation), len(ids) - 1)  # the first token has no prediction before it
        sequences.append((ids, len(ids) - scored))
    sequences.sort(key=lambda item: len(item[0]))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    batches = []
    for start in range(0, len(sequences), batch_size):
        part = sequences[start:start + batch_size]
        width = max(len(ids) for ids, _ in part)
        input_ids = torch.full((len(part), width), pad, dtype=torch.long)
        attention_mask = torch.zeros((len(part), width), dtype=torch.long)
        labels = torch.full((len(part), width), -100, dtype=torch.long)
        for row, (ids, first_scored) in enumerate(part):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention_mask[row, :len(ids)] = 1
            labels[row, first_scored:len(ids)] = torch.tensor(ids[first_scored:])
        batches.append({"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels})
    log.info("task loss: %d gold continuations of %s, %d scored tokens", len(pairs), task.name,
             sum(int((b["labels"] != -100).sum()) for b in batches))
    return batches
