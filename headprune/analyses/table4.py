"""Table 4 as the paper prints it, from the tidy runs ``headprune.analyses.speed`` times: one row per
(study, unit, batch size) with every variant's mean, std, speedup and its interval over the paired runs
(``summarize``), and its markdown (``table4_markdown``)."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from headprune.analyses.speed import (DEFAULT_VARIANTS, LABELS, ORIGINAL, PRUNED, STOCK, SUMMARY_COLUMNS, UNIFORM,
                                         UNITS, VARIANTS, column, variant_columns)
from headprune.analyses.engines import ENGINE_UNITS, OUTTYPE
from headprune.evaluation.timing import CONFIDENCE, speedup_interval
from headprune.io import atomic


def paired_ratios(group: pd.DataFrame, variant: str) -> list[float]:
    """items/s of ``variant`` over the original's, run by run (the runs that timed both)."""
    by_run = group.pivot_table(index="run", columns="variant", values="items_per_s", aggfunc="first")
    both = by_run[[ORIGINAL, variant]].dropna()
    return (both[variant] / both[ORIGINAL]).tolist()


def _first_number(values: pd.Series) -> float:
    values = values.dropna()
    return float(values.iloc[0]) if len(values) else math.nan


def variant_stats(group: pd.DataFrame, variant: str, facts: dict, confidence: float = CONFIDENCE) -> dict:
    """One variant's summary columns at one (study, unit, batch size): mean and sample std (ddof=1) of items/s,
    the KV cache's bytes and the peak GPU MiB of its runs; beyond the original, the speedup over it (ratio of the
    means, as the paper's), its interval over the paired runs (``speedup_interval``), heads removed and check."""
    mine = group[group["variant"] == variant]
    if mine.empty:
        first = group.iloc[0]
        raise ValueError(f"{first['study']}: no {variant} runs at batch size {first['batch_size']}")
    values = mine["items_per_s"].to_numpy(dtype=float)
    peak = mine["peak_gpu_bytes"].max() if "peak_gpu_bytes" in mine else math.nan
    stats = {"mean": values.mean(), "std": values.std(ddof=1) if len(values) > 1 else math.nan,
             "kv_cache_bytes": _first_number(mine["kv_cache_bytes"]) if "kv_cache_bytes" in mine else math.nan,
             "peak_gpu_mib": peak / 2 ** 20 if not pd.isna(peak) else math.nan}
    if variant != ORIGINAL:
        original = variant_stats(group, ORIGINAL, facts)["original_mean"]  # raises where there is none
        low, high = speedup_interval(paired_ratios(group, variant), confidence)
        heads = int(group["heads_total"].iloc[0]) - int(mine["heads"].iloc[0])
        stats.update(speedup_percent=100.0 * (stats["mean"] / original - 1.0), speedup_low=low,
                     speedup_high=high, heads_pruned=facts.get(column(variant, "heads_pruned"), heads),
                     **{key: facts.get(column(variant, key), math.nan)
                        for key in ("check_items", "check_agreement", "check_max_abs_diff")})
    return {column(variant, key): value for key, value in stats.items()}


def summarize(runs: pd.DataFrame, facts: dict | None = None, confidence: float = CONFIDENCE) -> pd.DataFrame:
    """One row per (study, unit, batch size): ``variant_stats`` of every variant timed; speedup_percent = 100 *
    (mean pruned / mean original - 1), as the paper's Table 4, and its interval (speedup_low, speedup_high).

    ``SUMMARY_COLUMNS``, then ``variant_columns`` of each variant timed beyond original and pruned."""
    facts = facts or {}
    timed = set(runs["variant"])
    extra = [v for v in VARIANTS if v in timed and v not in DEFAULT_VARIANTS]
    skipped = "; ".join(f"{name}: {why}" for name, why in (facts.get("skipped") or {}).items())
    rows = []
    for (study, unit, batch_size), group in runs.groupby(["study", "unit", "batch_size"], sort=False):
        first = group.iloc[0]
        row = {"study": study, "family": first["family"], "unit": unit, "batch_size": int(batch_size),
               "heads_total": int(first["heads_total"]), "prune_percent": facts.get("prune_percent", math.nan),
               "items": int(first["items"]), "device": first["device"], "torch_threads": int(first["torch_threads"]),
               "dtype": first["dtype"], "confidence": confidence, "timer": first.get("timer", "perf_counter"),
               "skipped": skipped}
        for variant in [*DEFAULT_VARIANTS, *extra]:
            row.update(variant_stats(group, variant, facts, confidence))
        row["runs"] = int(group.groupby("variant").size().min())
        rows.append(row)
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS + [c for v in extra for c in variant_columns(v)])


