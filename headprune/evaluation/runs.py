"""The study's experiments on top of gates and scores: what to evaluate, in which order to prune.

A head is named by (attn_type, layer, head), 0-based, as in every CSV. An evaluation
set is translation (sources, references, target language), classification (sentence pairs,
labels, metric), language modelling (token windows; perplexity, lower is better) or long-context
retrieval (needle-in-a-haystack prompts, ``headprune.data.retrieval``; the share of answers holding the
needle's value, higher is better). ``run`` gives the per-item outputs (translations, class predictions,
per window the summed NLL and its token count, or greedy answers)
that scores and significance tests are computed from; ``run_variants`` gives
them for several gate settings in one pass.
"""
from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from headprune.evaluation import metrics
# Below the kinds of score, which build evaluation sets; still importable from here.
from headprune.evaluation.evalset import EvalSet  # noqa: F401
from headprune.evaluation.kinds import kind_of
from headprune.models.masking import Masking, as_mode, masked_as

if TYPE_CHECKING:  # tables are read by the scripts; an evaluation job need not import pandas (0.4 s)
    import pandas as pd

# The most (setting, item) rows a pass when the settings name none and memory allows: beyond it a CPU pass is no
# faster a row (benchmarks/sweep_studies.py), and a GPU's is near its best.
VARIANT_ROWS = 256

# The model-side modules (torch, transformers: seconds to import) are imported inside the
# functions that run a model, so that significance and plotting jobs start fast.

HeadId = tuple[str, int, int]


def head_name(head: HeadId) -> str:
    return f"{head[0]}-{head[1]}-{head[2]}"


def parse_head_name(name: str) -> HeadId:
    attn_type, layer, head = name.rsplit("-", 2)
    return attn_type, int(layer), int(head)


def all_heads(model_or_shape) -> list[HeadId]:
    """Every head of a model (or of a ``head_shape``), in the model's order.

    >>> all_heads({"enc_self": (2, 2)})
    [('enc_self', 0, 0), ('enc_self', 0, 1), ('enc_self', 1, 0), ('enc_self', 1, 1)]
    """
    from headprune.models.heads import head_shape

    shape = model_or_shape if isinstance(model_or_shape, dict) else head_shape(model_or_shape)
    return [(t, layer, h) for t, (layers, heads) in shape.items() for layer in range(layers) for h in range(heads)]


def gates_without(model, heads: Iterable[HeadId]):
    """0/1 gates with the given heads switched off (for ``gated`` or ``run``).

    >>> gates_without(model, [("dec_self", 0, 1)])["dec_self"][0].tolist()
    [1.0, 0.0, 1.0, 1.0]
    """
    from headprune.models.heads import full_gates

    gates = full_gates(model)
    for attn_type, layer, head in heads:
        gates[attn_type][layer, head] = 0.0
    return gates


def gates_keeping_one(model, attn_type: str, layer: int, head: int):
    """Gates that switch off every head of one layer but ``head`` (the paper's Section 3.3)."""
    from headprune.models.heads import full_gates

    gates = full_gates(model)
    gates[attn_type][layer, :] = 0.0
    gates[attn_type][layer, head] = 1.0
    return gates


@dataclass
class EvalSettings:
    """How a set is evaluated: batch sizes, beam and BLEU variant, how a switched-off head is masked.

    >>> EvalSettings(batch_size=8, masking="uniform").masking
    Uniform()
    """

    batch_size: int = 64
    beam: int = 5
    lenpen: float = 1.0
    max_length: int = 128
    bleu: str = "detokenized"  # or "tokenized", as the paper's pruning script reports
    # Progress lines (headprune.io.progress) through logging at INFO: shown where logging shows INFO, as in
    # a job's log and the headprune command; False: none.
    progress: bool = True
    # Several gate settings share one forward or generate() up to this many (setting, item) rows;
    # batch_size alone decides which items share a batch, so the outputs do not depend on it. None: as many
    # as fit in the memory there is (rows_that_fit), at most VARIANT_ROWS.
    variant_batch_size: int | None = None
    # How a gate of 0 masks a head: a mode of headprune.models.masking (Zero(), the paper's, Uniform(),
    # Streaming(sink, recent), Mean(constants), Optimal(constants), Resample(pool, seed, draw, draws)), given as
    # the object, a word that needs nothing more ("zero", "uniform") or a job's params {"word": ..., its fields};
    # None: the paper's (masking.DEFAULT). A mode object once built; run_variants opens masked_as(model, it) around
    # the kind's evaluation, which names no masking.
    masking: Masking | str | dict | None = None
    max_new_tokens: int = 32  # retrieval: the longest answer generated (greedy)

    def __post_init__(self):
        self.masking = as_mode(self.masking)


