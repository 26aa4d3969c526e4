"""Checks of the tidy tables the figures read: required columns, the one value a column takes, the
`significant` column as bool, and an ablation table of one study (a screened Table 1's heads ablated)."""
from __future__ import annotations

import pandas as pd

from headprune.models.attention_types import KNOWN_TYPES

ABLATION_COLUMNS = ("study", "attn_type", "layer", "head", "metric", "score_full", "delta", "significant")


def _require_columns(df: pd.DataFrame, columns, what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} is missing columns {missing}; it has {list(df.columns)}")


def _single_value(df: pd.DataFrame, column: str, what: str):
    """The one value a column takes (study, metric, score_full of one ablation study)."""
    values = df[column].dropna().unique()
    if len(values) != 1:
        raise ValueError(f"{what}: expected one {column}, found {sorted(map(str, values))}")
    return values[0]


def _as_bool(series: pd.Series) -> pd.Series:
    """The `significant` column as bool; CSVs may give bools, 0/1 or 'True'/'False'."""
    if series.dtype == bool:
        return series
    mapping = {True: True, False: False, 1: True, 0: False, "True": True, "False": False,
               "true": True, "false": False}
    converted = series.map(lambda v: mapping.get(v, None))
    if converted.isna().any():
        bad = series[converted.isna()].unique()[:5]
        raise ValueError(f"`significant` must be boolean, found {list(bad)}")
    return converted.astype(bool)


def _check_attn_types(types) -> None:
    unknown = sorted(set(types) - set(KNOWN_TYPES))
    if unknown:
        raise ValueError(f"unknown attention types {unknown}; expected {KNOWN_TYPES}")


def _ablation_of_one_study(ablation: pd.DataFrame) -> pd.DataFrame:
    _require_columns(ablation, ABLATION_COLUMNS, "ablation table")
    if ablation.empty:
        raise ValueError("ablation table is empty")
    _single_value(ablation, "study", "ablation table")
    _single_value(ablation, "metric", "ablation table")
    _check_attn_types(ablation["attn_type"].unique())
    duplicated = ablation.duplicated(["attn_type", "layer", "head"])
    if duplicated.any():
        raise ValueError(f"ablation table has {int(duplicated.sum())} duplicate (attn_type, layer, head) rows")
    ablation = ablation.copy()
    if "verification" in ablation:  # a screened Table 1: heads screened only have no test (significant empty)
        from headprune.analyses.screening import SCREENED

        ablation.loc[ablation["verification"].astype(str) == SCREENED, "significant"] = False
    ablation["significant"] = _as_bool(ablation["significant"])
    return ablation


def _ablated(ablation: pd.DataFrame) -> pd.DataFrame:
    """The heads ablated exactly: every row of an exhaustive table, the verified and sampled of a screened one."""
    from headprune.analyses.screening import ablated_rows

    return ablated_rows(ablation)
