"""Table 4 without the pipeline: time a BERT-base-sized (WMT transformer-big-sized, or Llama-layout) model with half
of its heads physically removed against the full model, and print the measured ratios.

Random weights and random token ids (nothing is downloaded); the heads removed are a seeded random half (a random
importance order), as the speed does not depend on which heads go (only on how many per layer). The harness is the
pipeline's own (headprune.analyses.speed), so the numbers are measured the same way as Table 4's: alternating
runs, CUDA events on a GPU, the speedup's interval over the paired runs. ``--variants`` adds the uniform layout
(as many heads from every layer, whole key/value groups) and its stock checkpoint (a Llama; BERT has none).

    python benchmarks/speed.py                       # BERT-base, seq 128, batch sizes 1 4 16 64, on the GPU if any
    python benchmarks/speed.py --model fsmt --items 64 --batch-sizes 1 16 64
    python benchmarks/speed.py --model tiny --device cpu   # seconds, for a smoke test
    python benchmarks/speed.py --model llama-small --device cpu --variants original pruned uniform stock
"""
from __future__ import annotations

import argparse
import sys
import time

import pandas as pd
import torch

from headprune.analyses import speed, table4
from headprune.evaluation import timing
from headprune.evaluation.runs import all_heads
from headprune.models.loading import pick_device

SIZES = {
    # bert-base-uncased: 12 layers x 12 heads, hidden 768 (the paper's Table 4)
    "bert": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
}
# Llama layouts: grouped-query attention (4 query heads a key/value head) with head_dim 64 (small, for the CPU) or
# Llama-3-8B's widths in 8 of its 32 layers (a GPU's)
LLAMAS = {
    "llama-small": dict(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                        num_attention_heads=8, num_key_value_heads=2, head_dim=64),
    "llama3-8b-8": dict(vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=8,
                        num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0),
}


def bert_model(size: str, attention: str = "eager"):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=30522, num_labels=3, attn_implementation=attention, **SIZES[size])
    return BertForSequenceClassification(config).eval()


def llama_model(size: str, attention: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**LLAMAS[size], max_position_embeddings=2048, pad_token_id=0, attn_implementation=attention)
    return LlamaForCausalLM(config).eval()


def fsmt_model():
    """fairseq's WMT14 en-fr transformer big: 6+6 layers x 16 heads, d_model 1024, ffn 4096."""
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    config = FSMTConfig(langs=["en", "fr"], src_vocab_size=44512, tgt_vocab_size=44512, d_model=1024,
                        encoder_layers=6, decoder_layers=6, encoder_attention_heads=16, decoder_attention_heads=16,
                        encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024, pad_token_id=1,
                        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, tie_word_embeddings=True)
    return FSMTForConditionalGeneration(config).eval()


def random_importance(model, seed: int = 0) -> pd.DataFrame:
    """Distinct random scores: the free layout then removes a seeded random share of the heads."""
    heads = all_heads(model)
    scores = torch.randperm(len(heads), generator=torch.Generator().manual_seed(seed)).tolist()
    return pd.DataFrame([{"attn_type": t, "layer": layer, "head": h, "importance": float(score)}
                         for (t, layer, h), score in zip(heads, scores)])


