"""This project's own questions beyond the paper: what the uniform layout (a stock checkpoint) costs against the
paper's free one (U1), and how much of the loss from pruning a few steps of training win back (R1). A study that ran
neither experiment has no row."""
from __future__ import annotations

import numpy as np

from headprune.analyses.criteria import reference_order
from headprune.analyses.layouts import FREE, UNIFORM
from headprune.evaluation.metrics import better_sign
from headprune.report.claims.base import Claim, by_study, claim, points_worse, show, verdict
from headprune.report.claims.michel import WITHIN_POINTS

UNIFORM_AT = 50.0  # U1: the % of heads pruned the two layouts are compared at
RECOVERY_AT = 50.0  # R1: the % of heads pruned where recovery is judged
WON_BACK = 50.0  # R1: the % of the loss from pruning the best training method must win back


@claim
class UniformLayout(Claim):
    code = "U1"
    statement = ("Uniform pruning (the same heads kept in every layer: a stock checkpoint) costs little against free "
                 "pruning at equal heads removed")
    evidence = "pruning.csv, layout"
    source = "not in the paper (it prunes freely): what Minitron-style width pruning costs, this project's question"
    rule = (f"importance order, whole model: at the % pruned nearest {UNIFORM_AT:g}% where both layouts have a step "
            f"(else the free curve interpolated there), reproduced if the uniform layout's score is at most "
            f"{WITHIN_POINTS:g} point worse than the free layout's (a point as in C3)")

    def judge(self, evidence):
        """Per study pruned in both layouts (importance order, whole model): the uniform layout's score against the
        free one's at the % pruned nearest UNIFORM_AT."""
        pruning = evidence["pruning"]
        if pruning.empty or "layout" not in pruning or not (pruning["layout"] == UNIFORM).any():
            return []
        curves = pruning[(pruning["order"] == reference_order()) & (pruning["scope"] == "all")]
        rows = []
        for study, curve in by_study(curves[curves["study"].isin(curves.loc[curves["layout"] == UNIFORM, "study"])]):
            free = curve[curve["layout"] == FREE].sort_values("percent_pruned")
            uniform = curve[curve["layout"] == UNIFORM].sort_values("percent_pruned")
            inside = uniform[(uniform["percent_pruned"] > 0) & (uniform["percent_pruned"] < 100)]
            if free.empty or inside.empty:
                continue
            shared = inside[inside["percent_pruned"].round(6).isin(free["percent_pruned"].round(6))]
            candidates = shared if not shared.empty else inside
            at = candidates.loc[(candidates["percent_pruned"] - UNIFORM_AT).abs().idxmin()]
            percent, metric = float(at["percent_pruned"]), at["metric"]
            free_score = float(np.interp(percent, free["percent_pruned"].to_numpy(float),
                                         free["score"].to_numpy(float)))
            cost = points_worse(free_score, float(at["score"]), metric)
            how = "" if not shared.empty else " (free interpolated)"
            this_run = (f"at {percent:.1f}% of the heads{how}: free {show(free_score, metric)}, uniform "
                        f"{show(at['score'], metric)} ({abs(cost):.2f} points {'worse' if cost > 0 else 'better'})")
            rows.append(self.row(study, this_run, verdict(cost <= WITHIN_POINTS)))
        return rows


@claim
class Recovery(Claim):
    code = "R1"
    statement = ("Training the pruned model a few steps (LoRA, full fine-tuning, distillation) wins back much of what "
                 "pruning cost; bias compensation, without training, less")
    evidence = "recovery.csv, Figure 3"
    source = ("not in the paper (it does not retrain): LLM-Pruner (LLaMA-7B, 20% pruned, LoRA on 50k instructions) "
              "zero-shot average 56.69 pruned -> 59.23 recovered of 63.25 unpruned (39% won back)")
    rule = (f"at the recovered point nearest {RECOVERY_AT:g}% of the heads pruned (importance order, free layout), each "
            "method's share of the loss from pruning won back, (recovered - pruned) / (unpruned - pruned) in the "
            f"metric's better direction: reproduced if the best training method wins back at least {WON_BACK:g}%")

    def judge(self, evidence):
        """Per recovered study (recovery.csv): each method's share of the loss from pruning won back at the point
        nearest RECOVERY_AT."""
        recovery = evidence["recovery"]
        if recovery.empty:
            return []
        rows = []
        for study, table in by_study(recovery):
            at = table.loc[(table["percent_pruned"] - RECOVERY_AT).abs().idxmin(), "percent_pruned"]
            points = table[table["percent_pruned"] == at]
            metric = points["metric"].iloc[0]
            shares = {r.method: won_back(r.score_unpruned, r.score_pruned, r.score_recovered, metric)
                      for r in points.itertuples()}
            # bias compensation's rows train nothing (steps 0): R1 is about training
            trained = [won_back(r.score_unpruned, r.score_pruned, r.score_recovered, metric)
                       for r in points.itertuples() if int(r.steps) > 0]
            first = points.iloc[0]
            this_run = (f"at {at:g}% pruned ({show(first['score_unpruned'], metric)} unpruned, "
                        f"{show(first['score_pruned'], metric)} pruned): " +
                        ", ".join(f"{method} {share:.0f}%" for method, share in shares.items()) + " won back")
            rows.append(self.row(study, this_run, verdict(bool(trained) and max(trained) >= WON_BACK)))
        return rows


def won_back(unpruned: float, pruned: float, recovered: float, metric: str) -> float:
    """The % of the loss from pruning that recovery wins back (100: the unpruned score again; over 100: better)."""
    lost = better_sign(metric) * (float(unpruned) - float(pruned))
    if lost == 0:
        return 0.0
    return 100.0 * better_sign(metric) * (float(recovered) - float(pruned)) / lost
