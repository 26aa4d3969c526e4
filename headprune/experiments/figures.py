"""Tables and figures of the paper, drawn from the tidy CSVs the pipeline writes.

Every public ``table*`` / ``figure*`` function takes DataFrames, writes files and returns
the list of paths it wrote. The ``build_*`` functions return the matplotlib Figure
without writing it, so tests (and ``plotted_lines``) can look at what is drawn.

Rule: every number drawn is in a CSV. Figures 3 and 4 draw pruning.csv values as they
are; Figure 1 draws histogram counts, which it writes to a bins CSV first and then
draws from that table. Table 1's CSV holds the rounded values its markdown shows.

Display units: BLEU stays in points; metrics in [0, 1] (accuracy, F1, MCC) are shown
x100, as the paper reports accuracy changes in %. Pruning curves keep the raw score.

Matplotlib is used without pyplot (``Figure`` + the Agg canvas), so nothing global is
touched and no display is needed.
"""
from __future__ import annotations

import collections
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from headprune.experiments.metrics import better_sign
from headprune.io import atomic
from headprune.models.attention_types import ATTENTION_TYPES, TYPE_LABELS

log = logging.getLogger(__name__)

# A decoder-only LM has one attention type, stored as dec_self; "Dec-Dec" would say it has an encoder.
CAUSAL_LABEL = "Causal self-attention"


def type_labels(attn_types) -> dict:
    """Labels of a study's attention types: the paper's for an encoder-decoder or an encoder, and
    CAUSAL_LABEL when dec_self is the only type (a decoder-only LM)."""
    attn_types = set(attn_types)
    if attn_types == {"dec_self"}:
        return {"dec_self": CAUSAL_LABEL}
    return {t: TYPE_LABELS[t] for t in attn_types}


def study_title(study: str, family: str | None = None) -> str:
    """A study as figures and tables name it: 'tiny_llama (llama)', the model family being the
    model's config.json model_type as evaluate_full records it in full.json."""
    return f"{study} ({family})" if family else study

PRUNING_ORDERS = ("importance", "oracle", "random")
# The paper's Figure 3: importance-score order solid, oracle (Section 3.2 ablation) dashed.
ORDER_LINESTYLES = {"importance": "-", "oracle": "--", "random": ":"}
ORDER_LABELS = {"importance": "importance $I_h$", "oracle": "oracle (single-head ablation)",
                "random": "random"}

DEFAULT_STYLE = {"dpi": 150, "width": 5.0, "height": 3.5, "font_size": 10}
DEFAULT_HISTOGRAM_BINS = 30

NOT_SIGNIFICANT_COLOR = "#b0b0b0"
SIGNIFICANT_COLOR = "#d62728"

ABLATION_COLUMNS = ("study", "attn_type", "layer", "head", "metric", "score_full", "delta", "significant")
PRUNING_COLUMNS = ("study", "order", "scope", "step", "percent_pruned", "score", "metric")


# ----------------------------------------------------------------------------- units

@dataclass(frozen=True)
class MetricDisplay:
    label: str  # as written on axes: "BLEU", "accuracy"
    scale: float  # display value = raw value * scale
    unit: str  # suffix shown after a value or in an axis label; "" for none


METRIC_DISPLAY = {
    "bleu": MetricDisplay("BLEU", 1.0, ""),
    "accuracy": MetricDisplay("accuracy", 100.0, "%"),
    "f1": MetricDisplay("F1", 100.0, "%"),
    "mcc": MetricDisplay("MCC", 100.0, "x100"),  # MCC is in [-1, 1], not a percentage
    "perplexity": MetricDisplay("perplexity", 1.0, ""),  # lower is better: a positive change is a loss
}


def metric_display(metric: str) -> MetricDisplay:
    """How a metric is shown; an unknown metric is shown as is, under its own name."""
    return METRIC_DISPLAY.get(metric, MetricDisplay(metric, 1.0, ""))


def change_label(metric: str) -> str:
    """Axis label for a delta: 'BLEU change', 'accuracy change (%)'."""
    display = metric_display(metric)
    return f"{display.label} change" + (f" ({display.unit})" if display.unit else "")


def unit_name(metric: str) -> str:
    """The `unit` column of the CSVs: what a displayed delta is measured in."""
    display = metric_display(metric)
    return display.unit or f"{display.label} points"


def format_score(metric: str, raw_score: float) -> str:
    """'BLEU 36.05', 'accuracy 83.40%'."""
    display = metric_display(metric)
    unit = {"": "", "%": "%"}.get(display.unit, f" ({display.unit})")
    return f"{display.label} {raw_score * display.scale:.2f}{unit}"


# ------------------------------------------------------------------------ validation

def _require_columns(df: pd.DataFrame, columns, what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} is missing columns {missing}; it has {list(df.columns)}")


def _single_value(df: pd.DataFrame, column: str, what: str):
    """The one value a column takes (study, metric, score_full of one ablation study)."""
    values = df[column].dropna().unique()
    if len(values) != 1:
        raise ValueError(f"{what}: expected one {column}, found {sorted(map(str, values))}")
    return values[0]


