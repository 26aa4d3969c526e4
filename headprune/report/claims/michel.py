"""The six claims of Michel, Levy and Neubig (2019), C1-C6, each tested on the CSV the pipeline writes for its
experiment, next to the paper's numbers for the model a study stands for ('WMT' for the translation study, the GLUE
task of a glue study, 'IWSLT' for Figure 5's; rules/report.smk). A study that cannot test a claim (a model without
encoder-decoder attention for C4) gets a "not run" row saying why."""
from __future__ import annotations

import pandas as pd

from headprune.analyses.engines import ENGINE_UNITS
from headprune.evaluation.metrics import better_sign
from headprune.models.attention_types import TYPE_LABELS
from headprune.report.claims.base import (NOT_REPRODUCED, REPRODUCED, UNDECIDED, Claim, by_study, claim, flags,
                                          importance_curves, in_points, last_step_at_or_below, points_worse, share,
                                          show, unit, verdict)

MOST_HEADS = 50.0  # C1: "most" heads = more than this % of a study's heads
MANY_LAYERS = 50.0  # C2: "many" layers = at least this % of a study's layers (the paper's WMT figure)
WITHIN_POINTS = 1.0  # C3 (and U1): "no noticeable impact" = within this many points of the unpruned score
MIN_PRUNABLE = 20.0  # C3: the low end of the paper's "20-60%"
TYPE_PRUNED = 80.0  # C4: % of an attention type's heads pruned where the paper compares the types
DYNAMICS_PRUNED = 40.0  # C5: % of the heads pruned where the paper reads its training dynamics
DYNAMICS_KEPT = 85.0  # C5: % of the unpruned BLEU the paper's late checkpoints keep there (85-90%)


@claim
class SingleHeads(Claim):
    code = "C1"
    statement = "Most single heads can be removed at test time without a significant change"
    evidence = "Table 1, Figure 1"
    paper = {"WMT": "WMT Enc-Enc (Table 1): 88/96 heads (92%) no significant change; 8 significant, 4 of them gains",
             "MNLI": "BERT MNLI (Figure 1b): most heads stay near the full 83.4% accuracy (no count given)"}
    rule = (f"reproduced if more than {MOST_HEADS:.0f}% of the heads, each removed alone, change the score not "
            "significantly (`significant` of eval/ablation.csv: p < alpha, paired bootstrap for BLEU and perplexity, "
            "t-test for accuracy)")

    def judge(self, evidence):
        """Per ablation study (eval/ablation.csv: one row per head, removed alone): the share of heads whose
        removal changes the score not significantly; Enc-Enc alone too (the paper's Table 1) when the model has
        other attention types. A screened Table 1 (headprune.analyses.screening) gives a range: its heads screened
        only may hide up to the bound's count of significant heads at ``evidence.confidence``; the claim is
        reproduced when it holds even then, not reproduced when it fails with none hidden, else undecided."""
        ablation = evidence["ablation"]
        if ablation.empty:
            return [self.not_run()]
        from headprune.analyses.screening import bound_sentence, table_basis, unverified_bound

        rows = []
        for study, heads in by_study(ablation):
            significant = flags(heads["significant"])
            unchanged = int((~significant).sum())
            gains = int((significant & (better_sign(heads["metric"].iloc[0]) * heads["delta"] > 0)).sum())
            this_run = (f"{share(unchanged, len(heads))} heads no significant change; {int(significant.sum())} "
                        f"significant, {gains} of them gains")
            if heads["attn_type"].nunique() > 1 and "enc_self" in set(heads["attn_type"]):
                enc_self = ~significant[heads["attn_type"] == "enc_self"]
                this_run += f"; Enc-Enc (Table 1): {share(int(enc_self.sum()), len(enc_self))}"
            passed = 100.0 * unchanged / len(heads) > MOST_HEADS
            outcome = verdict(passed)
            if table_basis(heads) == "screened":
                # heads screened only count as unchanged above; the bound says how many of them may be significant
                bound = unverified_bound(heads, evidence.confidence)
                fewest = unchanged - bound["bound_significant_unverified"]
                this_run = (f"{share(fewest, len(heads))} to {share(unchanged, len(heads))} heads no significant "
                            f"change ({bound_sentence(bound)}); {int(significant.sum())} significant found, {gains} "
                            "of them gains")
                surely = 100.0 * fewest / len(heads) > MOST_HEADS
                outcome = verdict(True) if surely else verdict(False) if not passed else UNDECIDED
            else:
                this_run += "; exhaustive Table 1"
            rows.append(self.row(study, this_run, outcome, evidence.paper_models.get(study)))
        return rows


