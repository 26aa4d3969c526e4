"""Table 4 with intervals, memory and more variants (issue #46): the interval's arithmetic by hand and by scipy's
t-test, the KV cache's bytes by hand, the uniform and stock variants checked against the gated model.

The CUDA-event stopwatch cannot run here (no GPU): it is the few lines of ``timing.cuda_event_stopwatch``;
benchmarks/gpu_check.py's table4 part runs it on a GPU.
"""
import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import tiny_bert
from headprune.analyses import speed, table4
from headprune.evaluation import timing
from headprune.evaluation.runs import EvalSet
from headprune.models.prune import count_heads
from headprune.models.portable.headprune_attention import needs_headprune_attention
from test_speed import FakeClock, fake_importance, toy_runs

HEADS, KV_HEADS, HEAD_DIM, LAYERS = 8, 2, 8, 2
# Student's t with 2 degrees of freedom has a closed-form quantile: (2p - 1) sqrt(2 / (4 p (1 - p))); 4.3027 at 97.5%
T_975_2 = 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025))


def gqa_llama():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=48, intermediate_size=64, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                         max_position_embeddings=64, attn_implementation="eager", pad_token_id=0, eos_token_id=49)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.3)
    return model


# Layer 0 loses heads 0-2 of kv group 0 and head 4 of group 1 (kept: 1 and 3 query heads on both kv heads, uneven);
# layer 1 loses all of kv group 1 (heads 4-7): 8 of 16 heads, the least important in this table.
FREE_REMOVED = [("dec_self", 0, h) for h in (0, 1, 2, 4)] + [("dec_self", 1, h) for h in (4, 5, 6, 7)]


