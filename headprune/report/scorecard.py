"""The scorecard: the paper's six claims, each tested on this run's CSVs by a rule written down here, and
beyond the paper Wu et al. (2025)'s claims about retrieval heads (W1-W3) for every retrieval study.

Michel, Levy and Neubig (2019) make six claims (C1-C6). For each, one function below takes the CSV
the pipeline writes for that experiment (all its studies stacked, a ``study`` column telling them
apart) and returns the scorecard rows: one per study, each with this run's numbers, the paper's
numbers for the model the study stands for, the rule and its verdict:

- "reproduced" / "not reproduced": what the rule (``RULES``, printed in the table) decides;
- "not run": the config runs no experiment that tests the claim (an empty table), or the study
  cannot test it (e.g. a model without encoder-decoder attention for C4).

Thresholds are module constants, named in the rules. Scores are compared in *points*: BLEU points,
or percentage points of accuracy, F1 and MCC (the CSVs hold those as fractions in [0, 1]).
Only pandas is imported: the scorecard job starts in a second.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from headprune.analyses.criteria import reference_order
from headprune.analyses.engines import ENGINE_UNITS
from headprune.analyses.layouts import FREE, UNIFORM, free_layout
from headprune.evaluation.metrics import better_sign, metric_of
from headprune.models.attention_types import TYPE_LABELS

REPRODUCED, NOT_REPRODUCED, NOT_RUN = "reproduced", "not reproduced", "not run"
UNDECIDED = "undecided"  # a screened Table 1 whose bound leaves the claim open (C1); overlapping intervals (C6)
COLUMNS = ("claim", "study", "statement", "evidence", "this_run", "paper", "rule", "verdict")

# --- the thresholds of the rules ---------------------------------------------------------------

MOST_HEADS = 50.0  # C1: "most" heads = more than this % of a study's heads
MANY_LAYERS = 50.0  # C2: "many" layers = at least this % of a study's layers (the paper's WMT figure)
WITHIN_POINTS = 1.0  # C3: "no noticeable impact" = within this many points of the unpruned score
MIN_PRUNABLE = 20.0  # C3: the low end of the paper's "20-60%"
TYPE_PRUNED = 80.0  # C4: % of an attention type's heads pruned where the paper compares the types
DYNAMICS_PRUNED = 40.0  # C5: % of the heads pruned where the paper reads its training dynamics
DYNAMICS_KEPT = 85.0  # C5: % of the unpruned BLEU the paper's late checkpoints keep there (85-90%)

FEW_RETRIEVAL_HEADS = 5.0  # W1: "fewer than 5% of the heads" are retrieval heads
RETRIEVAL_HEAD = 0.1  # W1: a retrieval head scores above this (Wu et al.; headprune.scoring.lm_roles)
FAR_MORE = 20.0  # W2: points of retrieval accuracy the top-K heads cost beyond K random heads
LITTLE = 5.0  # W3: % of the full model's perplexity masking the top-K retrieval heads may add
TASK_MORE = 5.0  # W4: points of a task's score the top-K heads cost beyond K random heads
UNIFORM_AT = 50.0  # U1: the % of heads pruned the two layouts are compared at
RECOVERY_AT = 50.0  # R1: the % of heads pruned where recovery is judged
WON_BACK = 50.0  # R1: the % of the loss from pruning the best training method must win back

# --- the claims, their rules and the paper's numbers (as the paper reports them) -------------

CLAIMS = {
    "C1": ("Most single heads can be removed at test time without a significant change", "Table 1, Figure 1"),
    "C2": ("Many layers can be reduced to one head without a significant loss", "Tables 2-3"),
    "C3": ("20-60% of the heads can be pruned (importance order) before the score falls off", "Figures 3, 6"),
    "C4": ("Enc-Dec attention is the most sensitive to pruning", "Figure 4"),
    "C5": ("Two-phase training dynamics: the unimportant heads emerge early but not at once; only later "
           "checkpoints keep most of their BLEU with 40% of the heads pruned", "Figure 5"),
    "C6": ("Pruning 50% of the heads speeds inference up, more so at larger batch sizes", "Table 4"),
    "W1": ("Wu et al.: fewer than 5% of the heads are retrieval heads", "head_roles.csv"),
    "W2": ("Wu et al.: masking the top-K retrieval heads costs far more retrieval than masking K random heads",
           "retrieval_heads.csv"),
    "W3": ("Masking the retrieval heads moves perplexity little (perplexity does not see them)", "retrieval_heads.csv"),
    "W4": ("Wu et al.: a task that reads its answer from the context suffers from masking the retrieval heads far "
           "more than from masking as many random heads", "retrieval_heads.csv of a task"),
    "U1": ("Uniform pruning (the same heads kept in every layer: a stock checkpoint) costs little against free "
           "pruning at equal heads removed", "pruning.csv, layout"),
    "R1": ("Training the pruned model a few steps (LoRA, full fine-tuning, distillation) wins back much of what "
           "pruning cost; bias compensation, without training, less", "recovery.csv, Figure 3"),
}

RULES = {
    "C1": f"reproduced if more than {MOST_HEADS:.0f}% of the heads, each removed alone, change the score "
          "not significantly (`significant` of eval/ablation.csv: p < alpha, paired bootstrap for BLEU "
          "and perplexity, t-test for accuracy)",
    "C2": f"reproduced if at least {MANY_LAYERS:.0f}% of the layers, each reduced to its best head (chosen on "
          "the selection set), show no significant loss on the test set (one_head_per_layer.csv: "
          "`significant` and a worse score, delta < 0, or > 0 for perplexity, is a loss)",
    "C3": f"prunable = the largest % of heads pruned (importance order, whole model) up to which every step "
          f"stays within {WITHIN_POINTS:g} point of the unpruned score (a point: 1 BLEU, or 1 percentage "
          f"point of accuracy, F1 or MCC, or 1% of the unpruned perplexity); reproduced if prunable >= {MIN_PRUNABLE:.0f}%",
    "C4": f"each attention type pruned alone (importance order): reproduced if, at {TYPE_PRUNED:.0f}% of the "
          f"type's heads pruned (the last step at or below), Enc-Dec has the lowest score of the three types",
    "C5": f"% of the unpruned BLEU kept at {DYNAMICS_PRUNED:.0f}% of the heads pruned (the last step at or "
          f"below), per checkpoint: reproduced if the last checkpoint keeps >= {DYNAMICS_KEPT:.0f}% and more "
          "than the first",
    "C6": "on the pruned model's speedup and its 95% interval over the paired runs (table4.csv's speedup_low, "
          "speedup_high; a table without them: the speedup alone): reproduced if the interval at the largest batch "
          "size timed lies above 0 and above the smallest batch size's interval, not reproduced if it lies at or "
          "below 0 or at or below the smallest's, else undecided (a batch size above the number of items timed "
          "runs them all as one smaller batch: left out)",
    "W1": f"reproduced if fewer than {FEW_RETRIEVAL_HEADS:g}% of the query heads score above {RETRIEVAL_HEAD:g} "
          "(Wu et al.'s retrieval score, the authors' code's definition)",
    "W2": f"at the largest K run: reproduced if masking the top-K heads leaves a retrieval accuracy at least "
          f"{FAR_MORE:g} points below the mean over the K-random-head sets, and its drop is significant",
    "W3": f"at the largest K run: reproduced if masking the top-K heads raises perplexity by less than {LITTLE:g}% "
          "of the full model's",
    "W4": f"at the largest K run: reproduced if masking the top-K retrieval heads costs the task's score at least "
          f"{TASK_MORE:g} points more than the mean of the random K-head sets, significantly (p < alpha against the "
          "full model)",
    "U1": f"importance order, whole model: at the % pruned nearest {UNIFORM_AT:g}% where both layouts have a step (else "
          f"the free curve interpolated there), reproduced if the uniform layout's score is at most {WITHIN_POINTS:g} "
          "point worse than the free layout's (a point as in C3)",
    "R1": f"at the recovered point nearest {RECOVERY_AT:g}% of the heads pruned (importance order, free layout), each "
          "method's share of the loss from pruning won back, (recovered - pruned) / (unpruned - pruned) in the "
          f"metric's better direction: reproduced if the best training method wins back at least {WON_BACK:g}%",
}

# The paper's numbers, by claim and by the paper's model a study stands for (rules/report.smk:
# 'WMT' for the translation study, the GLUE task of a glue study, 'IWSLT' for Figure 5's).
PAPER = {
    "C1": {"WMT": "WMT Enc-Enc (Table 1): 88/96 heads (92%) no significant change; 8 significant, 4 of "
                  "them gains",
           "MNLI": "BERT MNLI (Figure 1b): most heads stay near the full 83.4% accuracy (no count given)"},
    "C2": {"WMT": "WMT (Table 2): 14/18 layers (78%) no significant loss, worst Enc-Dec layer 6 -13.56 BLEU; "
                  "newstest2014 (App. A): 50% of the layers no significant change",
           "MNLI": "BERT MNLI (Table 3): 12/12 layers (100%) no significant change, worst layer 9 -0.96%"},
    "C3": {"WMT": "WMT: ~20% (Figure 3a)", "MNLI": "BERT MNLI: ~40% (Figure 3b)",
           "SST-2": "BERT SST-2: ~60% (Figure 6a)", "CoLA": "BERT CoLA: ~50% (Figure 6b)",
           "MRPC": "BERT MRPC: ~50% (Figure 6c)"},
    "C4": {"WMT": "WMT (Figure 4): with 20% of a type's heads left Enc-Enc and Dec-Dec keep ~30 BLEU (of 36); "
                  "Enc-Dec degrades catastrophically beyond 60% pruned"},
    "C5": {"IWSLT": "IWSLT de-en 6x8 heads (Figure 5): epochs 1-2 BLEU falls about linearly with % pruned; from "
                    "epoch 10 85-90% of the unpruned BLEU kept at 40% pruned"},
    "C6": {"MNLI": "BERT MNLI, GTX 1080Ti (Table 4): +1.9% (batch 1), +2.7% (4), +17.5% (16), +17.5% (64)"},
}
NO_PAPER_NUMBER = "no number in the paper for this model"
WU = {"W1": "Llama-2-7B-80K, Yi, Qwen, Mistral (Wu et al., Figure 2): under 5% of heads score above 0.1",
      "W2": "Llama-2-7B-80K (Wu et al., Figure 6): top-50 retrieval heads masked, needle-in-a-haystack below 50%; "
            "50 random heads, above 80%",
      "W3": "not measured by Wu et al.: this project's question (perplexity alone would not show it)",
      "W4": "Mistral-7B-Instruct-v0.2 (Wu et al., Table 3): 100 retrieval heads masked, extractive QA F1 56.7 -> "
            "32.3, GSM8K chain-of-thought 45.1 -> 2.0"}
# Beyond both papers: this project's own questions
OURS = {"U1": "not in the paper (it prunes freely): what Minitron-style width pruning costs, this project's question",
        "R1": "not in the paper (it does not retrain): LLM-Pruner (LLaMA-7B, 20% pruned, LoRA on 50k instructions) "
              "zero-shot average 56.69 pruned -> 59.23 recovered of 63.25 unpruned (39% won back)"}


# --- helpers -----------------------------------------------------------------------------------


def paper_number(claim: str, model: str | None) -> str:
    if claim in WU:
        return WU[claim]
    if claim in OURS:
        return OURS[claim]
    return PAPER[claim].get(model, NO_PAPER_NUMBER)


def row(claim: str, study: str, this_run: str, paper: str, verdict: str) -> dict:
    statement, evidence = CLAIMS[claim]
    return {"claim": claim, "study": study, "statement": statement, "evidence": evidence, "this_run": this_run,
            "paper": paper, "rule": RULES[claim], "verdict": verdict}


def not_run(claim: str, study: str = "(none)", why: str = "not run by this config") -> dict:
    """A claim no experiment of the config tests: the paper's numbers for every model, no verdict."""
    return row(claim, study, why, WU[claim] if claim in WU else "; ".join(PAPER[claim].values()), NOT_RUN)


