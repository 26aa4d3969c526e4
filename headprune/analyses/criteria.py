"""Head criteria as pruning orders, and how their pruning curves compare.

A criterion scores every head; pruning removes the lowest-scored heads first, globally, in the
paper's steps (``runs.pruning_steps``). The static criteria are columns of
``importance.csv`` (one forward/backward pass, ``headprune.scoring.importance``) or of the single-head
ablation (oracle); ``iterative`` re-estimates I_h after every step (Hugging Face bertology), so
its order is built by ``iterative_order`` with the model at hand.

- ``importance``           I_h with the configured estimator (normalized per layer if configured)
- ``importance_token|example|batch``  I_h with that placement of the absolute value
- ``fisher``               Kwon et al. (2022): mean over examples of (dL_x/dxi_h)^2
- ``attention_gradient``   E|dL/dA_h| (seed 003)
- ``confidence``           Voita et al.: mean largest non-EOS attention weight; least confident first
- ``entropy_low``          lowest normalized attention entropy first (keeps the spread-out heads)
- ``entropy_high``         highest normalized attention entropy first (keeps the focused heads)
- ``combined``             I_h and entropy, seed 000: (1 - w) rank(I_h) + w rank(+-entropy)
- ``iterative``            I_h re-estimated on the pruned model before every step
- ``oracle``               the heads whose removal alone hurts least first
- ``random``               a seeded shuffle
- ``retrieval``            Wu et al.'s retrieval score (head_roles.csv of a retrieval study), lowest first:
                           keeps the heads that copy from the context
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from headprune.evaluation.runs import HeadId, importance_order, oracle_order, pruning_steps, random_order
from headprune.io.progress import counted
from headprune.io.registry import Registry
from headprune.scoring.importance import ESTIMATORS

log = logging.getLogger(__name__)



class Criterion:
    """A head criterion: the order it prunes a scope's heads in (``order``, first pruned first), and what the
    pipeline, the command line and the figures know of it. One class per criterion (or one instance per member
    of a family, as I_h per estimator), registered in ``CRITERIA`` by its word: the config's enum and the prune
    rule's wildcard list the words in the registry's order, and no code outside the class compares one."""

    # What its prune job reads besides the model, its test set and importance.csv (rules/pruning.smk,
    # headprune.stages.pruning.inputs): "roles" (the head roles), "ablation" (the single-head ablation),
    # "importance_data" (the data I_h is re-estimated on after each step), or None
    reads: ClassVar[str | None] = None
    # Whether it waits for the whole single-head ablation: then it has a prune job of its own
    waits_for_ablation: ClassVar[bool] = False
    # Whether its order is made from importance.csv's scores (the command line computes them only then)
    scored: ClassVar[bool] = True
    # Whether its order is made from the tables alone (``criterion_order``); else ``iterative_order`` makes it,
    # the model at hand
    static: ClassVar[bool] = True
    # One of the paper's orders (Figure 3, in the registry's order); the others are compared in criteria.csv
    in_paper: ClassVar[bool] = False
    # The order the others are tested against, which Figures 4 and 6 and the scorecard read (I_h)
    reference: ClassVar[bool] = False
    # Figure 3's legend and line style, and the criteria figure's legend (None: its word, matplotlib's style)
    label: ClassVar[str | None] = None
    short_label: ClassVar[str | None] = None
    linestyle: ClassVar[str | None] = None

    def order(self, asked: _Asked) -> list[HeadId]:
        raise NotImplementedError(f"{type(self).__name__} makes no order from the tables (iterative_order does)")


CRITERIA: Registry[Criterion] = Registry("criterion", base=Criterion)


def criterion(name: str):
    """A class decorator registering one instance of the class as the criterion ``name``."""
    def register(cls):
        CRITERIA.add(name, cls())
        return cls
    return register


def _heads(table: pd.DataFrame) -> list[HeadId]:
    return [(r.attn_type, int(r.layer), int(r.head)) for r in table.itertuples()]


def _in_scope(table: pd.DataFrame, attn_type: str | None) -> pd.DataFrame:
    return table if attn_type is None else table[table.attn_type == attn_type]


def _ascending(table: pd.DataFrame, values) -> list[HeadId]:
    """Heads sorted by ``values`` ascending; ties keep the table's order."""
    return _heads(table.assign(_key=np.asarray(values, dtype=float)).sort_values("_key", kind="stable"))