def _as_bool(series: pd.Series) -> pd.Series:
    """The `significant` column as bool; CSVs may give bools, 0/1 or 'True'/'False'."""
    if series.dtype == bool:
        return series
    mapping = {True: True, False: False, 1: True, 0: False, "True": True, "False": False,
               "true": True, "false": False}
    converted = series.map(lambda v: mapping.get(v, None))
    if converted.isna().any():
        bad = series[converted.isna()].unique()[:5]
        raise ValueError(f"`significant` must be boolean, found {list(bad)}")
    return converted.astype(bool)


def _check_attn_types(types) -> None:
    unknown = sorted(set(types) - set(ATTENTION_TYPES))
    if unknown:
        raise ValueError(f"unknown attention types {unknown}; expected {ATTENTION_TYPES}")


def _ablation_of_one_study(ablation: pd.DataFrame) -> pd.DataFrame:
    _require_columns(ablation, ABLATION_COLUMNS, "ablation table")
    if ablation.empty:
        raise ValueError("ablation table is empty")
    _single_value(ablation, "study", "ablation table")
    _single_value(ablation, "metric", "ablation table")
    _check_attn_types(ablation["attn_type"].unique())
    duplicated = ablation.duplicated(["attn_type", "layer", "head"])
    if duplicated.any():
        raise ValueError(f"ablation table has {int(duplicated.sum())} duplicate (attn_type, layer, head) rows")
    ablation = ablation.copy()
    if "verification" in ablation:  # a screened Table 1: heads screened only have no test (significant empty)
        from headprune.experiments.screening import SCREENED

        ablation.loc[ablation["verification"].astype(str) == SCREENED, "significant"] = False
    ablation["significant"] = _as_bool(ablation["significant"])
    return ablation


def _ablated(ablation: pd.DataFrame) -> pd.DataFrame:
    """The heads ablated exactly: every row of an exhaustive table, the verified and sampled of a screened one."""
    from headprune.experiments.screening import ablated_rows

    return ablated_rows(ablation)


# ----------------------------------------------------------------------------- style

def _style(style: dict | None) -> dict:
    style = {**DEFAULT_STYLE, **(style or {})}
    unknown = sorted(set(style) - set(DEFAULT_STYLE))
    if unknown:
        log.warning("ignoring unknown style keys %s", unknown)
    return style


def _new_figure(style: dict, n_panels: int = 1) -> tuple[Figure, list]:
    """A Figure with n_panels side by side; style width is per panel so panels stay legible."""
    figure = Figure(figsize=(style["width"] * n_panels, style["height"]), dpi=style["dpi"], layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, n_panels, squeeze=False)[0]
    return figure, list(axes)


def _rc(style: dict):
    """Font size applies while artists are created, so figures are built inside this context."""
    size = style["font_size"]
    return rc_context({"font.size": size, "axes.titlesize": size, "axes.labelsize": size,
                       "legend.fontsize": size * 0.85, "xtick.labelsize": size * 0.9,
                       "ytick.labelsize": size * 0.9, "figure.titlesize": size * 1.1})


def save_figure(figure: Figure, out_png, out_pdf, style: dict | None = None) -> list[str]:
    """Write PNG and PDF. The PDF gets no CreationDate, so reruns give identical bytes."""
    style = _style(style)
    paths = []
    for path, metadata in ((out_png, None), (out_pdf, {"CreationDate": None})):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.save_figure(figure, path, dpi=style["dpi"], metadata=metadata)
        paths.append(str(path))
    log.info("wrote %s", ", ".join(paths))
    return paths


def plotted_lines(figure: Figure) -> pd.DataFrame:
    """Every point of every line drawn on the figure, for tests and debugging.

    Columns: panel (axes title), label (legend label), linestyle ('-', '--', ':'),
    color, x, y. One row per point.
    """
    rows = []
    for ax in figure.axes:
        for line in ax.get_lines():
            label = line.get_label()
            if label.startswith("_"):  # reference lines (zero line) carry no legend label
                continue
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                rows.append({"panel": ax.get_title(), "label": label, "linestyle": line.get_linestyle(),
                             "color": line.get_color(), "x": float(x), "y": float(y)})
    return pd.DataFrame(rows, columns=["panel", "label", "linestyle", "color", "x", "y"])


# ------------------------------------------------------------------------ Table 1

TABLE1_COLUMNS = ["study", "attn_type", "metric", "unit", "layer", "head", "delta", "significant",
                  "p_bootstrap", "p_ttest", "cell"]


def _format_delta(value: float, significant: bool) -> str:
    if pd.isna(value):
        return ""
    return f"{value + 0.0:+.2f}" + ("*" if significant else "")  # + 0.0 turns -0.0 into 0.0


