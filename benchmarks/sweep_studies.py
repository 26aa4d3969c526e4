"""The studies that benchmarks/ablation_sweep.py times: a finished demo's translation and MNLI-like models, or a
random-weight model built here (BERT-base, WMT transformer-big, or a Llama-layout LM of ``LLAMA_SIZES`` with its
perplexity, retrieval and multiple-choice studies) with a synthetic test set and training split; nothing is
downloaded."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path


def demo_studies(workdir: Path) -> list[dict]:
    """The demo's translation and MNLI-like studies, as a finished demo run left them, evaluated with the
    demo config's variant batch sizes."""
    import yaml

    translation = {"name": "demo_en_fr", "kind": "translation",
                   "folder": workdir / "data/demo/checkpoints/demo_en_fr.model",
                   "source": workdir / "data/demo/testsets/newstest2013.en",
                   "reference": workdir / "data/demo/testsets/newstest2013.fr"}
    mnli = {"name": "mnli", "kind": "classification", "folder": workdir / "results/demo/models/mnli",
            "tsv": workdir / "data/demo/glue/mnli/dev.tsv"}
    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "demo" / "config.yaml").read_text())
    rows = config["ablation"]
    # the masking modes' data (--masking): the demo's importance data, as its head_constants jobs read it
    t, bert = config["translation"], config["bert"]
    translation["importance"] = {
        "kind": "translation", "batch_size": t["importance_batch_size"], "max_items": t.get("max_sentences"),
        "sets": [{"source": workdir / f"data/demo/testsets/{name}.{t['src_lang']}",
                  "reference": workdir / f"data/demo/testsets/{name}.{t['tgt_lang']}"}
                 for name in t["importance_sets"]],
        "name": f"importance sets {'+'.join(t['importance_sets'])}"}
    mnli["importance"] = {"kind": "classification", "tsv": workdir / "data/demo/glue/mnli/train.tsv",
                          "batch_size": bert["finetune"]["batch_size"], "max_length": bert["finetune"]["max_length"],
                          "max_items": bert.get("importance_examples"), "seed": bert["finetune"]["seed"],
                          "name": "MNLI-like train split"}
    for study in (translation, mnli):
        study["variant_batch_size"] = rows.get("variant_batch_size", {}).get(study["kind"], 256)
        for key in ("folder", "source", "reference", "tsv"):
            if key in study and not Path(study[key]).exists():
                raise FileNotFoundError(f"{study[key]}: run the demo in {workdir} first (README)")
    return [translation, mnli]


def random_study(size: str, folder: Path, items: int, seed: int = 0, train_items: int | None = None,
                 train_batch_size: int = 32) -> dict:
    """A random-weight BERT-base or WMT transformer-big in a model folder, with a synthetic test set, and a
    synthetic training split of ``train_items`` items (default: as many as the test set), drawn after the test
    set's, that the masking modes' data are computed on (the study's "importance" entry)."""
    import random

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(2000)]
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) for _ in range(items)]
    train = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) for _ in range(train_items or items)]
    folder.mkdir(parents=True, exist_ok=True)
    if size == "bert-base":
        from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

        vocab = folder / "vocab.txt"
        vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
        tokenizer = BertTokenizer(str(vocab))
        config = BertConfig(vocab_size=30522, num_labels=3, attn_implementation="eager")
        BertForSequenceClassification(config).eval().save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")
        tsv, train_tsv = folder / "dev.tsv", folder / "train.tsv"
        for path, rows in ((tsv, sentences), (train_tsv, train)):
            path.write_text("text_a\ttext_b\tlabel\n"
                            + "".join(f"{s}\t{s[::-1]}\t{i % 3}\n" for i, s in enumerate(rows)))
        return {"name": size, "kind": "classification", "folder": folder / "model", "tsv": tsv,
                "importance": {"kind": "classification", "tsv": train_tsv, "batch_size": train_batch_size,
                               "max_length": 128, "max_items": None, "seed": 0,
                               "name": f"synthetic train split, {len(train)} pairs"}}
    if size == "transformer-big":
        from headprune.models.fairseq import write_fairseq_checkpoint_dir
        from headprune.models.loading import convert_translation_checkpoint
        from transformers import FSMTConfig, FSMTForConditionalGeneration

        tokens = words + [f"x{i}" for i in range(44512 - 4 - len(words))]
        config = FSMTConfig(langs=["en", "fr"], src_vocab_size=44512, tgt_vocab_size=44512, d_model=1024,
                            encoder_layers=6, decoder_layers=6, encoder_attention_heads=16,
                            decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096,
                            max_position_embeddings=1024, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                            decoder_start_token_id=2, tie_word_embeddings=True)
        codes = folder / "bpecodes"
        codes.write_text("#version: 0.2\nw 1\n")
        fairseq_dir = write_fairseq_checkpoint_dir(FSMTForConditionalGeneration(config).eval(), tokens, tokens, codes,
                                                   folder / "fairseq")
        model_folder = convert_translation_checkpoint(fairseq_dir, folder / "model")
        source, reference = folder / "test.en", folder / "test.fr"
        source.write_text("\n".join(sentences) + "\n")
        reference.write_text("\n".join(sentences) + "\n")
        train_source, train_reference = folder / "train.en", folder / "train.fr"
        train_source.write_text("\n".join(train) + "\n")
        train_reference.write_text("\n".join(train) + "\n")
        return {"name": size, "kind": "translation", "folder": model_folder, "source": source, "reference": reference,
                "importance": {"kind": "translation", "sets": [{"source": train_source, "reference": train_reference}],
                               "batch_size": train_batch_size, "max_items": None,
                               "name": f"synthetic train split, {len(train)} sentences"}}
    raise ValueError(f"unknown model size {size!r}")