def verdict(passed: bool) -> str:
    return REPRODUCED if passed else NOT_REPRODUCED


def by_study(table: pd.DataFrame):
    """(study, its rows), in the order the studies appear (the config's)."""
    return table.groupby("study", sort=False)


def flags(column: pd.Series) -> pd.Series:
    """A True/False column as booleans, whether pandas read it as bool or as text."""
    return column.astype(str).str.strip().str.lower() == "true"


def point(metric: str) -> float:
    """What one point of ``metric`` is, in the units of the CSVs' ``score``/``delta`` columns (its class says:
    headprune.evaluation.metrics). A perplexity has no absolute scale: C3 reads its "point" as 1% of the unpruned
    perplexity (``points_worse``), and every delta is signed by ``better_sign``."""
    return metric_of(metric).point


def unit(metric: str) -> str:
    """How a value in points of ``metric`` is written."""
    return metric_of(metric).point_unit


def in_points(value: float, metric: str) -> float:
    """A score or a change in points; rounded so that 0.9775 - 0.9675 is 1 point, not 1.0000000000000009."""
    return round(float(value) / point(metric), 6)


def show(value: float, metric: str, sign: bool = False) -> str:
    """A score or change as written: '99.12 BLEU', '-0.75% accuracy'."""
    return f"{in_points(value, metric):{'+' if sign else ''}.2f}{unit(metric)}"


