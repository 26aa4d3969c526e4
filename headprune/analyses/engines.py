"""Table 4 in a serving engine: the models of a causal-LM study timed in llama.cpp beside PyTorch (#58 item 4).

``speed.engines: [transformers, llama.cpp]``: every variant timed (the full model, the pruned one in the paper's
free layout, uniform and stock on request) is written as a GGUF file (``headprune.models.gguf_export.save_gguf``:
llama.cpp's ``deci`` architecture, each layer with its own heads; f16 weights, as served) and loaded in llama.cpp
(llama-cpp-python, the ``gguf`` extra). Timed as llama.cpp's own benchmark does, one sequence at a time:

- prompt processing: each window of the eval set evaluated at once (tokens per second);
- generation: the window's first ``PROMPT_TOKENS`` tokens, then ``decode_tokens`` greedy tokens one by one
  (generated tokens per second, the prompt included in the time, as the PyTorch decode is timed).

Runs alternate between the models as PyTorch's do (``timing.time_variants``: ABBA, warmup untimed), so the same
paired interval on the log ratio applies; the rows go into speed.csv with their own units (``PROMPT_UNIT``,
``GENERATED_UNIT``, batch size 1) and Table 4 draws them beside PyTorch's. Where llama.cpp is not installed, or a
model cannot be written as a GGUF llama.cpp runs (another family), nothing is timed and the reason is recorded.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np


TRANSFORMERS, LLAMA_CPP = "transformers", "llama.cpp"
ENGINES = (TRANSFORMERS, LLAMA_CPP)
PROMPT_UNIT, GENERATED_UNIT = "llama.cpp prompt tokens", "llama.cpp generated tokens"
ENGINE_UNITS = (PROMPT_UNIT, GENERATED_UNIT)
HOW_TO_GET = 'pip install -e ".[gguf]" (llama-cpp-python, built from source in about 8 minutes)'
OUTTYPE = "f16"


def llama_cpp_missing() -> str | None:
    """Why llama.cpp cannot be used here (None: it can)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as error:
        return f"llama.cpp is not installed ({error}): {HOW_TO_GET}"
    return None


def load_gguf(path, n_ctx: int, threads: int):
    """``path`` in llama.cpp: one sequence of ``n_ctx`` tokens, ``threads`` threads, quiet."""
    import llama_cpp

    return llama_cpp.Llama(str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=threads,
                           n_threads_batch=threads, logits_all=False, verbose=False)


def prompt_step(llm) -> Callable[[dict], None]:
    """Evaluate a whole window from an empty cache."""
    def step(inputs):
        llm.reset()
        llm.eval(inputs["tokens"])
    return step


def generation_step(llm, tokens: int) -> Callable[[dict], None]:
    """Evaluate the prompt, then ``tokens`` greedy tokens, each from the last position's logits."""
    vocab = llm.n_vocab()

    def step(inputs):
        llm.reset()
        llm.eval(inputs["tokens"])
        for _ in range(tokens):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(vocab,))
            llm.eval([int(logits.argmax())])
    return step


def engine_batches(windows: Sequence[Sequence[int]], prompt_tokens: int, decode_tokens: int) -> dict:
    """{unit: batches}: one window a batch (prompt processing: its tokens counted), or its first
    ``prompt_tokens`` tokens (generation: ``decode_tokens`` counted)."""
    from headprune.evaluation.timing import Batch  # torch: the scorecard reads this module's units without it

    return {PROMPT_UNIT: [Batch({"tokens": [int(t) for t in w]}, len(w)) for w in windows],
            GENERATED_UNIT: [Batch({"tokens": [int(t) for t in w[:prompt_tokens]]}, decode_tokens) for w in windows]}


def write_ggufs(models: dict, folder: Path) -> tuple[dict[str, Path], str | None]:
    """Each model as a GGUF in ``folder``: ({variant: path}, None), or ({}, why) where one cannot be written."""
    from headprune.models.gguf_export import save_gguf

    paths = {}
    for name, model in models.items():
        try:
            paths[name] = save_gguf(model, None, folder / f"{name}.gguf", outtype=OUTTYPE)
        except ValueError as error:
            return {}, f"the {name} model: {error}"
    return paths, None


def llama_cpp_runs(models: dict, windows: Sequence[Sequence[int]], *, repeats: int, warmup_batches: int,
                   prompt_tokens: int, decode_tokens: int, threads: int,
                   done: Callable[[int], None] | None = None) -> tuple[list[dict], str | None]:
    """Rows of speed.csv (without the study) for every model of ``models`` ({variant: model}, the original first)
    timed in llama.cpp (installed: ``llama_cpp_missing``); ([], why) where one cannot be written as a GGUF."""
    import llama_cpp
    import torch

    from headprune.evaluation.timing import cpu_name, time_variants
    from headprune.models.prune import count_heads

    n_ctx = max(len(w) for w in windows) + decode_tokens
    with tempfile.TemporaryDirectory(prefix="headprune-gguf-") as folder:
        paths, why = write_ggufs(models, Path(folder))
        if why is not None:
            return [], why
        llms = {name: load_gguf(path, n_ctx, threads) for name, path in paths.items()}
        heads = {name: count_heads(model) for name, model in models.items()}
        sizes = {name: path.stat().st_size for name, path in paths.items()}
        rows = []
        for unit, batches in engine_batches(windows, prompt_tokens, decode_tokens).items():
            steps = {name: (prompt_step(llm) if unit == PROMPT_UNIT else generation_step(llm, decode_tokens))
                     for name, llm in llms.items()}
            for row in time_variants(steps, batches, repeats, warmup_batches, done=done):
                name = row["variant"]
                rows.append({"unit": unit, "batch_size": 1, **row, "heads": heads[name],
                             "heads_total": heads[next(iter(models))], "device": f"cpu: {cpu_name()}",
                             "device_type": "cpu", "torch_threads": threads, "dtype": OUTTYPE,
                             "attn_implementation": f"llama.cpp (llama-cpp-python {llama_cpp.__version__})",
                             "torch_version": torch.__version__, "timer": "perf_counter",
                             "weight_bytes": sizes[name], "kv_cache_bytes": float("nan")})
        for llm in llms.values():
            llm.close()
    return rows, None

