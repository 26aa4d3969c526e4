"""Table 4: the timing harness, which heads go, pruned = gated, and the table's arithmetic.

Nothing here asserts that anything is fast (machines are noisy): the clock is fake where
numbers are checked; benchmarks/speed.py prints real measurements.
"""
import itertools
import math

import pandas as pd
import pytest
import torch

from conftest import EOS, PAD, bert_batch, tiny_bert, tiny_fsmt
from headprune.analyses import speed, table4
from headprune.evaluation import timing
from headprune.evaluation.runs import all_heads
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.prune import count_heads, pruned_heads


def fake_importance(model, seed=0):
    """An importance.csv for a tiny model: distinct random scores, in the CSV's head order."""
    g = torch.Generator().manual_seed(seed)
    heads = all_heads(model)
    scores = torch.randperm(len(heads), generator=g).tolist()
    return pd.DataFrame([{"study": "toy", "attn_type": t, "layer": layer, "head": h, "importance": float(s)}
                         for (t, layer, h), s in zip(heads, scores)])


class FakeClock:
    """Returns the given times one after another; counts how often it was read."""

    def __init__(self, times):
        self.times = iter(times)
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return next(self.times)


def counting_step(log, name):
    def step(inputs):
        log.append((name, inputs["i"]))
    return step


# --------------------------------------------------------------------------- timing harness


def test_items_per_second_from_the_clock_warmup_not_timed_runs_alternate():
    batches = [timing.Batch({"i": i}, size) for i, size in enumerate([4, 4, 2])]  # 10 items per run
    calls = []
    steps = {"original": counting_step(calls, "original"), "pruned": counting_step(calls, "pruned")}
    # start/stop per timed run: original 2 s, pruned 1 s | pruned 0.5 s, original 4 s | original 5 s, pruned 2 s
    clock = FakeClock([0, 2, 2, 3, 10, 10.5, 20, 24, 30, 35, 35, 37])
    syncs = []
    rows = timing.time_variants(steps, batches, repeats=3, warmup_batches=2, clock=clock,
                               synchronize=lambda: syncs.append(1))
    assert clock.reads == 12  # the warmup reads no clock
    # warmup: the first two batches of each variant, then every batch per timed run
    assert calls[:4] == [("original", 0), ("original", 1), ("pruned", 0), ("pruned", 1)]
    assert len(calls) == 4 + 3 * 2 * 3
    assert [r["variant"] for r in rows] == ["original", "pruned", "pruned", "original", "original", "pruned"]
    assert [r["position"] for r in rows] == [0, 1, 0, 1, 0, 1]
    assert [r["run"] for r in rows] == [0, 0, 1, 1, 2, 2]
    assert all(r["items"] == 10 for r in rows)
    assert [r["seconds"] for r in rows] == [2, 1, 0.5, 4, 5, 2]
    assert [r["items_per_s"] for r in rows] == [5.0, 10.0, 20.0, 2.5, 2.0, 5.0]
    assert len(syncs) == 1 + 6 * 2  # after the warmup, before and after every timed run


def test_a_clock_that_does_not_advance_is_an_error():
    batches = [timing.Batch({"i": 0}, 1)]
    with pytest.raises(RuntimeError, match="clock does not advance"):
        timing.time_variants({"original": lambda inputs: None}, batches, repeats=1, clock=lambda: 1.0)


def test_measure_on_a_tiny_bert_gives_one_row_per_variant_batch_size_and_run():
    model = tiny_bert()
    removed = speed.heads_to_prune(fake_importance(model), 50)
    pruned = speed.pruned_copy(model, removed)
    batch = bert_batch(batch=4)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    by_size = {1: [timing.Batch({k: v[i:i + 1] for k, v in inputs.items()}, 1) for i in range(4)],
               4: [timing.Batch(inputs, 4)]}
    clock = FakeClock(itertools.count(0, 0.25))  # every timed run takes 0.25 s
    runs = speed.measure({"original": model, "pruned": pruned}, by_size,
                         speed.SpeedSettings(repeats=3, warmup_batches=1), "bert", "cpu", clock=clock)
    assert len(runs) == 2 * 2 * 3
    assert set(runs.variant) == {"original", "pruned"} and set(runs.batch_size) == {1, 4}
    assert (runs["items"] == 4).all() and (runs.items_per_s == 16.0).all()
    assert set(runs.heads[runs.variant == "pruned"]) == {4} and set(runs.heads[runs.variant == "original"]) == {8}
    assert (runs.unit == "examples").all() and (runs.device_type == "cpu").all()
    assert (runs.device == timing.cpu_name()).all() and (runs.torch_threads == torch.get_num_threads()).all()
    assert (runs.dtype == "float32").all()


# --------------------------------------------------------------------------- which heads, pruned = gated