def share(count: int, total: int) -> str:
    return f"{count}/{total} ({100.0 * count / total:.0f}%)"


def importance_curves(pruning: pd.DataFrame, scopes) -> pd.DataFrame:
    """The pruning steps of the importance order (I_h) within ``scopes`` ('all': the whole model)."""
    if pruning.empty:
        return pruning
    pruning = free_layout(pruning)
    return pruning[(pruning["order"] == reference_order()) & pruning["scope"].isin(scopes)]


def points_worse(unpruned: float, score: float, metric: str) -> float:
    """How much worse ``score`` is than ``unpruned``, in points (a perplexity, or any metric where lower is better:
    percent of the unpruned one)."""
    if better_sign(metric) < 0:
        return 100.0 * (score - unpruned) / unpruned
    return in_points(unpruned - score, metric)


def last_step_at_or_below(curve: pd.DataFrame, percent: float) -> pd.Series:
    """The pruning step with the largest % pruned not above ``percent``."""
    steps = curve[curve["percent_pruned"] <= percent + 1e-9]
    return steps.loc[steps["percent_pruned"].idxmax()]


# --- C1: single heads (Table 1, Figure 1) --------------------------------------------------------


def c1_single_heads(ablation: pd.DataFrame, paper_models: dict, confidence: float = 0.95) -> list[dict]:
    """Per ablation study (eval/ablation.csv: one row per head, removed alone): the share of heads whose
    removal changes the score not significantly; Enc-Enc alone too (the paper's Table 1) when the model
    has other attention types. A screened Table 1 (headprune.analyses.screening) gives a range: its heads
    screened only may hide up to the bound's count of significant heads at ``confidence``; the claim is reproduced
    when it holds even then, not reproduced when it fails with none hidden, else undecided."""
    if ablation.empty:
        return [not_run("C1")]
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
            bound = unverified_bound(heads, confidence)
            fewest = unchanged - bound["bound_significant_unverified"]
            this_run = (f"{share(fewest, len(heads))} to {share(unchanged, len(heads))} heads no significant change "
                        f"({bound_sentence(bound)}); {int(significant.sum())} significant found, {gains} of them gains")
            surely = 100.0 * fewest / len(heads) > MOST_HEADS
            outcome = verdict(True) if surely else verdict(False) if not passed else UNDECIDED
        else:
            this_run += "; exhaustive Table 1"
        rows.append(row("C1", study, this_run, paper_number("C1", paper_models.get(study)), outcome))
    return rows