def run_variants(model, tokenizer, evalset: EvalSet, gates_list: list,
                 settings: EvalSettings = EvalSettings()) -> list[list]:
    """Per-item outputs of the model under each gate setting (None: all heads on), in one pass over the set.

    The one place where a job's masking meets its model: the kind's evaluation gates the model inside
    ``masked_as(model, settings.masking)`` and names no masking of its own."""
    settings = rows_that_fit(model, tokenizer, evalset, settings)
    with masked_as(model, settings.masking):
        return kind_of(evalset.kind).run_variants(model, tokenizer, evalset, gates_list, settings)


def rows_that_fit(model, tokenizer, evalset: EvalSet, settings: EvalSettings) -> EvalSettings:
    """``settings`` as told, or with as many (setting, item) rows a pass as fit in the memory there is, at most
    ``VARIANT_ROWS`` (``headprune.models.memory``: the job's ``mem_mb``, else a headroom that grows with the
    weights); not even one row is one line that says what is needed."""
    if settings.variant_batch_size is not None:
        return settings
    from headprune.models.memory import free_bytes, sized

    device = next(model.parameters()).device
    positions = kind_of(evalset.kind).row_positions(model, tokenizer, evalset, settings)
    rows = sized(model, positions, free_bytes(model, device), None, VARIANT_ROWS, "variant_batch_size")
    return dataclasses.replace(settings, variant_batch_size=rows)


def draw_settings(settings: EvalSettings) -> list[EvalSettings]:
    """The settings of each draw whose scores are averaged: ``settings`` itself, or one per masking of the mode's
    ``each_draw`` (resample masking with ``draws`` K > 1: draws d, d + 1, ..., d + K - 1)."""
    draws = settings.masking.each_draw()
    if len(draws) == 1:
        return [settings]
    return [dataclasses.replace(settings, masking=masking) for masking in draws]


def switches_nothing_off(gates) -> bool:
    """True for gates under which every mode gives the full model: None, or every gate 1."""
    if gates is None:
        return True
    import torch

    return all(bool((torch.as_tensor(gate).detach() == 1).all()) for gate in gates.values())


def scored_variants(model, tokenizer, evalset: EvalSet, gates_list: list,
                    settings: EvalSettings = EvalSettings()) -> list[dict]:
    """Each gate setting evaluated and scored, as every experiment scores its settings: per setting "score",
    "outputs" (per item, what the paired tests compare), "draw_scores" and ``scores_beside``'s scores.

    The one place where several resample draws (``EvalSettings.draws`` K > 1, ``draw_settings``) are run and
    averaged: every setting is evaluated under each draw's masking (a setting that switches nothing off once:
    it is the full model under every draw), "score" and the scores beside it are the mean over the K draws,
    "draw_scores" each draw's score, and "outputs" the FIRST draw's per-item outputs, so a paired test of a
    setting against the full model is the test of one draw (K draws of the same items are not K times the
    items; docs/method.md). With one draw (every other mode) "score" is ``score`` of the outputs.

    >>> full, = scored_variants(model, tokenizer, evalset, [None])
    >>> full["score"] == score(evalset, run(model, tokenizer, evalset)), full["draw_scores"] == [full["score"]]
    (True, True)
    """
    draws = draw_settings(settings)
    first = run_variants(model, tokenizer, evalset, gates_list, draws[0])
    per_draw = [first]
    # the settings a later draw changes (those that switch a head off), by their index in gates_list
    redrawn = [i for i, gates in enumerate(gates_list) if not switches_nothing_off(gates)] if len(draws) > 1 else []
    for later in draws[1:]:
        outputs = list(first)
        for i, out in zip(redrawn, run_variants(model, tokenizer, evalset, [gates_list[i] for i in redrawn], later)):
            outputs[i] = out
        per_draw.append(outputs)
    results = []
    for i in range(len(gates_list)):
        each = [outputs[i] for outputs in per_draw]
        scores = [score(evalset, out, settings.bleu) for out in each]
        besides = [scores_beside(evalset, out) for out in each]
        beside = {key: float(np.mean([b[key] for b in besides])) for key in besides[0]}
        results.append({"score": float(np.mean(scores)) if len(scores) > 1 else scores[0], **beside,
                        "outputs": each[0], "draw_scores": scores})
    return results


def run(model, tokenizer, evalset: EvalSet, gates=None, settings: EvalSettings = EvalSettings()) -> list:
    """Per-item outputs of the (gated) model: translations, predicted class indices, or per window
    [summed NLL, predicted tokens].

    >>> outputs = run(model, tokenizer, evalset, gates_without(model, [("dec_self", 1, 0)]))
    >>> len(outputs) == len(evalset)
    True
    """
    return run_variants(model, tokenizer, evalset, [gates], settings)[0]


def score(evalset: EvalSet, outputs: list, bleu: str = "detokenized") -> float:
    """The set's metric of ``run``'s outputs: BLEU, accuracy/MCC/F1, perplexity or retrieval accuracy.

    >>> score(evalset, run(model, tokenizer, evalset)) > 1  # a perplexity
    True
    """
    return kind_of(evalset.kind).score(evalset, outputs, bleu)


