"""A language model's heads under every score it is judged by, side by side: one map per study (its own
perplexity, needle retrieval, each lm-evaluation-harness task), each head's single-head ablation cost, so
that a reader sees at a glance whether the heads perplexity needs are the ones a task needs.

The cost is the change a head's removal makes, in points of the study's metric, signed so that worse is
positive whichever way the metric goes (``headprune.evaluation.metrics.better_sign``); heads whose change
is significant (the ablation's paired test) are ringed. Every plotted number is a row of the table.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headprune.report.figures.checks import _ablation_of_one_study
from headprune.report.figures.style import _new_figure, _rc, _style
from headprune.evaluation.metrics import better_sign

COLUMNS = ["study", "metric", "attn_type", "layer", "head", "score", "score_full", "delta", "cost_points",
           "significant"]


def points(metric: str) -> float:
    """A point of the metric: 0.01 of a score in [0, 1] (accuracy, retrieval), 1 of a perplexity."""
    return 0.01 if better_sign(metric) > 0 else 1.0


def head_maps_table(ablations: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (study, head): its single-head ablation (eval/ablation.csv) and its cost in points (worse
    positive). When a study's Table 1 is screened (headprune.analyses.screening) the column ``verification``
    says for every head verified, sampled, screened (no cost) or exhaustive. ``ablations``: study name -> its
    ablation table, in the order the maps are drawn."""
    tables = []
    for study, ablation in ablations.items():
        ablation = _ablation_of_one_study(ablation)
        metric = str(ablation["metric"].iloc[0])
        table = ablation[["attn_type", "layer", "head", "score", "score_full", "delta", "significant"]].copy()
        table.insert(0, "metric", metric)
        table.insert(0, "study", study)
        table["cost_points"] = -better_sign(metric) * table["delta"] / points(metric)
        if "verification" in ablation:  # a screened Table 1: heads screened only have no cost (a blank cell)
            table["verification"] = ablation["verification"].fillna("exhaustive").astype(str)
        tables.append(table[[c for c in [*COLUMNS, "verification"] if c in table]])
    table = pd.concat(tables, ignore_index=True)
    if "verification" in table:  # said for every study once one stands on a screened table
        table["verification"] = table["verification"].fillna("exhaustive")
    return table


def rank_correlations(table: pd.DataFrame) -> pd.DataFrame:
    """Spearman's rank correlation of the heads' costs between every two studies (heads matched by place)."""
    wide = table.pivot_table(index=["attn_type", "layer", "head"], columns="study", values="cost_points")
    studies = list(dict.fromkeys(table["study"]))
    return wide[studies].rank().corr()


def build_head_maps_figure(table: pd.DataFrame, model: str, style: dict | None = None) -> Figure:
    """One panel per study: layers down, heads across, each cell the head's cost (worse: darker red, better:
    blue), significant heads ringed."""
    style = _style(style)
    studies = list(dict.fromkeys(table["study"]))
    with _rc(style):
        figure, axes = _new_figure(style, len(studies))
        for ax, study in zip(axes, studies):
            part = table[table["study"] == study]
            layers, heads = int(part["layer"].max()) + 1, int(part["head"].max()) + 1
            grid = np.full((layers, heads), np.nan)
            grid[part["layer"].to_numpy(int), part["head"].to_numpy(int)] = part["cost_points"].to_numpy(float)
            bound = float(np.nanmax(np.abs(grid))) or 1.0
            image = ax.imshow(grid, cmap="RdBu_r", vmin=-bound, vmax=bound, aspect="auto", interpolation="nearest")
            significant = part[part["significant"].astype(bool)]
            ax.scatter(significant["head"], significant["layer"], s=60, facecolors="none", edgecolors="black",
                       linewidths=1.0, label="significant")
            metric = str(part["metric"].iloc[0])
            screened = "verification" in part and (part["verification"] != "exhaustive").any()
            ax.set_title(f"{study}\n({metric}, cost in points"
                         + (", screened: blank = not ablated)" if screened else ")"))
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
            ax.set_xticks(range(heads))
            ax.set_yticks(range(layers))
            figure.colorbar(image, ax=ax, shrink=0.8)
        figure.suptitle(f"{model}: each head switched off alone, under each score")
    return figure