# --- C2: one head per layer (Tables 2-3) ---------------------------------------------------------


def c2_one_head_per_layer(one_head: pd.DataFrame, paper_models: dict) -> list[dict]:
    """Per study (one_head_per_layer.csv: one row per layer and attention type, the layer reduced to its
    best head): the share of layers with no significant loss on the test set."""
    if one_head.empty:
        return [not_run("C2")]
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
        rows.append(row("C2", study, this_run, paper_number("C2", paper_models.get(study)), verdict(passed)))
    return rows


# --- C3: pruning curves (Figures 3 and 6) --------------------------------------------------------


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


def c3_pruning(pruning: pd.DataFrame, paper_models: dict) -> list[dict]:
    """Per study pruned across the whole model in the importance order (pruning tables, scope 'all'):
    the % of heads prunable before the score falls more than WITHIN_POINTS below the unpruned model."""
    curves = importance_curves(pruning, ["all"])
    if curves.empty:
        return [not_run("C3")]
    rows = []
    for study, curve in by_study(curves):
        metric = curve["metric"].iloc[0]
        unpruned = curve.loc[curve["percent_pruned"] == 0, "score"].iloc[0]
        prunable, falls = prunable_percent(curve)
        this_run = f"{prunable:.0f}% prunable (unpruned {show(unpruned, metric)}"
        this_run += (f"; {show(falls['score'], metric)} at {falls['percent_pruned']:.0f}%)" if falls is not None
                     else f"; never more than {WITHIN_POINTS:g} point below)")
        rows.append(row("C3", study, this_run, paper_number("C3", paper_models.get(study)),
                        verdict(prunable >= MIN_PRUNABLE)))
    return rows


