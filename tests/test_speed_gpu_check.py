"""benchmarks/gpu_check.py's table4 part in its CPU form (tiny shapes): what the lead runs on a GPU runs here too,
and its summary holds every variant, the intervals, the KV cache and the checks."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_table4_part_runs_on_the_cpu(tmp_path):
    result = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--cpu", "--parts", "table4", "--out",
                             str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] and not summary["tests"] and not summary["speed"]  # only the part asked for
    rows = summary["table4"]
    timed = {(r["model"], r["unit"], r["variant"]): r for r in rows if "by_batch" in r}
    assert set(timed) == {("bert-toy", "examples", v) for v in ("original", "pruned", "uniform")} | {
        ("llama3 toy", unit, v) for unit in ("prefill tokens", "decode tokens")
        for v in ("original", "pruned", "uniform", "stock")}
    (skipped,) = [r for r in rows if "skipped" in r]
    assert skipped["model"] == "bert-toy" and skipped["variant"] == "stock" and "hidden_size" in skipped["skipped"]
    for (model, unit, variant), row in timed.items():
        assert set(row["by_batch"]) == {"1", "4"} and row["timer"] == "perf_counter" and row["runs"] == 3
        if variant == "original":
            assert all(len(v) == 1 and v[0] > 0 for v in row["by_batch"].values())
            continue
        assert row["check_agreement"] == 1.0 and row["heads"] == row["heads_total"] // 2
        for point, low, high in row["by_batch"].values():
            assert low < high  # three noisy runs on a shared CPU: an interval of some width
        assert 0 < row["attention_share"] < 1 and row["host_over_gpu"] is None  # a GPU's diagnostic
    decode = {v: timed["llama3 toy", "decode tokens", v]["kv_cache_mib"] for v in ("original", "uniform", "stock")}
    # 4 rows, 4 layers, 2 kv heads of 8, 16 + 2 - 1 positions, float32; uniform and stock keep 1 kv head a layer
    assert decode["original"] == round(4 * 2 * 4 * 2 * 17 * 8 * 4 / 2 ** 20, 3)
    assert decode["uniform"] == decode["stock"] == round(decode["original"] / 2, 3)
    assert timed["llama3 toy", "prefill tokens", "pruned"]["kv_cache_mib"] is None
    # one decoding step's attention three ways (the padded way checked inside to equal the gathered one)
    gather = summary["table4_gather"]
    assert [(r["batch"], r["positions"]) for r in gather] == [(2, 32), (4, 128)]
    assert all(r[f"{way}_ms"] > 0 for r in gather for way in ("free", "uniform", "padded"))
    assert all(r["heads_kept"] == 4 and r["kv_heads"] == 2 and 2 <= r["largest_group"] <= 4 for r in gather)
    text = (tmp_path / "summary.txt").read_text()
    assert "One decoding step's attention, ms, 4 of 8 query heads kept on 2 kv heads" in text
    assert "Table 4 with 95% intervals over 3 paired runs (perf_counter)" in text and "Tests (" not in text
    assert "llama3 toy          decode tokens  stock" in text
