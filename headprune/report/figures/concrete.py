"""The Hard Concrete figure (beyond the paper): the score against the heads kept by learned gates, one point
per penalty, beside I_h and random pruning with as many heads kept."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from headprune.report.figures.checks import _require_columns, _single_value
from headprune.report.figures.display import metric_display
from headprune.report.figures.pruning import order_labels, order_linestyles
from headprune.report.figures.style import _new_figure, _rc, _style, save_figure


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
        labels, linestyles = order_labels(), order_linestyles()
        lines += [(f"score_{name}", labels.get(name, name), linestyles.get(name, "--"), marker)
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