def table1_cells(ablation: pd.DataFrame, attn_type: str = "enc_self") -> pd.DataFrame:
    """One row per head of one attention type, in display units, 1-based layer and head.

    Columns: TABLE1_COLUMNS. `delta` is rounded to 2 decimals (BLEU points, accuracy %),
    `cell` is the text shown in the table: '+0.12', '-0.85*' (* = significant).
    """
    ablation = _ablation_of_one_study(ablation)
    rows = ablation[ablation["attn_type"] == attn_type]
    if rows.empty:
        raise ValueError(f"no {attn_type} heads in the ablation table; it has {sorted(ablation['attn_type'].unique())}")
    metric = _single_value(rows, "metric", "ablation table")
    display = metric_display(metric)
    cells = pd.DataFrame({
        "study": rows["study"],
        "attn_type": attn_type,
        "metric": metric,
        "unit": unit_name(metric),
        "layer": rows["layer"].astype(int) + 1,
        "head": rows["head"].astype(int) + 1,
        "delta": (rows["delta"] * display.scale).round(2) + 0.0,
        "significant": rows["significant"],
        "p_bootstrap": rows["p_bootstrap"] if "p_bootstrap" in rows else np.nan,
        "p_ttest": rows["p_ttest"] if "p_ttest" in rows else np.nan,
    })
    cells["cell"] = [_format_delta(d, s) for d, s in zip(cells["delta"], cells["significant"])]
    columns = list(TABLE1_COLUMNS)
    if "verification" in rows:  # a screened table: which heads were verified, sampled or screened only
        from headprune.experiments.screening import SCREENED

        cells["verification"] = rows["verification"].astype(str).to_numpy()
        cells.loc[cells["verification"] == SCREENED, "cell"] = "·"
        columns.append("verification")
    return cells.sort_values(["layer", "head"]).reset_index(drop=True)[columns]


def table1_grid(cells: pd.DataFrame, value: str = "delta") -> pd.DataFrame:
    """Layers (rows) x heads (columns) grid of one column of table1_cells ('delta' or 'cell')."""
    return cells.pivot(index="layer", columns="head", values=value)


@dataclass(frozen=True)
class SignificanceSummary:
    n_heads: int
    n_significant: int
    n_improve: int  # significant and the score goes up without the head

    def __str__(self) -> str:
        return f"{self.n_significant} of {self.n_heads} heads significant ({self.n_improve} improve)"


def significance_summary(cells: pd.DataFrame) -> SignificanceSummary:
    """Counts for the paper's 'k of N heads significant (m improve)' from table1_cells."""
    if "verification" in cells:  # a screened table: the heads ablated
        cells = cells[cells["verification"] != "screened"]
    significant = cells["significant"]
    sign = better_sign(cells["metric"].iloc[0]) if "metric" in cells and len(cells) else 1  # perplexity: lower
    # Uses the rounded delta the table shows, so the line agrees with the table; a significant
    # change shown as +0.00 is not counted as an improvement.
    return SignificanceSummary(n_heads=len(cells), n_significant=int(significant.sum()),
                               n_improve=int((significant & (sign * cells["delta"] > 0)).sum()))


def table1_markdown(cells: pd.DataFrame, ablation: pd.DataFrame, family: str | None = None,
                    bound: str | None = None) -> str:
    study = _single_value(cells, "study", "table 1")
    metric = _single_value(cells, "metric", "table 1")
    attn_type = _single_value(cells, "attn_type", "table 1")
    score_full = _single_value(ablation, "score_full", "ablation table")
    alphas = ", ".join(f"{a:g}" for a in sorted(ablation["alpha"].dropna().unique())) if "alpha" in ablation else "alpha"
    unit = metric_display(metric).unit
    grid = table1_grid(cells, "cell").fillna("")
    heads = list(grid.columns)
    lines = [
        f"**Table 1** ({study_title(study, family)}, {type_labels(ablation['attn_type'])[attn_type]}): "
        f"{change_label(metric)} when one head is masked; "
        f"full model {format_score(metric, score_full)}. Layers and heads are 1-based; "
        f"* marks a significant change (p < {alphas})." + (" · marks a head screened only (not ablated)."
                                                             if "verification" in cells else ""),
        "",
        "| Layer | " + " | ".join(str(h) for h in heads) + " |",
        "|---:|" + "---:|" * len(heads),
    ]
    for layer, row in grid.iterrows():
        lines.append(f"| {layer} | " + " | ".join(row[h] for h in heads) + " |")
    summary = significance_summary(cells)
    summary = (f"{summary.n_significant} of the {summary.n_heads} heads ablated significant ({summary.n_improve} "
               f"improve)" if "verification" in cells else str(summary))
    lines += ["", summary + (f" (deltas in {unit})" if unit else ""), ""]
    if bound:
        lines += [bound, ""]
    return "\n".join(lines)


def table1(ablation: pd.DataFrame, out_csv, out_md, attn_type: str = "enc_self", family: str | None = None,
           out_bound_csv=None, confidence: float = 0.95) -> list[str]:
    """The paper's Table 1: per-head change when one head of `attn_type` is masked.

    CSV: tidy, one row per head, columns TABLE1_COLUMNS (numeric `delta` and text `cell`; a screened table also
    ``verification``: verified, sampled or screened, a screened-only head's cell '·').
    Markdown: the layers x heads grid of `cell`, then 'k of N heads significant (m improve)'; a screened table's
    also the bound on what it may have missed. ``out_bound_csv``: that bound (``screening.BOUND_COLUMNS``, one row;
    an exhaustive table's says so, with bounds 0), at ``confidence``.
    """
    from headprune.experiments.screening import BOUND_COLUMNS, bound_sentence, unverified_bound

    cells = table1_cells(ablation, attn_type)
    out_csv, out_md = Path(out_csv), Path(out_md)
    for path in (out_csv, out_md):
        path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(cells, out_csv, index=False)
    bound = unverified_bound(ablation, confidence, study=_single_value(ablation, "study", "ablation table"),
                             testset=str(ablation["testset"].dropna().iloc[0]) if "testset" in ablation else "")
    screened = bound["table1"] != "exhaustive"
    atomic.write_text(out_md, table1_markdown(cells, ablation, family, bound_sentence(bound) if screened else None))
    paths = [str(out_csv), str(out_md)]
    if out_bound_csv:
        atomic.write_csv(pd.DataFrame([bound], columns=list(BOUND_COLUMNS)), Path(out_bound_csv), index=False)
        paths.append(str(out_bound_csv))
    log.info("table 1: %s", significance_summary(cells))
    return paths


