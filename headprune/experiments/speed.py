"""Table 4: inference speed with a share of the heads physically removed, against the full model.

The paper (Section 4.3) removes the 50% least important heads of BERT fine-tuned on MNLI
(by I_h, the order pruning uses) and times the MNLI-matched dev set at batch sizes 1, 4,
16 and 64, three runs each, reporting examples per second, mean +- std. Here the same
is done for any study: an encoder (examples per second), a translation model (sentences per
second, beam search as the evaluation runs it) or a causal LM (tokens per second, twice: prefill, one
forward over whole windows; and decode, greedy generation of ``decode_tokens`` tokens after a
prompt of the window's first ``PROMPT_TOKENS`` tokens, the KV cache on).

How a measurement is taken (``time_variants``):

- both models see the very same batches, tokenized and moved to the device beforehand
  (tokenization is not timed; BERT inputs are padded to ``max_length`` as the authors'
  ``run_classifier.py`` does, unless ``padding="longest"``);
- a warmup of a few batches per model and batch size is run and not timed;
- runs alternate between the two models (ABBA: original, pruned, pruned, original, ...) so
  that slow drift of the machine (clock, temperature, other load) hits both alike;
- one run is one pass over all items; ``torch.no_grad``, ``time.perf_counter``, and
  ``torch.cuda.synchronize`` before reading the clock on a GPU.

The pruned model is also checked against the gated one (the full model with the same heads'
gates at 0): the same predictions, or translations, for every timed item.
"""
from __future__ import annotations

import copy
import logging
import math
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from headprune.experiments.beam_search import beam_search, supports
from headprune.experiments.runs import HeadId, gates_without, importance_order
from headprune.io import atomic
from headprune.io.progress import Progress
from headprune.models.beam_cache import SourceSharingCache
from headprune.models.heads import adapter_for, gated
from headprune.models.prune import count_heads, prune_heads

ORIGINAL, PRUNED = "original", "pruned"
VARIANTS = (ORIGINAL, PRUNED)
# What a study's model does decides what is timed (``task_of``): classify, translate, or generate text.
UNITS = {"classify": ["examples"], "translate": ["sentences"], "lm": ["prefill tokens", "decode tokens"]}
PROMPT_TOKENS = 32


def task_of(model) -> str:
    from headprune.models.heads import DEC_SELF, ENC_DEC

    types = adapter_for(model).attention_types
    return "lm" if tuple(types) == (DEC_SELF,) else "translate" if ENC_DEC in types else "classify"

# One row per (study, variant, batch size, run): the tidy CSV behind Table 4.
RUN_COLUMNS = ["study", "family", "unit", "variant", "batch_size", "run", "position", "items", "seconds",
               "items_per_s", "heads", "heads_total", "device", "device_type", "torch_threads", "dtype",
               "attn_implementation", "torch_version"]
# One row per (study, batch size): Table 4 as the paper prints it, plus what it was measured on.
SUMMARY_COLUMNS = ["study", "family", "unit", "batch_size", "runs", "original_mean", "original_std",
                   "pruned_mean", "pruned_std", "speedup_percent", "heads_total", "heads_pruned",
                   "prune_percent", "items", "device", "torch_threads", "dtype", "check_items",
                   "check_agreement", "check_max_abs_diff"]


# --------------------------------------------------------------------------- which heads


def heads_to_prune(importance: pd.DataFrame, percent: float) -> list[HeadId]:
    """The ``percent``% least important heads of the whole model (increasing I_h, as pruning does).

    round(percent * N / 100) heads, like ``experiments.pruning_steps``.
    """
    order = importance_order(importance)
    return order[:int(round(percent * len(order) / 100.0))]


def removal_plan(heads: Sequence[HeadId]) -> dict[str, dict[int, list[int]]]:
    """{attn_type: {layer: [heads]}}, the form ``prune.prune_heads`` takes."""
    plan: dict[str, dict[int, list[int]]] = {}
    for attn_type, layer, head in heads:
        plan.setdefault(attn_type, {}).setdefault(int(layer), []).append(int(head))
    return {t: {layer: sorted(hs) for layer, hs in sorted(layers.items())} for t, layers in plan.items()}