def scores_beside(evalset: EvalSet, outputs: list) -> dict:
    """Scores reported next to the main one: for retrieval, the mean ROUGE-1 recall of the needle sentence
    in the answers (Wu et al.'s measure); nothing for the other kinds."""
    return kind_of(evalset.kind).scores_beside(evalset, outputs)


def significance(evalset: EvalSet, full_outputs: list, ablated_outputs: list, *, resamples: int = 1000,
                 seed: int = 0) -> dict:
    """Paired bootstrap (compare-mt for BLEU; over windows for perplexity, over items for retrieval) and, for
    classification, the paper's paired t-test."""
    return kind_of(evalset.kind).significance(evalset, full_outputs, ablated_outputs, resamples=resamples, seed=seed)


def compare_to_full(evalset: EvalSet, full: dict, variant: dict, *, resamples: int = 1000, seed: int = 0,
                    alpha: float = 0.01) -> dict:
    """Score change of a variant (a head off, one head kept, ...) against the full model, and its significance.

    ``full`` and ``variant`` hold "score" and per-item "outputs". A change is significant
    when p < alpha: the bootstrap's p for BLEU, perplexity and retrieval, the paper's t-test for
    classification.
    ``delta`` is score - full score, so it is positive when perplexity got worse.

    >>> full, off = (run(model, tokenizer, evalset, gates) for gates in (None, gates_without(model, [("dec_self", 0, 0)])))
    >>> result = compare_to_full(evalset, {"score": score(evalset, full), "outputs": full},
    ...                          {"score": score(evalset, off), "outputs": off}, resamples=100)
    >>> sorted(result)[:4]
    ['alpha', 'delta', 'metric', 'n_resamples']
    """
    test = significance(evalset, full["outputs"], variant["outputs"], resamples=resamples, seed=seed)
    p = test[kind_of(evalset.kind).decisive_p]
    return {"metric": evalset.metric, "score_full": full["score"], "score": variant["score"],
            "delta": variant["score"] - full["score"], **test, "significant": bool(p < alpha), "alpha": alpha,
            "n_resamples": resamples}


# --- pruning orders -----------------------------------------------------------------------


def importance_order(importance: pd.DataFrame, attn_type: str | None = None) -> list[HeadId]:
    """Least important first (the paper prunes by increasing I_h); ties in CSV order."""
    table = importance if attn_type is None else importance[importance.attn_type == attn_type]
    table = table.sort_values("importance", kind="stable")
    return [(r.attn_type, int(r.layer), int(r.head)) for r in table.itertuples()]


def oracle_order(ablation: pd.DataFrame, attn_type: str | None = None) -> list[HeadId]:
    """Heads whose removal alone hurts least (best ablated score: the largest BLEU or accuracy, the lowest
    perplexity) first.

    From a screened Table 1 (``headprune.analyses.screening``): the heads screened only first, smallest screen
    score first (the screen ranked them below every verified head), then the heads ablated exactly in the oracle's
    order; the order is then the screen's where no head was ablated."""
    table = ablation if attn_type is None else ablation[ablation.attn_type == attn_type]
    sign = metrics.better_sign(table["metric"].iloc[0]) if "metric" in table and len(table) else 1
    screened_only = table["score"].isna() & table["verification"].notna() if "verification" in table else None
    if screened_only is not None and screened_only.any():
        first = table[screened_only].sort_values("screen", kind="stable")
        rest = table[~screened_only]
        rest = rest.assign(_goodness=sign * rest["score"]).sort_values("_goodness", ascending=False, kind="stable")
        return [(r.attn_type, int(r.layer), int(r.head)) for r in (*first.itertuples(), *rest.itertuples())]
    table = table.assign(_goodness=sign * table["score"]).sort_values("_goodness", ascending=False, kind="stable")
    return [(r.attn_type, int(r.layer), int(r.head)) for r in table.itertuples()]


def random_order(heads: list[HeadId], seed: int) -> list[HeadId]:
    order = list(heads)
    random.Random(seed).shuffle(order)
    return order


def pruning_steps(order: list[HeadId], step_percent: float = 10.0) -> list[tuple[float, list[HeadId]]]:
    """(percent pruned, heads removed) for 0%, step%, 2*step%, ... up to 100% of the heads in ``order``.

    The order is fixed once (no recomputation between steps, no per-layer protection),
    as in the authors' code; each step removes round(percent * N / 100) heads.
    """
    total = len(order)
    steps = []
    k = 0
    while True:
        percent = min(100.0, round(k * step_percent, 6))
        steps.append((percent, order[:int(round(percent * total / 100.0))]))
        if percent >= 100.0:
            return steps
        k += 1
