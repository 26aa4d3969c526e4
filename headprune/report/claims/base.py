"""What every claim of the scorecard is: a class registered in ``CLAIMS`` by its code ("C1", "W2", "R1"), with its
statement, its evidence, the rule it is judged by and the numbers its source reports, and ``judge``, which turns the
run's tables into its rows, one per study. The helpers below write and compare scores in the units the rules use.

Scores are compared in *points*: BLEU points, or percentage points of accuracy, F1 and MCC (the CSVs hold those as
fractions in [0, 1]); a perplexity's point is 1% of the unpruned one. Only pandas is imported: the scorecard job
starts in a second."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pandas as pd

from headprune.analyses.criteria import reference_order
from headprune.analyses.layouts import free_layout
from headprune.evaluation.metrics import better_sign, metric_of
from headprune.io.registry import Registry

REPRODUCED, NOT_REPRODUCED, NOT_RUN = "reproduced", "not reproduced", "not run"
UNDECIDED = "undecided"  # a screened Table 1 whose bound leaves the claim open (C1); overlapping intervals (C6)
COLUMNS = ("claim", "study", "statement", "evidence", "this_run", "paper", "rule", "verdict")
NO_PAPER_NUMBER = "no number in the paper for this model"


@dataclass
class Evidence:
    """What the claims are judged on: each experiment's table (all its studies stacked, a ``study`` column telling
    them apart; the names of ``headprune.stages.report_inputs``), the paper's model each study stands for ('WMT',
    'MNLI', ..., or None), and the confidence of a screened Table 1's bound."""

    tables: dict[str, pd.DataFrame | None] = field(default_factory=dict)
    paper_models: dict = field(default_factory=dict)
    confidence: float = 0.95

    def __getitem__(self, name: str) -> pd.DataFrame:
        """The experiment's table; empty where the config runs none."""
        table = self.tables.get(name)
        return pd.DataFrame() if table is None else table

    def given(self, name: str) -> bool:
        """Whether the experiment's table was handed in at all (empty or not)."""
        return self.tables.get(name) is not None


class Claim:
    """One claim: ``judge`` returns its rows (``row`` or ``not_run`` each), in ``COLUMNS``. Registered in
    ``CLAIMS`` by ``code`` (the ``claim`` decorator), in the order the scorecard lists them."""

    code: ClassVar[str]
    statement: ClassVar[str]
    evidence: ClassVar[str]  # where a reader finds it: the paper's table or figure, or this run's CSV
    # The source's numbers by the paper's model a study stands for (Michel et al.'s claims) ...
    paper: ClassVar[dict[str, str]] = {}
    # ... or one line for every study (Wu et al.'s numbers, or this project's own question)
    source: ClassVar[str | None] = None

    @property
    def rule(self) -> str:
        """How the verdict is decided, with the thresholds it uses (printed in the scorecard)."""
        raise NotImplementedError

    def judge(self, evidence: Evidence) -> list[dict]:
        """The claim's rows on this run's tables."""
        raise NotImplementedError

    def paper_number(self, model: str | None = None) -> str:
        return self.source if self.source is not None else self.paper.get(model, NO_PAPER_NUMBER)

    def row(self, study: str, this_run: str, verdict: str, model: str | None = None) -> dict:
        """A study's row; ``model``: the paper's model it stands for (its numbers in the ``paper`` column)."""
        return {"claim": self.code, "study": study, "statement": self.statement, "evidence": self.evidence,
                "this_run": this_run, "paper": self.paper_number(model), "rule": self.rule, "verdict": verdict}

    def not_run(self, study: str = "(none)", why: str = "not run by this config") -> dict:
        """A row without a verdict: the source's numbers for every model."""
        row = self.row(study, why, NOT_RUN)
        if self.source is None:
            row["paper"] = "; ".join(self.paper.values())
        return row


CLAIMS: Registry[Claim] = Registry("scorecard claim", base=Claim)


def claim(cls):
    """A class decorator registering one instance of the claim under its code."""
    CLAIMS.add(cls.code, cls())
    return cls


# --- helpers -----------------------------------------------------------------------------------


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