@claim
class OneHeadPerLayer(Claim):
    code = "C2"
    statement = "Many layers can be reduced to one head without a significant loss"
    evidence = "Tables 2-3"
    paper = {"WMT": "WMT (Table 2): 14/18 layers (78%) no significant loss, worst Enc-Dec layer 6 -13.56 BLEU; "
                    "newstest2014 (App. A): 50% of the layers no significant change",
             "MNLI": "BERT MNLI (Table 3): 12/12 layers (100%) no significant change, worst layer 9 -0.96%"}
    rule = (f"reproduced if at least {MANY_LAYERS:.0f}% of the layers, each reduced to its best head (chosen on the "
            "selection set), show no significant loss on the test set (one_head_per_layer.csv: `significant` and a "
            "worse score, delta < 0, or > 0 for perplexity, is a loss)")

    def judge(self, evidence):
        """Per study (one_head_per_layer.csv: one row per layer and attention type, the layer reduced to its best
        head): the share of layers with no significant loss on the test set."""
        one_head = evidence["one_head"]
        if one_head.empty:
            return [self.not_run()]
        rows = []
        for study, layers in by_study(one_head):
            change = better_sign(layers["metric"].iloc[0]) * layers["delta"]  # > 0: better
            loss = flags(layers["significant"]) & (change < 0)
            kept = int((~loss).sum())
            worst = layers.loc[change.idxmin()]
            metric = worst["metric"]
            this_run = (f"{share(kept, len(layers))} layers no significant loss; worst "
                        f"{TYPE_LABELS.get(worst['attn_type'], worst['attn_type'])} layer {int(worst['layer']) + 1} "
                        f"{show(worst['delta'], metric, sign=True)}" + (" (significant)" if loss[worst.name] else ""))
            passed = 100.0 * kept / len(layers) >= MANY_LAYERS
            rows.append(self.row(study, this_run, verdict(passed), evidence.paper_models.get(study)))
        return rows


def prunable_percent(curve: pd.DataFrame) -> tuple[float, pd.Series | None]:
    """(the largest % pruned up to which every step stays within WITHIN_POINTS of the unpruned score,
    the first step that does not, or None): one study's curve, one order."""
    curve = curve.sort_values("percent_pruned")
    metric = curve["metric"].iloc[0]
    unpruned = curve.loc[curve["percent_pruned"] == 0, "score"].iloc[0]
    prunable = 0.0
    for _, step in curve[curve["percent_pruned"] > 0].iterrows():
        if points_worse(unpruned, step["score"], metric) > WITHIN_POINTS:
            return prunable, step
        prunable = float(step["percent_pruned"])
    return prunable, None


@claim
class Pruning(Claim):
    code = "C3"
    statement = "20-60% of the heads can be pruned (importance order) before the score falls off"
    evidence = "Figures 3, 6"
    paper = {"WMT": "WMT: ~20% (Figure 3a)", "MNLI": "BERT MNLI: ~40% (Figure 3b)",
             "SST-2": "BERT SST-2: ~60% (Figure 6a)", "CoLA": "BERT CoLA: ~50% (Figure 6b)",
             "MRPC": "BERT MRPC: ~50% (Figure 6c)"}
    rule = (f"prunable = the largest % of heads pruned (importance order, whole model) up to which every step stays "
            f"within {WITHIN_POINTS:g} point of the unpruned score (a point: 1 BLEU, or 1 percentage point of "
            f"accuracy, F1 or MCC, or 1% of the unpruned perplexity); reproduced if prunable >= {MIN_PRUNABLE:.0f}%")

    def judge(self, evidence):
        """Per study pruned across the whole model in the importance order (pruning tables, scope 'all'): the % of
        heads prunable before the score falls more than WITHIN_POINTS below the unpruned model."""
        curves = importance_curves(evidence["pruning"], ["all"])
        if curves.empty:
            return [self.not_run()]
        rows = []
        for study, curve in by_study(curves):
            metric = curve["metric"].iloc[0]
            unpruned = curve.loc[curve["percent_pruned"] == 0, "score"].iloc[0]
            prunable, falls = prunable_percent(curve)
            this_run = f"{prunable:.0f}% prunable (unpruned {show(unpruned, metric)}"
            this_run += (f"; {show(falls['score'], metric)} at {falls['percent_pruned']:.0f}%)" if falls is not None
                         else f"; never more than {WITHIN_POINTS:g} point below)")
            rows.append(self.row(study, this_run, verdict(prunable >= MIN_PRUNABLE), evidence.paper_models.get(study)))
        return rows


