"""A language model's retrieval heads (beyond the paper): Wu et al.'s experiment, the top-K retrieval heads
masked against K random heads, and perplexity beside retrieval accuracy, one head off and pruning."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from headprune.report.figures.checks import _ablated, _require_columns
from headprune.report.figures.style import _new_figure, _rc, _style
from headprune.analyses.layouts import free_layout


def wu_scores(runs: pd.DataFrame) -> list[str]:
    """The scores of a retrieval_heads.csv, in its column order: each has <score>_full beside it (retrieval or
    task, then perplexity)."""
    return [column for column in runs.columns if f"{column}_full" in runs.columns]


def retrieval_heads_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Wu et al.'s experiment per K: the top-K heads masked, and the mean (and spread) over the random K-head
    sets, for each score (retrieval accuracy or a task's metric, and perplexity); one row per K and selection."""
    _require_columns(runs, ["study", "k", "selection", "seed"], "retrieval heads table")
    scores = wu_scores(runs)
    if len(scores) < 2:
        raise ValueError(f"retrieval heads table: two scores (<score> and <score>_full columns) expected, found "
                         f"{scores}")
    rows = []
    for (k, selection), part in runs.groupby(["k", "selection"], sort=True):
        row = {"study": part["study"].iloc[0], "k": int(k), "selection": selection, "sets": len(part)}
        for score in scores:
            row.update({score: part[score].mean(), f"{score}_min": part[score].min(),
                        f"{score}_max": part[score].max(), f"{score}_full": part[f"{score}_full"].iloc[0]})
        row.update({f"significant_{score}": int(part[f"significant_{score}"].sum()) for score in scores})
        if "task_metric" in part:
            row["task_metric"] = part["task_metric"].iloc[0]
        rows.append(row)
    return pd.DataFrame(rows)


def build_retrieval_heads_figure(table: pd.DataFrame, style: dict | None = None) -> Figure:
    """A panel per score against K (retrieval accuracy or the task's metric, and perplexity): the top-K retrieval
    heads masked and K random heads masked (mean, and the range over the random sets), the full model dashed."""
    style = _style(style)
    scores = [score for score in wu_scores(table) if f"{score}_min" in table]
    labels = {"retrieval": "retrieval accuracy", "perplexity": "perplexity",
              "task": f"task: {table['task_metric'].iloc[0]}" if "task_metric" in table else "task"}
    with _rc(style):
        figure, axes = _new_figure(style, len(scores))
        for ax, score in zip(axes, scores):
            for selection, marker in (("top", "o"), ("random", "s")):
                part = table[table.selection == selection].sort_values("k")
                ax.plot(part["k"], part[score], marker=marker, label=f"{selection} K heads masked")
                if selection == "random":
                    ax.fill_between(part["k"], part[f"{score}_min"], part[f"{score}_max"], alpha=0.2)
            ax.axhline(table[f"{score}_full"].iloc[0], linestyle="--", color="gray", label="all heads")
            ax.set_xlabel("K heads masked")
            ax.set_ylabel(labels.get(score, score))
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[0].set_title(f"{table['study'].iloc[0]}: retrieval heads masked")
        axes[0].legend()
    return figure


def perplexity_and_retrieval_table(retrieval_ablation: pd.DataFrame, perplexity_ablation: pd.DataFrame,
                                   retrieval_pruning: pd.DataFrame, perplexity_pruning: pd.DataFrame) -> pd.DataFrame:
    """A language model's two scores side by side, tidy: one row per single head switched off and per
    pruning step of each order both studies pruned in (score, the full model's, its change). A head is a row when
    both tables ablated it (a screened Table 1 leaves its screened-only heads out: headprune.analyses.screening)."""
    keys = ["attn_type", "layer", "head"]
    heads = _ablated(perplexity_ablation)[keys + ["score", "score_full"]].merge(
        _ablated(retrieval_ablation)[keys + ["score", "score_full"]], on=keys, suffixes=("_perplexity", "_retrieval"))
    heads = heads.rename(columns={"score_perplexity": "perplexity", "score_full_perplexity": "perplexity_full",
                                  "score_retrieval": "retrieval", "score_full_retrieval": "retrieval_full"})
    heads.insert(0, "experiment", "single head off")
    steps = free_layout(perplexity_pruning)[["order", "scope", "percent_pruned", "score"]].merge(
        free_layout(retrieval_pruning)[["order", "scope", "percent_pruned", "score"]], on=["order", "scope", "percent_pruned"],
        suffixes=("_perplexity", "_retrieval"))
    steps = steps[steps.scope == "all"].rename(columns={"score_perplexity": "perplexity", "score_retrieval": "retrieval"})
    steps.insert(0, "experiment", "pruning")
    return pd.concat([heads, steps], ignore_index=True)


def build_perplexity_and_retrieval_figure(table: pd.DataFrame, study: str, style: dict | None = None) -> Figure:
    """Left: each head switched off alone, its perplexity change against its retrieval change. Right: the
    pruning curves of each order, perplexity (solid, left axis) and retrieval accuracy (dashed, right axis)."""
    style = _style(style)
    heads, steps = table[table.experiment == "single head off"], table[table.experiment == "pruning"]
    with _rc(style):
        figure, (left, right) = _new_figure(style, 2)
        left.scatter(heads["perplexity"] - heads["perplexity_full"], heads["retrieval"] - heads["retrieval_full"])
        for row in heads.itertuples():
            left.annotate(f"{int(row.layer)}-{int(row.head)}", (row.perplexity - row.perplexity_full,
                                                                row.retrieval - row.retrieval_full),
                          fontsize=style["font_size"] * 0.6)
        left.axhline(0, color="gray", linewidth=0.5)
        left.axvline(0, color="gray", linewidth=0.5)
        left.set_xlabel("perplexity change (head off)")
        left.set_ylabel("retrieval accuracy change")
        left.set_title(f"{study}: one head off")
        twin = right.twinx()
        for k, (order, part) in enumerate(steps.groupby("order", sort=True)):
            part = part.sort_values("percent_pruned")
            color = f"C{k}"
            right.plot(part["percent_pruned"], part["perplexity"], color=color, label=order)
            twin.plot(part["percent_pruned"], part["retrieval"], color=color, linestyle="--")
        right.set_xlabel("% heads pruned")
        right.set_ylabel("perplexity (solid)")
        twin.set_ylabel("retrieval accuracy (dashed)")
        right.set_yscale("log")
        right.set_title("pruning")
        right.legend(fontsize=style["font_size"] * 0.7)
    return figure
