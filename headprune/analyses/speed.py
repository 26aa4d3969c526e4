"""Table 4: inference speed with a share of the heads physically removed, against the full model.

The paper (Section 4.3) removes the 50% least important heads of BERT fine-tuned on MNLI
(by I_h, the order pruning uses) and times the MNLI-matched dev set at batch sizes 1, 4,
16 and 64, three runs each, reporting examples per second, mean +- std. Here the same
is done for any study: an encoder (examples per second), a translation model (sentences per
second, beam search as the evaluation runs it) or a causal LM (tokens per second, twice: prefill, one
forward over whole windows; and decode, greedy generation of ``decode_tokens`` tokens after a
prompt of the window's first ``PROMPT_TOKENS`` tokens, the KV cache on).

The models timed (``speed.variants``; ``build_variants``): ``original`` (the full model) and ``pruned`` (the
paper's free layout: the least important heads wherever they are, so layers keep different head counts) always;
on request ``uniform`` (about as many heads removed, the same number from every layer, whole key/value groups with
grouped-query attention: ``layouts.uniform_removal``) and ``stock`` (that uniform model saved as a stock
transformers checkpoint, ``headprune.models.stock.save_stock``, and reloaded with its own Auto class without
remote code; skipped, with the reason recorded, for a family no stock class can hold with fewer heads).

How a measurement is taken (``time_variants``):

- every model sees the very same batches, tokenized and moved to the device beforehand
  (tokenization is not timed; BERT inputs are padded to ``max_length`` as the authors'
  ``run_classifier.py`` does, unless ``padding="longest"``);
- a warmup of a few batches per model and batch size is run and not timed;
- runs alternate between the models (ABBA: original, pruned, pruned, original, ...) so
  that slow drift of the machine (clock, temperature, other load) hits them alike;
- one run is one pass over all items, under ``torch.no_grad``. On a GPU it is timed by CUDA events recorded on
  the stream around it (the GPU's own clock, after a synchronize so that nothing queued before counts); on the
  CPU by ``time.perf_counter``;
- on a GPU, the peak memory a run allocated above what was allocated when it began (``peak_gpu_bytes``: the
  activations and the KV cache; every model's weights stay on the GPU throughout, ``weight_bytes``); when decoding,
  the bytes of the KV cache after one batch's generation (``kv_cache_bytes``, the cache's key and value tensors).

Table 4's speedup is 100 (mean pruned / mean original - 1), as the paper's. Its interval (``speedup_interval``) is
a t-interval over the paired runs of the ABBA design: run r times every model once, back to back, so the ratio
pruned / original of run r is one paired observation; the interval of the mean log ratio (Student's t, n - 1
degrees of freedom, ``CONFIDENCE``) is mapped back to percent. Logs, because a ratio's noise is multiplicative.

Each variant is also checked against the gated model (the full model with the same heads' gates at 0): the same
predictions, or translations, for every item checked.
"""
from __future__ import annotations

import copy
import logging
import math
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from headprune.evaluation.beam_search import beam_search, supports
from headprune.analyses.engines import LLAMA_CPP, TRANSFORMERS, llama_cpp_missing, llama_cpp_runs
from headprune.evaluation.runs import HeadId, gates_without, importance_order
from headprune.evaluation.timing import (Batch, device_name, environment, gpu_memory_meter, kv_cache_bytes,
                                         stopwatch_for, synchronizer, time_variants, weight_bytes)
from headprune.io.progress import Progress
from headprune.models.beam_cache import SourceSharingCache
from headprune.models.heads import adapter_for
from headprune.models.masking import gated
from headprune.models.prune import count_heads, prune_heads

ORIGINAL, PRUNED, UNIFORM, STOCK = "original", "pruned", "uniform", "stock"
VARIANTS = (ORIGINAL, PRUNED, UNIFORM, STOCK)  # every variant there is, in the order a run times them
DEFAULT_VARIANTS = (ORIGINAL, PRUNED)  # the paper's comparison, and what the pipeline times unless told more
LABELS = {PRUNED: "Pruned", UNIFORM: "Uniform", STOCK: "Stock"}
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
               "attn_implementation", "torch_version", "timer", "peak_gpu_bytes", "weight_bytes",
               "kv_cache_bytes"]