@claim
class AttentionTypes(Claim):
    code = "C4"
    statement = "Enc-Dec attention is the most sensitive to pruning"
    evidence = "Figure 4"
    paper = {"WMT": "WMT (Figure 4): with 20% of a type's heads left Enc-Enc and Dec-Dec keep ~30 BLEU (of 36); "
                    "Enc-Dec degrades catastrophically beyond 60% pruned"}
    rule = (f"each attention type pruned alone (importance order): reproduced if, at {TYPE_PRUNED:.0f}% of the "
            "type's heads pruned (the last step at or below), Enc-Dec has the lowest score of the three types")

    def judge(self, evidence):
        """Per study pruned within each attention type (pruning tables, scope = the type): the score of each type at
        TYPE_PRUNED% of its heads pruned; Enc-Dec should be the lowest."""
        curves = importance_curves(evidence["attention_types"], list(TYPE_LABELS))
        if curves.empty:
            return [self.not_run()]
        rows = []
        for study, study_curves in by_study(curves):
            types = [t for t in TYPE_LABELS if t in set(study_curves["scope"])]
            if len(types) < len(TYPE_LABELS):
                rows.append(self.not_run(study, f"only {', '.join(TYPE_LABELS[t] for t in types)} attention: no "
                                                "attention types to compare"))
                continue
            metric = study_curves["metric"].iloc[0]
            scores = {t: last_step_at_or_below(study_curves[study_curves["scope"] == t], TYPE_PRUNED) for t in types}
            lowest = min(types, key=lambda t: better_sign(metric) * scores[t]["score"])
            unpruned = study_curves.loc[study_curves["percent_pruned"] == 0, "score"].iloc[0]
            this_run = (f"at {TYPE_PRUNED:.0f}% of a type's heads pruned: "
                        + ", ".join(f"{TYPE_LABELS[t]} {in_points(scores[t]['score'], metric):.2f}" for t in types)
                        + f"{unit(metric)} (unpruned {in_points(unpruned, metric):.2f}); lowest {TYPE_LABELS[lowest]}")
            rows.append(self.row(study, this_run, verdict(lowest == "enc_dec"), evidence.paper_models.get(study)))
        return rows


@claim
class TrainingDynamics(Claim):
    code = "C5"
    statement = ("Two-phase training dynamics: the unimportant heads emerge early but not at once; only later "
                 "checkpoints keep most of their BLEU with 40% of the heads pruned")
    evidence = "Figure 5"
    paper = {"IWSLT": "IWSLT de-en 6x8 heads (Figure 5): epochs 1-2 BLEU falls about linearly with % pruned; from "
                      "epoch 10 85-90% of the unpruned BLEU kept at 40% pruned"}
    rule = (f"% of the unpruned BLEU kept at {DYNAMICS_PRUNED:.0f}% of the heads pruned (the last step at or below), "
            f"per checkpoint: reproduced if the last checkpoint keeps >= {DYNAMICS_KEPT:.0f}% and more than the first")

    def judge(self, evidence):
        """Figure 5's pruning curves, one per checkpoint epoch (the dynamics_prune tables with an ``epoch`` column):
        the % of that checkpoint's unpruned BLEU kept at DYNAMICS_PRUNED% pruned (as figure5.csv's
        relative_percent), first checkpoint against last."""
        dynamics = evidence["dynamics"]
        if dynamics.empty:
            return [self.not_run()]
        rows = []
        for study, curves in by_study(dynamics):
            unpruned, kept = {}, {}
            for epoch, curve in sorted(curves.groupby("epoch"), key=lambda item: item[0]):
                full = float(curve.loc[curve["percent_pruned"] == 0, "score"].iloc[0])
                score = float(last_step_at_or_below(curve, DYNAMICS_PRUNED)["score"])
                unpruned[int(epoch)], kept[int(epoch)] = full, 100.0 * score / full if full else float("nan")
            epochs = list(kept)
            this_run = (f"% of unpruned BLEU kept at {DYNAMICS_PRUNED:.0f}% pruned: "
                        + ", ".join(f"epoch {e} {kept[e]:.1f}%" for e in epochs)
                        + " (unpruned BLEU " + ", ".join(f"{unpruned[e]:.1f}" for e in epochs) + ")")
            if len(epochs) < 2:
                rows.append(self.not_run(study, this_run + "; one checkpoint: no dynamics to compare"))
                continue
            first, last = kept[epochs[0]], kept[epochs[-1]]
            rows.append(self.row(study, this_run, verdict(last >= DYNAMICS_KEPT and last > first),
                                 evidence.paper_models.get(study)))
        return rows