def importance_column(importance: pd.DataFrame, estimator: str, normalize: bool) -> np.ndarray:
    """I_h with one placement of the absolute value, l2-normalized per layer and attention type if
    ``normalize`` (as ``importance.normalize_per_layer`` does for the ``importance`` column)."""
    values = importance[f"importance_{estimator}"].astype(float)
    if normalize:
        norms = values.groupby([importance["attn_type"], importance["layer"]]).transform(lambda v: np.sqrt((v ** 2).sum()))
        values = values / norms.where(norms > 0, 1.0)
    return values.to_numpy()


def percentile_rank(values) -> np.ndarray:
    """Each value's rank among ``values`` scaled to [0, 1] (ties share their mean rank)."""
    ranks = pd.Series(np.asarray(values, dtype=float)).rank(method="average").to_numpy()
    return (ranks - 1) / max(len(ranks) - 1, 1)


def combined_scores(importance: np.ndarray, entropy: np.ndarray, weight: float, keep: str) -> np.ndarray:
    """Seed 000's two-fold criterion: (1 - weight) * rank(I_h) + weight * rank(entropy), with the entropy
    rank reversed when ``keep`` is "low" (focused heads kept). Ranks make the two scales comparable."""
    if keep not in ("high", "low"):
        raise ValueError(f"combined criterion: keep must be 'high' or 'low' (entropy heads kept), not {keep!r}")
    entropy_rank = percentile_rank(entropy if keep == "high" else -np.asarray(entropy, dtype=float))
    return (1 - weight) * percentile_rank(importance) + weight * entropy_rank


def criterion_order(name: str, importance: pd.DataFrame, heads: list[HeadId], *, attn_type: str | None = None,
                    ablation: pd.DataFrame | None = None, seed: int = 0, estimator: str = "token",
                    normalize: bool = True, entropy_weight: float = 0.5, keep_entropy: str = "low",
                    roles: pd.DataFrame | None = None) -> list[HeadId]:
    """The heads of a scope (all, or one attention type) in the order ``name`` prunes them; ``heads`` are
    the scope's heads in the model's order (the random order shuffles them). ``roles``: a language
    model's head_roles.csv, for the retrieval criterion (a head without a score, NaN, goes first).

    >>> scores = head_scores(model, evalset_batches(tokenizer, evalset, 8), progress=False)
    >>> order = criterion_order("entropy_low", scores, all_heads(model))  # any of CRITERIA but iterative
    >>> len(order), order[0][0]
    (8, 'dec_self')
    """
    found = CRITERIA.get(name, None)
    if found is None or not found.static:
        raise ValueError(f"unknown static criterion {name!r}; expected one of "
                         f"{[c for c, entry in CRITERIA.items() if entry.static]} (the others: iterative_order)")
    return found.order(_Asked(importance, heads, attn_type, ablation, seed, estimator, normalize, entropy_weight,
                        keep_entropy, roles))


@dataclass(frozen=True)
class _Asked:
    """What criterion_order was given, as each criterion's order reads it."""

    importance: pd.DataFrame
    heads: list
    attn_type: str | None
    ablation: pd.DataFrame | None
    seed: int
    estimator: str
    normalize: bool
    entropy_weight: float
    keep_entropy: str
    roles: pd.DataFrame | None

    @property
    def table(self) -> pd.DataFrame:
        """importance.csv's rows of the scope."""
        return _in_scope(self.importance, self.attn_type).reset_index(drop=True)


@criterion("importance")
class Importance(Criterion):
    """I_h with the configured estimator (the paper's order, Figure 3's solid line)."""
    in_paper, reference, label, short_label, linestyle = True, True, "importance $I_h$", "$I_h$", "-"

    def order(self, asked):
        return importance_order(asked.importance, asked.attn_type)


class ImportanceEstimated(Criterion):
    """I_h with one placement of the absolute value (``importance_<estimator>``), one instance per estimator."""

    def __init__(self, estimator: str):
        self.estimator = estimator

    def order(self, asked):
        table = asked.table
        return _ascending(table, importance_column(table, self.estimator, asked.normalize))