# --- C4: attention types (Figure 4) --------------------------------------------------------------


def c4_attention_types(pruning: pd.DataFrame, paper_models: dict) -> list[dict]:
    """Per study pruned within each attention type (pruning tables, scope = the type): the score of each
    type at TYPE_PRUNED% of its heads pruned; Enc-Dec should be the lowest."""
    curves = importance_curves(pruning, list(TYPE_LABELS))
    if curves.empty:
        return [not_run("C4")]
    rows = []
    for study, study_curves in by_study(curves):
        types = [t for t in TYPE_LABELS if t in set(study_curves["scope"])]
        if len(types) < len(TYPE_LABELS):
            rows.append(not_run("C4", study, f"only {', '.join(TYPE_LABELS[t] for t in types)} attention: "
                                             "no attention types to compare"))
            continue
        metric = study_curves["metric"].iloc[0]
        scores = {t: last_step_at_or_below(study_curves[study_curves["scope"] == t], TYPE_PRUNED) for t in types}
        lowest = min(types, key=lambda t: better_sign(metric) * scores[t]["score"])
        unpruned = study_curves.loc[study_curves["percent_pruned"] == 0, "score"].iloc[0]
        this_run = (f"at {TYPE_PRUNED:.0f}% of a type's heads pruned: "
                    + ", ".join(f"{TYPE_LABELS[t]} {in_points(scores[t]['score'], metric):.2f}" for t in types)
                    + f"{unit(metric)} (unpruned {in_points(unpruned, metric):.2f}); lowest {TYPE_LABELS[lowest]}")
        rows.append(row("C4", study, this_run, paper_number("C4", paper_models.get(study)),
                        verdict(lowest == "enc_dec")))
    return rows


# --- C5: training dynamics (Figure 5) ------------------------------------------------------------


def c5_training_dynamics(dynamics: pd.DataFrame, paper_models: dict) -> list[dict]:
    """Figure 5's pruning curves, one per checkpoint epoch (the dynamics_prune tables with an ``epoch``
    column): the % of that checkpoint's unpruned BLEU kept at DYNAMICS_PRUNED% pruned (as figure5.csv's
    relative_percent), first checkpoint against last."""
    if dynamics.empty:
        return [not_run("C5")]
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
            rows.append(not_run("C5", study, this_run + "; one checkpoint: no dynamics to compare"))
            continue
        first, last = kept[epochs[0]], kept[epochs[-1]]
        rows.append(row("C5", study, this_run, paper_number("C5", paper_models.get(study)),
                        verdict(last >= DYNAMICS_KEPT and last > first)))
    return rows


# --- C6: inference speed (Table 4) ---------------------------------------------------------------


def c6_speed(speed: pd.DataFrame, paper_models: dict) -> list[dict]:
    """Per study timed (table4.csv: one row per batch size, ``speedup_percent`` of the pruned model over
    the full one): the speedup at the largest batch size actually run against the smallest."""
    if speed.empty:
        return [not_run("C6")]
    rows = []
    # a causal LM is timed in two units (prefill and decode tokens): each is its own comparison
    units = speed["unit"] if "unit" in speed else pd.Series("", index=speed.index)
    for study, table in by_study(speed.assign(_unit=units)):
        for unit, part in table.groupby("_unit", sort=False):
            rows.append(c6_one(study if table["_unit"].nunique() == 1 else f"{study} ({unit})", part, paper_models,
                               study))
    return rows