@pytest.mark.parametrize("make", [tiny_bert, tiny_fsmt])
def test_exactly_half_of_the_heads_go_the_least_important_ones(make):
    model = make()
    importance = fake_importance(model, seed=3)
    removed = speed.heads_to_prune(importance, 50)
    total = count_heads(model)
    assert len(removed) == total // 2 == len(set(removed))
    least = importance.sort_values("importance").head(total // 2)
    assert set(removed) == {(r.attn_type, r.layer, r.head) for r in least.itertuples()}
    pruned = speed.pruned_copy(model, removed)
    assert count_heads(pruned) == total - len(removed) and count_heads(model) == total  # the original is intact
    assert pruned_heads(pruned) == speed.removal_plan(removed)
    # the pruned model really is smaller: fewer attention parameters
    assert sum(p.numel() for p in pruned.parameters()) < sum(p.numel() for p in model.parameters())


def test_prune_percent_rounds_like_the_pruning_steps():
    model = tiny_fsmt()  # 24 heads
    importance = fake_importance(model)
    assert len(speed.heads_to_prune(importance, 10)) == 2  # round(2.4)
    assert len(speed.heads_to_prune(importance, 100)) == 24


def test_removal_plan_groups_heads_by_type_and_layer():
    plan = speed.removal_plan([("enc_dec", 1, 3), ("enc_self", 0, 2), ("enc_dec", 1, 0), ("enc_dec", 0, 1)])
    assert plan == {"enc_dec": {0: [1], 1: [0, 3]}, "enc_self": {0: [2]}}


def test_pruned_bert_predicts_what_the_gated_bert_predicts():
    model = tiny_bert()
    removed = speed.heads_to_prune(fake_importance(model, seed=1), 50)
    pruned = speed.pruned_copy(model, removed)
    batch = bert_batch(batch=4)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    check = speed.check_pruned_equals_gated(model, pruned, removed, [timing.Batch(inputs, 4)])
    assert check["check_items"] == 4 and check["check_agreement"] == 1.0
    assert check["check_max_abs_diff"] < 1e-5
    # and the check notices a model that is not the gated one
    other = speed.pruned_copy(model, speed.heads_to_prune(fake_importance(model, seed=2), 50))
    gates = full_gates(model)
    for t, layer, h in removed:
        gates[t][layer, h] = 0
    with torch.no_grad(), gated(model, gates):
        expected = model(**inputs).logits
    with torch.no_grad():
        got = other(**inputs).logits
    differs = speed.check_pruned_equals_gated(model, other, removed, [timing.Batch(inputs, 4)])
    assert differs["check_max_abs_diff"] == pytest.approx(float((expected - got).abs().max()))
    assert differs["check_max_abs_diff"] > 1e-3


def test_pruned_translation_model_generates_what_the_gated_one_generates():
    model = tiny_fsmt()
    removed = speed.heads_to_prune(fake_importance(model, seed=4), 50)
    pruned = speed.pruned_copy(model, removed)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 40, (3, 6), generator=g)
    ids[:, -1] = EOS
    ids[2, 3:] = PAD
    ids[2, 2] = EOS
    inputs = {"input_ids": ids, "attention_mask": (ids != PAD).long()}
    make = lambda m: speed.translate_step(m, beam=3, max_len_b=5)  # noqa: E731
    check = speed.check_pruned_equals_gated(model, pruned, removed, [timing.Batch(inputs, 3)], make)
    assert check["check_items"] == 3 and check["check_agreement"] == 1.0
    assert math.isnan(check["check_max_abs_diff"])
    clock = FakeClock(itertools.count(0, 0.5))
    runs = speed.measure({"original": model, "pruned": pruned}, {3: [timing.Batch(inputs, 3)]},
                         speed.SpeedSettings(repeats=3, beam=3), "fsmt", "cpu", clock=clock)
    assert (runs.unit == "sentences").all() and (runs.items_per_s == 6.0).all()
    assert set(runs.heads) == {24, 12}


def test_importance_table_must_match_the_model():
    model = tiny_bert()
    with pytest.raises(ValueError, match="importance.csv has 4 heads"):
        speed.speed_study("toy", model, None, None, fake_importance(model).head(4), speed.SpeedSettings(), "cpu")


# --------------------------------------------------------------------------- Table 4