for _estimator in ESTIMATORS:
    CRITERIA.add(f"importance_{_estimator}", ImportanceEstimated(_estimator))


class Column(Criterion):
    """A column of importance.csv, ascending (one instance per column)."""

    def __init__(self, column: str):
        self.column = column

    def order(self, asked):
        table = asked.table
        return _ascending(table, table[self.column])


for _column_name in ("fisher", "attention_gradient", "confidence"):
    CRITERIA.add(_column_name, Column(_column_name))


@criterion("entropy_low")
class EntropyLow(Criterion):
    def order(self, asked):
        table = asked.table
        return _ascending(table, table["entropy_normalized"].to_numpy(dtype=float))


@criterion("entropy_high")
class EntropyHigh(Criterion):
    def order(self, asked):
        table = asked.table
        return _ascending(table, -table["entropy_normalized"].to_numpy(dtype=float))


@criterion("combined")
class Combined(Criterion):
    def order(self, asked):
        table = asked.table
        entropy = table["entropy_normalized"].to_numpy(dtype=float)
        return _ascending(table, combined_scores(table["importance"], entropy, asked.entropy_weight,
                                                 asked.keep_entropy))


@criterion("iterative")
class Iterative(Criterion):
    """I_h re-estimated on the pruned model before every step: ``iterative_order``, with the model at hand."""
    reads, static = "importance_data", False


@criterion("oracle")
class Oracle(Criterion):
    """The heads whose removal alone hurts least first: it waits for the whole single-head ablation."""
    reads, waits_for_ablation, in_paper = "ablation", True, True
    label, linestyle = "oracle (single-head ablation)", "--"

    def order(self, asked):
        if asked.ablation is None:
            raise ValueError("the oracle order needs the single-head ablation table")
        return oracle_order(asked.ablation, asked.attn_type)


@criterion("random")
class Random(Criterion):
    scored, in_paper, label, linestyle = False, True, "random", ":"

    def order(self, asked):
        return random_order(asked.heads, asked.seed)


@criterion("retrieval")
class Retrieval(Criterion):
    """Wu et al.'s retrieval score of a language model's head roles, lowest first."""
    reads = "roles"

    def order(self, asked):
        roles = asked.roles
        if roles is None or "retrieval" not in roles:
            raise ValueError("the retrieval criterion needs a language model's head roles (head_roles.csv of a "
                             "retrieval study)")
        table = _in_scope(roles, asked.attn_type).reset_index(drop=True)
        return _ascending(table, table["retrieval"].astype(float).fillna(-np.inf))


def paper_orders() -> list[str]:
    """The paper's orders (Figure 3), in the registry's order."""
    return [name for name, entry in CRITERIA.items() if entry.in_paper]


def reference_order() -> str:
    """The criterion the others are tested against and Figures 4 and 6 prune in (I_h)."""
    return next(name for name, entry in CRITERIA.items() if entry.reference)


def importance_on_pruned(model, batches, *, estimator: str = "token", normalize: bool = True):
    """``estimate(removed) -> {head: I_h}`` for ``iterative_order``: I_h on the model with the heads
    ``removed`` switched off, from the I_h-only pass in the model's own attention backend; the removed
    heads count as 0 in the per-layer normalization."""
    from headprune.evaluation.runs import gates_without
    from headprune.scoring.importance import head_importance

    column = f"importance_{estimator}"

    def estimate(removed):
        table = head_importance(model, batches, estimator=estimator, normalize=False,
                                gates=gates_without(model, removed), progress=False)
        gone = [head in set(removed) for head in _heads(table)]
        table[column] = table[column].mask(gone, 0.0)
        return dict(zip(_heads(table), importance_column(table, estimator, normalize)))

    return estimate


def iterative_order(estimate, heads: list[HeadId], step_percent: float, *, progress: bool = True) -> list[HeadId]:
    """Bertology's iterative pruning: before every step, I_h of the heads left is estimated again on the
    model with the heads removed so far switched off (``estimate(removed) -> {head: score}``), and the
    step removes the lowest-scored. Steps remove as many heads as ``runs.pruning_steps``; the last, which removes
    all the heads left, keeps them in the model's order (no estimate changes which heads that step removes)."""
    counts = [len(removed) for _, removed in pruning_steps(heads, step_percent)]
    removed: list[HeadId] = []
    for count in counted(counts[1:], f"iterative order of {len(heads)} heads, I_h re-estimated before each step",
                         "steps", enabled=progress, log=log):
        if count <= len(removed):
            continue
        left = [h for h in heads if h not in set(removed)]
        if count < len(heads):  # a step that removes every head left needs no estimate to choose among them
            scores = estimate(list(removed))
            left.sort(key=lambda h: scores[h])  # stable: ties keep the model's order
        removed += left[:count - len(removed)]
    return removed


