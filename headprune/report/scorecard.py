"""The scorecard: the paper's six claims (C1-C6), each tested on this run's CSVs by a rule written down with it,
this project's own questions beyond it (U1, R1), and Wu et al. (2025)'s claims about retrieval heads (W1-W4) for
every retrieval study. Each claim is a class of ``headprune.report.claims``; a row per claim and study says this
run's numbers, the paper's for the model the study stands for, the rule and its verdict:

- "reproduced" / "not reproduced": what the rule decides;
- "undecided": a screened Table 1 whose bound leaves C1 open, or Table 4's intervals overlapping (C6);
- "not run": the config runs no experiment that tests the claim (an empty table), or the study
  cannot test it (e.g. a model without encoder-decoder attention for C4).
"""
from __future__ import annotations

import pandas as pd

from headprune.report.claims import CLAIMS, COLUMNS, NOT_REPRODUCED, NOT_RUN, REPRODUCED, UNDECIDED, Evidence


def scorecard(tables: dict[str, pd.DataFrame | None], paper_models: dict, *, confidence: float = 0.95,
              masking_modes: tuple | None = None) -> pd.DataFrame:
    """Every claim's rows, in ``CLAIMS``'s order. ``tables``: each experiment's CSVs stacked (an empty table: not
    run; a name left out: not handed in, as the retrieval experiment's tables outside a pipeline), named as
    ``headprune.stages.report_inputs`` names them; ``paper_models`` maps a study to the paper's model it stands for
    ('WMT', 'MNLI', ..., or None). ``masking_modes``: experiments.masking_modes's (ablation, pruning, one_head)
    sweeps, a study per mode ('<study> (<mode> masking)', masking_modes.as_scorecard_tables), judged by C1, C3 and
    C2 after the config's own studies."""
    tables = dict(tables)
    for name, by_mode in zip(("ablation", "pruning", "one_head"), masking_modes or ()):
        if by_mode is not None and not by_mode.empty:
            tables[name] = pd.concat([tables.get(name), by_mode], ignore_index=True)
    evidence = Evidence(tables, paper_models, confidence)
    return pd.DataFrame([row for claim in CLAIMS.values() for row in claim.judge(evidence)], columns=list(COLUMNS))


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


def judged(code: str, paper_models: dict | None = None, *, confidence: float = 0.95, **tables) -> list[dict]:
    """One claim's rows on the tables named (``judged("C3", {"mnli": "MNLI"}, pruning=curves)``), as the scorecard
    writes them."""
    return CLAIMS[code].judge(Evidence(tables, paper_models or {}, confidence))