# Llama-layout sizes (--model): SmolLM-135M's layout, and a toy one for smoke runs and tests
LLAMA_SIZES = {
    "llama-100m": {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                   "num_key_value_heads": 3, "head_dim": 64},
    "llama-tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 16},
}


def llama_studies(folder: Path, args, seed: int = 0) -> list[dict]:
    """A random-weight Llama-layout LM of about 110M parameters in a model folder (SmolLM-135M's layout: hidden
    576, 30 layers of 9 query heads on 3 KV heads, intermediate 1536, tied embeddings, rope; a vocabulary of
    ``--vocab`` byte-level BPE tokens trained here on synthetic text: the model's output layer has them all, the
    tokenizer as many as the text makes; ``--model llama-tiny``: the toy size of ``LLAMA_SIZES``), and its
    studies of ``--scores`` (only those are built): perplexity over ``--windows`` windows of ``--window`` tokens
    of a synthetic corpus, needle-in-a-haystack retrieval on items from ``headprune.data.retrieval.make_items``
    over a synthetic haystack, and a multiple-choice lm-eval task (``multiple_choice_task``). The masking modes'
    data (each study's "importance" entry) are computed on windows of the same synthetic text drawn after the
    test windows (``--constants-items`` of them, default as many): a training split, as a language model's
    importance split is (a retrieval study's, and a task's with ``importance_split: corpus``)."""
    import random

    import numpy as np
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from headprune.data.retrieval import make_items, write_items
    from headprune.evaluation.perplexity import save_windows

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(6000)})
    weights = [1 / (rank + 1) for rank in range(len(words))]  # Zipf-like, as words in text

    def text(sentences: int) -> str:
        out = []
        for _ in range(sentences):
            sentence = " ".join(rng.choices(words, weights, k=rng.randint(5, 20)))
            out.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", ".", "?", "!"])
                       + ("\n" if rng.random() < 0.1 else " "))
        return "".join(out)

    folder.mkdir(parents=True, exist_ok=True)
    model_folder = folder / "model"
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator([text(200) for _ in range(100)], trainers.BpeTrainer(
        vocab_size=args.vocab, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    size = getattr(args, "model", None) or "llama-100m"
    config = LlamaConfig(vocab_size=args.vocab, **LLAMA_SIZES[size], max_position_embeddings=2048,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=0,
                         eos_token_id=0, pad_token_id=0, attn_implementation="eager")
    model = LlamaForCausalLM(config).eval()
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(model_folder)
    fast.save_pretrained(model_folder)
    del model

    scores = getattr(args, "scores", ["language_modeling", "retrieval", "lm_eval"])
    windows, train_windows = folder / "windows.npy", folder / "train_windows.npy"
    # every word is a token or more, and a sentence 5-20 words: text enough for the windows
    save_windows(fast, text(args.windows * args.window // 5), args.window, windows)
    np.save(windows, np.load(windows)[:args.windows])
    haystack = text(max(args.context_lengths) // 3)  # drawn in any case: the text after it stays the same
    items = folder / "items.jsonl"
    if "retrieval" in scores:
        write_items(make_items(fast, haystack, context_lengths=args.context_lengths, depths=args.depths,
                               needles_per_setting=args.needles, seed=seed,
                               answer_prefix="The special magic number is"), items)
    task = multiple_choice_task(folder / "task", fast, text, args, rng) if "lm_eval" in scores else None
    train_count = getattr(args, "constants_items", None) or args.windows
    save_windows(fast, text(train_count * args.window // 5 + 50), args.window, train_windows)
    np.save(train_windows, np.load(train_windows)[:train_count])
    importance = {"kind": "language_modeling", "windows": train_windows, "max_items": None,
                  "batch_size": getattr(args, "constants_batch_size", None) or 4,
                  "name": f"synthetic train split, {train_count} windows of {args.window} tokens"}
    share = output_layer_share(model_folder, args.window, args.threads, args.device)
    params = f"{params / 1e6:.0f}M parameters" if params >= 1e6 else f"{params / 1e3:.0f}k parameters"
    base = {"folder": model_folder, "params": f"{params}, vocabulary {args.vocab}", "importance": importance,
            "output_layer": f"output layer {100 * share['time']:.0f}% of a {args.window}-token forward pass's time, "
                            f"{100 * share['flops']:.0f}% of its multiply-adds"}
    studies = [{"name": f"{size} perplexity", "kind": "language_modeling", "windows": windows, **base},
               {"name": f"{size} retrieval", "kind": "retrieval", "items": items,
                "max_new_tokens": args.max_new_tokens, **base},
               {"name": f"{size} multiple choice", "kind": "lm_eval", "task": task,
                "hflm_batch_size": args.hflm_batch_size, **base}]
    return [study for study in studies if study["kind"] in scores]


MC_TASK = """\
# lm-evaluation-harness task: which words go on from the passage (multiple choice; random weights: a meaningless score)
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {test}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{passage}}}}\\nQuestion: Which words come next?\\nAnswer:"
doc_to_target: "{{{{label}}}}"
doc_to_choice: "{{{{choices}}}}"
target_delimiter: " "
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""


def multiple_choice_task(folder: Path, tokenizer, text, args, rng) -> Path:
    """A local lm-eval task YAML (``dataset_path: json``, as a user without hub access writes one; the demo's
    headprune.demo.lm_task is the same kind) of ``--questions`` questions: a passage of ``--passage`` tokens of
    the synthetic text, then ``--choices`` endings of 2-8 words each (HellaSwag's shape: a shared context, a
    few multi-token endings), no few-shot examples."""
    folder.mkdir(parents=True, exist_ok=True)
    # lm-eval reads the data through datasets: offline, cached beside the task (the workers inherit these)
    for name, value in (("HF_DATASETS_OFFLINE", "1"), ("HF_HUB_OFFLINE", "1"), ("HF_DATASETS_CACHE", folder / "cache")):
        os.environ.setdefault(name, str(value))
    rows = []
    for _ in range(args.questions):
        ids = tokenizer(text(args.passage // 4 + 8))["input_ids"][:args.passage]
        endings = [" ".join(text(2).split()[:rng.randint(2, 8)]) for _ in range(args.choices)]
        rows.append({"passage": tokenizer.decode(ids).strip(), "choices": endings,
                     "label": rng.randrange(args.choices)})
    data = folder / "bench_mc.test.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = folder / "bench_mc.yaml"
    task.write_text(MC_TASK.format(name="bench_mc", test=json.dumps(str(data))))
    return task


def output_layer_share(model_folder: Path, tokens: int, threads: int, device: str) -> dict:
    """The output layer's share of one forward pass of ``tokens`` tokens (one row): of its time (the body and
    the output layer timed apart on ``device``, median of 3, ``threads`` torch threads) and of its multiply-adds (the
    projections, the MLP, attention's scores and sums, the output layer). Every perplexity variant computes the
    output layer whole; an lm-eval choice only at its continuation's positions."""
    import torch

    from headprune.models.loading import attention_backend, load_causal_lm

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model, _ = load_causal_lm(model_folder, device=device)
        config = model.config
        ids = torch.randint(1, config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0)).to(device)
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        body, head = [], []
        with torch.no_grad(), attention_backend(model, "sdpa"):
            for _ in range(4):
                sync()
                began = time.perf_counter()
                hidden = model.model(input_ids=ids).last_hidden_state
                sync()
                middle = time.perf_counter()
                model.lm_head(hidden)
                sync()
                body.append(middle - began)
                head.append(time.perf_counter() - middle)
        body, head = sorted(body[1:])[1], sorted(head[1:])[1]
        layer_params = sum(p.numel() for name, p in model.model.layers.named_parameters() if p.dim() == 2)
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        attention = config.num_hidden_layers * heads * head_dim * tokens  # per token: scores and sums, causal (1/2 x 2)
        output = config.vocab_size * config.hidden_size
        del model
    finally:
        torch.set_num_threads(before)
    return {"time": head / (body + head), "flops": output / (layer_params + attention + output)}