def toy_runs():
    """Two batch sizes, three runs per variant, numbers chosen to check by hand."""
    values = {(1, "original"): [10, 12, 14], (1, "pruned"): [11, 12, 13],
              (64, "original"): [100, 100, 100], (64, "pruned"): [110, 120, 130]}
    rows = []
    for (batch_size, variant), per_run in values.items():
        for run, value in enumerate(per_run):
            rows.append({"study": "toy", "family": "bert", "unit": "examples", "variant": variant,
                         "batch_size": batch_size, "run": run, "position": 0, "items": 20, "seconds": 20 / value,
                         "items_per_s": float(value), "heads": 8 if variant == "original" else 4, "heads_total": 8,
                         "device": "Toy CPU 3000", "device_type": "cpu", "torch_threads": 2, "dtype": "float32",
                         "attn_implementation": "eager", "torch_version": torch.__version__})
    return pd.DataFrame(rows)


FACTS = {"heads_pruned": 4, "prune_percent": 50, "check_items": 20, "check_agreement": 1.0,
         "check_max_abs_diff": 2e-7}


def test_summary_mean_sample_std_and_speedup_by_hand():
    summary = table4.summarize(toy_runs(), FACTS)
    assert list(summary.columns) == speed.SUMMARY_COLUMNS
    small, large = summary.iloc[0], summary.iloc[1]
    assert (small.batch_size, large.batch_size) == (1, 64)
    assert small.original_mean == 12 and small.original_std == pytest.approx(2.0)  # sqrt((4 + 0 + 4) / 2)
    assert small.pruned_mean == 12 and small.pruned_std == pytest.approx(1.0)
    assert small.speedup_percent == pytest.approx(0.0)
    assert large.original_mean == 100 and large.original_std == 0
    assert large.pruned_mean == 120 and large.pruned_std == pytest.approx(10.0)  # sqrt((100 + 0 + 100) / 2)
    assert large.speedup_percent == pytest.approx(20.0)
    assert (summary.runs == 3).all() and (summary.heads_pruned == 4).all() and (summary.heads_total == 8).all()
    assert table4.measured_ratio(summary) == {1: pytest.approx(1.0), 64: pytest.approx(1.2)}


def test_paper_numbers_give_the_paper_speedup():
    """Table 4 of the paper, batch 64: 124.7 -> 146.6 examples/s is +17.5%."""
    runs = toy_runs()
    runs.loc[(runs.batch_size == 64) & (runs.variant == "original"), "items_per_s"] = 124.7
    runs.loc[(runs.batch_size == 64) & (runs.variant == "pruned"), "items_per_s"] = 146.6
    large = table4.summarize(runs, FACTS).iloc[1]
    assert f"{large.speedup_percent:+.1f}%" == "+17.6%"  # the paper rounds its means first (+17.5%)


def test_markdown_table_names_the_device_and_the_check(tmp_path):
    runs = toy_runs()
    summary = table4.write(runs, FACTS, tmp_path / "speed.csv", tmp_path / "table4.csv", tmp_path / "table4.md",
                           evalset_name="dev")
    md = (tmp_path / "table4.md").read_text()
    assert "Toy CPU 3000" in md and "2 torch threads" in md and "float32" in md
    assert "| Batch size | Original | Pruned 50% | Speedup (95% CI) |" in md
    # the intervals: test_interval_of_the_toy_runs_by_hand
    assert "| 1 | 12.0 ± 2.0 | 12.0 ± 1.0 | +0.0% (-18.4, +24.4) |" in md
    assert "| 64 | 100.0 ± 0.0 | 120.0 ± 10.0 | +20.0% (-2.7, +47.3) |" in md
    assert "Memory, MiB" not in md and "Not timed" not in md  # nothing measured, nothing skipped
    assert "4 of 8 heads (50%)" in md and "mean ± std over 3 runs" in md and "20 examples of dev" in md
    assert "equal the gated full model's on 20 of 20 examples" in md
    written = pd.read_csv(tmp_path / "table4.csv")
    assert list(written.columns) == speed.SUMMARY_COLUMNS
    assert written[["original_mean", "pruned_std", "speedup_percent"]].to_numpy() == pytest.approx(
        summary[["original_mean", "pruned_std", "speedup_percent"]].to_numpy())
    assert list(pd.read_csv(tmp_path / "speed.csv").columns) == list(runs.columns)


def test_a_slower_pruned_model_shows_a_negative_speedup():
    runs = toy_runs()
    runs.loc[runs.variant == "pruned", "items_per_s"] /= 2
    summary = table4.summarize(runs, FACTS)
    assert summary.speedup_percent.iloc[1] == pytest.approx(-40.0)
    assert "| 64 | 100.0 ± 0.0 | 60.0 ± 5.0 | -40.0% (-51.4, -26.3) |" in table4.table4_markdown(summary)


def test_summary_needs_both_variants():
    runs = toy_runs()
    with pytest.raises(ValueError, match="no pruned runs at batch size 1"):
        table4.summarize(runs[~((runs.variant == "pruned") & (runs.batch_size == 1))])


# --------------------------------------------------------------------------- the machine


