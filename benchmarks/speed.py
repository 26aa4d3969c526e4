"""Table 4 without the pipeline: time a BERT-base-sized (or WMT transformer-big-sized) model with half of
its heads physically removed against the full model, and print the measured ratios.

Random weights and random token ids (nothing is downloaded); the heads removed are a seeded random
half, as the speed does not depend on which heads go (only on how many per layer). The harness is
the pipeline's own (headprune.experiments.speed), so the numbers are measured the same way as Table 4's.

    python benchmarks/speed.py                       # BERT-base, seq 128, batch sizes 1 4 16 64, on the GPU if any
    python benchmarks/speed.py --model fsmt --items 64 --batch-sizes 1 16 64
    python benchmarks/speed.py --model tiny --device cpu   # seconds, for a smoke test
"""
from __future__ import annotations

import argparse
import random
import sys
import time

import pandas as pd
import torch

from headprune.experiments import speed
from headprune.experiments.runs import all_heads
from headprune.models.loading import pick_device

SIZES = {
    # bert-base-uncased: 12 layers x 12 heads, hidden 768 (the paper's Table 4)
    "bert": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
}


def bert_model(size: str):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=30522, num_labels=3, attn_implementation="eager", **SIZES[size])
    return BertForSequenceClassification(config).eval()


def fsmt_model():
    """fairseq's WMT14 en-fr transformer big: 6+6 layers x 16 heads, d_model 1024, ffn 4096."""
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    config = FSMTConfig(langs=["en", "fr"], src_vocab_size=44512, tgt_vocab_size=44512, d_model=1024,
                        encoder_layers=6, decoder_layers=6, encoder_attention_heads=16, decoder_attention_heads=16,
                        encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024, pad_token_id=1,
                        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, tie_word_embeddings=True)
    return FSMTForConditionalGeneration(config).eval()


def random_batches(family: str, items: int, batch_size: int, seq_len: int, vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for start in range(0, items, batch_size):
        n = min(batch_size, items - start)
        ids = torch.randint(5, vocab, (n, seq_len), generator=g)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if family == "bert":
            inputs["token_type_ids"] = torch.zeros_like(ids)
        else:
            ids[:, -1] = 2  # </s>
        batches.append(speed.Batch(inputs, n))
    return batches


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["bert", "fsmt", "tiny"], default="bert")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--items", type=int, default=256, help="examples (sentences) per timed run")
    parser.add_argument("--seq-len", type=int, default=128, help="BERT: the authors' max_seq_length; fsmt: source length")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=40, help="fsmt: a random model rarely stops early")
    parser.add_argument("--percent", type=float, default=50.0)
    parser.add_argument("--warmup-batches", type=int, default=3)
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    parser.add_argument("--csv", help="also write the tidy runs here")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = pick_device(args.device)
    family = "fsmt" if args.model == "fsmt" else "bert"
    model = fsmt_model() if family == "fsmt" else bert_model(args.model)
    model = model.to(device=device, dtype=getattr(torch, args.dtype))
    heads = all_heads(model)
    removed = random.Random(0).sample(heads, int(round(args.percent * len(heads) / 100)))
    pruned = speed.pruned_copy(model, removed)
    vocab = model.config.vocab_size if family == "bert" else model.config.src_vocab_size
    batches = {b: random_batches(family, args.items, b, args.seq_len, vocab) for b in args.batch_sizes}
    settings = speed.SpeedSettings(batch_sizes=args.batch_sizes, repeats=args.repeats, prune_percent=args.percent,
                                   warmup_batches=args.warmup_batches, beam=args.beam)
    check = speed.check_pruned_equals_gated(model, pruned, removed, [b.to(device) for b in batches[max(batches)][:1]],
                                            family, None if family == "bert" else
                                            (lambda m: speed.translate_step(m, args.beam, max_len_a=0,
                                                                            max_len_b=args.max_new_tokens)))
    print(f"{args.model}: {len(removed)} of {len(heads)} heads removed, {args.items} items per run, "
          f"{speed.device_name(device)}, {torch.get_num_threads()} torch threads, {args.dtype}, torch {torch.__version__}",
          file=sys.stderr)
    start = time.perf_counter()
    if family == "fsmt":
        # a fixed output length (random weights), the pipeline's beam search otherwise
        original_step = speed.translate_step(model, args.beam, max_len_a=0, max_len_b=args.max_new_tokens)
        pruned_step = speed.translate_step(pruned, args.beam, max_len_a=0, max_len_b=args.max_new_tokens)
        rows = []
        env = speed.environment(model, device)
        for b, bs in batches.items():
            for row in speed.time_variants({"original": original_step, "pruned": pruned_step},
                                           [x.to(device) for x in bs], args.repeats, args.warmup_batches,
                                           synchronize=speed.synchronizer(device)):
                rows.append({"family": family, "unit": "sentences", "batch_size": b, **row,
                             "heads": len(heads) - (len(removed) if row["variant"] == "pruned" else 0),
                             "heads_total": len(heads), **env})
        runs = pd.DataFrame(rows)
    else:
        runs = speed.measure(model, pruned, batches, settings, family, device)
    runs.insert(0, "study", f"benchmark_{args.model}")
    facts = {"heads_pruned": len(removed), "prune_percent": args.percent, **check}
    summary = speed.summarize(runs, facts)
    print(speed.table4_markdown(summary, "random inputs", chosen="at random (seeded)"))
    print(f"timed in {time.perf_counter() - start:.1f} s")
    for batch_size, ratio in speed.measured_ratio(summary).items():
        print(f"batch {batch_size}: pruned / original = {ratio:.3f}")
    if args.csv:
        runs.to_csv(args.csv, index=False)
    return summary


if __name__ == "__main__":
    main()