@claim
class Speed(Claim):
    code = "C6"
    statement = "Pruning 50% of the heads speeds inference up, more so at larger batch sizes"
    evidence = "Table 4"
    paper = {"MNLI": "BERT MNLI, GTX 1080Ti (Table 4): +1.9% (batch 1), +2.7% (4), +17.5% (16), +17.5% (64)"}
    rule = ("on the pruned model's speedup and its 95% interval over the paired runs (table4.csv's speedup_low, "
            "speedup_high; a table without them: the speedup alone): reproduced if the interval at the largest batch "
            "size timed lies above 0 and above the smallest batch size's interval, not reproduced if it lies at or "
            "below 0 or at or below the smallest's, else undecided (a batch size above the number of items timed "
            "runs them all as one smaller batch: left out)")

    def judge(self, evidence):
        """Per study timed (table4.csv: one row per batch size, ``speedup_percent`` of the pruned model over the
        full one): the speedup at the largest batch size actually run against the smallest."""
        speed = evidence["speed"]
        if speed.empty:
            return [self.not_run()]
        rows = []
        # a causal LM is timed in two units (prefill and decode tokens): each is its own comparison
        units = speed["unit"] if "unit" in speed else pd.Series("", index=speed.index)
        for study, table in by_study(speed.assign(_unit=units)):
            for unit_name, part in table.groupby("_unit", sort=False):
                label = study if table["_unit"].nunique() == 1 else f"{study} ({unit_name})"
                rows.append(self.one(label, part, evidence.paper_models.get(study)))
        return rows

    def one(self, label: str, table: pd.DataFrame, model: str | None) -> dict:
        """One study (and unit) of Table 4: the speedup's interval at the largest batch size timed against 0 and
        against the smallest's (``speed_verdict``)."""
        table = table.sort_values("batch_size")
        items = int(table["items"].iloc[0])
        timed = table[table["batch_size"] <= items]
        left_out = table[table["batch_size"] > items]
        this_run = ", ".join(f"{speedup_text(r)} (batch {r['batch_size']})" for _, r in timed.iterrows())
        if not left_out.empty:
            this_run += (f"; left out: batch {', '.join(str(b) for b in left_out['batch_size'])} (one batch of "
                         f"the {items} items timed)")
        this_run += f"; {table['device'].iloc[0]}" if "device" in table else ""
        engine = "unit" in table and table["unit"].iloc[0] in ENGINE_UNITS
        if len(timed) < 2 and engine:  # llama.cpp runs one sequence: the speedup itself is what it can decide
            low, high = speedup_interval(timed.iloc[0])
            outcome = REPRODUCED if low > 0 else NOT_REPRODUCED if high <= 0 else UNDECIDED
            return self.row(label, this_run + "; llama.cpp, one sequence: decided on the speedup's interval against 0",
                            outcome, model)
        if len(timed) < 2:
            return self.not_run(label, this_run + "; one batch size: nothing to compare")
        return self.row(label, this_run, speed_verdict(timed.iloc[-1], timed.iloc[0]), model)


def speedup_interval(table_row: pd.Series) -> tuple[float, float]:
    """(low, high) of a Table 4 row's speedup (%): its interval, or the speedup alone where it has none (one run,
    or a table4.csv written before intervals)."""
    low, high = table_row.get("speedup_low"), table_row.get("speedup_high")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return float(table_row["speedup_percent"]), float(table_row["speedup_percent"])
    return float(low), float(high)


def speed_verdict(largest: pd.Series, smallest: pd.Series) -> str:
    """Reproduced: the largest batch size's interval above 0 and above the smallest's; not reproduced: at or below
    0, or at or below the smallest's; undecided: the intervals overlap, or the largest's holds 0 (C6's rule).
    Without intervals, the old rule on the speedups themselves (positive and larger: reproduced, else not)."""
    (low, high), (small_low, small_high) = speedup_interval(largest), speedup_interval(smallest)
    if low > 0 and low > small_high:
        return REPRODUCED
    if high <= 0 or high <= small_low:
        return NOT_REPRODUCED
    return UNDECIDED


def speedup_text(table_row: pd.Series) -> str:
    """'+17.5% [+12.1, +23.2]': a Table 4 row's speedup and its interval, where it has one."""
    low, high = speedup_interval(table_row)
    text = f"{table_row['speedup_percent']:+.1f}%"
    return text if low == high == table_row["speedup_percent"] else f"{text} [{low:+.1f}, {high:+.1f}]"