def random_batches(task: str, items: int, batch_size: int, seq_len: int, vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for start in range(0, items, batch_size):
        n = min(batch_size, items - start)
        ids = torch.randint(5, vocab, (n, seq_len), generator=g)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if task == "classify":  # an encoder's segment ids
            inputs["token_type_ids"] = torch.zeros_like(ids)
        else:
            ids[:, -1] = 2  # </s>
        batches.append(timing.Batch(inputs, n))
    return batches


def llama_batches(model, args) -> dict:
    """{(unit, batch size): batches}: ``--items`` windows of ``--seq-len`` tokens for prefill and for decoding
    (``--max-new-tokens`` generated after the first PROMPT_TOKENS)."""
    g = torch.Generator().manual_seed(0)
    windows = torch.randint(5, model.config.vocab_size, (args.items, args.seq_len), generator=g).tolist()
    return {(unit, b): speed.lm_inputs(windows, b, unit, args.max_new_tokens)
            for unit in speed.UNITS["lm"] for b in args.batch_sizes}


def fsmt_runs(variants: dict, batches: dict, args, device) -> pd.DataFrame:
    """A fixed output length (random weights rarely stop), the pipeline's beam search otherwise."""
    def step(model):
        return speed.translate_step(model, args.beam, max_len_a=0, max_len_b=args.max_new_tokens)
    rows = []
    env = timing.environment(variants["original"].model, device)
    stopwatch, timer = timing.stopwatch_for(device)
    heads = {name: speed.count_heads(v.model) for name, v in variants.items()}
    for b, bs in batches.items():
        for row in timing.time_variants({name: step(v.model) for name, v in variants.items()},
                                       [x.to(device) for x in bs], args.repeats, args.warmup_batches,
                                       synchronize=timing.synchronizer(device), stopwatch=stopwatch,
                                       memory=timing.gpu_memory_meter(device)):
            rows.append({"family": "fsmt", "unit": "sentences", "batch_size": b, **row, "heads": heads[row["variant"]],
                         "heads_total": heads["original"], **env, "timer": timer})
    return pd.DataFrame(rows)


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["bert", "fsmt", "tiny", *LLAMAS], default="bert")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--items", type=int, default=256, help="examples (sentences, windows) per timed run")
    parser.add_argument("--seq-len", type=int, default=128,
                        help="BERT: the authors' max_seq_length; fsmt: source length; Llama: window")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=40,
                        help="fsmt: a random model rarely stops early; Llama: tokens decoded")
    parser.add_argument("--percent", type=float, default=50.0)
    parser.add_argument("--warmup-batches", type=int, default=3)
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    parser.add_argument("--attention", choices=["eager", "sdpa"], default=None,
                        help="default: eager for BERT (as before), sdpa for Llama")
    parser.add_argument("--variants", nargs="+", default=list(speed.DEFAULT_VARIANTS), choices=speed.VARIANTS)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    parser.add_argument("--csv", help="also write the tidy runs here")
    return parser.parse_args(argv)


def build(args, device):
    """(model, family, {(unit,) batch size: batches}) for ``args.model``, on ``device`` in ``args.dtype``."""
    if args.model in LLAMAS:
        model, family = llama_model(args.model, args.attention or "sdpa"), "llama"
    elif args.model == "fsmt":
        model, family = fsmt_model(), "fsmt"
    else:
        model, family = bert_model(args.model, args.attention or "eager"), "bert"
    model = model.to(device=device, dtype=getattr(torch, args.dtype))
    task = speed.task_of(model)
    if task == "lm":
        return model, family, llama_batches(model, args)
    vocab = model.config.vocab_size if task == "classify" else model.config.src_vocab_size
    return model, family, {b: random_batches(task, args.items, b, args.seq_len, vocab) for b in args.batch_sizes}


def main(argv=None):
    args = parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = pick_device(args.device)
    model, family, batches = build(args, device)
    variants, skipped = speed.build_variants(model, None, random_importance(model), args.variants, args.percent,
                                             device)
    # the check on the largest batch of logits: BERT's examples, an LM's prefill (not its decoding prompts)
    largest = batches[max(batches, key=lambda k: k if isinstance(k, int) else (k[0] == "prefill tokens", k[1]))]
    task = speed.task_of(model)
    translate = None if task != "translate" else (lambda m: speed.translate_step(m, args.beam, max_len_a=0,
                                                                              max_len_b=args.max_new_tokens))
    checks = speed.check_variants(variants, [b.to(device) for b in largest[:1]], translate)
    print(f"{args.model}: {', '.join(variants)}; {len(variants['pruned'].removed)} of {len(all_heads(model))} heads "
          f"removed, {args.items} items per run, {timing.device_name(device)}, {torch.get_num_threads()} torch threads, "
          f"{args.dtype}, torch {torch.__version__}" + "".join(f"; {v} skipped: {why}" for v, why in skipped.items()),
          file=sys.stderr)
    start = time.perf_counter()
    settings = speed.SpeedSettings(batch_sizes=args.batch_sizes, repeats=args.repeats, prune_percent=args.percent,
                                   warmup_batches=args.warmup_batches, beam=args.beam,
                                   decode_tokens=args.max_new_tokens, variants=list(variants))
    if task == "translate":
        runs = fsmt_runs(variants, batches, args, device)
    else:
        runs = speed.measure({name: v.model for name, v in variants.items()}, batches, settings, family, device)
    runs.insert(0, "study", f"benchmark_{args.model}")
    summary = table4.summarize(runs, {"prune_percent": args.percent, **checks, "skipped": skipped})
    print(table4.table4_markdown(summary, "random inputs", chosen="at random (seeded)"))
    print(f"timed in {time.perf_counter() - start:.1f} s")
    for unit, table in summary.groupby("unit", sort=False):
        for variant in table4.timed_variants(table):
            for batch_size, ratio in table4.measured_ratio(table, variant).items():
                print(f"{unit}, batch {batch_size}: {variant} / original = {ratio:.3f}")
    if args.csv:
        runs.to_csv(args.csv, index=False)
    return summary


if __name__ == "__main__":
    main()