def test_cpu_name_from_cpuinfo_and_fallback(monkeypatch):
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC  9654 96-Core Processor\n"
    assert timing.cpu_name(cpuinfo) == "AMD EPYC 9654 96-Core Processor"
    assert timing.cpu_name("processor\t: 0\nHardware\t: BCM2835\n") == "BCM2835"
    monkeypatch.setattr(timing.platform, "processor", lambda: "")
    monkeypatch.setattr(timing.platform, "machine", lambda: "aarch64")
    assert timing.cpu_name("processor\t: 0\n") == "aarch64"


def test_device_name_and_environment_on_this_machine():
    model = tiny_bert()
    env = timing.environment(model, "cpu")
    assert env["device"] == timing.device_name("cpu") == timing.cpu_name() != ""
    assert env["device_type"] == "cpu" and env["torch_threads"] >= 1 and env["attn_implementation"] == "eager"
    if torch.cuda.is_available():
        assert timing.device_name("cuda") == torch.cuda.get_device_name(0)


def test_what_the_model_does_decides_the_unit():
    from test_adapter_contract import tiny_gpt2

    assert adapter_for(tiny_bert()).family == "bert" and speed.UNITS[speed.task_of(tiny_bert())] == ["examples"]
    assert adapter_for(tiny_fsmt()).family == "fsmt" and speed.UNITS[speed.task_of(tiny_fsmt())] == ["sentences"]
    assert speed.UNITS[speed.task_of(tiny_gpt2())] == ["prefill tokens", "decode tokens"]


def test_causal_lm_is_timed_in_prefill_and_decode_tokens():
    """A GQA Llama with half its query heads removed: prefill tokens/s (one forward over whole windows)
    and decode tokens/s (exactly decode_tokens generated per row), the pruned logits checked against
    the gated full model on every token."""
    from test_adapter_contract import tiny_llama_gqa

    from headprune.evaluation.runs import EvalSet, all_heads

    model = tiny_llama_gqa()
    heads = all_heads(model)
    importance = pd.DataFrame([{"attn_type": t, "layer": layer, "head": h, "importance": float(i)}
                               for i, (t, layer, h) in enumerate(heads)])
    g = torch.Generator().manual_seed(0)
    windows = torch.randint(3, 40, (6, 12), generator=g).tolist()
    evalset = EvalSet("language_modeling", windows, windows, "perplexity")
    settings = speed.SpeedSettings(batch_sizes=[1, 4], repeats=2, warmup_batches=1, decode_tokens=5)
    runs, facts = speed.speed_study("lm", model, None, evalset, importance, settings, "cpu")
    assert set(runs["unit"]) == {"prefill tokens", "decode tokens"}
    prefill = runs[runs["unit"] == "prefill tokens"]
    decode = runs[runs["unit"] == "decode tokens"]
    assert (prefill["items"] == 6 * 12).all() and (decode["items"] == 6 * 5).all()
    assert facts["heads_pruned"] == len(heads) // 2 and facts["check_agreement"] == 1.0
    assert facts["check_items"] == 6 * 12 and facts["check_max_abs_diff"] < 1e-4
    summary = table4.summarize(runs, facts)
    assert len(summary) == 4 and set(summary["unit"]) == {"prefill tokens", "decode tokens"}
    table = table4.table4_markdown(summary)
    assert "prefill tokens and decode tokens per second" in table and "| 4 (decode tokens) |" in table


# --------------------------------------------------------------------------- the rule


def _snakemake(*args, timeout=600):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=root, capture_output=True, text=True,
                          timeout=timeout)


def _config_with(tmp_path, change):
    from pathlib import Path

    import yaml

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())
    change(config["speed"])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_paper_dry_run_has_one_gpu_speed_job_per_study():
    result = _snakemake("-n", "results/figures/mnli/table4.md", "results/figures/wmt14_en_fr/table4.md")
    assert result.returncode == 0, result.stderr
    jobs = result.stdout.split("rule speed:")[1:]
    assert len(jobs) == 2
    for job in jobs:
        assert "gpu=1" in job and "importance.csv" in job
    translation = next(job for job in jobs if "wildcards: study=wmt14_en_fr" in job)
    assert "newstest2013.en" in translation.split("output:")[0] and "mtnt" not in translation.split("output:")[0]


@pytest.mark.parametrize("change, message", [
    (lambda s: s.update(studies=["qnli"]), "speed.studies names 'qnli'"),
    (lambda s: s.update(repeats=2), "2 is less than the minimum of 3"),
    (lambda s: s.update(batch_sizes=[0, 4]), "0 is less than the minimum of 1"),
])
def test_bad_speed_config_stops_before_any_job(tmp_path, change, message):
    result = _snakemake("-n", "--configfile", _config_with(tmp_path, change))
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert "Job stats" not in result.stdout