def c6_one(label: str, table: pd.DataFrame, paper_models: dict, study: str) -> dict:
    """One study (and unit) of Table 4: the speedup's interval at the largest batch size timed against 0 and
    against the smallest's (``c6_verdict``)."""
    table = table.sort_values("batch_size")
    items = int(table["items"].iloc[0])
    timed = table[table["batch_size"] <= items]
    left_out = table[table["batch_size"] > items]
    this_run = ", ".join(f"{c6_text(r)} (batch {r['batch_size']})" for _, r in timed.iterrows())
    if not left_out.empty:
        this_run += (f"; left out: batch {', '.join(str(b) for b in left_out['batch_size'])} (one batch of "
                     f"the {items} items timed)")
    this_run += f"; {table['device'].iloc[0]}" if "device" in table else ""
    engine = "unit" in table and table["unit"].iloc[0] in ENGINE_UNITS
    if len(timed) < 2 and engine:  # llama.cpp runs one sequence: the speedup itself is what it can decide
        low, high = c6_interval(timed.iloc[0])
        outcome = REPRODUCED if low > 0 else NOT_REPRODUCED if high <= 0 else UNDECIDED
        return row("C6", label, this_run + "; llama.cpp, one sequence: decided on the speedup's interval against 0",
                   paper_number("C6", paper_models.get(study)), outcome)
    if len(timed) < 2:
        return not_run("C6", label, this_run + "; one batch size: nothing to compare")
    outcome = c6_verdict(timed.iloc[-1], timed.iloc[0])
    return row("C6", label, this_run, paper_number("C6", paper_models.get(study)), outcome)


def c6_interval(table_row: pd.Series) -> tuple[float, float]:
    """(low, high) of a Table 4 row's speedup (%): its interval, or the speedup alone where it has none (one run,
    or a table4.csv written before intervals)."""
    low, high = table_row.get("speedup_low"), table_row.get("speedup_high")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return float(table_row["speedup_percent"]), float(table_row["speedup_percent"])
    return float(low), float(high)


def c6_verdict(largest: pd.Series, smallest: pd.Series) -> str:
    """Reproduced: the largest batch size's interval above 0 and above the smallest's; not reproduced: at or below
    0, or at or below the smallest's; undecided: the intervals overlap, or the largest's holds 0 (RULES["C6"]).
    Without intervals, the old rule on the speedups themselves (positive and larger: reproduced, else not)."""
    (low, high), (small_low, small_high) = c6_interval(largest), c6_interval(smallest)
    if low > 0 and low > small_high:
        return REPRODUCED
    if high <= 0 or high <= small_low:
        return NOT_REPRODUCED
    return UNDECIDED


def c6_text(table_row: pd.Series) -> str:
    """'+17.5% [+12.1, +23.2]': a Table 4 row's speedup and its interval, where it has one."""
    low, high = c6_interval(table_row)
    text = f"{table_row['speedup_percent']:+.1f}%"
    return text if low == high == table_row["speedup_percent"] else f"{text} [{low:+.1f}, {high:+.1f}]"


# --- U1: what the uniform layout costs -----------------------------------------------------------


def u1_uniform_layout(pruning: pd.DataFrame) -> list[dict]:
    """Per study pruned in both layouts (importance order, whole model): the uniform layout's score against the
    free one's at the % pruned nearest UNIFORM_AT. No row where no study was pruned uniformly."""
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
        free_score = float(np.interp(percent, free["percent_pruned"].to_numpy(float), free["score"].to_numpy(float)))
        cost = points_worse(free_score, float(at["score"]), metric)
        how = "" if not shared.empty else " (free interpolated)"
        this_run = (f"at {percent:.1f}% of the heads{how}: free {show(free_score, metric)}, uniform "
                    f"{show(at['score'], metric)} ({abs(cost):.2f} points {'worse' if cost > 0 else 'better'})")
        rows.append(row("U1", study, this_run, OURS["U1"], verdict(cost <= WITHIN_POINTS)))
    return rows