# ------------------------------------------------------------------------ Figure 1

BINS_COLUMNS = ["study", "attn_type", "metric", "unit", "bin_left", "bin_right", "count", "count_significant"]


def ablation_histogram(ablation: pd.DataFrame, bins: int = DEFAULT_HISTOGRAM_BINS) -> pd.DataFrame:
    """Histogram of single-head deltas (display units), one per attention type, shared bin edges.

    Shared edges make the panels comparable. Bins follow numpy.histogram: [left, right),
    the last one [left, right]. Columns: BINS_COLUMNS; `count` includes `count_significant`.
    """
    ablation = _ablated(_ablation_of_one_study(ablation))  # a screened table: the heads ablated
    study = _single_value(ablation, "study", "ablation table")
    metric = _single_value(ablation, "metric", "ablation table")
    display = metric_display(metric)
    deltas = ablation["delta"] * display.scale
    if deltas.isna().any():
        raise ValueError(f"{int(deltas.isna().sum())} heads have no delta")
    edges = np.histogram_bin_edges(deltas.to_numpy(), bins=bins)
    tables = []
    for attn_type in [t for t in ATTENTION_TYPES if t in set(ablation["attn_type"])]:
        of_type = ablation["attn_type"] == attn_type
        count, _ = np.histogram(deltas[of_type], bins=edges)
        count_significant, _ = np.histogram(deltas[of_type & ablation["significant"]], bins=edges)
        tables.append(pd.DataFrame({
            "study": study, "attn_type": attn_type, "metric": metric, "unit": unit_name(metric),
            "bin_left": edges[:-1], "bin_right": edges[1:], "count": count, "count_significant": count_significant,
        }))
    return pd.concat(tables, ignore_index=True)[BINS_COLUMNS]


def build_figure1(histogram: pd.DataFrame, title: str, style: dict | None = None,
                  alpha_label: str = "significant") -> Figure:
    """Stacked bars from ablation_histogram's table: significant heads on top, in red and hatched."""
    style = _style(style)
    metric = _single_value(histogram, "metric", "histogram")
    attn_types = [t for t in ATTENTION_TYPES if t in set(histogram["attn_type"])]
    labels = type_labels(attn_types)
    with _rc(style):
        figure, axes = _new_figure(style, len(attn_types))
        for ax, attn_type in zip(axes, attn_types):
            bins = histogram[histogram["attn_type"] == attn_type]
            widths = bins["bin_right"] - bins["bin_left"]
            not_significant = bins["count"] - bins["count_significant"]
            ax.bar(bins["bin_left"], not_significant, width=widths, align="edge",
                   color=NOT_SIGNIFICANT_COLOR, edgecolor="white", linewidth=0.5)
            ax.bar(bins["bin_left"], bins["count_significant"], width=widths, align="edge",
                   bottom=not_significant, color=SIGNIFICANT_COLOR, hatch="//", edgecolor="white", linewidth=0.5)
            ax.axvline(0.0, color="black", linestyle="--", linewidth=0.8)
            ax.set_title(labels[attn_type])
            ax.set_xlabel(change_label(metric))
            ax.set_ylabel("number of heads")
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts of heads are whole numbers
        handles = [Patch(facecolor=NOT_SIGNIFICANT_COLOR, label="not significant"),
                   Patch(facecolor=SIGNIFICANT_COLOR, hatch="//", edgecolor="white", label=alpha_label)]
        axes[0].legend(handles=handles, loc="upper left", frameon=False)
        figure.suptitle(title)
    return figure


def figure1(ablation: pd.DataFrame, out_png, out_pdf, style: dict | None = None,
            out_bins_csv=None, bins: int = DEFAULT_HISTOGRAM_BINS, family: str | None = None) -> list[str]:
    """The paper's Figure 1: distribution of single-head ablation deltas, per attention type.

    Writes the bin counts (columns BINS_COLUMNS) to out_bins_csv, by default
    '<png stem>_bins.csv' next to the PNG, and draws the figure from that table.
    """
    histogram = ablation_histogram(ablation, bins)
    out_bins_csv = Path(out_bins_csv) if out_bins_csv else Path(out_png).with_name(Path(out_png).stem + "_bins.csv")
    out_bins_csv.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(histogram, out_bins_csv, index=False)

    study = _single_value(ablation, "study", "ablation table")
    metric = _single_value(ablation, "metric", "ablation table")
    score_full = _single_value(ablation, "score_full", "ablation table")
    alpha_label = "significant"
    if "alpha" in ablation and ablation["alpha"].notna().any():
        alpha_label += " (p < " + ", ".join(f"{a:g}" for a in sorted(ablation["alpha"].dropna().unique())) + ")"
    title = f"{study_title(study, family)}: full model {format_score(metric, score_full)}"
    if "verification" in ablation and len(_ablated(ablation)) < len(ablation):
        title += f"\n(screened Table 1: the {len(_ablated(ablation))} of {len(ablation)} heads ablated)"
    figure = build_figure1(histogram, title, style, alpha_label)
    return [str(out_bins_csv)] + save_figure(figure, out_png, out_pdf, style)