def pruned_copy(model, heads: Sequence[HeadId]):
    """A copy of ``model`` with ``heads`` physically removed; ``model`` itself is untouched."""
    total = count_heads(model)
    pruned = prune_heads(copy.deepcopy(model), removal_plan(heads)).eval()
    if count_heads(pruned) != total - len(set(heads)):
        raise RuntimeError(f"pruning removed {total - count_heads(pruned)} heads, expected {len(set(heads))}")
    return pruned


# --------------------------------------------------------------------------- inputs


@dataclass
class Batch:
    """Model inputs of one batch (already on the device) and how many items it holds."""

    inputs: dict[str, torch.Tensor]
    size: int

    def to(self, device) -> "Batch":
        return Batch({k: v.to(device) for k, v in self.inputs.items()}, self.size)


def classification_inputs(tokenizer, pairs: Sequence[tuple[str, str]], batch_size: int, max_length: int = 128,
                          padding: str = "max_length") -> list[Batch]:
    """Sentence-pair batches in dataset order; ``padding="max_length"`` pads every batch to max_length."""
    batches = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        text_b = [b for _, b in chunk]
        encoded = tokenizer([a for a, _ in chunk], text_b if any(text_b) else None,
                            padding="max_length" if padding == "max_length" else True, truncation=True,
                            max_length=max_length, return_tensors="pt")
        inputs = {k: encoded[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in encoded}
        batches.append(Batch(inputs, len(chunk)))
    return batches


def lm_inputs(windows: Sequence[Sequence[int]], batch_size: int, unit: str, decode_tokens: int = 32) -> list[Batch]:
    """Batches of whole windows (prefill: the size counts their tokens) or of their first PROMPT_TOKENS
    tokens (decode: the size counts the ``decode_tokens`` each row generates)."""
    batches = []
    for start in range(0, len(windows), batch_size):
        ids = torch.tensor([list(w) for w in windows[start:start + batch_size]], dtype=torch.long)
        if unit == "prefill tokens":
            batches.append(Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, ids.numel()))
        else:
            prompt = ids[:, :min(PROMPT_TOKENS, ids.shape[1])]
            batches.append(Batch({"input_ids": prompt, "attention_mask": torch.ones_like(prompt)},
                                 len(prompt) * decode_tokens))
    return batches


