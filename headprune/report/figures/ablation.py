"""The paper's figures of single heads masked: Figure 1 (the distribution of the changes, per attention type,
drawn from its bins CSV) and Figure 2 (each head's change out of domain against in domain, with Pearson's r)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from headprune.report.figures.checks import _ablated, _ablation_of_one_study, _single_value
from headprune.report.figures.display import (change_label, format_score, metric_display, study_title,
                                                   type_labels, unit_name)
from headprune.report.figures.style import _new_figure, _rc, _style, save_figure
from headprune.io import atomic
from headprune.models.attention_types import KNOWN_TYPES, LABELS

DEFAULT_HISTOGRAM_BINS = 30

NOT_SIGNIFICANT_COLOR = "#b0b0b0"
SIGNIFICANT_COLOR = "#d62728"


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
    for attn_type in [t for t in KNOWN_TYPES if t in set(ablation["attn_type"])]:
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
    attn_types = [t for t in KNOWN_TYPES if t in set(histogram["attn_type"])]
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


# ------------------------------------------------------------------ Figure 2

FIGURE2_COLUMNS = ["study", "attn_type", "layer", "head", "metric", "delta_in_domain", "delta_out_of_domain",
                   "pearson_r", "p_value"]


def figure2_table(in_domain: pd.DataFrame, out_of_domain: pd.DataFrame) -> pd.DataFrame:
    """One row per head: its ablation delta in domain and out of domain, with Pearson's r over all heads (of a
    screened Table 1: over the heads ablated, which both test sets share)."""
    from headprune.evaluation.stats import pearson

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
        for attn_type in KNOWN_TYPES:
            rows = table[table["attn_type"] == attn_type]
            if not rows.empty:
                # raw deltas, exactly as in the CSV (accuracy as a fraction)
                ax.scatter(rows["delta_in_domain"], rows["delta_out_of_domain"], s=12, label=LABELS[attn_type])
        ax.axhline(0, color="black", linewidth=0.6, linestyle="--")
        ax.axvline(0, color="black", linewidth=0.6, linestyle="--")
        r, p = table["pearson_r"].iloc[0], table["p_value"].iloc[0]
        ax.set_title(f"{table['study'].iloc[0]}: Pearson r = {r:.2f} (p = {p:.2g})")
        ax.set_xlabel(f"{display.label} change, in domain")
        ax.set_ylabel(f"{display.label} change, out of domain")
        ax.legend(frameon=False)
    return [str(out_csv), *save_figure(figure, out_png, out_pdf, style)]