# ------------------------------------------------------------------- Figures 3, 4

def _check_pruning(pruning: pd.DataFrame) -> None:
    _require_columns(pruning, PRUNING_COLUMNS, "pruning table")
    duplicated = pruning.duplicated(["study", "scope", "order", "step"])
    if duplicated.any():
        # Several runs of one order (e.g. random seeds) would need averaging: do it upstream, in a CSV.
        raise ValueError(f"pruning table has {int(duplicated.sum())} duplicate (study, scope, order, step) rows")


def _draw_lines(ax, rows: pd.DataFrame, x: str, y: str, hue: str, hue_values, labels: dict,
                linestyles: dict | None = None, marker: str | None = "o", linestyle_default: str = "-") -> None:
    """One line per hue value, points sorted by x, drawn exactly as they are in `rows`."""
    for value in hue_values:
        line = rows[rows[hue] == value].sort_values(x)
        if line.empty:
            continue
        ax.plot(line[x].to_numpy(dtype=float), line[y].to_numpy(dtype=float),
                linestyle=(linestyles or {}).get(value, linestyle_default), marker=marker, markersize=3,
                label=labels.get(value, str(value)))


def build_pruning_figure(pruning: pd.DataFrame, scopes, hue: str, hue_values, labels: dict,
                         linestyles: dict | None, style: dict | None, xlabel: str,
                         families: dict | None = None) -> Figure:
    """One panel per study (titled with its model family from ``families``, study -> model_type):
    score against % of heads pruned, one line per hue value. An order drawn from a screened Table 1 (rows with
    ``table1`` "screened": the oracle of a screened study, headprune.experiments.screening) says so in its label."""
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
    are drawn by ``criteria_figure``)."""
    _check_pruning(pruning)
    rows = pruning[(pruning["scope"] == "all") & pruning["order"].isin(PRUNING_ORDERS)]
    if rows.empty:
        raise ValueError(f"no rows with scope 'all' and an order in {PRUNING_ORDERS} in the pruning table")
    return rows


def build_figure3(pruning: pd.DataFrame, style: dict | None = None, families: dict | None = None) -> Figure:
    return build_pruning_figure(figure3_rows(pruning), ["all"], "order", PRUNING_ORDERS, ORDER_LABELS,
                                ORDER_LINESTYLES, style, "% of heads pruned", families)


def figure3(pruning: pd.DataFrame, out_png, out_pdf, style: dict | None = None, families: dict | None = None) -> list[str]:
    """The paper's Figure 3: score vs % of all heads pruned; importance solid, oracle dashed, random dotted."""
    return save_figure(build_figure3(pruning, style, families), out_png, out_pdf, style)


def figure4_rows(pruning: pd.DataFrame) -> pd.DataFrame:
    """The rows Figure 4 draws: importance-order pruning within one attention type."""
    _check_pruning(pruning)
    rows = pruning[pruning["scope"].isin(ATTENTION_TYPES) & (pruning["order"] == "importance")]
    if rows.empty:
        raise ValueError(f"no importance-order rows with scope in {ATTENTION_TYPES} in the pruning table")
    return rows


def build_figure4(pruning: pd.DataFrame, style: dict | None = None, families: dict | None = None) -> Figure:
    return build_pruning_figure(figure4_rows(pruning), ATTENTION_TYPES, "scope", ATTENTION_TYPES, TYPE_LABELS,
                                None, style, "% of heads of that type pruned", families)


def figure4(pruning: pd.DataFrame, out_png, out_pdf, style: dict | None = None, families: dict | None = None) -> list[str]:
    """The paper's Figure 4: score vs % pruned within each attention type (importance order)."""
    return save_figure(build_figure4(pruning, style, families), out_png, out_pdf, style)


# ------------------------------------------------------------------ generic lines

def build_generic_lines(df: pd.DataFrame, x: str, y: str, hue: str | None = None, style: dict | None = None, *,
                        kind: str = "line", xlabel: str | None = None, ylabel: str | None = None,
                        title: str = "", linestyles: dict | None = None) -> Figure:
    """One panel, one line (kind='line') or point cloud (kind='scatter') per value of `hue`.

    For later figures: cross-domain scatter (Figure 2), training dynamics (Figure 5).
    """
    if kind not in ("line", "scatter"):
        raise ValueError(f"kind must be 'line' or 'scatter', not {kind!r}")
    _require_columns(df, [c for c in (x, y, hue) if c], "table")
    style = _style(style)
    df = df.assign(_all="all") if hue is None else df
    hue = hue or "_all"
    hue_values = list(dict.fromkeys(df[hue]))
    with _rc(style):
        figure, (ax,) = _new_figure(style)
        if kind == "line":
            _draw_lines(ax, df, x, y, hue, hue_values, {}, linestyles)
        else:
            for value in hue_values:
                points = df[df[hue] == value]
                ax.scatter(points[x].to_numpy(dtype=float), points[y].to_numpy(dtype=float), s=10, label=str(value))
        ax.set_title(title)
        ax.set_xlabel(xlabel or x)
        ax.set_ylabel(ylabel or y)
        if len(hue_values) > 1:
            ax.legend(frameon=False)
    return figure