def _mean_std(mean: float, std: float) -> str:
    return f"{mean:.1f} ± {std:.1f}" if not math.isnan(std) else f"{mean:.1f}"


def _threads(n: int) -> str:
    return f"{n} torch thread" + ("" if n == 1 else "s")


def _percent(value: float) -> str:
    text = f"{value:+.1f}%"
    return text.replace("-0.0%", "+0.0%")


def _speedup(point: float, low: float, high: float) -> str:
    """'+17.5% (+12.1, +23.2)': the speedup and its interval, where there is one."""
    if pd.isna(low) or pd.isna(high):
        return _percent(point)
    return f"{_percent(point)} ({_percent(low)[:-1]}, {_percent(high)[:-1]})"


def timed_variants(summary: pd.DataFrame) -> list[str]:
    """The variants beyond the original that the summary holds, in ``VARIANTS``' order."""
    return [v for v in VARIANTS if v != ORIGINAL and (v == PRUNED or column(v, "mean") in summary)]


def _share(summary: pd.DataFrame, variant: str) -> str:
    first = summary.iloc[0]
    pruned = first[column(variant, "heads_pruned")]
    if variant == PRUNED and not pd.isna(first["prune_percent"]):
        return f"{first['prune_percent']:g}"
    return f"{100 * pruned / first['heads_total']:g}"


def _memory_lines(summary: pd.DataFrame, variants: list[str], units: list[str]) -> list[str]:
    """A table of the KV cache after decoding one batch and a run's peak GPU memory, where they were measured."""
    def cell(row, variant):
        kv, peak = row[column(variant, "kv_cache_bytes")], row[column(variant, "peak_gpu_mib")]
        parts = ([f"KV cache {kv / 2 ** 20:.2f}"] if not pd.isna(kv) else []) + \
                ([f"peak {peak:.0f}"] if not pd.isna(peak) else [])
        return ", ".join(parts) or "-"
    names = [ORIGINAL, *variants]
    measured = summary[[column(v, k) for v in names for k in ("kv_cache_bytes", "peak_gpu_mib")]].notna().any(axis=1)
    if not measured.any():
        return []
    lines = ["", "Memory, MiB: the KV cache after decoding one batch (its key and value tensors), and a run's peak "
                 "GPU memory above what was allocated before it (activations and cache; the weights not counted).", "",
             "| Batch size | " + " | ".join(LABELS.get(v, "Original") for v in names) + " |",
             "|---:|" + "---:|" * len(names)]
    for (_, row), keep in zip(summary.iterrows(), measured):
        if keep:
            size = f"{row['batch_size']} ({row['unit']})" if len(units) > 1 else f"{row['batch_size']}"
            lines.append(f"| {size} | " + " | ".join(cell(row, v) for v in names) + " |")
    return lines


def _check_lines(summary: pd.DataFrame, variants: list[str], units: list[str], kind=None) -> list[str]:
    first = summary.iloc[0]
    what = kind.timed_outputs if kind is not None else \
        {"examples": "predictions", "sentences": "translations"}.get(units[0], "next-token predictions")
    lines = []
    for variant in variants:
        items, agreement = first[column(variant, "check_items")], first[column(variant, "check_agreement")]
        if pd.isna(items):
            continue
        line = (f"Check: the {variant} model's {what} equal the gated full model's on "
                f"{round(agreement * items)} of {int(items)} {first['unit']}")
        diff = first[column(variant, "check_max_abs_diff")]
        if not pd.isna(diff):
            line += f" (largest logit difference {diff:.1e})"
        lines += ["", line + "."]
    return lines


def _model_words(family: str, units: list[str], kind=None) -> str:
    """What Table 4's caption calls the model: as the study's kind says (``timed_as``), with its family (the model
    type); without a kind (a table drawn outside the pipeline), by what it was timed on."""
    if kind is not None:
        return kind.timed_as.format(family=family)
    if units == UNITS["classify"]:
        return f"encoder classifier ({family})"
    if units == UNITS["translate"]:
        return "translation model, beam search"
    return f"causal LM ({family})"