def translation_inputs(tokenizer, sources: Sequence[str], batch_size: int) -> list[Batch]:
    """Source batches sorted by length, as ``evaluate.translate`` batches them."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i].split()))
    batches = []
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        encoded = tokenizer([sources[i] for i in index], padding=True, truncation=True, max_length=1024,
                            return_tensors="pt")
        batches.append(Batch({"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]},
                             len(index)))
    return batches


# --------------------------------------------------------------------------- what one batch runs


def classify_step(model) -> Callable[[dict], torch.Tensor]:
    """One forward pass; returns the logits."""
    def step(inputs):
        return model(**inputs).logits
    return step


def translate_step(model, beam: int = 5, lenpen: float = 1.0, max_len_a: float = 1.2,
                   max_len_b: int = 10) -> Callable[[dict], torch.Tensor]:
    """Beam search as the evaluation runs it (``evaluate.translate``: finished sentences leave the batch
    where ``beam_search`` reproduces the model's generate(), else generate()); returns token ids."""
    shrinking = supports(model) is None

    def step(inputs):
        max_new = int(max_len_a * inputs["input_ids"].shape[1] + max_len_b)
        if shrinking:
            return torch.stack(beam_search(model, inputs, [None], beam=beam, lenpen=lenpen, max_new=max_new)[0])
        return model.generate(**inputs, num_beams=beam, length_penalty=lenpen, early_stopping=True,
                              max_new_tokens=max_new, max_length=None, do_sample=False,
                              past_key_values=SourceSharingCache.for_model(model))
    return step


def decode_step(model, decode_tokens: int = 32) -> Callable[[dict], torch.Tensor]:
    """Greedy generation of exactly ``decode_tokens`` tokens (no early stop: the count is the unit)."""
    def step(inputs):
        return model.generate(**inputs, max_new_tokens=decode_tokens, min_new_tokens=decode_tokens,
                              do_sample=False, num_beams=1, max_length=None)
    return step


def make_step(task: str, unit: str, settings) -> Callable:
    """The step factory (model -> step) of what a study's timing runs."""
    if task == "classify" or unit == "prefill tokens":
        return classify_step
    if unit == "decode tokens":
        return lambda m: decode_step(m, settings.decode_tokens)
    return lambda m: translate_step(m, settings.beam, settings.lenpen)


# --------------------------------------------------------------------------- timing


def synchronizer(device) -> Callable[[], None]:
    """Waits for the GPU's queued work (CUDA runs asynchronously); nothing to wait for on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def run_order(variants: Sequence[str], run: int) -> list[str]:
    """ABBA: the given order on even runs, reversed on odd runs."""
    return list(variants) if run % 2 == 0 else list(variants)[::-1]


@torch.no_grad()
def time_variants(steps: dict[str, Callable[[dict], object]], batches: Sequence[Batch], repeats: int,
                  warmup_batches: int = 2, clock: Callable[[], float] = time.perf_counter,
                  synchronize: Callable[[], None] = lambda: None,
                  done: Callable[[int], None] | None = None) -> list[dict]:
    """Time every variant over all ``batches``, ``repeats`` runs each, alternating variants; ``done(1)`` is
    told each timed run, after its clock stopped (a ``Progress``'s update).

    Returns one dict per (variant, run): run, position (0 or 1 within the run), items,
    seconds, items_per_s = items / seconds. The warmup (the first ``warmup_batches``
    batches, each variant) is run before and not timed.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    if not batches:
        raise ValueError("no batches to time")
    items = sum(batch.size for batch in batches)
    for step in steps.values():
        for batch in batches[:warmup_batches]:
            step(batch.inputs)
    synchronize()
    rows = []
    for run in range(repeats):
        for position, name in enumerate(run_order(list(steps), run)):
            step = steps[name]
            synchronize()
            start = clock()
            for batch in batches:
                step(batch.inputs)
            synchronize()
            seconds = clock() - start
            if seconds <= 0:
                raise RuntimeError(f"{name}: run {run} took {seconds} s; the clock does not advance")
            rows.append({"variant": name, "run": run, "position": position, "items": items, "seconds": seconds,
                         "items_per_s": items / seconds})
            if done is not None:
                done(1)
    return rows


# --------------------------------------------------------------------------- the machine


def cpu_name(cpuinfo: str | None = None) -> str:
    """The CPU model: 'model name' in /proc/cpuinfo (Linux), else platform.processor() or the architecture."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("model name", "hardware", "cpu model") and value.strip():
            return " ".join(value.split())
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device) -> str:
    """'NVIDIA H200' for a GPU (torch.cuda.get_device_name), the CPU model for the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple {platform.processor() or 'GPU'} (mps)"
    return cpu_name()


def environment(model, device) -> dict:
    """What the speed depends on besides the model's size, recorded in every row."""
    device = torch.device(device)
    return {"device": device_name(device), "device_type": device.type, "torch_threads": torch.get_num_threads(),
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "attn_implementation": getattr(model.config, "_attn_implementation", None) or "eager",
            "torch_version": torch.__version__}


# --------------------------------------------------------------------------- correctness


def _strip(ids: torch.Tensor, pad: int | None) -> list[int]:
    return [int(i) for i in ids.tolist() if pad is None or int(i) != pad]


@torch.no_grad()
def check_pruned_equals_gated(original, pruned, heads: Sequence[HeadId], batches: Sequence[Batch],
                              step_factory: Callable | None = None, logits: bool | None = None) -> dict:
    """Does the pruned model predict what the full model with those heads gated off predicts?

    Logits (classification, an LM's prefill; the default but for a translation model): agreement of the argmax
    over items (tokens) and the largest |logit difference|. Generation: share of items whose output ids are
    identical (max diff NaN).
    """
    gates = gates_without(original, heads)
    logits = task_of(original) != "translate" if logits is None else logits
    make = step_factory or (classify_step if logits else translate_step)
    gated_step, pruned_step = make(original), make(pruned)
    pad = getattr(original.config, "pad_token_id", None)
    items = agree = 0
    max_diff = 0.0 if logits else math.nan
    for batch in batches:
        with gated(original, gates):
            expected = gated_step(batch.inputs)
        got = pruned_step(batch.inputs)
        if logits:
            expected, got = expected.reshape(-1, expected.shape[-1]), got.reshape(-1, got.shape[-1])
        items += len(expected)
        if logits:
            max_diff = max(max_diff, float((expected.float() - got.float()).abs().max()))
            agree += int((expected.argmax(-1) == got.argmax(-1)).sum())
        else:
            agree += sum(_strip(e, pad) == _strip(g, pad) for e, g in zip(expected, got))
    return {"check_items": items, "check_agreement": agree / items if items else math.nan,
            "check_max_abs_diff": max_diff}


# --------------------------------------------------------------------------- one study


@dataclass
class SpeedSettings:
    batch_sizes: Sequence[int] = (1, 4, 16, 64)
    repeats: int = 3
    prune_percent: float = 50.0
    warmup_batches: int = 2
    padding: str = "max_length"  # BERT: pad to max_length (the authors' code) or to the longest in a batch
    max_length: int = 128  # BERT
    beam: int = 5  # translation
    lenpen: float = 1.0
    decode_tokens: int = 32  # causal LM: tokens generated per row when timing decoding


def measure(original, pruned, batches_by_size: dict[int, list[Batch]], settings: SpeedSettings, family: str,
            device, clock: Callable[[], float] = time.perf_counter) -> pd.DataFrame:
    """Tidy timings, one row per (unit, variant, batch size, run), both models on ``device``.

    ``batches_by_size``: {batch size: batches}, or {(unit, batch size): batches} for a study timed in
    several units (an LM: prefill and decode tokens)."""
    task = task_of(original)
    heads = {ORIGINAL: count_heads(original), PRUNED: count_heads(pruned)}
    env = environment(original, device)
    rows = []
    counter = Progress(len(batches_by_size) * settings.repeats * 2,
                       f"speed of {family}, {len(batches_by_size)} batch settings x {settings.repeats} runs x "
                       "original and pruned", "timed runs", log=logging.getLogger(__name__))
    for key, batches in batches_by_size.items():
        unit, batch_size = key if isinstance(key, tuple) else (UNITS[task][0], key)
        make = make_step(task, unit, settings)
        steps = {ORIGINAL: make(original), PRUNED: make(pruned)}
        timed = time_variants(steps, [b.to(device) for b in batches], settings.repeats, settings.warmup_batches,
                              clock=clock, synchronize=synchronizer(device), done=counter.update)
        for row in timed:
            rows.append({"family": family, "unit": unit, "batch_size": int(batch_size), **row,
                         "heads": heads[row["variant"]], "heads_total": heads[ORIGINAL], **env})
    counter.close()
    return pd.DataFrame(rows)


def speed_study(study: str, model, tokenizer, evalset, importance: pd.DataFrame, settings: SpeedSettings, device,
                log=None) -> tuple[pd.DataFrame, dict]:
    """Everything Table 4 needs for one study: (tidy runs, facts for the table)."""
    family, task = adapter_for(model).family, task_of(model)
    removed = heads_to_prune(importance, settings.prune_percent)
    if len(importance) != count_heads(model):
        raise ValueError(f"{study}: importance.csv has {len(importance)} heads, the model {count_heads(model)}")
    pruned = pruned_copy(model, removed).to(device)

    def make_batches(unit, size):
        if task == "classify":
            return classification_inputs(tokenizer, evalset.sources, size, settings.max_length, settings.padding)
        if task == "lm":
            return lm_inputs(evalset.sources, size, unit, settings.decode_tokens)
        return translation_inputs(tokenizer, evalset.sources, size)
    batches_by_size = {(unit, int(size)): make_batches(unit, int(size))
                       for unit in UNITS[task] for size in settings.batch_sizes}
    if log:
        log.info("%s: %d of %d heads removed; %d items; batch sizes %s; %d runs each on %s", study, len(removed),
                 count_heads(model), len(evalset), list(settings.batch_sizes), settings.repeats, device_name(device))
    # the check: logits where the timing reads logits (classification, an LM's prefill), outputs otherwise
    check_unit = UNITS[task][0]
    check_batches = [b.to(device) for b in batches_by_size[check_unit, max(settings.batch_sizes)]]
    step = None if task != "translate" else (lambda m: translate_step(m, settings.beam, settings.lenpen))
    check = check_pruned_equals_gated(model, pruned, removed, check_batches, step, logits=task in ("classify", "lm"))
    if log:
        log.info("%s: pruned = gated on %.1f%% of %d items (max |logit diff| %s)", study,
                 100 * check["check_agreement"], check["check_items"], check["check_max_abs_diff"])
        if check["check_agreement"] < 1:
            log.warning("%s: the pruned model disagrees with the gated one on some items (rounding in beam "
                        "search ties, or a pruning bug): see table4.csv's check_* columns", study)
    runs = measure(model, pruned, batches_by_size, settings, family, device)
    runs.insert(0, "study", study)
    facts = {"study": study, "family": family, "heads_total": count_heads(model), "heads_pruned": len(removed),
             "prune_percent": settings.prune_percent, "items": len(evalset), **check}
    return runs[RUN_COLUMNS], facts


# --------------------------------------------------------------------------- Table 4


def summarize(runs: pd.DataFrame, facts: dict | None = None) -> pd.DataFrame:
    """One row per (study, batch size): mean and sample std (ddof=1) of items/s per variant, speedup.

    speedup_percent = 100 * (mean pruned / mean original - 1), as the paper's Table 4.
    """
    facts = facts or {}
    rows = []
    for (study, unit, batch_size), group in runs.groupby(["study", "unit", "batch_size"], sort=False):
        stats = {}
        for variant in VARIANTS:
            values = group.loc[group["variant"] == variant, "items_per_s"].to_numpy(dtype=float)
            if len(values) == 0:
                raise ValueError(f"{study}: no {variant} runs at batch size {batch_size}")
            stats[variant] = (values.mean(), values.std(ddof=1) if len(values) > 1 else math.nan, len(values))
        first = group.iloc[0]
        rows.append({
            "study": study, "family": first["family"], "unit": unit, "batch_size": int(batch_size),
            "runs": min(n for _, _, n in stats.values()),
            "original_mean": stats[ORIGINAL][0], "original_std": stats[ORIGINAL][1],
            "pruned_mean": stats[PRUNED][0], "pruned_std": stats[PRUNED][1],
            "speedup_percent": 100.0 * (stats[PRUNED][0] / stats[ORIGINAL][0] - 1.0),
            "heads_total": int(first["heads_total"]),
            "heads_pruned": facts.get("heads_pruned", int(first["heads_total"]) - int(
                group.loc[group["variant"] == PRUNED, "heads"].iloc[0])),
            "prune_percent": facts.get("prune_percent", math.nan), "items": int(first["items"]),
            "device": first["device"], "torch_threads": int(first["torch_threads"]), "dtype": first["dtype"],
            "check_items": facts.get("check_items", math.nan), "check_agreement": facts.get("check_agreement", math.nan),
            "check_max_abs_diff": facts.get("check_max_abs_diff", math.nan),
        })
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def _mean_std(mean: float, std: float) -> str:
    return f"{mean:.1f} ± {std:.1f}" if not math.isnan(std) else f"{mean:.1f}"


def _threads(n: int) -> str:
    return f"{n} torch thread" + ("" if n == 1 else "s")


def _percent(value: float) -> str:
    text = f"{value:+.1f}%"
    return text.replace("-0.0%", "+0.0%")


def table4_markdown(summary: pd.DataFrame, evalset_name: str | None = None,
                    chosen: str = "in order of importance I_h") -> str:
    """The paper's Table 4 (Batch size | Original | Pruned x% | Speedup) for one study, with a caption.

    ``chosen`` says which heads were removed (the pipeline: the least important by I_h).
    """
    studies = summary["study"].unique()
    if len(studies) != 1:
        raise ValueError(f"table 4 is drawn per study; got {list(studies)}")
    first = summary.iloc[0]
    percent = f"{first['prune_percent']:g}" if not pd.isna(first["prune_percent"]) else \
        f"{100 * first['heads_pruned'] / first['heads_total']:g}"
    units = list(dict.fromkeys(summary["unit"]))
    model = _model_words(first["family"], units)
    on = f" of {evalset_name}" if evalset_name else ""
    lines = [
        f"**Table 4** ({first['study']}, {model}): {' and '.join(units)} per second, mean ± std over {int(first['runs'])} "
        f"runs, with {int(first['heads_pruned'])} of {int(first['heads_total'])} heads ({percent}%) physically "
        f"removed {chosen}, against the full model; {int(first['items'])} {first['unit']}{on}"
        f"{' (and as many windows decoded)' if len(units) > 1 else ''}. "
        f"Device: {first['device']} ({_threads(int(first['torch_threads']))}, {first['dtype']}).",
        "",
        f"| Batch size | Original | Pruned {percent}% | Speedup |",
        "|---:|---:|---:|---:|",
    ]
    for row in summary.sort_values(["unit", "batch_size"], key=lambda c: c.map(units.index) if c.name == "unit"
                                   else c).itertuples():
        size = f"{row.batch_size} ({row.unit})" if len(units) > 1 else f"{row.batch_size}"
        lines.append(f"| {size} | {_mean_std(row.original_mean, row.original_std)} | "
                     f"{_mean_std(row.pruned_mean, row.pruned_std)} | {_percent(row.speedup_percent)} |")
    items = int(first["items"])
    if len(units) == 1 and (summary["batch_size"] > items).any():
        lines += ["", f"Batch sizes above {items} run one batch of all {items} {first['unit']}."]
    if not pd.isna(first["check_items"]):
        what = {"examples": "predictions", "sentences": "translations"}.get(units[0], "next-token predictions")
        line = (f"Check: the pruned model's {what} equal the gated full model's on "
                f"{round(first['check_agreement'] * first['check_items'])} of {int(first['check_items'])} "
                f"{first['unit']}")
        if not pd.isna(first["check_max_abs_diff"]):
            line += f" (largest logit difference {first['check_max_abs_diff']:.1e})"
        lines += ["", line + "."]
    lines.append("")
    return "\n".join(lines)


def _model_words(family: str, units: list[str]) -> str:
    """What Table 4's caption calls the model: by what it was timed on, and its family (the model type)."""
    if units == UNITS["classify"]:
        return "BERT" if family == "bert" else f"encoder classifier ({family})"
    if units == UNITS["translate"]:
        return "translation model, beam search"
    return f"causal LM ({family})"


def table4(runs: pd.DataFrame, facts: dict, out_runs, out_csv, out_md, evalset_name: str | None = None) -> pd.DataFrame:
    """Write the tidy runs CSV, Table 4's CSV (``summarize``) and its markdown; returns the summary."""
    summary = summarize(runs, facts)
    for path, write in ((out_runs, lambda p: atomic.write_csv(runs, p, index=False)),
                        (out_csv, lambda p: atomic.write_csv(summary, p, index=False)),
                        (out_md, lambda p: atomic.write_text(p, table4_markdown(summary, evalset_name)))):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write(path)
    return summary


def measured_ratio(summary: pd.DataFrame) -> dict[int, float]:
    """{batch size: pruned / original mean throughput} (what benchmarks print)."""
    return {int(r.batch_size): float(r.pruned_mean / r.original_mean) for r in summary.itertuples()}