def figure_generic_lines(df: pd.DataFrame, x: str, y: str, hue: str | None, out_png, out_pdf,
                         style: dict | None = None, **kwargs) -> list[str]:
    """Write build_generic_lines(df, x, y, hue, style, **kwargs) as PNG and PDF."""
    return save_figure(build_generic_lines(df, x, y, hue, style, **kwargs), out_png, out_pdf, style)


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


# ------------------------------------------------------------------ Figure 2

FIGURE2_COLUMNS = ["study", "attn_type", "layer", "head", "metric", "delta_in_domain", "delta_out_of_domain",
                   "pearson_r", "p_value"]


def figure2_table(in_domain: pd.DataFrame, out_of_domain: pd.DataFrame) -> pd.DataFrame:
    """One row per head: its ablation delta in domain and out of domain, with Pearson's r over all heads (of a
    screened Table 1: over the heads ablated, which both test sets share)."""
    from headprune.experiments.stats import pearson

    in_domain, out_of_domain = _ablated(in_domain), _ablated(out_of_domain)
    keys = ["study", "attn_type", "layer", "head"]
    merged = in_domain[keys + ["metric", "delta"]].merge(
        out_of_domain[keys + ["delta"]], on=keys, suffixes=("_in_domain", "_out_of_domain"), validate="one_to_one")
    if len(merged) != len(in_domain) or len(merged) != len(out_of_domain):
        raise ValueError("the in-domain and out-of-domain ablation tables do not cover the same heads")
    correlation = pearson(merged["delta_in_domain"], merged["delta_out_of_domain"])
    return merged.assign(pearson_r=correlation.r, p_value=correlation.p_value)[FIGURE2_COLUMNS]


def figure2(in_domain: pd.DataFrame, out_of_domain: pd.DataFrame, out_csv, out_png, out_pdf,
            style: dict | None = None) -> list[str]:
    """The paper's Figure 2: each head's delta out of domain against in domain, with Pearson's r and p."""
    table = figure2_table(in_domain, out_of_domain)
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(table, out_csv, index=False)
    style = _style(style)
    display = metric_display(_single_value(table, "metric", "figure 2 table"))
    with _rc(style):
        figure, (ax,) = _new_figure(style)
        for attn_type in ATTENTION_TYPES:
            rows = table[table["attn_type"] == attn_type]
            if not rows.empty:
                # raw deltas, exactly as in the CSV (accuracy as a fraction)
                ax.scatter(rows["delta_in_domain"], rows["delta_out_of_domain"], s=12, label=TYPE_LABELS[attn_type])
        ax.axhline(0, color="black", linewidth=0.6, linestyle="--")
        ax.axvline(0, color="black", linewidth=0.6, linestyle="--")
        r, p = table["pearson_r"].iloc[0], table["p_value"].iloc[0]
        ax.set_title(f"{table['study'].iloc[0]}: Pearson r = {r:.2f} (p = {p:.2g})")
        ax.set_xlabel(f"{display.label} change, in domain")
        ax.set_ylabel(f"{display.label} change, out of domain")
        ax.legend(frameon=False)
    return [str(out_csv), *save_figure(figure, out_png, out_pdf, style)]


# ------------------------------------------------------------------ Tables 2-3

def one_head_table(one_head: pd.DataFrame, out_csv, out_md, family: str | None = None) -> list[str]:
    """Tables 2-3: per layer and attention type, the change when only the best head is kept."""
    display = metric_display(_single_value(one_head, "metric", "one-head-per-layer table"))
    table = one_head.assign(layer=one_head["layer"] + 1, best_head=one_head["best_head"] + 1,
                            delta_display=(one_head["delta"] * display.scale).round(2))
    table["cell"] = [_format_delta(d, bool(s)) for d, s in zip(table["delta_display"], _as_bool(table["significant"]))]
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(table, out_csv, index=False)
    types = [t for t in ATTENTION_TYPES if t in set(table["attn_type"])]
    grid = table.pivot(index="layer", columns="attn_type", values="cell")[types]
    labels = type_labels(types)
    lines = [f"**Tables 2-3** ({study_title(table['study'].iloc[0], family)}): {change_label(table['metric'].iloc[0])} on the test set "
             f"when each layer keeps only its best head (chosen on the selection set); full model "
             f"{format_score(table['metric'].iloc[0], table['score_full'].iloc[0])}. * marks p < {table['alpha'].iloc[0]}.",
             "", "| Layer | " + " | ".join(labels[t] for t in types) + " |",
             "|---:|" + "---:|" * len(types)]
    lines += [f"| {layer} | " + " | ".join(grid.loc[layer]) + " |" for layer in grid.index]
    n_sig = int(_as_bool(table["significant"]).sum())
    lines += ["", f"{n_sig} of {len(table)} layers change significantly with a single head."]
    atomic.write_text(out_md, "\n".join(lines) + "\n")
    return [str(out_csv), str(out_md)]


