"""The masking modes compared (``headprune.analyses.masking_modes``): each head's single-head change under each
mode, and the importance-order pruning curve under each. Every number drawn is a row of the mode sweep's table."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headprune.evaluation.metrics import better_sign
from headprune.report.figures.style import _new_figure, _rc, _style


def build_modes_figure(runs: pd.DataFrame, summary: pd.DataFrame, style: dict | None = None) -> Figure:
    """Left: each head's single-head change under each mode (heads ordered by the first mode's change). Right:
    the importance-order pruning curve under each mode."""
    style = _style(style)
    modes = list(summary["mode"])
    heads, steps = runs[runs["experiment"] == "single head"], runs[runs["experiment"] == "pruning"]
    metric = str(summary["metric"].iloc[0])
    with _rc(style):
        figure, (left, right) = _new_figure(style, 2)
        first = heads[heads["mode"] == modes[0]].sort_values("delta", key=lambda d: -better_sign(metric) * d)
        order = [tuple(key) for key in first[["attn_type", "layer", "head"]].itertuples(index=False)]
        for k, mode in enumerate(modes):
            mine = heads[heads["mode"] == mode].set_index(["attn_type", "layer", "head"]).loc[order]
            left.plot(np.arange(len(order)), mine["delta"].to_numpy(float), marker="o", markersize=3, linewidth=1,
                      color=f"C{k}", label=mode)
            curve = steps[steps["mode"] == mode].sort_values("percent_pruned")
            right.plot(curve["percent_pruned"], curve["score"], marker="o", markersize=3, color=f"C{k}", label=mode)
        left.axhline(0, color="gray", linewidth=0.5)
        left.set_xlabel(f"head (by its change under {modes[0]})")
        left.set_ylabel(f"{metric} change, head off alone")
        left.set_title(f"{summary['study'].iloc[0]}: one head off")
        left.legend()
        right.set_xlabel("% heads pruned (importance order)")
        right.set_ylabel(metric)
        if better_sign(metric) < 0:
            right.set_yscale("log")
        right.set_title("pruning")
    return figure
