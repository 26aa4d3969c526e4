"""Line plots of a tidy table: one line per value of a column, points drawn exactly as they are in the table
(the pruning curves' drawing), and the generic one-panel line or scatter figure."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from headprune.report.figures.checks import _require_columns
from headprune.report.figures.style import _new_figure, _rc, _style, save_figure


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