# ------------------------------------------------------------------ head criteria (beyond the paper)

CRITERIA_LINESTYLES = {"importance": "-", "oracle": "--", "random": ":"}


def criteria_figure(curves: pd.DataFrame, out_png, out_pdf, style: dict | None = None) -> list[str]:
    """Every criterion's pruning curve on one panel (criteria.csv): score vs % of heads pruned."""
    _require_columns(curves, ["study", "criterion", "percent_pruned", "score", "metric"], "criteria table")
    criteria = list(dict.fromkeys(curves["criterion"]))
    figure = build_pruning_figure(curves.assign(scope="all"), ["all"], "criterion", criteria,
                                  {**ORDER_LABELS, "importance": "$I_h$"}, CRITERIA_LINESTYLES, style,
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


# ----------------------------------------------------- beyond the paper: Hard Concrete gates and head roles

ROLE_COLORS = {"positional": "#1f77b4", "syntactic": "#2ca02c", "rare-word": "#d62728", "other": "#d9d9d9",
               "pruned": "#ffffff", "n/a": "#f7f7f7"}
ROLES = ("positional", "syntactic", "rare-word", "other")
LM_ROLES = ("retrieval", "induction", "previous-token", "sink", "other")  # headprune.scoring.lm_roles.ROLE_PRIORITY


def build_concrete_figure(concrete: pd.DataFrame, style: dict | None = None) -> Figure:
    """Score vs heads kept: Hard Concrete (one point per penalty), and I_h / random pruning with as many
    heads kept, from concrete.csv; the full model as a dotted line."""
    _require_columns(concrete, ["study", "penalty", "heads_kept", "heads_total", "score_full", "score_concrete",
                                "metric"], "concrete table")
    style = _style(style)
    metric = _single_value(concrete, "metric", "concrete table")
    display = metric_display(metric)
    table = concrete.sort_values(["heads_kept", "penalty"])
    with _rc(style):
        figure, (ax,) = _new_figure(style)
        x = table["heads_kept"].to_numpy()
        ax.axhline(table["score_full"].iloc[0] * display.scale, color="black", linestyle=":", linewidth=1,
                   label="_full model")
        lines = [("score_concrete", "Hard Concrete gates", "-", "o")]
        lines += [(f"score_{name}", ORDER_LABELS.get(name, name), ORDER_LINESTYLES.get(name, "--"), marker)
                  for name, marker in (("importance", "s"), ("random", "^")) if f"score_{name}" in table]
        for column, label, linestyle, marker in lines:
            ax.plot(x, table[column].to_numpy() * display.scale, linestyle=linestyle, marker=marker, label=label)
        for row in table.itertuples():
            ax.annotate(f"λ={row.penalty:g}", (row.heads_kept, row.score_concrete * display.scale),
                        textcoords="offset points", xytext=(3, 4), fontsize=style["font_size"] * 0.7)
        ax.set_xlabel(f"heads kept (of {int(table['heads_total'].iloc[0])})")
        ax.set_ylabel(display.label + (f" ({display.unit})" if display.unit else ""))
        ax.set_title(f"{table['study'].iloc[0]}: learned gates vs pruning")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="lower right")
    return figure


def concrete_figure(concrete: pd.DataFrame, out_png, out_pdf, style: dict | None = None) -> list[str]:
    return save_figure(build_concrete_figure(concrete, style), out_png, out_pdf, style)


def roles_by_step(roles: pd.DataFrame, step_percent: float = 10.0) -> pd.DataFrame:
    """Which roles are left after each step of global I_h pruning (least important first): one row per
    step, the number of heads of each role still in the model ('n/a': heads without a role measured)."""
    from headprune.experiments.runs import importance_order, pruning_steps

    _require_columns(roles, ["study", "attn_type", "layer", "head", "importance", "role"], "head roles table")
    role_of = {(r.attn_type, int(r.layer), int(r.head)): r.role for r in roles.itertuples()}
    names = LM_ROLES if is_language_model_roles(roles) else ROLES
    rows = []
    for step, (percent, removed) in enumerate(pruning_steps(importance_order(roles), step_percent)):
        left = collections.Counter(role for head, role in role_of.items() if head not in set(removed))
        rows.append({"study": roles["study"].iloc[0], "step": step, "percent_pruned": percent,
                     "heads_left": len(role_of) - len(removed),
                     **{role: left.get(role, 0) for role in (*names, "pruned", "n/a")}})
    return pd.DataFrame(rows)


def roles_by_step_markdown(steps: pd.DataFrame, out_md) -> str:
    columns = [role for role in steps.columns if role not in ("study", "step", "percent_pruned", "heads_left")
               and steps[role].any()]
    lines = [f"**Head roles left while pruning by $I_h$** ({steps['study'].iloc[0]}): heads of each role "
             "still in the model after each step (Voita et al.: the specialised heads go last).", "",
             "| % pruned | heads left | " + " | ".join(columns) + " |", "|---:|---:|" + "---:|" * len(columns)]
    for row in steps.itertuples(index=False):
        row = row._asdict()
        lines.append(f"| {row['percent_pruned']:.0f} | {row['heads_left']} | "
                     + " | ".join(str(steps.loc[row['step'], role]) for role in columns) + " |")
    Path(out_md).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out_md, "\n".join(lines) + "\n")
    return str(out_md)