# One row per (study, batch size): Table 4 as the paper prints it, plus what it was measured on; the pruned
# variant's interval, memory and check. A variant beyond original and pruned adds ``variant_columns(variant)``.
SUMMARY_COLUMNS = ["study", "family", "unit", "batch_size", "runs", "original_mean", "original_std",
                   "pruned_mean", "pruned_std", "speedup_percent", "heads_total", "heads_pruned",
                   "prune_percent", "items", "device", "torch_threads", "dtype", "check_items",
                   "check_agreement", "check_max_abs_diff", "speedup_low", "speedup_high", "confidence", "timer",
                   "original_kv_cache_bytes", "pruned_kv_cache_bytes", "original_peak_gpu_mib", "pruned_peak_gpu_mib",
                   "skipped"]
# A variant's statistics in the summary; the pruned variant's speedup and check keep Table 4's first names
STATS = ("mean", "std", "speedup_percent", "speedup_low", "speedup_high", "heads_pruned", "check_items",
         "check_agreement", "check_max_abs_diff", "kv_cache_bytes", "peak_gpu_mib")
UNPREFIXED = ("speedup_percent", "speedup_low", "speedup_high", "heads_pruned", "check_items", "check_agreement",
              "check_max_abs_diff")


def column(variant: str, stat: str) -> str:
    """The summary's column of a variant's statistic: ``uniform_speedup_low``; the pruned variant's speedup and
    check columns unprefixed (``speedup_low``), as Table 4 named them before there were other variants."""
    return stat if variant == PRUNED and stat in UNPREFIXED else f"{variant}_{stat}"


def variant_columns(variant: str) -> list[str]:
    """The columns a variant beyond original and pruned adds to the summary."""
    return [column(variant, stat) for stat in STATS]


# --------------------------------------------------------------------------- which heads


