"""One model, one test set, one call: the single-head sweep with significance (a table like
``eval/ablation.csv``) and pruning curves (a table like ``pruning.csv``), composed of ``runs``.

Also the test sets and scoring batches that the public API and the ``headprune`` command build from a
plain text file (language modelling, windows of tokens) or a GLUE-format TSV (classification). The
pipeline's scripts use ``ablation_table`` (scripts/significance.py) and ``pruning_tables``
(scripts/prune.py), so the tables are the same whichever way they are made.

The examples assume a causal LM and its tokenizer (``headprune.load_model``) and, as in the README,
``evalset = evalset_from_text(tokenizer, text, window=16)``.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from headprune.evaluation.kinds import kind_of
from headprune.analyses.layouts import LAYOUTS, layout_steps, paper_layout, removal_units
from headprune.evaluation.runs import (EvalSet, EvalSettings, HeadId, all_heads, compare_to_full, gates_without,
                                        pruning_steps, scored_variants)
from headprune.io.progress import counted

if TYPE_CHECKING:
    import pandas as pd

# The columns of eval/ablation.csv and pruning.csv, in their order.
ABLATION_COLUMNS = ("study", "testset", "attn_type", "layer", "head", "metric", "score_full", "score", "delta",
                    "p_bootstrap", "p_ttest", "significant", "alpha", "n_resamples")
PRUNING_COLUMNS = ("study", "order", "scope", "layout", "step", "percent_pruned", "heads_pruned", "heads_left", "score",
                   "metric")


def evalset_from_text(tokenizer, text: str, window: int = 512, max_windows: int | None = None) -> EvalSet:
    """A language-modelling test set: the text tokenized once, in windows of ``window`` tokens, each starting
    with the BOS the tokenizer adds, if it adds one (perplexity; ``headprune.evaluation.perplexity``).

    >>> evalset = evalset_from_text(tokenizer, text, window=16)
    >>> evalset.kind, evalset.metric, len(evalset.sources[0])
    ('language_modeling', 'perplexity', 16)
    """
    from headprune.evaluation.perplexity import windows

    chunks = windows(tokenizer, text, window, max_windows)
    return EvalSet("language_modeling", chunks, chunks, "perplexity")


def evalset_from_tsv(path, metric: str = "accuracy", max_items: int | None = None) -> EvalSet:
    """A classification test set from a GLUE-format TSV (header ``text_a text_b label``, integer labels;
    ``headprune.data.glue.read_glue_split``), scored by accuracy, mcc or f1.

    >>> _ = open("dev.tsv", "w").write("text_a\\ttext_b\\tlabel\\ngood film\\t\\t1\\nbad film\\t\\t0\\n")
    >>> evalset = evalset_from_tsv("dev.tsv", metric="f1")
    >>> evalset.kind, evalset.references, evalset.sources[0]
    ('classification', [1, 0], ('good film', ''))
    """
    from headprune.data.glue import read_glue_split
    from headprune.evaluation.metrics import CLASSIFICATION_METRICS

    if metric not in CLASSIFICATION_METRICS:
        raise ValueError(f"unknown classification metric {metric!r}; expected one of {CLASSIFICATION_METRICS}")
    pairs, labels = read_glue_split(path)
    return EvalSet("classification", labels[:max_items], pairs[:max_items], metric)


def evalset_batches(tokenizer, evalset: EvalSet, batch_size: int = 32, max_length: int = 128) -> list[dict]:
    """Batches with labels to score heads on (``head_scores``): a language-modelling set's windows, a
    classification set's sentence pairs and labels, a translation set's sources and references.

    >>> batches = evalset_batches(tokenizer, evalset, batch_size=4)
    >>> sorted(batches[0])
    ['attention_mask', 'input_ids', 'labels']
    """
    return kind_of(evalset.kind).scoring_batches(tokenizer, evalset, batch_size, max_length)


def ablation_table(evalset: EvalSet, full: dict, ablated: dict[HeadId, dict], *, study: str = "",
                   testset: str = "", resamples: int = 1000, seed: int = 0, alpha: float = 0.01,
                   progress: bool = True) -> pd.DataFrame:
    """One row per head switched off alone, as eval/ablation.csv: its score, the change from the full model
    and the significance of that change (``runs.compare_to_full``), sorted by attention type, layer, head.

    ``full`` and each ``ablated[head]`` hold "score" and per-item "outputs" (see ``single_head_sweep``).
    """
    import pandas as pd

    heads = counted(ablated.items(), f"significance of {len(ablated)} heads, {resamples} resamples each", "heads",
                    enabled=progress, log=logging.getLogger(__name__))
    rows = [{"study": study, "testset": testset, "attn_type": attn_type, "layer": layer, "head": head,
             **compare_to_full(evalset, full, result, resamples=resamples, seed=seed, alpha=alpha)}
            for (attn_type, layer, head), result in heads]
    return pd.DataFrame(rows).sort_values(["attn_type", "layer", "head"])


def single_head_sweep(model, tokenizer, evalset: EvalSet, settings: EvalSettings | None = None, *,
                      heads: list[HeadId] | None = None, resamples: int = 1000, seed: int = 0, alpha: float = 0.01,
                      study: str = "", testset: str = "") -> pd.DataFrame:
    """Switch off each head alone (every head, or ``heads``) and test the change against the full model:
    one row per head, the columns of eval/ablation.csv (score_full, score, delta, p_bootstrap, p_ttest,
    significant at ``alpha``). The full model and all the ablations share one pass over the set.

    >>> table = single_head_sweep(model, tokenizer, evalset, resamples=100)
    >>> len(table) == len(all_heads(model)), table.columns[5:9].tolist()
    (True, ['metric', 'score_full', 'score', 'delta'])
    """
    settings = settings or EvalSettings()
    heads = list(heads) if heads is not None else all_heads(model)
    results = scored_variants(model, tokenizer, evalset, [None] + [gates_without(model, [head]) for head in heads],
                              settings)
    return ablation_table(evalset, results[0], dict(zip(heads, results[1:])), study=study, testset=testset,
                          resamples=resamples, seed=seed, alpha=alpha, progress=settings.progress)


def one_head_per_layer(model, tokenizer, selection: EvalSet, test: EvalSet, settings: EvalSettings | None = None, *,
                       resamples: int = 1000, seed: int = 0, alpha: float = 0.01, study: str = "") -> pd.DataFrame:
    """The paper's Section 3.3 (Tables 2-3) in one call: each layer reduced to one head (the others switched off by
    ``settings``' masking), the head chosen by its score on ``selection`` (the best; the first among equals), that
    setting scored on ``test`` and tested against the full model: one row per layer, the columns of
    one_head_per_layer.csv (attn_type, layer, best_head, selection_score, metric, score_full, score, delta, ...).
    Every layer's candidates share one pass over the selection set, the best heads one pass over the test set (as
    scripts/one_head_layer.py and one_head_significance.py do, a job per layer)."""
    import pandas as pd

    from headprune.evaluation.metrics import better_sign
    from headprune.evaluation.runs import gates_keeping_one
    from headprune.models.heads import head_shape

    settings = settings or EvalSettings()
    keeping = {(attn_type, layer): [gates_keeping_one(model, attn_type, layer, head) for head in range(heads)]
               for attn_type, (layers, heads) in head_shape(model).items() for layer in range(layers)}
    scored = iter(scored_variants(model, tokenizer, selection, [g for gates in keeping.values() for g in gates],
                                  settings))
    selection_scores = {key: [next(scored)["score"] for _ in gates] for key, gates in keeping.items()}
    sign = better_sign(selection.metric)
    best = {key: max(range(len(values)), key=lambda head: sign * values[head])
            for key, values in selection_scores.items()}
    full, *tested = scored_variants(model, tokenizer, test, [None] + [keeping[key][best[key]] for key in keeping],
                                    settings)
    rows = [{"study": study, "attn_type": attn_type, "layer": layer, "best_head": best[attn_type, layer],
             "selection_score": selection_scores[attn_type, layer][best[attn_type, layer]],
             **compare_to_full(test, full, result, resamples=resamples, seed=seed, alpha=alpha)}
            for (attn_type, layer), result in zip(keeping, tested)]
    return pd.DataFrame(rows)


def pruning_tables(model, tokenizer, evalset: EvalSet, orders: dict[str, list[HeadId]], *,
                   step_percent: float = 10.0, settings: EvalSettings | None = None, study: str = "",
                   scope: str = "all", total_heads: int | None = None,
                   layouts: Sequence[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """Prune in each order (name -> heads, first pruned first) in each of ``layouts`` (free: steps of
    ``step_percent`` % of its heads; uniform: one head or key/value group of every layer a step,
    ``headprune.analyses.layouts``; None: the paper's, free) and score every step: (the pruning.csv rows, per order
    the free layout's per-step removed heads and per-item outputs).

    Every step of every order is one gate setting and all share one pass over the set (identical settings
    are evaluated once). ``total_heads`` (default: the model's) is what heads_left counts down from.
    """
    import pandas as pd

    log = logging.getLogger(__name__)
    settings = settings or EvalSettings()
    total_heads = len(all_heads(model)) if total_heads is None else total_heads
    layouts = layouts or (paper_layout(),)
    needs_units = any(LAYOUTS[layout].needs_units for layout in layouts)
    units = removal_units(model, None if scope == "all" else scope) if needs_units else None
    steps = {(name, layout): layout_steps(order, layout, step_percent=step_percent, units=units)
             for layout in layouts for name, order in orders.items()}
    settings_of = {}  # one gate setting per distinct set of removed heads: every order starts from the full model
    for order_steps in steps.values():
        for _, removed in order_steps:
            settings_of.setdefault(frozenset(removed), len(settings_of))
    results = scored_variants(model, tokenizer, evalset, [gates_without(model, removed) for removed in settings_of],
                              settings)
    outputs, scores = [r["outputs"] for r in results], [r["score"] for r in results]
    rows, step_outputs = [], {}
    for (name, layout), order_steps in steps.items():
        for step, (percent, removed) in enumerate(order_steps):
            index = settings_of[frozenset(removed)]
            log.info("%s %s %s (%s): %.0f%% pruned (%d heads): %s = %.4f", study, scope, name, layout, percent,
                     len(removed), evalset.metric, scores[index])
            rows.append({"study": study, "order": name, "scope": scope, "layout": layout, "step": step,
                         "percent_pruned": percent, "heads_pruned": len(removed),
                         "heads_left": total_heads - len(removed), "score": scores[index], "metric": evalset.metric})
            if LAYOUTS[layout].paper:  # what the criteria are compared on
                step_outputs.setdefault(name, []).append({
                    "percent_pruned": percent, "removed": ["-".join(map(str, h)) for h in removed],
                    "outputs": outputs[index]})
    return pd.DataFrame(rows), step_outputs


def pruning_curve(model, tokenizer, evalset: EvalSet, order: list[HeadId], step_percent: float = 10.0,
                  settings: EvalSettings | None = None, *, name: str = "order", study: str = "") -> pd.DataFrame:
    """Prune the heads in ``order`` (first pruned first, e.g. ``criterion_order``) in steps of
    ``step_percent`` % and score every step: the rows of pruning.csv (step, percent_pruned, heads_pruned,
    heads_left, score, metric). Heads are switched off by gates; the model is not changed.

    >>> curve = pruning_curve(model, tokenizer, evalset, all_heads(model), step_percent=50)
    >>> curve.percent_pruned.tolist(), curve.heads_left.tolist()[-1]
    ([0.0, 50.0, 100.0], 0)
    """
    return pruning_tables(model, tokenizer, evalset, {name: order}, step_percent=step_percent, settings=settings,
                          study=study, total_heads=len(order))[0]


def heads_by_layer(heads: list[HeadId]) -> dict[str, dict[int, list[int]]]:
    """Heads as ``prune_heads`` takes them: {attn_type: {layer: [heads]}}.

    >>> heads_by_layer([("dec_self", 1, 2), ("dec_self", 0, 3), ("dec_self", 1, 0)])
    {'dec_self': {1: [0, 2], 0: [3]}}
    """
    spec: dict[str, dict[int, list[int]]] = {}
    for attn_type, layer, head in heads:
        spec.setdefault(attn_type, {}).setdefault(int(layer), []).append(int(head))
    return {t: {layer: sorted(hs) for layer, hs in layers.items()} for t, layers in spec.items()}


def remove_heads(model, heads: list[HeadId]):
    """Physically remove ``heads`` from ``model``, in place (``headprune.models.prune.prune_heads``): their
    query/key/value rows and output-projection columns go, and the model's config records them, so
    ``model.save_pretrained(folder)`` then ``load_model(folder)`` gives the pruned model back. Returns it.

    >>> import torch
    >>> batch = evalset_batches(tokenizer, evalset, 2)[0]
    >>> with torch.no_grad(), gated(model, gates_without(model, [("dec_self", 0, 1)])):
    ...     masked = model(**batch).logits
    >>> _ = remove_heads(model, [("dec_self", 0, 1)])
    >>> with torch.no_grad():
    ...     torch.allclose(model(**batch).logits, masked, atol=1e-5)
    True
    >>> model.save_pretrained("tiny-pruned"); tokenizer.save_pretrained("tiny-pruned")  # doctest: +ELLIPSIS
    (...)
    >>> load_model("tiny-pruned")[0].model.layers[0].self_attn.q_proj.out_features  # 3 of 4 heads of 8 dims
    24
    """
    from headprune.models.prune import prune_heads

    return prune_heads(model, heads_by_layer(heads))
