"""C6 (Table 4) decided on the speedup's interval: hand-made table4.csv tables, one per verdict."""
import math

import pandas as pd

from headprune.report import scorecard as sc
from headprune.report.claims import NOT_REPRODUCED, NOT_RUN, REPRODUCED, UNDECIDED

MODELS = {"mnli": "MNLI"}


def table4(intervals, speedups=None, items=9815, study="mnli"):
    """Table 4's rows at batch sizes 1, 4, 16, 64: (low, high) intervals; the speedup the middle unless given."""
    speedups = speedups or [(low + high) / 2 for low, high in intervals]
    return pd.DataFrame({"study": study, "batch_size": [1, 4, 16, 64][:len(intervals)], "speedup_percent": speedups,
                         "speedup_low": [low for low, _ in intervals], "speedup_high": [high for _, high in intervals],
                         "items": items, "device": "NVIDIA H200", "unit": "examples"})


def verdict_of(table):
    (row,) = sc.judged("C6", MODELS, speed=table)
    return row


def test_largest_batch_above_zero_and_above_the_smallest_is_reproduced():
    row = verdict_of(table4([(-1.0, 4.0), (0.0, 5.0), (12.0, 20.0), (14.0, 21.0)], [1.9, 2.7, 17.5, 17.5]))
    assert row["verdict"] == REPRODUCED
    assert row["this_run"].startswith("+1.9% [-1.0, +4.0] (batch 1), +2.7% [+0.0, +5.0] (batch 4)")
    assert "+17.5% [+14.0, +21.0] (batch 64)" in row["this_run"] and row["this_run"].endswith("; NVIDIA H200")
    assert "interval" in row["rule"] and "undecided" in row["rule"]


def test_largest_batch_at_or_below_zero_is_not_reproduced():
    # the H200's bfloat16 BERT: -15.5% at batch 64, its interval all below 0
    assert verdict_of(table4([(-3.0, 3.0), (-2.0, 2.0), (-5.0, 1.0), (-20.0, -11.0)]))["verdict"] == NOT_REPRODUCED
    # an interval whose top is exactly 0 lies "at or below" 0
    assert verdict_of(table4([(-9.0, -5.0), (-2.0, 2.0), (-5.0, 1.0), (-4.0, 0.0)]))["verdict"] == NOT_REPRODUCED


def test_largest_batch_below_the_smallest_is_not_reproduced_even_when_positive():
    assert verdict_of(table4([(20.0, 30.0), (10.0, 15.0), (5.0, 9.0), (5.0, 12.0)]))["verdict"] == NOT_REPRODUCED
    # touching: the largest's top equals the smallest's bottom
    assert verdict_of(table4([(20.0, 30.0), (10.0, 15.0), (5.0, 9.0), (5.0, 20.0)]))["verdict"] == NOT_REPRODUCED


def test_overlapping_intervals_or_one_holding_zero_are_undecided():
    # above 0 but overlapping the smallest's
    assert verdict_of(table4([(1.0, 8.0), (2.0, 6.0), (3.0, 12.0), (6.0, 14.0)]))["verdict"] == UNDECIDED
    # above the smallest's but holding 0
    assert verdict_of(table4([(-20.0, -10.0), (-8.0, 0.0), (-5.0, 3.0), (-4.0, 9.0)]))["verdict"] == UNDECIDED
    # the interval bounds decide, not the point estimate (+17.5%, clearly above +1.9%)
    assert verdict_of(table4([(-6.0, 10.0), (0.0, 5.0), (0.0, 20.0), (-2.0, 40.0)],
                             [1.9, 2.7, 9.0, 17.5]))["verdict"] == UNDECIDED


def test_a_table_without_intervals_falls_back_to_the_speedups_themselves():
    for speedups, expected in (([1.9, 2.7, 17.5, 17.5], REPRODUCED), ([5.0, 4.0, 3.0, 2.0], NOT_REPRODUCED),
                               ([-3.0, -2.0, -1.0, -0.5], NOT_REPRODUCED)):
        table = pd.DataFrame({"study": "mnli", "batch_size": [1, 4, 16, 64], "speedup_percent": speedups,
                              "items": 9815})
        row = verdict_of(table)
        assert row["verdict"] == expected
        assert "[" not in row["this_run"]
    # one run: NaN intervals (summarize cannot make one), the same fallback
    nan = table4([(math.nan, math.nan)] * 4, [1.9, 2.7, 17.5, 17.5])
    assert verdict_of(nan)["verdict"] == REPRODUCED


def test_each_unit_of_a_language_model_is_judged_alone_and_batches_beyond_the_items_are_left_out():
    prefill = table4([(-1.0, 1.0), (2.0, 4.0), (10.0, 15.0), (20.0, 30.0)])
    decode = table4([(-1.0, 1.0), (-2.0, 2.0), (-3.0, 1.0), (-2.0, 1.5)]).assign(unit="decode tokens")
    rows = sc.judged("C6", MODELS, speed=pd.concat([prefill.assign(unit="prefill tokens"), decode]))
    assert [(r["study"], r["verdict"]) for r in rows] == [("mnli (prefill tokens)", REPRODUCED),
                                                         ("mnli (decode tokens)", UNDECIDED)]
    # 16 items: batch 64 runs one batch of 16 again; batch 16 is the largest compared
    row = verdict_of(table4([(-1.0, 1.0), (2.0, 4.0), (10.0, 15.0), (-30.0, -20.0)], items=16))
    assert row["verdict"] == REPRODUCED and "left out: batch 64" in row["this_run"]
    assert verdict_of(table4([(-1.0, 1.0), (2.0, 4.0)], items=1))["verdict"] == NOT_RUN


def test_the_summary_that_speed_writes_is_what_c6_reads():
    """summarize's columns feed c6 as they are (the scorecard reads table4.csv)."""
    from test_speed import FACTS, toy_runs

    from headprune.analyses import table4

    summary = table4.summarize(toy_runs().assign(items=100), FACTS)  # 100 items: batch 64 is compared
    row = verdict_of(summary)
    # batch 64: +20.0% (-2.7, +47.3) holds 0: undecided, though its mean (+20%) is above batch 1's (+0%)
    assert row["verdict"] == UNDECIDED and "+20.0% [-2.7, +47.3] (batch 64)" in row["this_run"]