# --- R1: recovery after pruning --------------------------------------------------------------------


def r1_recovery(recovery: pd.DataFrame) -> list[dict]:
    """Per recovered study (recovery.csv): each method's share of the loss from pruning won back at the point
    nearest RECOVERY_AT. No row where no study was recovered."""
    if recovery is None or recovery.empty:
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
        rows.append(row("R1", study, this_run, OURS["R1"], verdict(bool(trained) and max(trained) >= WON_BACK)))
    return rows


def won_back(unpruned: float, pruned: float, recovered: float, metric: str) -> float:
    """The % of the loss from pruning that recovery wins back (100: the unpruned score again; over 100: better)."""
    lost = better_sign(metric) * (float(unpruned) - float(pruned))
    if lost == 0:
        return 0.0
    return 100.0 * better_sign(metric) * (float(recovered) - float(pruned)) / lost


# --- W1-W3: Wu et al.'s retrieval heads ----------------------------------------------------------


def w1_few_retrieval_heads(roles: pd.DataFrame) -> list[dict]:
    if roles.empty:
        return [not_run("W1")]
    rows = []
    for study, table in by_study(roles):
        scores = table["retrieval"].astype(float)
        if scores.isna().all():
            rows.append(row("W1", study, "no needle item answered correctly: no retrieval score", WU["W1"], NOT_RUN))
            continue
        count = int((scores > RETRIEVAL_HEAD).sum())
        best = table.loc[scores.idxmax()]
        rows.append(row("W1", study, f"{share(count, len(table))} heads score above {RETRIEVAL_HEAD:g} (highest: "
                                     f"layer {int(best.layer)} head {int(best['head'])}, {best.retrieval:.2f})", WU["W1"],
                        verdict(100.0 * count / len(table) < FEW_RETRIEVAL_HEADS)))
    return rows


def w2_w3_masking(retrieval_heads: pd.DataFrame) -> list[dict]:
    if retrieval_heads.empty:
        return [not_run("W2"), not_run("W3")]
    rows = []
    has_retrieval = retrieval_heads["retrieval"].notna() if "retrieval" in retrieval_heads else None
    if has_retrieval is None or not has_retrieval.any():
        return [not_run("W2"), not_run("W3")]
    for study, table in by_study(retrieval_heads[has_retrieval]):
        k = int(table["k"].max())
        at_k = table[table["k"] == k]
        top, random_sets = at_k[at_k.selection == "top"].iloc[0], at_k[at_k.selection == "random"]
        full_retrieval, full_ppl = float(top.retrieval_full), float(top.perplexity_full)
        random_mean = float(random_sets["retrieval"].mean())
        gap = in_points(random_mean - float(top.retrieval), "retrieval")
        rows.append(row("W2", study, f"K={k}: top-K heads masked {show(top.retrieval, 'retrieval')}, K random heads "
                                     f"{show(random_mean, 'retrieval')} (mean of {len(random_sets)} sets), all heads "
                                     f"{show(full_retrieval, 'retrieval')}", WU["W2"],
                        verdict(gap >= FAR_MORE and flags(pd.Series([top.significant_retrieval])).iloc[0])))
        rise = 100.0 * (float(top.perplexity) - full_ppl) / full_ppl
        random_rise = 100.0 * (float(random_sets["perplexity"].mean()) - full_ppl) / full_ppl
        rows.append(row("W3", study, f"K={k}: perplexity {float(top.perplexity):.2f} with the top-K heads masked "
                                     f"({rise:+.1f}%), {float(random_sets['perplexity'].mean()):.2f} with K random "
                                     f"heads ({random_rise:+.1f}%), {full_ppl:.2f} with all", WU["W3"],
                        verdict(rise < LITTLE)))
    return rows


