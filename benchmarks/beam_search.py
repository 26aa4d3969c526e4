"""What the beam search's decoding paths cost, paired in one process: translations of several gate variants
(headprune.evaluation.runs.run_variants, as the ablation and pruning jobs run them) three ways, round robin:

    transformers  the cache transformers' beam search keeps: concatenate each step, then reorder (two copies)
    beam layer    models/beam_cache.BeamLayer: time-major buffers, one copy per step
    beam step     and FSMT's own step (FSMTAdapter.beam_decoding): a sentence's beams attend to one copy of
                  its source's keys and values in one matrix product

It prints each path's CPU seconds (the minimum over the rounds, and all of them), the ratios to the first path,
and whether the three gave the same translations (they should).

    python benchmarks/beam_search.py --demo results/demo-run      # a finished demo's model and newstest2013
    python benchmarks/beam_search.py --d-model 512 --layers 6 --heads 8 --sentences 64   # random FSMT weights
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

from headprune.evaluation.runs import EvalSet, EvalSettings, all_heads, gates_without, run_variants
from headprune.models.beam_cache import SourceSharingCache
from headprune.models.families.fsmt import FSMTAdapter
from headprune.models.heads import HeadAdapter

PATHS = ("transformers", "beam layer", "beam step")


def demo_model(folder: Path):
    from headprune.models.loading import load_model

    model, tokenizer = load_model(str(folder / "data/demo/checkpoints/demo_en_fr.model"))
    testsets = folder / "data/demo/testsets"
    sources = (testsets / "newstest2013.en").read_text().splitlines()
    references = (testsets / "newstest2013.fr").read_text().splitlines()
    return model, tokenizer, sources, references


def random_model(d_model: int, layers: int, heads: int, sentences: int, seed: int = 0):
    """A random-weight FSMT with a digit vocabulary; its 'sentences' are random digit strings (it babbles, which
    costs what long outputs cost)."""
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    torch.manual_seed(seed)
    vocab = 1000
    config = FSMTConfig(langs=["en", "fr"], src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=d_model,
                        encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
                        decoder_attention_heads=heads, encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model,
                        max_position_embeddings=512, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                        decoder_start_token_id=2, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    model = FSMTForConditionalGeneration(config).eval()
    rng = random.Random(seed)
    sources = [" ".join(str(rng.randrange(4, vocab)) for _ in range(rng.randrange(8, 30))) for _ in range(sentences)]
    return model, _DigitTokenizer(), sources, sources


class _DigitTokenizer:
    """Token ids written as numbers, enough for translate_variants."""

    def __call__(self, texts, padding=True, truncation=True, max_length=1024, return_tensors="pt"):
        rows = [[int(t) for t in text.split()] + [2] for text in texts]
        width = max(map(len, rows))
        ids = torch.tensor([row + [1] * (width - len(row)) for row in rows])
        return _Batch(input_ids=ids, attention_mask=(ids != 1).long())

    def batch_decode(self, rows, skip_special_tokens=True):
        return [" ".join(str(t) for t in row.tolist() if t > 3) for row in rows]


class _Batch(dict):
    def to(self, device):
        return _Batch({k: v.to(device) for k, v in self.items()})


def use(path: str, originals: dict) -> None:
    FSMTAdapter.beam_decoding = originals["step"] if path == "beam step" else HeadAdapter.beam_decoding
    SourceSharingCache.for_beam_search = originals["layer"] if path != "transformers" else SourceSharingCache.for_model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, help="a folder where the demo ran")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--variants", type=int, default=12, help="gate settings, 0, 2, 4, ... heads masked")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--variant-batch-size", type=int, default=600, help="rows of one search (the demo's)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.demo:
        model, tokenizer, sources, references = demo_model(args.demo)
    else:
        model, tokenizer, sources, references = random_model(args.d_model, args.layers, args.heads, args.sentences)
    sources, references = sources[:args.sentences], references[:args.sentences]
    evalset = EvalSet("translation", references, sources, "bleu")
    heads, rng = all_heads(model), random.Random(0)
    gates_list = [gates_without(model, rng.sample(heads, min(k, len(heads) - 1)))
                  for k in range(0, 2 * args.variants, 2)]
    settings = EvalSettings(batch_size=100, beam=args.beam, progress=False, variant_batch_size=args.variant_batch_size)
    originals = {"step": FSMTAdapter.beam_decoding, "layer": SourceSharingCache.for_beam_search}
    seconds: dict[str, list[float]] = {path: [] for path in PATHS}
    outputs = {}
    try:
        run_variants(model, tokenizer, evalset, gates_list[:1], settings)  # warm-up
        for _ in range(args.rounds):
            for path in PATHS:
                use(path, originals)
                started = time.process_time()
                outputs[path] = run_variants(model, tokenizer, evalset, gates_list, settings)
                seconds[path].append(time.process_time() - started)
    finally:
        use("beam step", originals)
    base = min(seconds[PATHS[0]])
    print(f"{len(gates_list)} gate settings x {len(sources)} sentences, beam {args.beam}, "
          f"{args.variant_batch_size} rows a search; CPU seconds, min of {args.rounds} rounds (all rounds)")
    for path in PATHS:
        print(f"  {path:13s} {min(seconds[path]):7.2f} s  x{min(seconds[path]) / base:5.2f}   "
              f"({', '.join(f'{s:.2f}' for s in seconds[path])})")
    same = outputs[PATHS[0]] == outputs[PATHS[1]] == outputs[PATHS[2]]
    print("the same translations on every path:", same)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
