"""How a figure is drawn and saved: the style (size, dpi, font size) and its defaults, a Figure of side-by-side
panels without pyplot, PNG and PDF written with reproducible bytes, and the points of every line drawn (for
tests)."""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from headprune.io import atomic

log = logging.getLogger(__name__)

DEFAULT_STYLE = {"dpi": 150, "width": 5.0, "height": 3.5, "font_size": 10}


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