def build_head_roles_figure(roles: pd.DataFrame, style: dict | None = None) -> Figure:
    """A layer x head map per attention type with roles, each head coloured by its role and labelled with
    its importance rank (1 = most important of all heads)."""
    from matplotlib.colors import ListedColormap

    _require_columns(roles, ["study", "attn_type", "layer", "head", "importance", "role"], "head roles table")
    style = _style(style)
    measured = roles[roles.role != "n/a"]
    types = [t for t in ATTENTION_TYPES if t in set(measured.attn_type)] or list(dict.fromkeys(roles.attn_type))
    names = list(ROLE_COLORS)
    rank = roles["importance"].rank(ascending=False, method="first").astype(int)
    with _rc(style):
        figure, axes = _new_figure(style, len(types))
        for ax, attn_type in zip(axes, types):
            part = roles[roles.attn_type == attn_type]
            grid = part.pivot(index="layer", columns="head", values="role").map(names.index)
            ranks = rank[part.index].to_numpy()
            ax.imshow(grid.to_numpy(), cmap=ListedColormap([ROLE_COLORS[n] for n in names]), vmin=0,
                      vmax=len(names) - 1, aspect="auto")
            for layer, head, r in zip(part["layer"], part["head"], ranks):
                ax.text(head, layer, str(r), ha="center", va="center", fontsize=style["font_size"] * 0.7)
            ax.set_xticks(range(grid.shape[1]))
            ax.set_yticks(range(grid.shape[0]))
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
            ax.set_title(f"{roles['study'].iloc[0]} {TYPE_LABELS.get(attn_type, attn_type)}")
        present = [n for n in names if n in set(roles.role)]
        figure.legend(handles=[Patch(facecolor=ROLE_COLORS[n], edgecolor="black", label=n) for n in present],
                      loc="outside right center")
    return figure


def head_roles_figure(roles: pd.DataFrame, out_png, out_pdf, style: dict | None = None) -> list[str]:
    return save_figure(build_head_roles_figure(roles, style), out_png, out_pdf, style)


# --- a language model's heads: their roles, Wu et al.'s retrieval heads, perplexity beside retrieval ----

LM_SCORES = {"previous_token": "previous token", "induction": "induction", "sink": "first-token sink",
             "retrieval": "retrieval (Wu et al.)"}


def is_language_model_roles(roles: pd.DataFrame) -> bool:
    """Whether a head_roles table holds a language model's roles (headprune.scoring.lm_roles)."""
    return "induction" in roles.columns


def build_lm_roles_figure(roles: pd.DataFrame, style: dict | None = None) -> Figure:
    """A layer x head map of each score of a language model's heads (previous token, induction, sink,
    retrieval), each cell labelled with its value; a score the table lacks (all NaN) is left out."""
    _require_columns(roles, ["study", "layer", "head", *LM_SCORES], "language model head roles table")
    style = _style(style)
    scores = [name for name in LM_SCORES if roles[name].notna().any()]
    with _rc(style):
        figure, axes = _new_figure(style, max(1, len(scores)))
        for ax, name in zip(axes, scores):
            grid = roles.pivot(index="layer", columns="head", values=name)
            image = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", vmin=0, vmax=max(1.0, np.nanmax(grid.to_numpy(dtype=float))),
                              aspect="auto")
            for (layer, head), value in np.ndenumerate(grid.to_numpy(dtype=float)):
                if np.isfinite(value):
                    ax.text(head, layer, f"{value:.2f}", ha="center", va="center", color="white" if value < 0.5 else "black",
                            fontsize=style["font_size"] * 0.6)
            ax.set_xticks(range(grid.shape[1]))
            ax.set_yticks(range(grid.shape[0]))
            ax.set_xlabel("query head")
            ax.set_ylabel("layer")
            ax.set_title(f"{roles['study'].iloc[0]}: {LM_SCORES[name]}")
        figure.colorbar(image, ax=axes, shrink=0.8)
    return figure


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
    both tables ablated it (a screened Table 1 leaves its screened-only heads out: headprune.experiments.screening)."""
    keys = ["attn_type", "layer", "head"]
    heads = _ablated(perplexity_ablation)[keys + ["score", "score_full"]].merge(
        _ablated(retrieval_ablation)[keys + ["score", "score_full"]], on=keys, suffixes=("_perplexity", "_retrieval"))
    heads = heads.rename(columns={"score_perplexity": "perplexity", "score_full_perplexity": "perplexity_full",
                                  "score_retrieval": "retrieval", "score_full_retrieval": "retrieval_full"})
    heads.insert(0, "experiment", "single head off")
    steps = perplexity_pruning[["order", "scope", "percent_pruned", "score"]].merge(
        retrieval_pruning[["order", "scope", "percent_pruned", "score"]], on=["order", "scope", "percent_pruned"],
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
