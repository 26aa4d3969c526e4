"""Pruning curves, the score against the % of heads pruned: Figures 3 (global pruning in the paper's orders)
and 4 (within each attention type), Figure 5 (checkpoints of several training epochs), and every head
criterion's curve with its summary table."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headprune.report.figures.checks import _require_columns, _single_value
from headprune.report.figures.display import format_score, metric_display, study_title
from headprune.report.figures.lines import _draw_lines
from headprune.report.figures.style import _new_figure, _rc, _style, save_figure
from headprune.analyses.criteria import CRITERIA, paper_orders, reference_order
from headprune.analyses.layouts import LAYOUTS, free_layout, paper_layout
from headprune.io import atomic
from headprune.models.attention_types import KNOWN_TYPES, LABELS



def order_labels(short: bool = False) -> dict[str, str]:
    """Figure 3's legend of each criterion that has one (``short``: the criteria figure's), as its class says
    (headprune.analyses.criteria); the others are written as their words."""
    return {name: (entry.short_label if short and entry.short_label else entry.label)
            for name, entry in CRITERIA.items() if entry.label}


def order_linestyles() -> dict[str, str]:
    """The line style of each criterion that has one (the paper's Figure 3: I_h solid, the oracle dashed)."""
    return {name: entry.linestyle for name, entry in CRITERIA.items() if entry.linestyle}


PRUNING_COLUMNS = ("study", "order", "scope", "step", "percent_pruned", "score", "metric")


# ------------------------------------------------------------------- Figures 3, 4

def _check_pruning(pruning: pd.DataFrame) -> None:
    _require_columns(pruning, PRUNING_COLUMNS, "pruning table")
    keys = ["study", "scope", "order", *(["layout"] if "layout" in pruning else []), "step"]
    duplicated = pruning.duplicated(keys)
    if duplicated.any():
        # Several runs of one order (e.g. random seeds) would need averaging: do it upstream, in a CSV.
        raise ValueError(f"pruning table has {int(duplicated.sum())} duplicate ({', '.join(keys)}) rows")


def build_pruning_figure(pruning: pd.DataFrame, scopes, hue: str, hue_values, labels: dict,
                         linestyles: dict | None, style: dict | None, xlabel: str,
                         families: dict | None = None) -> Figure:
    """One panel per study (titled with its model family from ``families``, study -> model_type):
    score against % of heads pruned, one line per hue value. An order drawn from a screened Table 1 (rows with
    ``table1`` "screened": the oracle of a screened study, headprune.analyses.screening) says so in its label."""
    style = _style(style)
    studies = list(dict.fromkeys(pruning["study"]))
    with _rc(style):
        figure, axes = _new_figure(style, len(studies))
        for ax, study in zip(axes, studies):
            rows = pruning[(pruning["study"] == study) & pruning["scope"].isin(scopes)]
            panel_labels = dict(labels)
            if "table1" in rows:
                screened = rows.loc[rows["table1"].astype(str) == "screened", hue]
                panel_labels.update({value: f"{labels.get(value, value)}, screened Table 1" for value in set(screened)})
            _draw_lines(ax, rows, "percent_pruned", "score", hue, hue_values, panel_labels, linestyles)
            metric = _single_value(rows, "metric", f"pruning rows of {study}")
            ax.set_title(study_title(study, (families or {}).get(study)))
            ax.set_xlabel(xlabel)
            ax.set_ylabel(metric_display(metric).label)
            ax.legend(frameon=False)
    return figure


def figure3_rows(pruning: pd.DataFrame) -> pd.DataFrame:
    """The rows Figure 3 draws: global pruning (scope 'all') in the paper's orders (the other criteria
    are drawn by ``criteria_figure``), in every layout pruned (``line``: the order, and ', uniform' in the
    uniform layout)."""
    _check_pruning(pruning)
    rows = pruning[(pruning["scope"] == "all") & pruning["order"].isin(paper_orders())]
    if rows.empty:
        raise ValueError(f"no rows with scope 'all' and an order in {paper_orders()} in the pruning table")
    layouts = rows["layout"] if "layout" in rows else pd.Series(paper_layout(), index=rows.index)
    return rows.assign(line=[order if LAYOUTS[layout].paper else f"{order}, {layout}"
                             for order, layout in zip(rows["order"], layouts)])


def build_figure3(pruning: pd.DataFrame, style: dict | None = None, families: dict | None = None,
                  recovery: pd.DataFrame | None = None) -> Figure:
    orders, order_label, order_linestyle = paper_orders(), order_labels(), order_linestyles()
    others = [layout for layout, entry in LAYOUTS.items() if not entry.paper]  # each a line of its own per order
    lines = [*orders, *(f"{order}, {layout}" for layout in others for order in orders)]
    labels = {**order_label, **{f"{order}, {layout}": f"{order_label.get(order, order)}, {layout} layout"
                                for layout in others for order in orders}}
    linestyles = {**order_linestyle, **{f"{order}, {layout}": style for layout in others
                                        for order, style in order_linestyle.items()}}
    figure = build_pruning_figure(figure3_rows(pruning), ["all"], "line", lines, labels, linestyles, style,
                                  "% of heads pruned", families)
    if recovery is not None and not recovery.empty:
        with _rc(_style(style)):
            draw_recovered(figure, list(dict.fromkeys(figure3_rows(pruning)["study"])), recovery)
    return figure


# Recovery after pruning (recovery.csv, headprune.training.recovery): a marker per method beside the curve
RECOVERY_MARKERS = {"lora": "o", "full": "s", "distill": "^", "bias_compensation": "x"}
RECOVERY_LABELS = {"lora": "recovered: LoRA", "full": "recovered: full fine-tuning", "distill": "recovered: distilled",
                   "bias_compensation": "bias compensation (no training)"}


def draw_recovered(figure: Figure, studies: list[str], recovery: pd.DataFrame) -> None:
    """Each study's recovered points (recovery.csv: score_recovered at percent_pruned, one marker per method) on its
    panel of ``figure``, beside the importance order's curve they start from."""
    _require_columns(recovery, ("study", "percent_pruned", "method", "score_recovered"), "recovery table")
    for ax, study in zip(figure.axes, studies):
        rows = recovery[recovery["study"] == study]
        for method, points in rows.groupby("method", sort=False):
            ax.scatter(points["percent_pruned"], points["score_recovered"], marker=RECOVERY_MARKERS.get(method, "d"),
                       s=22, zorder=3, label=RECOVERY_LABELS.get(method, method))
        if not rows.empty:
            ax.legend(frameon=False)


def figure3(pruning: pd.DataFrame, out_png, out_pdf, style: dict | None = None, families: dict | None = None,
            recovery: pd.DataFrame | None = None) -> list[str]:
    """The paper's Figure 3: score vs % of all heads pruned; importance solid, oracle dashed, random dotted; with
    ``recovery`` (recovery.csv's rows) the recovered models beside the curve, a marker per method."""
    return save_figure(build_figure3(pruning, style, families, recovery), out_png, out_pdf, style)


def figure4_rows(pruning: pd.DataFrame) -> pd.DataFrame:
    """The rows Figure 4 draws: importance-order pruning within one attention type."""
    _check_pruning(pruning)
    pruning = free_layout(pruning)
    rows = pruning[pruning["scope"].isin(KNOWN_TYPES) & (pruning["order"] == reference_order())]
    if rows.empty:
        raise ValueError(f"no importance-order rows with scope in {KNOWN_TYPES} in the pruning table")
    return rows


def build_figure4(pruning: pd.DataFrame, style: dict | None = None, families: dict | None = None) -> Figure:
    return build_pruning_figure(figure4_rows(pruning), KNOWN_TYPES, "scope", KNOWN_TYPES, LABELS,
                                None, style, "% of heads of that type pruned", families)


def figure4(pruning: pd.DataFrame, out_png, out_pdf, style: dict | None = None, families: dict | None = None) -> list[str]:
    """The paper's Figure 4: score vs % pruned within each attention type (importance order)."""
    return save_figure(build_figure4(pruning, style, families), out_png, out_pdf, style)


# ------------------------------------------------------------------ Figure 5

FIGURE5_COLUMNS = ["study", "epoch", "order", "scope", "step", "percent_pruned", "heads_pruned", "score", "metric",
                   "unpruned_score", "relative_percent"]
FIGURE5_PANELS = {"score": "pruned model", "relative_percent": "relative to the unpruned model"}


def figure5_table(pruning_by_epoch: dict) -> pd.DataFrame:
    """One pruning curve per checkpoint epoch ({epoch: scripts/prune.py's table}), stacked, with the
    score relative to that epoch's unpruned model: relative_percent = 100 * score / score at 0%
    pruned (NaN when that score is 0). Rows sorted by epoch, then % pruned; columns FIGURE5_COLUMNS.
    """
    if not pruning_by_epoch:
        raise ValueError("no pruning tables")
    frames = []
    for epoch, table in sorted(pruning_by_epoch.items()):
        _require_columns(table, [c for c in FIGURE5_COLUMNS if c not in ("epoch", "unpruned_score", "relative_percent")],
                         f"pruning table of epoch {epoch}")
        for column in ("study", "order", "scope", "metric"):
            _single_value(table, column, f"pruning table of epoch {epoch}")
        unpruned = table.loc[table["percent_pruned"] == 0, "score"]
        if len(unpruned) != 1:
            raise ValueError(f"pruning table of epoch {epoch}: expected one row with 0% pruned, found {len(unpruned)}")
        unpruned_score = float(unpruned.iloc[0])
        frame = table.assign(epoch=int(epoch), unpruned_score=unpruned_score)
        frame["relative_percent"] = 100.0 * frame["score"] / unpruned_score if unpruned_score else np.nan
        frames.append(frame.sort_values("percent_pruned"))
    table = pd.concat(frames, ignore_index=True)[FIGURE5_COLUMNS]
    for column in ("study", "metric"):
        _single_value(table, column, "the pruning tables of all epochs")
    return table


def figure5_rows(dynamics: pd.DataFrame) -> pd.DataFrame:
    """The rows Figure 5 draws: one pruning curve per checkpoint epoch (headprune.training.train.dynamics_table)."""
    _require_columns(dynamics, FIGURE5_COLUMNS, "training dynamics table")
    if dynamics.empty:
        raise ValueError("training dynamics table is empty")
    _single_value(dynamics, "study", "training dynamics table")
    _single_value(dynamics, "metric", "training dynamics table")
    duplicated = dynamics.duplicated(["epoch", "percent_pruned"])
    if duplicated.any():
        raise ValueError(f"training dynamics table has {int(duplicated.sum())} duplicate (epoch, percent_pruned) rows")
    return dynamics


def build_figure5(dynamics: pd.DataFrame, style: dict | None = None) -> Figure:
    """Left: score against % of heads pruned (importance order), one line per epoch, later epochs
    darker. Right: the same as % of that epoch's unpruned score. Values are drawn as in the table."""
    from matplotlib import colormaps

    rows = figure5_rows(dynamics)
    style = _style(style)
    study = _single_value(rows, "study", "training dynamics table")
    label = metric_display(_single_value(rows, "metric", "training dynamics table")).label
    epochs = sorted(int(e) for e in rows["epoch"].unique())
    colors = colormaps["viridis_r"]
    with _rc(style):
        figure, axes = _new_figure(style, 2)
        for ax, column in zip(axes, FIGURE5_PANELS):
            for i, epoch in enumerate(epochs):
                line = rows[rows["epoch"] == epoch].sort_values("percent_pruned")
                ax.plot(line["percent_pruned"].to_numpy(dtype=float), line[column].to_numpy(dtype=float),
                        marker="o", markersize=3, color=colors(0.1 + 0.85 * i / max(1, len(epochs) - 1)),
                        label=f"epoch {epoch}")
            ax.set_xlabel("% of heads pruned")
        axes[0].set_title(f"{study}: {FIGURE5_PANELS['score']}")
        axes[0].set_ylabel(label)
        axes[1].set_title(FIGURE5_PANELS["relative_percent"])
        axes[1].set_ylabel(f"% of the unpruned {label}")
        axes[0].legend(frameon=False)
    return figure


def figure5(dynamics: pd.DataFrame, out_png, out_pdf, style: dict | None = None) -> list[str]:
    """The paper's Figure 5: pruning curves of checkpoints from several epochs of training."""
    return save_figure(build_figure5(dynamics, style), out_png, out_pdf, style)


# ------------------------------------------------------------------ head criteria (beyond the paper)

def criteria_figure(curves: pd.DataFrame, out_png, out_pdf, style: dict | None = None) -> list[str]:
    """Every criterion's pruning curve on one panel (criteria.csv): score vs % of heads pruned."""
    _require_columns(curves, ["study", "criterion", "percent_pruned", "score", "metric"], "criteria table")
    criteria = list(dict.fromkeys(curves["criterion"]))
    figure = build_pruning_figure(curves.assign(scope="all"), ["all"], "criterion", criteria,
                                  order_labels(short=True), order_linestyles(), style,
                                  "% of heads pruned")
    return save_figure(figure, out_png, out_pdf, style)


def criteria_table(summary: pd.DataFrame, out_md, test_at=(30, 50, 70)) -> str:
    """The criteria summary as markdown: % prunable within the tolerance, area under the curve, and the
    score at each tested % with * where it differs from I_h (paired bootstrap, p < alpha)."""
    metric = _single_value(summary, "metric", "criteria summary")
    display = metric_display(metric)
    alpha = float(summary["alpha"].iloc[0]) if "alpha" in summary else 0.01
    header = " | ".join(f"{display.label} at {p}%" for p in test_at)
    lines = [f"**Head criteria** ({summary['study'].iloc[0]}): global pruning in the paper's steps. "
             f"'Within' is the largest % pruned before the score first falls more than "
             f"{summary['within_points'].iloc[0]:g} points below the full model "
             f"({format_score(metric, summary['score_full'].iloc[0])}); AUC is the mean {display.label} over 0-100% "
             f"pruned. * marks a significant difference from $I_h$ at that step (paired bootstrap, p < {alpha}).",
             "", f"| Criterion | Within (%) | AUC | {header} |", "|---|---:|---:|" + "---:|" * len(test_at)]
    for row in summary.itertuples():
        cells = []
        for p in test_at:
            value = getattr(row, f"score_{p}") * display.scale
            p_value = getattr(row, f"p_{p}")
            cells.append(f"{value:.2f}" + ("*" if p_value == p_value and p_value < alpha else ""))
        lines.append(f"| {row.criterion} | {row.largest_percent_within:.0f} | "
                     f"{row.area_under_curve * display.scale:.2f} | " + " | ".join(cells) + " |")
    Path(out_md).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out_md, "\n".join(lines) + "\n")
    return str(out_md)
