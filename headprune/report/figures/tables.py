"""The paper's tables of heads masked, as tidy CSV and markdown: Table 1 (the change when one head is
masked, layers x heads, with significance and a screened table's bound) and Tables 2-3 (the change when each
layer keeps only its best head)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from headprune.report.figures.checks import _ablation_of_one_study, _as_bool, _single_value
from headprune.report.figures.display import (change_label, format_score, metric_display, study_title,
                                                   type_labels, unit_name)
from headprune.evaluation.metrics import better_sign
from headprune.io import atomic
from headprune.models.attention_types import KNOWN_TYPES

log = logging.getLogger(__name__)


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
        from headprune.analyses.screening import SCREENED

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
    from headprune.analyses.screening import BOUND_COLUMNS, bound_sentence, unverified_bound

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


# ------------------------------------------------------------------ Tables 2-3

def one_head_table(one_head: pd.DataFrame, out_csv, out_md, family: str | None = None) -> list[str]:
    """Tables 2-3: per layer and attention type, the change when only the best head is kept."""
    display = metric_display(_single_value(one_head, "metric", "one-head-per-layer table"))
    table = one_head.assign(layer=one_head["layer"] + 1, best_head=one_head["best_head"] + 1,
                            delta_display=(one_head["delta"] * display.scale).round(2))
    table["cell"] = [_format_delta(d, bool(s)) for d, s in zip(table["delta_display"], _as_bool(table["significant"]))]
    Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(table, out_csv, index=False)
    types = [t for t in KNOWN_TYPES if t in set(table["attn_type"])]
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
