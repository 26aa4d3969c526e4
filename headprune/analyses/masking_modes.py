"""One study under every way of switching a head off (issue #32): does the answer to "which heads matter, how
many can go?" depend on the masking mode (zero, the paper's; mean; optimal; resample; uniform; streaming)?

Per mode (``mode_sweep``, one job each): every head switched off alone with its paired test against the full
model (as Table 1), and the importance-order pruning curve (as Figure 3), under that mode. The comparison
(``compare_modes``) sets them side by side: per mode the heads whose removal is significant and the % of
heads prunable within ``within`` points of the full model, and between every two modes the rank correlation
of the heads' single-head changes (Spearman). Tidy tables: one row per (mode, head) and per (mode, step).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from headprune.analyses.criteria import area_under_curve, largest_within, tolerance_points
from headprune.evaluation.metrics import better_sign

HEAD_COLUMNS = ["study", "mode", "experiment", "attn_type", "layer", "head", "metric", "score_full", "score", "delta",
                "p_bootstrap", "significant"]
STEP_COLUMNS = ["study", "mode", "experiment", "step", "percent_pruned", "heads_pruned", "metric", "score"]
ONE_HEAD = "one head per layer"  # the experiment of the rows of one_head_per_layer (C2), with the study in it


def mode_sweep(model, tokenizer, evalset, settings, order: list, *, mode: str, study: str, step_percent: float,
               resamples: int, seed: int, alpha: float, one_head: tuple | None = None) -> pd.DataFrame:
    """The single-head ablation and the pruning curve of ``order`` (first pruned first) under ``settings``'s
    masking: rows of experiment "single head" (one per head) and "pruning" (one per step); with ``one_head``
    (selection set, test set) also "one head per layer" (one per layer: its best head on the selection set, its
    change on the test set; ``head`` is that head)."""
    from headprune.analyses.sweeps import one_head_per_layer, pruning_curve, single_head_sweep

    heads = single_head_sweep(model, tokenizer, evalset, settings, resamples=resamples, seed=seed, alpha=alpha,
                              study=study)
    heads = heads.assign(mode=mode, experiment="single head")[HEAD_COLUMNS]
    curve = pruning_curve(model, tokenizer, evalset, order, step_percent, settings, name="importance", study=study)
    curve = curve.assign(mode=mode, experiment="pruning")[STEP_COLUMNS]
    tables = [heads, curve]
    if one_head is not None:
        layers = one_head_per_layer(model, tokenizer, *one_head, settings, resamples=resamples, seed=seed, alpha=alpha,
                                    study=study)
        tables.append(layers.rename(columns={"best_head": "head"}).assign(mode=mode, experiment=ONE_HEAD)[HEAD_COLUMNS])
    return pd.concat(tables, ignore_index=True)


def compare_modes(runs: pd.DataFrame, within: float = 1.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, correlations) of a study's mode sweeps stacked: per mode the significant heads, the % of heads
    prunable in the importance order within ``within`` points (criteria.tolerance_points) and the area under
    the pruning curve; the Spearman rank correlation of the heads' single-head deltas between every two modes."""
    modes = list(dict.fromkeys(runs["mode"]))
    heads, steps = runs[runs["experiment"] == "single head"], runs[runs["experiment"] == "pruning"]
    rows = []
    for mode in modes:
        mine, curve = heads[heads["mode"] == mode], steps[steps["mode"] == mode]
        metric = str(mine["metric"].iloc[0])
        full = float(mine["score_full"].iloc[0])
        significant = mine["significant"].astype(str).str.lower().isin(["true", "1"])
        rows.append({"study": mine["study"].iloc[0], "mode": mode, "metric": metric, "score_full": full,
                     "heads": len(mine), "significant_heads": int(significant.sum()),
                     "largest_delta_worse": float((-better_sign(metric) * mine["delta"]).max()),
                     "prunable_percent": largest_within(curve, full, tolerance_points(metric, within, full),
                                                        better_sign(metric)),
                     "area_under_curve": area_under_curve(curve),
                     "score_all_pruned": float(curve.sort_values("percent_pruned")["score"].iloc[-1])})
    wide = heads.pivot_table(index=["attn_type", "layer", "head"], columns="mode", values="delta")[modes]
    return pd.DataFrame(rows), wide.rank().corr()


def as_scorecard_tables(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(ablation, pruning, one head per layer) tables of the mode sweeps in the scorecard's columns, a study per
    mode named '<study> (<mode> masking)', so that C1, C3 and (for a study in experiments.one_head_per_layer) C2
    are judged under each mode."""
    if runs.empty:
        return pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    runs = runs.reset_index(drop=True)
    label = runs["study"] + " (" + runs["mode"] + " masking)"
    runs = runs.assign(study=label)
    heads = runs[runs["experiment"] == "single head"]
    steps = runs[runs["experiment"] == "pruning"].assign(order="importance", scope="all")
    layers = runs[runs["experiment"] == ONE_HEAD]
    return heads[["study", "attn_type", "layer", "head", "metric", "delta", "significant"]], \
        steps[["study", "order", "scope", "step", "percent_pruned", "heads_pruned", "score", "metric"]], \
        layers[["study", "attn_type", "layer", "metric", "delta", "significant"]]