def w4_tasks(retrieval_heads: pd.DataFrame) -> list[dict]:
    """Wu et al.'s experiment scored on a task (columns task, task_full, task_metric): the top-K retrieval heads
    against K random heads at the largest K."""
    if retrieval_heads.empty or "task" not in retrieval_heads or not retrieval_heads["task"].notna().any():
        return [not_run("W4")]
    rows = []
    for study, table in by_study(retrieval_heads[retrieval_heads["task"].notna()]):
        k = int(table["k"].max())
        at_k = table[table["k"] == k]
        top, random_sets = at_k[at_k.selection == "top"].iloc[0], at_k[at_k.selection == "random"]
        metric = str(top.task_metric)
        random_mean = float(random_sets["task"].mean())
        # the cost in points, worse counted positive whichever way the metric goes
        gap = better_sign(metric) * in_points(random_mean - float(top.task), metric)
        rows.append(row("W4", study, f"K={k}: {metric} {show(top.task, metric)} with the top-K retrieval heads masked, "
                                     f"{show(random_mean, metric)} with K random heads (mean of {len(random_sets)} "
                                     f"sets), {show(top.task_full, metric)} with all", WU["W4"],
                        verdict(gap >= TASK_MORE and flags(pd.Series([top.significant_task])).iloc[0])))
    return rows


# --- the scorecard -------------------------------------------------------------------------------


def scorecard(ablation: pd.DataFrame, one_head: pd.DataFrame, pruning: pd.DataFrame,
              attention_types: pd.DataFrame, dynamics: pd.DataFrame, speed: pd.DataFrame,
              paper_models: dict, roles: pd.DataFrame | None = None,
              retrieval_heads: pd.DataFrame | None = None, modes_ablation: pd.DataFrame | None = None,
              modes_pruning: pd.DataFrame | None = None, modes_one_head: pd.DataFrame | None = None,
              confidence: float = 0.95, recovery: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every claim's rows, C1 to C6, then W1-W3. Each table is the stack of that experiment's CSVs (empty:
    not run); ``paper_models`` maps a study to the paper's model it stands for ('WMT', 'MNLI', ..., or None).
    ``roles``: the head_roles.csv of the retrieval studies of experiments.retrieval_heads. ``modes_ablation``,
    ``modes_pruning`` and ``modes_one_head``: experiments.masking_modes's sweeps, a study per mode ('<study> (<mode>
    masking)', masking_modes.as_scorecard_tables), judged by C1, C3 and C2 after the config's own studies."""
    if modes_ablation is not None and not modes_ablation.empty:
        ablation = pd.concat([ablation, modes_ablation], ignore_index=True)
        pruning = pd.concat([pruning, modes_pruning], ignore_index=True)
    if modes_one_head is not None and not modes_one_head.empty:
        one_head = pd.concat([one_head, modes_one_head], ignore_index=True)
    rows = [*c1_single_heads(ablation, paper_models, confidence), *c2_one_head_per_layer(one_head, paper_models),
            *c3_pruning(pruning, paper_models), *c4_attention_types(attention_types, paper_models),
            *c5_training_dynamics(dynamics, paper_models), *c6_speed(speed, paper_models), *u1_uniform_layout(pruning),
            *r1_recovery(recovery)]
    if roles is not None or retrieval_heads is not None:
        rows += [*w1_few_retrieval_heads(pd.DataFrame() if roles is None else roles),
                 *w2_w3_masking(pd.DataFrame() if retrieval_heads is None else retrieval_heads),
                 *w4_tasks(pd.DataFrame() if retrieval_heads is None else retrieval_heads)]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def markdown(card: pd.DataFrame) -> str:
    """The scorecard as a Markdown table, with a one-line count of the verdicts above it."""
    counts = card["verdict"].value_counts()
    summary = ", ".join(f"{counts.get(v, 0)} {v}" for v in (REPRODUCED, NOT_REPRODUCED, NOT_RUN))
    if counts.get(UNDECIDED):
        summary += f", {counts[UNDECIDED]} {UNDECIDED}"
    headers = ["Claim", "Study", "Statement (evidence)", "This run", "Paper", "Rule", "Verdict"]

    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = [f"**Scorecard** of the claims of Michel, Levy and Neubig (2019), tested on this run: {summary} "
             f"(rows: claim x study).", "", "| " + " | ".join(headers) + " |",
             "|" + "---|" * len(headers)]
    for r in card.itertuples():
        cells = [r.claim, r.study, f"{r.statement} ({r.evidence})", r.this_run, r.paper, r.rule, f"**{r.verdict}**"]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
