"""The claims the scorecard tests, one class each (``base.Claim``), registered in ``CLAIMS`` by their codes in the
order the scorecard lists them: the paper's C1-C6 (``michel``), this project's U1 and R1 (``ours``), Wu et al.'s
W1-W4 (``wu``). A new claim is a class in one of these files, or in a file of its own imported here."""
from headprune.report.claims import michel, ours, wu  # noqa: F401  (each registers its claims)
from headprune.report.claims.base import (CLAIMS, COLUMNS, NO_PAPER_NUMBER, NOT_REPRODUCED, NOT_RUN, REPRODUCED,
                                          UNDECIDED, Claim, Evidence, claim)

__all__ = ["CLAIMS", "COLUMNS", "NO_PAPER_NUMBER", "NOT_REPRODUCED", "NOT_RUN", "REPRODUCED", "UNDECIDED", "Claim",
           "Evidence", "claim"]