def importance_removing(model, removed):
    rows = []
    for (attn_type, layer, head) in [("dec_self", layer, h) for layer in range(LAYERS) for h in range(HEADS)]:
        low = (attn_type, layer, head) in removed
        rows.append({"attn_type": attn_type, "layer": layer, "head": head,
                     "importance": (0.0 if low else 10.0) + 0.01 * (layer * HEADS + head)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- the interval


def test_interval_of_paired_ratios_by_hand_and_by_scipy():
    from scipy import stats

    ratios = [1.1, 1.2, 1.3]
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = T_975_2 * sd / math.sqrt(3)
    expected = (100 * (math.exp(mean - half) - 1), 100 * (math.exp(mean + half) - 1))
    assert timing.speedup_interval(ratios) == pytest.approx(expected, rel=1e-12)
    # a second method: scipy's one-sample t-test's confidence interval of the mean log ratio
    ci = stats.ttest_1samp(logs, 0.0).confidence_interval(0.95)
    assert timing.speedup_interval(ratios) == pytest.approx((100 * math.expm1(ci.low), 100 * math.expm1(ci.high)))
    assert timing.speedup_interval(ratios, 0.5)[1] - timing.speedup_interval(ratios, 0.5)[0] < expected[1] - expected[0]


def test_interval_edges_one_pair_and_no_noise():
    assert all(math.isnan(x) for x in timing.speedup_interval([1.2]))
    low, high = timing.speedup_interval([1.25, 1.25, 1.25, 1.25])
    assert low == pytest.approx(25.0) and high == pytest.approx(25.0)


def test_summary_pairs_the_runs_of_one_abba_round_by_run_not_by_row_order():
    runs = toy_runs().sample(frac=1.0, random_state=3)  # rows shuffled
    summary = table4.summarize(runs).set_index("batch_size")
    # batch 64: original 100, 100, 100; pruned 110, 120, 130 -> ratios 1.1, 1.2, 1.3
    assert (summary.loc[64, "speedup_low"], summary.loc[64, "speedup_high"]) == pytest.approx(
        timing.speedup_interval([1.1, 1.2, 1.3]))
    # batch 1: original 10, 12, 14; pruned 11, 12, 13
    assert (summary.loc[1, "speedup_low"], summary.loc[1, "speedup_high"]) == pytest.approx(
        timing.speedup_interval([11 / 10, 12 / 12, 13 / 14]))
    assert summary.loc[1, "speedup_low"] == pytest.approx(-18.446, abs=1e-3)  # the markdown's -18.4
    assert (summary["confidence"] == 0.95).all() and (summary["timer"] == "perf_counter").all()
    assert summary.loc[64, "speedup_percent"] == pytest.approx(20.0)  # ratio of the means, as the paper's


# --------------------------------------------------------------------------- timing


def test_every_variant_alternates_abba_and_the_cpu_uses_the_clock():
    batches = [timing.Batch({"i": 0}, 2)]
    seen = []
    steps = {name: (lambda inputs, name=name: seen.append(name)) for name in ("original", "pruned", "uniform")}
    rows = timing.time_variants(steps, batches, repeats=2, warmup_batches=0,
                               stopwatch=timing.clock_stopwatch(FakeClock(range(0, 100, 1))))
    assert [r["variant"] for r in rows] == ["original", "pruned", "uniform", "uniform", "pruned", "original"]
    assert [r["position"] for r in rows] == [0, 1, 2, 0, 1, 2]
    assert all(r["seconds"] == 1 and r["items_per_s"] == 2 for r in rows)
    assert all(math.isnan(r["peak_gpu_bytes"]) for r in rows)
    # a memory meter's reading goes into the row
    rows = timing.time_variants(steps, batches, repeats=1, warmup_batches=0, memory=lambda: (lambda: 1234))
    assert [r["peak_gpu_bytes"] for r in rows] == [1234.0] * 3
    stopwatch, name = timing.stopwatch_for("cpu")
    assert name == "perf_counter" and stopwatch()() >= 0 and timing.gpu_memory_meter("cpu") is None
    assert timing.host_over_gpu(lambda inputs: None, batches, "cpu") is None  # a GPU's diagnostic


# --------------------------------------------------------------------------- variants and the KV cache


def test_variants_remove_about_as_many_heads_each_and_equal_the_gated_model():
    model = gqa_llama()
    variants, skipped = speed.build_variants(model, None, importance_removing(model, FREE_REMOVED),
                                             ["stock", "original", "uniform", "pruned"], 50, "cpu")
    assert list(variants) == ["original", "pruned", "uniform", "stock"] and skipped == {}
    assert sorted(variants["pruned"].removed) == sorted(FREE_REMOVED)
    assert needs_headprune_attention(variants["pruned"].model)  # layer 0's groups are uneven
    # uniform: one whole kv group from every layer, the one whose heads come first in the order
    assert sorted(variants["uniform"].removed) == [("dec_self", 0, h) for h in range(4)] + \
        [("dec_self", 1, h) for h in range(4, 8)]
    stock = variants["stock"].model
    assert type(stock) is LlamaForCausalLM and stock.config.num_attention_heads == 4
    assert stock.config.num_key_value_heads == 1 and not hasattr(stock.config, "auto_map")
    assert {name: count_heads(v.model) for name, v in variants.items()} == {
        "original": 16, "pruned": 8, "uniform": 8, "stock": 8}
    assert count_heads(model) == 16  # the original untouched
    ids = torch.randint(3, 49, (3, 7), generator=torch.Generator().manual_seed(0))
    batches = [timing.Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, 3)]
    checks = speed.check_variants(variants, batches, logits=True)
    for name in ("pruned", "uniform", "stock"):
        assert checks[speed.column(name, "check_agreement")] == 1.0
        assert checks[speed.column(name, "check_max_abs_diff")] < 1e-4
        assert checks[speed.column(name, "heads_pruned")] == 8 and checks[speed.column(name, "check_items")] == 21
    assert "check_agreement" in checks and "uniform_check_agreement" in checks  # pruned's name unprefixed


def test_stock_is_skipped_with_the_reason_where_no_stock_class_holds_fewer_heads():
    model = tiny_bert()
    variants, skipped = speed.build_variants(model, None, fake_importance(model), ["original", "pruned", "stock"],
                                             50, "cpu")
    assert list(variants) == ["original", "pruned"]
    assert list(skipped) == ["stock"] and "hidden_size" in skipped["stock"]


def test_variant_names_are_checked():
    with pytest.raises(ValueError, match="unknown speed variants"):
        speed.check_variant_names(["original", "pruned", "free"])
    with pytest.raises(ValueError, match="must include 'original' and 'pruned'"):
        speed.check_variant_names(["original", "uniform"])
    assert speed.check_variant_names(["uniform", "pruned", "original"]) == ["original", "pruned", "uniform"]


def test_kv_cache_bytes_by_hand():
    """layers x 2 (keys, values) x batch x kv heads x positions x head_dim x 4 bytes; positions = prompt + tokens
    generated - 1 (the last one is never fed back). The free layout keeps a kv head while any of its query heads
    stays; the uniform one drops whole groups."""
    model = gqa_llama()
    variants, _ = speed.build_variants(model, None, importance_removing(model, FREE_REMOVED),
                                       ["original", "pruned", "uniform"], 50, "cpu")
    batch, prompt, new = 3, 5, 4
    ids = torch.randint(3, 49, (batch, prompt), generator=torch.Generator().manual_seed(1))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    per_kv_head = 2 * batch * (prompt + new - 1) * HEAD_DIM * 4
    assert timing.kv_cache_bytes(model, inputs, new) == LAYERS * KV_HEADS * per_kv_head
    # layer 0 keeps both kv heads, layer 1 one
    assert timing.kv_cache_bytes(variants["pruned"].model, inputs, new) == (2 + 1) * per_kv_head
    assert timing.kv_cache_bytes(variants["uniform"].model, inputs, new) == LAYERS * 1 * per_kv_head
    assert timing.cache_bytes(None) == 0
    legacy = [(torch.zeros(2, 3, 4, dtype=torch.bfloat16), torch.zeros(2, 3, 4, dtype=torch.bfloat16))]
    assert timing.cache_bytes(legacy) == 2 * 24 * 2


def test_a_study_with_every_variant_writes_their_columns_memory_and_checks(tmp_path):
    model = gqa_llama()
    g = torch.Generator().manual_seed(0)
    windows = torch.randint(3, 49, (4, 10), generator=g).tolist()
    evalset = EvalSet("language_modeling", windows, windows, "perplexity")
    settings = speed.SpeedSettings(batch_sizes=[1, 4], repeats=3, warmup_batches=1, decode_tokens=3,
                                   variants=["original", "pruned", "uniform", "stock"])
    runs, facts = speed.speed_study("lm", model, None, evalset, importance_removing(model, FREE_REMOVED), settings,
                                    "cpu")
    assert list(runs.columns) == speed.RUN_COLUMNS
    assert set(runs["variant"]) == {"original", "pruned", "uniform", "stock"} and len(runs) == 2 * 2 * 4 * 3
    decode = runs[runs["unit"] == "decode tokens"]
    assert decode["kv_cache_bytes"].notna().all()
    assert runs.loc[runs["unit"] == "prefill tokens", "kv_cache_bytes"].isna().all()
    def per_kv_head(rows):  # 10-token windows: the prompt is all 10 (PROMPT_TOKENS is more), 3 generated
        return 2 * rows * (10 + 3 - 1) * HEAD_DIM * 4
    kv = decode[decode["batch_size"] == 4].groupby("variant")["kv_cache_bytes"].first()
    assert kv.to_dict() == {"original": 4 * per_kv_head(4), "pruned": 3 * per_kv_head(4),
                            "uniform": 2 * per_kv_head(4), "stock": 2 * per_kv_head(4)}
    weights = runs.groupby("variant")["weight_bytes"].first()
    # the free layout keeps 3 of 4 kv heads' key/value rows, the uniform one 2
    assert weights["uniform"] == weights["stock"] < weights["pruned"] < weights["original"]
    summary = table4.write(runs, facts, tmp_path / "speed.csv", tmp_path / "table4.csv", tmp_path / "table4.md")
    assert list(summary.columns) == speed.SUMMARY_COLUMNS + speed.variant_columns("uniform") + \
        speed.variant_columns("stock")
    assert (summary[["check_agreement", "uniform_check_agreement", "stock_check_agreement"]] == 1.0).all().all()
    md = (tmp_path / "table4.md").read_text()
    assert ("| Batch size | Original | Pruned 50% | Speedup (95% CI) | Uniform 50% | Speedup (95% CI) | "
            "Stock 50% |") in md
    assert "Memory, MiB" in md and f"KV cache {4 * per_kv_head(4) / 2 ** 20:.2f}" in md
    assert "Check: the stock model's next-token predictions equal the gated full model's on 40 of 40" in md
    written = pd.read_csv(tmp_path / "table4.csv")
    # summary rows: prefill 1, prefill 4 (no cache), decode 1, decode 4
    assert written["uniform_kv_cache_bytes"].dropna().tolist() == [2 * per_kv_head(1), 2 * per_kv_head(4)]


def test_a_study_whose_stock_variant_is_skipped_says_why():
    model = tiny_bert()
    from conftest import bert_batch

    batch = bert_batch(batch=4)
    by_size = {1: [timing.Batch({k: batch[k][i:i + 1] for k in ("input_ids", "attention_mask", "token_type_ids")}, 1)
                   for i in range(4)]}
    variants, skipped = speed.build_variants(model, None, fake_importance(model), ["original", "pruned", "stock"],
                                             50, "cpu")
    runs = speed.measure({n: v.model for n, v in variants.items()}, by_size, speed.SpeedSettings(repeats=2), "bert",
                         "cpu")
    runs.insert(0, "study", "toy")
    summary = table4.summarize(runs, {"skipped": skipped, "prune_percent": 50})
    assert list(summary.columns) == speed.SUMMARY_COLUMNS  # the default form: nothing beyond pruned was timed
    assert summary["skipped"].iloc[0].startswith("stock: a pruned BertForSequenceClassification")
    assert "Not timed: stock: a pruned BertForSequenceClassification" in table4.table4_markdown(summary)


def test_the_stage_passes_the_variants_setting():
    from headprune.stages import speed as stage

    plan = SimpleNamespace(speed_data=None, speed_settings=lambda study, s: {"decode_tokens": 8})
    study = SimpleNamespace(config={"speed": {"variants": ["original", "pruned", "uniform"], "repeats": 5}},
                            evalset_spec=lambda: {"name": "eval"}, plan=plan)
    settings = stage.params(study)["settings"]
    assert settings["variants"] == ["original", "pruned", "uniform"] and settings["repeats"] == 5
    assert speed.SpeedSettings(**settings).variants == ["original", "pruned", "uniform"]
    del study.config["speed"]["variants"]
    assert stage.params(study)["settings"]["variants"] == list(speed.DEFAULT_VARIANTS)


def test_the_cuda_event_stopwatch_and_memory_meter_plumbing_with_a_fake_cuda(monkeypatch):
    """No GPU here: torch.cuda's calls replaced by fakes that log them, to check the order (synchronize, record,
    run, record, wait for the end event), the milliseconds turned into seconds and the memory above the start."""
    calls = []

    class Event:
        clock = iter([100.0, 350.0])  # ms: the run took 0.25 s on the GPU

        def __init__(self, enable_timing=False):
            assert enable_timing
            self.at = None

        def record(self, stream=None):
            calls.append(("record", stream))
            self.at = next(Event.clock)

        def synchronize(self):
            calls.append(("wait",))

        def elapsed_time(self, end):
            return end.at - self.at

    allocated = {"now": 1000, "peak": 5000}
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("synchronize",)))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: allocated.update(peak=1000))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: allocated["peak"])
    timing.PEAK_BEFORE_RESET.clear()

    def step(inputs):
        calls.append(("step",))
        allocated["peak"] = 1800  # the run's activations

    stopwatch, name = timing.stopwatch_for("cuda:0")
    assert name == "cuda events"
    rows = timing.time_variants({"original": step}, [timing.Batch({}, 5)], repeats=1, warmup_batches=0,
                               stopwatch=stopwatch, memory=timing.gpu_memory_meter("cuda:0"))
    assert rows[0]["seconds"] == pytest.approx(0.25) and rows[0]["items_per_s"] == pytest.approx(20.0)
    assert rows[0]["peak_gpu_bytes"] == 800  # above the 1000 allocated when the run began
    assert timing.PEAK_BEFORE_RESET[torch.device("cuda:0")] == 5000  # the peak the meter reset, kept
    assert calls[-5:] == [("synchronize",), ("record", "stream"), ("step",), ("record", "stream"), ("wait",)]