def table4_markdown(summary: pd.DataFrame, evalset_name: str | None = None,
                    chosen: str = "in order of importance I_h", kind=None) -> str:
    """The paper's Table 4 (Batch size | Original | Pruned x% | Speedup) for one study, with a caption; the
    speedup's interval beside it, a column pair per variant beyond pruned, and a memory table where measured.

    ``chosen`` says which heads were removed (the pipeline: the least important by I_h); ``kind`` (the study's kind
    of score, ``headprune.evaluation.kinds``) what the model and its outputs are called.
    """
    studies = summary["study"].unique()
    if len(studies) != 1:
        raise ValueError(f"table 4 is drawn per study; got {list(studies)}")
    first = summary.iloc[0]
    variants = timed_variants(summary)
    units = list(dict.fromkeys(summary["unit"]))
    model = _model_words(first["family"], units, kind)
    on = f" of {evalset_name}" if evalset_name else ""
    level = f"{100 * first.get('confidence', CONFIDENCE):g}%"
    timer = " by CUDA events" if first.get("timer") == "cuda events" else ""
    lines = [
        f"**Table 4** ({first['study']}, {model}): {' and '.join(units)} per second, mean ± std over "
        f"{int(first['runs'])} "
        f"runs, with {int(first['heads_pruned'])} of {int(first['heads_total'])} heads ({_share(summary, PRUNED)}%) "
        f"physically removed {chosen}, against the full model; {int(first['items'])} {first['unit']}{on}"
        f"{' (and as many windows decoded)' if len(units) > 1 else ''}. The speedup's {level} interval is a "
        f"t-interval over the paired runs (each run times every model once, in alternating order). "
        f"Device: {first['device']} ({_threads(int(first['torch_threads']))}, {first['dtype']})"
        f"{', timed' + timer if timer else ''}.",
    ]
    if UNIFORM in variants or STOCK in variants:
        lines += ["", "Uniform: as many heads removed from every layer (whole key/value groups with grouped-query "
                      "attention), the first in the same order; stock: that model saved as a stock transformers "
                      "checkpoint and loaded without remote code."]
    if any(unit in ENGINE_UNITS for unit in units):
        lines += ["", f"llama.cpp: the same models written as GGUF files ({OUTTYPE} weights; llama.cpp's deci "
                      "architecture, each layer with its own heads) and timed in llama.cpp on the CPU, one sequence "
                      "at a time: each window's prompt processed at once, and greedy tokens generated after the "
                      "window's first tokens (the prompt included, as in PyTorch's decode)."]
    header = " | ".join(f"{LABELS[v]} {_share(summary, v)}% | Speedup ({level} CI)" for v in variants)
    lines += ["", f"| Batch size | Original | {header} |", "|---:|---:|" + "---:|---:|" * len(variants)]
    for row in summary.sort_values(["unit", "batch_size"], key=lambda c: c.map(units.index) if c.name == "unit"
                                   else c).itertuples(index=False):
        row = row._asdict()
        size = f"{row['batch_size']} ({row['unit']})" if len(units) > 1 else f"{row['batch_size']}"
        cells = [f"{_mean_std(row[column(v, 'mean')], row[column(v, 'std')])} | "
                 f"{_speedup(*(row[column(v, k)] for k in ('speedup_percent', 'speedup_low', 'speedup_high')))}"
                 for v in variants]
        lines.append(f"| {size} | {_mean_std(row['original_mean'], row['original_std'])} | {' | '.join(cells)} |")
    items = int(first["items"])
    if len(units) == 1 and (summary["batch_size"] > items).any():
        lines += ["", f"Batch sizes above {items} run one batch of all {items} {first['unit']}."]
    lines += _memory_lines(summary, variants, units) + _check_lines(summary, variants, units, kind)
    if isinstance(first.get("skipped"), str) and first["skipped"]:
        lines += ["", f"Not timed: {first['skipped']}"]
    lines.append("")
    return "\n".join(lines)


def write(runs: pd.DataFrame, facts: dict, out_runs, out_csv, out_md, evalset_name: str | None = None,
          kind=None) -> pd.DataFrame:
    """Write the tidy runs CSV, Table 4's CSV (``summarize``) and its markdown (``kind``: the study's kind of
    score, which names the model); returns the summary."""
    summary = summarize(runs, facts)
    for path, write in ((out_runs, lambda p: atomic.write_csv(runs, p, index=False)),
                        (out_csv, lambda p: atomic.write_csv(summary, p, index=False)),
                        (out_md, lambda p: atomic.write_text(p, table4_markdown(summary, evalset_name, kind=kind)))):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write(path)
    return summary


def measured_ratio(summary: pd.DataFrame, variant: str = PRUNED) -> dict[int, float]:
    """{batch size: variant / original mean throughput} (what benchmarks print)."""
    return {int(r["batch_size"]): float(r[column(variant, "mean")] / r["original_mean"]) for _, r in summary.iterrows()}