# --- comparing the curves -------------------------------------------------------------------


def largest_within(curve: pd.DataFrame, full_score: float, tolerance: float, sign: int = 1) -> float:
    """The largest % pruned before the curve first gets more than ``tolerance`` worse than the full model
    (``sign`` -1: lower is better, as perplexity)."""
    curve = curve.sort_values("percent_pruned")
    within = 0.0
    for row in curve.itertuples():
        if sign * row.score < sign * full_score - tolerance:
            break
        within = float(row.percent_pruned)
    return within


def area_under_curve(curve: pd.DataFrame) -> float:
    """Mean score over 0-100% pruned: the trapezoid area under score vs fraction of heads pruned."""
    curve = curve.sort_values("percent_pruned")
    x = curve["percent_pruned"].to_numpy(dtype=float) / 100.0
    y = curve["score"].to_numpy(dtype=float)
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))


def nearest_step(curve: pd.DataFrame, percent: float) -> int:
    """The step whose % pruned is nearest ``percent``."""
    return int(curve.loc[(curve["percent_pruned"] - percent).abs().idxmin(), "step"])


def tolerance_points(metric: str, points: float, full_score: float | None = None) -> float:
    """``points`` in the metric's units: BLEU points, percentage points of a [0, 1] score, or for
    perplexity (any metric where lower is better) ``points`` percent of the full model's."""
    from headprune.evaluation.metrics import metric_of

    found = metric_of(metric)
    if found.better < 0:
        return full_score * points / 100.0
    return points / (1.0 / found.point)  # points / 100 for a share (1 / 0.01 is 100.0 exactly), as before


def summarize(curves: pd.DataFrame, step_outputs: dict, evalset, *, within: float = 1.0,
              test_at=(30, 50, 70), reference: str | None = None, resamples: int = 1000, seed: int = 0,
              alpha: float = 0.01) -> pd.DataFrame:
    """One row per criterion: the largest % pruned within ``within`` points of the full model (for perplexity:
    within ``within`` percent of it), the area under the curve (lower is better for perplexity), and at each % of ``test_at`` the score and a paired bootstrap test against the
    ``reference`` criterion (None: ``reference_order()``, I_h) at the same step (p_<percent>; NaN for the reference
    itself).

    ``curves``: criteria.csv rows (criterion, step, percent_pruned, score, metric); ``step_outputs``:
    criterion -> per-step lists of per-item outputs (the prune jobs' outputs.json).
    """
    from headprune.evaluation.metrics import better_sign
    from headprune.evaluation.runs import significance

    reference = reference or reference_order()
    rows = []
    metric = curves["metric"].iloc[0]
    full = curves.loc[curves["step"] == 0, "score"]
    if full.nunique() != 1:
        raise ValueError(f"the criteria's curves start from different full-model scores: {sorted(full.unique())}")
    full_score = float(full.iloc[0])
    for criterion, curve in curves.groupby("criterion", sort=False):
        row = {"criterion": criterion, "metric": metric, "score_full": full_score, "alpha": alpha,
               "within_points": within, "largest_percent_within": largest_within(
                   curve, full_score, tolerance_points(metric, within, full_score), better_sign(metric)),
               "area_under_curve": area_under_curve(curve)}
        for percent in test_at:
            step = nearest_step(curve, percent)
            row[f"score_{percent}"] = float(curve.loc[curve["step"] == step, "score"].iloc[0])
            p = float("nan")
            if criterion != reference and reference in step_outputs:
                test = significance(evalset, step_outputs[reference][step], step_outputs[criterion][step],
                                    resamples=resamples, seed=seed)
                p = test["p_bootstrap"]
            row[f"p_{percent}"] = p
            row[f"significant_{percent}"] = bool(p < alpha)
        rows.append(row)
    return pd.DataFrame(rows)