def heads_to_prune(importance: pd.DataFrame, percent: float) -> list[HeadId]:
    """The ``percent``% least important heads of the whole model (increasing I_h, as pruning does).

    round(percent * N / 100) heads, like ``evaluation.runs.pruning_steps``.
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


@dataclass
class Variant:
    """A model timed, and the heads of the full model it lacks (what the gated model it is checked against
    switches off)."""

    model: object
    removed: list[HeadId]


def check_variant_names(names: Sequence[str]) -> list[str]:
    """The variants asked for, in ``VARIANTS``' order; original and pruned always (Table 4's comparison)."""
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown speed variants {unknown}; known: {', '.join(VARIANTS)}")
    if ORIGINAL not in names or PRUNED not in names:
        raise ValueError(f"speed.variants must include {ORIGINAL!r} and {PRUNED!r} (Table 4's comparison), "
                         f"not {list(names)}")
    return [name for name in VARIANTS if name in names]


def build_variants(model, tokenizer, importance: pd.DataFrame, names: Sequence[str], percent: float,
                   device) -> tuple[dict[str, Variant], dict[str, str]]:
    """The models ``names`` asks for (see the module docstring), on ``device``: ({name: Variant}, {name: why
    skipped}). ``model`` itself is the original, untouched."""
    names = check_variant_names(names)
    order = importance_order(importance)
    variants, skipped = {ORIGINAL: Variant(model, [])}, {}
    free = order[:int(round(percent * len(order) / 100.0))]  # heads_to_prune's
    variants[PRUNED] = Variant(pruned_copy(model, free).to(device), free)
    if UNIFORM in names or STOCK in names:
        from headprune.analyses.layouts import uniform_removal

        removed = uniform_removal(order, model, percent)
        uniform = pruned_copy(model, removed).to(device)
        if UNIFORM in names:
            variants[UNIFORM] = Variant(uniform, removed)
        if STOCK in names:
            stock, why = stock_copy(uniform, tokenizer, device)
            if stock is None:
                skipped[STOCK] = why
            else:
                variants[STOCK] = Variant(stock, removed)
    return variants, skipped


def stock_copy(model, tokenizer, device) -> tuple[object | None, str | None]:
    """``model`` (uniformly pruned) saved as a stock transformers checkpoint and loaded back by its own Auto class,
    without remote code, in its dtype and attention backend: (the stock model, None), or (None, why) where
    ``save_stock`` refuses the family (GPT-2, BERT, Marian derive a head's size from hidden_size / heads). The
    folder is a temporary one (under $TMPDIR), deleted once loaded."""
    import transformers

    from headprune.models.export import auto_class
    from headprune.models.portable.headprune_decoder import PREFIX as THROUGH
    from headprune.models.stock import save_stock

    folder = Path(tempfile.mkdtemp(prefix="headprune-stock-")) / "model"
    try:
        try:
            save_stock(model, tokenizer, folder)
        except ValueError as error:  # what a stock class cannot hold: a reason, not a failure of the timing
            return None, str(error)
        auto = getattr(transformers, auto_class(type(model)))
        backend = (getattr(model.config, "_attn_implementation", None) or "eager").removeprefix(THROUGH)
        stock = auto.from_pretrained(folder, trust_remote_code=False, dtype=next(model.parameters()).dtype,
                                     attn_implementation=backend)
        return stock.to(device).eval(), None
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


# --------------------------------------------------------------------------- inputs


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
        with gated(original, gates, masking="zero"):  # a pruned head is a zeroed one
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


def check_variants(variants: dict[str, Variant], batches: Sequence[Batch],
                   step_factory: Callable | None = None, logits: bool | None = None) -> dict:
    """Every variant but the original checked against the gated full model (``check_pruned_equals_gated``), as
    facts for the summary: {column(variant, "check_agreement"): ..., column(variant, "heads_pruned"): ...}."""
    original = variants[ORIGINAL].model
    facts = {}
    for name, variant in variants.items():
        if name == ORIGINAL:
            continue
        check = check_pruned_equals_gated(original, variant.model, variant.removed, batches, step_factory, logits)
        facts.update({column(name, key): value for key, value in check.items()})
        facts[column(name, "heads_pruned")] = len(set(variant.removed))
    return facts


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
    variants: Sequence[str] = DEFAULT_VARIANTS  # the models timed (ORIGINAL and PRUNED always)
    engines: Sequence[str] = (TRANSFORMERS,)  # where: PyTorch always; llama.cpp on request (causal LMs)


def measure(models: dict, batches_by_size: dict, settings: SpeedSettings, family: str, device,
            clock: Callable[[], float] | None = None) -> pd.DataFrame:
    """Tidy timings, one row per (unit, variant, batch size, run), every model of ``models`` ({variant: model},
    the original first) on ``device``. ``clock``: time with it (tests) instead of ``stopwatch_for``'s choice.

    ``batches_by_size``: {batch size: batches}, or {(unit, batch size): batches} for a study timed in
    several units (an LM: prefill and decode tokens)."""
    original = models[ORIGINAL]
    task = task_of(original)
    heads = {name: count_heads(model) for name, model in models.items()}
    weights = {name: weight_bytes(model) for name, model in models.items()}
    env = environment(original, device)
    stopwatch, timer = stopwatch_for(device, clock)
    memory = gpu_memory_meter(device)
    rows = []
    counter = Progress(len(batches_by_size) * settings.repeats * len(models),
                       f"speed of {family}, {len(batches_by_size)} batch settings x {settings.repeats} runs x "
                       f"{' and '.join(models)}", "timed runs", log=logging.getLogger(__name__))
    for key, batches in batches_by_size.items():
        unit, batch_size = key if isinstance(key, tuple) else (UNITS[task][0], key)
        make = make_step(task, unit, settings)
        on_device = [b.to(device) for b in batches]
        timed = time_variants({name: make(model) for name, model in models.items()}, on_device, settings.repeats,
                              settings.warmup_batches, synchronize=synchronizer(device), done=counter.update,
                              stopwatch=stopwatch, memory=memory)
        # the cache after one batch's generation, outside the timed runs (decoding only)
        kv = {name: float(kv_cache_bytes(model, on_device[0].inputs, settings.decode_tokens))
              if unit == "decode tokens" else math.nan for name, model in models.items()}
        for row in timed:
            name = row["variant"]
            rows.append({"family": family, "unit": unit, "batch_size": int(batch_size), **row,
                         "heads": heads[name], "heads_total": heads[ORIGINAL], **env, "timer": timer,
                         "weight_bytes": weights[name], "kv_cache_bytes": kv[name]})
    counter.close()
    return pd.DataFrame(rows)


def study_batches(task: str, tokenizer, evalset, settings: SpeedSettings) -> dict[tuple[str, int], list[Batch]]:
    """{(unit, batch size): batches} of the eval set, as the study's task is timed."""
    def make_batches(unit, size):
        if task == "classify":
            return classification_inputs(tokenizer, evalset.sources, size, settings.max_length, settings.padding)
        if task == "lm":
            return lm_inputs(evalset.sources, size, unit, settings.decode_tokens)
        return translation_inputs(tokenizer, evalset.sources, size)
    return {(unit, int(size)): make_batches(unit, int(size)) for unit in UNITS[task] for size in settings.batch_sizes}


def engine_runs(study: str, task: str, family: str, variants: dict, evalset, settings: SpeedSettings,
                skipped: dict, log=None) -> pd.DataFrame | None:
    """The variants timed in llama.cpp (``headprune.analyses.engines``), rows of speed.csv without the study.
    Where llama.cpp is not installed, or the study is not a causal LM's, one line is logged and nothing recorded;
    where a model cannot be written as a GGUF llama.cpp runs, the reason goes to ``skipped`` (Table 4 says it).
    None where nothing was timed."""
    log = log or logging.getLogger(__name__)
    if task != "lm":
        log.info("%s: llama.cpp times causal LMs only; this study is timed in PyTorch alone", study)
        return None
    missing = llama_cpp_missing()
    if missing is not None:  # the demo without the extra: its outputs as they were, and how to get the rows
        log.info("%s: no llama.cpp rows in Table 4: %s", study, missing)
        return None
    windows = [list(w) for w in evalset.sources]
    rows, why = llama_cpp_runs({name: v.model for name, v in variants.items()}, windows,
                               repeats=settings.repeats, warmup_batches=settings.warmup_batches,
                               prompt_tokens=PROMPT_TOKENS, decode_tokens=settings.decode_tokens,
                               threads=torch.get_num_threads())
    if why is not None:
        log.warning("%s: not timed in llama.cpp: %s", study, why)
        skipped[LLAMA_CPP] = why
        return None
    log.info("%s: %s timed in llama.cpp too (%d rows)", study, ", ".join(variants), len(rows))
    return pd.DataFrame([{"family": family, **row} for row in rows])


def speed_study(study: str, model, tokenizer, evalset, importance: pd.DataFrame, settings: SpeedSettings, device,
                log=None) -> tuple[pd.DataFrame, dict]:
    """Everything Table 4 needs for one study: (tidy runs, facts for the table)."""
    family, task = adapter_for(model).family, task_of(model)
    if len(importance) != count_heads(model):
        raise ValueError(f"{study}: importance.csv has {len(importance)} heads, the model {count_heads(model)}")
    variants, skipped = build_variants(model, tokenizer, importance, settings.variants, settings.prune_percent,
                                       device)
    for name, why in skipped.items():
        (log or logging.getLogger(__name__)).warning("%s: the %s variant is not timed: %s", study, name, why)
    batches_by_size = study_batches(task, tokenizer, evalset, settings)
    if log:
        log.info("%s: %s timed; %d of %d heads removed (pruned); %d items; batch sizes %s; %d runs each on %s", study,
                 ", ".join(variants), len(variants[PRUNED].removed), count_heads(model), len(evalset),
                 list(settings.batch_sizes), settings.repeats, device_name(device))
    # the check: logits where the timing reads logits (classification, an LM's prefill), outputs otherwise
    check_unit = UNITS[task][0]
    check_batches = [b.to(device) for b in batches_by_size[check_unit, max(settings.batch_sizes)]]
    step = None if task != "translate" else (lambda m: translate_step(m, settings.beam, settings.lenpen))
    checks = check_variants(variants, check_batches, step, logits=task in ("classify", "lm"))
    for name in variants:
        if name != ORIGINAL and log:
            log.info("%s: %s = gated on %.1f%% of %d items (max |logit diff| %s)", study, name,
                     100 * checks[column(name, "check_agreement")], checks[column(name, "check_items")],
                     checks[column(name, "check_max_abs_diff")])
        if name != ORIGINAL and checks[column(name, "check_agreement")] < 1 and log:
            log.warning("%s: the %s model disagrees with the gated one on some items (rounding in beam search "
                        "ties, or a pruning bug): see table4.csv's check columns", study, name)
    runs = measure({name: v.model for name, v in variants.items()}, batches_by_size, settings, family, device)
    engine = engine_runs(study, task, family, variants, evalset, settings, skipped, log) \
        if LLAMA_CPP in settings.engines else None
    if engine is not None and len(engine):
        runs = pd.concat([runs, engine[runs.columns]], ignore_index=True)
    runs.insert(0, "study", study)
    facts = {"study": study, "family": family, "heads_total": count_heads(model),
             "prune_percent": settings.prune_percent, "items": len(evalset), **checks, "skipped": skipped}
    return runs[RUN_COLUMNS], facts
