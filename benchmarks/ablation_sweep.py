"""What the single-head ablation sweep costs against the work it does, from one run on one machine.

    (a) one full-model evaluation of the test set, in a warm process (the unit of real work; median of 3);
    (b) the sweep over all N heads, one process per head (load the model, evaluate one head);
    (c) the sweep as the pipeline runs it: one process per job of ``--heads-per-job`` heads, each
        loading the model folder once and evaluating its heads in batched gate variants
        (headprune.experiments.runs.run_variants, as scripts/evaluate.py does); with ``--warm-start``
        also (c'), the same jobs forked from a warm server (headprune.warm, config ``warm_start``), as
        the demo runs them;

and the ratios b / (N a) and c / (N a): how much the sweep costs beyond N evaluations. (b) and (c)
time whole processes (start, imports, load, evaluation), as a job on a cluster pays them. With
``--sample`` only that many processes of each kind run, spread evenly over the heads and jobs (a head's
variant recomputes the layers from its own up, so the first jobs are the dearest), and their mean is
scaled to the whole sweep; each sampled job's line gives its layers, its time split and its cost per head.

    python benchmarks/ablation_sweep.py --demo results/demo-run        # a finished demo's models, CPU
    python benchmarks/ablation_sweep.py --model bert-base --device cuda --sample 8
    python benchmarks/ablation_sweep.py --model transformer-big --device cuda --sample 8
    python benchmarks/ablation_sweep.py --model llama-100m --heads-per-job 30 --sample 3 \
        --variant-batch-size language_modeling=4 retrieval=32 lm_eval=64   # perplexity, retrieval, multiple choice
    python benchmarks/ablation_sweep.py --model llama-100m --vocab 128256 --scores language_modeling \
        --heads-per-job 90 --sample 1 --variant-batch-size language_modeling=4   # Llama-3's vocabulary

``--demo DIR`` reads the demo's translation model folder and newstest2013 and its fine-tuned
MNLI-like model and dev set from a directory where the demo ran; ``--model`` builds a random-weight
model of that size with a synthetic vocabulary (nothing is downloaded), so the numbers measure the
machinery, not the model. ``llama-100m`` is a Llama-layout LM of SmolLM-135M's shape (30 layers of 9
query heads on 3 KV heads, N = 270) with an 8k vocabulary (``--vocab``: SmolLM's 49152 or Llama-3's 128256
for a real output layer; its share of a forward pass is printed), timed on three studies: perplexity over
512-token windows, needle-in-a-haystack retrieval (contexts of 512 and 1024 tokens, 16 greedy tokens per
answer: a random model never emits EOS, so every answer decodes all of them), and a multiple-choice
lm-evaluation-harness task (kind lm_eval: a local task YAML of ``--questions`` passages of ``--passage``
tokens with ``--choices`` endings each; HellaSwag's shape). For the task, (a) is one evaluation of the full
model by lm-eval itself (``simple_evaluate`` with its own ``HFLM`` over the loaded model, ``--hflm-batch-size``):
what a user running lm-eval once per head pays per head; the pipeline's own full evaluation is printed beside it.
``--model llama-tiny`` is the same layout at a toy size (2 layers of 4 query heads on 2 KV heads), for smoke runs.

``--masking MODE [MODE ...]`` (issue #32; default ``zero`` alone) times (a) and (c) under each masking mode
(headprune.models.masking) on the same study in one run, zero always among them as the reference, and prints per
mode a, c/(N a) and the mode's c over zero's c (and its jobs' evaluation time over zero's, which leaves out the
process start that both pay alike). For mean, optimal and resample it first computes the study's data as the
pipeline's head_constants job does (headprune.scoring.constants on data that is not the test set: the demo's
importance sets and MNLI training split; for ``--model``, a separate synthetic training split of the test set's
size, ``--constants-items``), timed in this process with ``--threads`` threads and printed in units of a: the
mean's one pass, the optimal constants' statistics pass and ``--optimal-steps`` Adam steps (seconds a step), the
resample pool's pass. The jobs read the files as the pipeline's do (EvalSettings masking, constants, pool).

    python benchmarks/ablation_sweep.py --model llama-100m --scores language_modeling --windows 2 --window 128 \
        --heads-per-job 27 --sample 1 --skip-b --masking zero mean optimal resample --optimal-steps 10
"""
from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the imports: a worker's time includes them, as a job's does

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402


# --------------------------------------------------------------------------- test sets and models


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
    from headprune.experiments.perplexity import save_windows

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


# --------------------------------------------------------------------------- one job, as the pipeline runs it


def worker(study: dict, heads: list[str], device: str, threads: int, batch_size: int, variant_batch_size: int,
           warm: bool = False, paired: bool = False, scores: bool = False) -> dict:
    """Load the model folder and evaluate each head off (or the full model) in one pass; times in seconds.
    ``warm``: evaluate once untimed first (caches, lazy initialization), then time three runs and report
    their median (a full-model evaluation of the demo's models takes 0.1-0.5 s: one run is noisy).
    ``paired``: then time one full-model evaluation too (``a_here``: a measured beside the job's own work, in
    the same process and minute, for a ratio that other work on a shared machine moves less). The study's
    "masking" (and "constants" or "pool", the files of ``mode_data``) is how a head is switched off, as the
    pipeline's EvalSettings say it; ``scores``: also report each variant's score, untimed (for tests)."""
    import torch

    from headprune.experiments.runs import EvalSet, EvalSettings, gates_without, parse_head_name, run_variants
    from headprune.models.loading import load_causal_lm, load_classifier, load_translation
    from headprune.workflow import keep_freed_memory

    keep_freed_memory()  # as every pipeline job does (headprune.workflow.logged)
    torch.set_num_threads(threads)
    loaded = time.perf_counter()
    if study["kind"] == "translation":
        model, tokenizer = load_translation(study["folder"], device=device)
        from headprune.data.datasets import read_lines

        evalset = EvalSet("translation", read_lines(study["reference"]), read_lines(study["source"]), "bleu")
    elif study["kind"] in ("language_modeling", "retrieval", "lm_eval"):  # as workflow.load_evalset reads them
        model, tokenizer = load_causal_lm(study["folder"], device=device)
        if study["kind"] == "lm_eval":  # the task's requests built by lm-eval (headprune.experiments.lm_tasks)
            from headprune.experiments.kinds import kind_of

            evalset = kind_of("lm_eval").load_evalset({"kind": "lm_eval", "task": str(study["task"]),
                                                       "num_fewshot": 0, "limit": None, "fewshot_seed": 1234,
                                                       "metric": "acc"})
        elif study["kind"] == "language_modeling":
            from headprune.experiments.perplexity import load_windows

            chunks = load_windows(study["windows"])
            evalset = EvalSet("language_modeling", chunks, chunks, "perplexity")
        else:
            from headprune.data.retrieval import read_items

            items = read_items(study["items"])
            evalset = EvalSet("retrieval", [item["value"] for item in items], items, "retrieval")
    else:
        model, tokenizer = load_classifier(study["folder"], device=device)
        from headprune.data.glue import read_glue_split

        pairs, labels = read_glue_split(study["tsv"])
        evalset = EvalSet("classification", labels, pairs, "accuracy")
    evaluated = time.perf_counter()
    gates = [None if head == "full" else gates_without(model, [parse_head_name(head)]) for head in heads]
    settings = EvalSettings(batch_size=batch_size, variant_batch_size=int(study.get("variant_batch_size",
                                                                                  variant_batch_size)),
                            **({"max_new_tokens": int(study["max_new_tokens"])} if "max_new_tokens" in study else {}),
                            masking=study.get("masking", "zero"))
    # one full-model evaluation, as a: the pipeline's own; for an lm-eval task, lm-eval's own HFLM
    full = functools.partial(hflm_evaluation, study, model, tokenizer) if study["kind"] == "lm_eval" else \
        functools.partial(run_variants, model, tokenizer, evalset, [None], settings)
    if warm:
        def median_of_3(run) -> tuple[float, float]:
            run()  # untimed: caches, lazy initialization
            times, cpu = [], []
            for _ in range(3):
                began, began_cpu = time.perf_counter(), time.process_time()
                run()
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - began)
                cpu.append(time.process_time() - began_cpu)
            return sorted(times)[1], sorted(cpu)[1]

        wall, cpu = median_of_3(full)
        report = {"start": loaded - STARTED, "load": evaluated - loaded, "eval": wall, "eval_cpu": cpu,
                  "variants": len(gates), "heads": heads}
        if study["kind"] == "lm_eval":  # beside it, the project's own full evaluation (its requests batched)
            report["own"], report["own_cpu"] = median_of_3(
                functools.partial(run_variants, model, tokenizer, evalset, gates, settings))
        return report
    evaluated_cpu = time.process_time()
    outputs = run_variants(model, tokenizer, evalset, gates, settings)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    done, done_cpu = time.perf_counter(), time.process_time()
    report = {"start": loaded - STARTED, "load": evaluated - loaded, "eval": done - evaluated,
              "eval_cpu": done_cpu - evaluated_cpu, "variants": len(outputs), "heads": heads}
    if paired:
        full()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        report["a_here"], report["a_here_cpu"] = time.perf_counter() - done, time.process_time() - done_cpu
    if scores:
        from headprune.experiments.runs import score

        report["scores"] = [score(evalset, out, settings.bleu) for out in outputs]
    return report


def hflm_evaluation(study: dict, model, tokenizer) -> dict:
    """One evaluation of the full model on the study's lm-eval task by lm-eval itself, as a user runs it on a
    loaded model: ``simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=...))``, in sdpa
    attention (transformers' default, and the pipeline's for log-likelihoods). Not counted: indexing the task
    folder (once per process; lm-eval's command line indexes its ~15,000 task files, 10-40 s, on every run)
    and simple_evaluate's report of the environment (``pip list`` in a subprocess, about 5 s a call)."""
    import lm_eval.evaluator
    from lm_eval.models.huggingface import HFLM

    from headprune.experiments.lm_tasks import _quiet_lm_eval, _task_manager
    from headprune.models.loading import attention_backend

    lm_eval.evaluator.add_env_info = lambda results: None
    task = Path(study["task"])
    manager = _task_manager(str(task.parent), False)
    with _quiet_lm_eval(), attention_backend(model, "sdpa"):
        return lm_eval.evaluator.simple_evaluate(
            model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=int(study["hflm_batch_size"])),
            tasks=[str(task)], task_manager=manager, num_fewshot=0, bootstrap_iters=0)


def worker_study(study: dict) -> dict:
    """The study as a worker process gets it (JSON, every value a string but the masking's fields): without the
    modes' training data."""
    return {key: value if key == "masking" else str(value) for key, value in study.items()
            if key != "importance" and value is not None}


def run_worker(study: dict, heads: list[str], args, warm: bool = False, forked: bool = False,
               paired: bool = False) -> tuple[float, dict]:
    """Wall time of one worker process (``forked``: one that hands its work to the warm server), and what it
    reported, with the process's CPU time (user and system) as "cpu"; with ``paired``, its full-model
    evaluation after the job's (``worker``) is not counted. (A forked worker's CPU time is its child's in
    the warm server, which this process does not see: only its wall time is comparable.)"""
    command = [sys.executable, __file__, "--worker", json.dumps(worker_study(study)),
               "--heads", "+".join(heads), "--device", args.device, "--threads", str(args.threads),
               "--batch-size", str(args.batch_size), "--variant-batch-size", str(args.variant_batch_size)] \
        + (["--warm"] if warm else []) + (["--forked"] if forked else []) + (["--paired"] if paired else [])
    began, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wall, after = time.perf_counter() - began, resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"worker failed:\n{result.stderr[-3000:]}")
    report = json.loads(result.stdout.strip().splitlines()[-1])
    report["cpu"] = (after.ru_utime - children.ru_utime + after.ru_stime - children.ru_stime
                     - report.get("a_here_cpu", 0.0))
    return wall - report.get("a_here", 0.0), report


def spread(items: list, k: int) -> list:
    """``k`` of the items (all when k is 0 or at least their number), evenly spread: the middle one of each of k
    equal stretches. A job's cost depends on its heads' layers (a variant recomputes the layers from its head's
    up), so a sample of the first jobs only would be the dearest ones."""
    if not k or k >= len(items):
        return list(items)
    return [items[int((i + 0.5) * len(items) / k)] for i in range(k)]


def layer_range(heads: list[str]) -> str:
    from headprune.experiments.runs import parse_head_name

    layers = sorted({parse_head_name(head)[1] for head in heads if head != "full"})
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"


def load_model(study: dict, device: str):
    """(model, tokenizer) of a study's model folder, as the worker loads it."""
    from headprune.models.loading import load_causal_lm, load_classifier, load_translation

    load = {"translation": load_translation, "language_modeling": load_causal_lm, "retrieval": load_causal_lm,
            "lm_eval": load_causal_lm}.get(study["kind"], load_classifier)
    return load(study["folder"], device=device)


# --------------------------------------------------------------------------- masking modes (--masking, issue #32)



class _TimedSteps(list):
    """``optimal_constants``'s history, each step's entry stamped with the time it ended."""

    def append(self, entry):
        super().append({**entry, "time": time.perf_counter(), "cpu": time.process_time()})


def mode_data(study: dict, modes: list[str], folder: Path, device: str = "cpu", threads: int = 1,
              optimal: dict | None = None, resample_items: int = 64) -> dict:
    """The data of the modes among ``modes`` that need some (mean and optimal: a HeadConstants file, resample: a
    ResamplePool file), computed as the pipeline's head_constants job computes them (scripts/head_constants.py:
    headprune.scoring.constants on the batches of the study's "importance" entry, a kind's importance data,
    never its test set) in this process with ``threads`` torch threads, each timed apart. ``optimal``: the
    optimal constants' steps, lr, repeats and seed (config ``constants.optimal``; its defaults where left out).
    Returns per mode {"path", "seconds", "cpu"} (optimal also "steps", "per_step": the seconds of one step, and
    "before_steps": its statistics pass), and "load" (seconds to load the model and build the batches),
    "batches" and "data" (what the batches are). Nothing for modes that need no data."""
    import importlib
    import inspect

    import torch

    from headprune.experiments.kinds import kind_of
    from headprune.models.masking import MODES
    from headprune.scoring.constants import DEFAULT_LR, DEFAULT_STEPS

    wanted = [mode for mode in modes if MODES[mode].data]
    if not wanted:
        return {}
    optimal = {"steps": DEFAULT_STEPS, "lr": DEFAULT_LR, "repeats": 1, "seed": 0, **(optimal or {})}
    settings = {**optimal, "items": resample_items}  # each mode's data_options take theirs
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        began = time.perf_counter()
        model, tokenizer = load_model(study, device)
        spec = study["importance"]
        batches = kind_of(spec["kind"]).importance_batches(tokenizer, spec, model)
        described = f"{spec.get('name', spec['kind'])} ({len(batches)} batches)"
        made = {"load": time.perf_counter() - began, "batches": len(batches), "data": described}
        folder.mkdir(parents=True, exist_ok=True)
        for mode in wanted:
            history = _TimedSteps()
            sync()
            began, began_cpu = time.perf_counter(), time.process_time()
            module, function = MODES[mode].data_maker.split(":")  # as scripts/head_constants.py calls it
            make = getattr(importlib.import_module(module), function)
            steps_seen = {"history": history} if "history" in inspect.signature(make).parameters else {}
            data = make(model, batches, data=described, device=device, progress=False,
                        **MODES[mode].data_options(settings), **steps_seen)
            sync()
            ended = time.perf_counter()
            path = folder / f"{mode}.safetensors"
            data.save(path)
            entry = {"path": path, "seconds": ended - began, "cpu": time.process_time() - began_cpu}
            if steps_seen:  # a mode whose data is learned step by step (optimal)
                steps = len(history)
                # a step's time from the steps after the first (the first follows the statistics pass): with one
                # step, the whole less the mean's pass (the same statistics pass), where it was timed
                if steps > 1:
                    per_step = (history[-1]["time"] - history[0]["time"]) / (steps - 1)
                    per_step_cpu = (history[-1]["cpu"] - history[0]["cpu"]) / (steps - 1)
                else:
                    per_step = entry["seconds"] - made.get("mean", {}).get("seconds", 0.0) if steps else 0.0
                    per_step_cpu = entry["cpu"] - made.get("mean", {}).get("cpu", 0.0) if steps else 0.0
                rows = int(next(value for value in batches[0].values() if torch.is_tensor(value)).shape[0])
                entry.update(steps=steps, per_step=per_step, per_step_cpu=per_step_cpu,
                             before_steps=entry["seconds"] - steps * per_step,
                             rows=rows * int(optimal["repeats"]),
                             loss=(history[0]["loss"], history[-1]["loss"]) if history else None)
            made[mode] = entry
        del model
    finally:
        torch.set_num_threads(before)
    return made


def masked(study: dict, mode: str, data: dict) -> dict:
    """The study as a worker evaluates it under masking ``mode``, with its data file from ``mode_data``."""
    from headprune.models.masking import MODES

    data_file = MODES[mode].data
    return {**study, "masking": {"word": mode, **({data_file: str(data[mode]["path"])} if data_file else {})}}


def sweep(study: dict, args, time_b: bool = True) -> dict:
    import torch

    from headprune.experiments.runs import all_heads, head_name

    model, _ = load_model(study, args.device)
    heads = [head_name(h) for h in all_heads(model)]
    del model
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    n = len(heads)

    # (a) the full model once, in a warm process
    full = run_worker(study, ["full"], args, warm=True)[1]
    # (b) one process per head (a sample spread over the layers)
    one = [] if getattr(args, "skip_b", False) or not time_b else \
        [run_worker(study, [head], args) for head in spread(heads, args.sample)]
    b = sum(wall for wall, _ in one) / len(one) * n if one else None
    b_cpu = sum(report["cpu"] for _, report in one) / len(one) * n if one else None
    # (c) the pipeline's jobs: heads_per_job heads each, evaluated in batched variants
    pipeline = []
    for forked in ([False, True] if args.warm_start else [False]):
        if forked:  # the server's own start is paid once per run, by the first job: not timed here
            run_worker(study, heads[:1], args, forked=True)
        for k in args.heads_per_job:
            jobs = [heads[i:i + k] for i in range(0, n, k)]
            # each job --repeats times, its median wall time kept: a demo job takes about a second, and one
            # run of it on a shared machine can be off by a third; each also times a full-model evaluation
            # after its own work (paired: a measured in the same process and minutes)
            timed = [sorted((run_worker(study, job, args, forked=forked, paired=True) for _ in range(args.repeats)),
                            key=lambda timing: timing[0])[args.repeats // 2] for job in spread(jobs, args.sample)]
            pipeline.append({"c": sum(wall for wall, _ in timed) / len(timed) * len(jobs), "jobs": len(jobs),
                             "c_cpu": sum(report["cpu"] for _, report in timed) / len(timed) * len(jobs),
                             "paired": sum(wall for wall, _ in timed)
                             / sum(len(report["heads"]) * report["a_here"] for _, report in timed),
                             "paired_cpu": sum(report["cpu"] for _, report in timed)
                             / sum(len(report["heads"]) * report["a_here_cpu"] for _, report in timed),
                             "heads_per_job": k, "measured": len(timed), "load": timed[-1][1]["load"],
                             "eval": timed[-1][1]["eval"], "forked": forked,
                             "sampled": [{"wall": wall, **report} for wall, report in timed]})
    return {"study": study["name"], "heads": n, "a": full["eval"], "a_cpu": full["eval_cpu"], "b": b, "b_cpu": b_cpu,
            "b_measured": len(one), "pipeline": pipeline,
            **({"own": full["own"], "own_cpu": full["own_cpu"]} if "own" in full else {})}


def variant_batch_sizes(values: list[str]) -> tuple[int, dict]:
    """--variant-batch-size: a plain number (every kind), and/or KIND=NUMBER for one kind."""
    default, by_kind = 256, {}
    for value in values:
        kind, _, number = value.rpartition("=")
        if kind:
            by_kind[kind] = int(number)
        else:
            default = int(number)
    return default, by_kind


def main():
    from headprune.models.masking import MASKING_WORDS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, help="a directory where the demo ran")
    parser.add_argument("--model", choices=["bert-base", "transformer-big", *LLAMA_SIZES],
                        help="a random-weight model of this size (llama-100m: three studies, perplexity, retrieval and "
                             "multiple choice; llama-tiny: the same at a toy size)")
    parser.add_argument("--items", type=int, default=64, help="test items of the random model's test set")
    llama = parser.add_argument_group("llama-100m")
    llama.add_argument("--vocab", type=int, default=8192,
                       help="vocabulary size: the output layer's rows (byte-level BPE, tied embeddings; real ones: "
                            "49152 as SmolLM2, 128256 as Llama-3)")
    llama.add_argument("--windows", type=int, default=4, help="perplexity windows")
    llama.add_argument("--window", type=int, default=512, help="tokens per perplexity window")
    llama.add_argument("--context-lengths", type=int, nargs="+", default=[512, 1024], help="retrieval contexts")
    llama.add_argument("--depths", type=float, nargs="+", default=[25, 75], help="retrieval needle depths (%%)")
    llama.add_argument("--needles", type=int, default=2, help="retrieval items per (context length, depth)")
    llama.add_argument("--max-new-tokens", type=int, default=16, help="retrieval: tokens decoded per answer")
    llama.add_argument("--questions", type=int, default=16, help="multiple choice (lm_eval): questions")
    llama.add_argument("--passage", type=int, default=256, help="multiple choice: tokens of a question's passage")
    llama.add_argument("--choices", type=int, default=4, help="multiple choice: endings per question (2-8 words each)")
    llama.add_argument("--hflm-batch-size", type=int, default=16,
                       help="multiple choice: the batch_size of lm-eval's HFLM that times (a)")
    llama.add_argument("--scores", nargs="+", default=["language_modeling", "retrieval", "lm_eval"],
                       choices=["language_modeling", "retrieval", "lm_eval"],
                       help="the studies to time (all three by default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (the demo's jobs use 1)")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--heads-per-job", type=int, nargs="+", default=[4], help="ablation.heads_per_job: one or more")
    parser.add_argument("--variant-batch-size", nargs="+", default=["256"], metavar="[KIND=]ROWS",
                        help="(gate setting, item) rows per forward or generate() (EvalSettings.variant_batch_size): "
                             "a number for every kind, KIND=ROWS for one (e.g. retrieval=32); with --demo, the demo "
                             "config's ablation.variant_batch_size of each study's kind unless KIND=ROWS is given")
    parser.add_argument("--sample", type=int, default=0,
                        help="processes of each kind actually run, spread over the heads and jobs (0: all)")
    parser.add_argument("--repeats", type=int, default=1, help="(c): runs of each job, the median kept")
    parser.add_argument("--skip-b", action="store_true", help="do not time (b), one process per head")
    modes = parser.add_argument_group("masking modes (issue #32)")
    modes.add_argument("--masking", nargs="+", default=["zero"], choices=MASKING_WORDS, metavar="MODE",
                       help=f"time (a) and (c) under each of these masking modes ({', '.join(MASKING_WORDS)}) on the "
                            "same study, zero always among them (first) as the reference; (b) under the first only")
    modes.add_argument("--optimal-steps", type=int, default=200,
                       help="optimal constants: Adam steps (config constants.optimal.steps)")
    modes.add_argument("--optimal-lr", type=float, default=0.05, help="optimal constants: learning rate")
    modes.add_argument("--optimal-repeats", type=int, default=1, help="optimal constants: copies of a batch per step")
    modes.add_argument("--optimal-seed", type=int, default=0, help="optimal constants: seed")
    modes.add_argument("--resample-items", type=int, default=64, help="resample: items recorded (constants.resample)")
    modes.add_argument("--constants-items", type=int,
                       help="--model: items of the synthetic training split the modes' data are computed on "
                            "(default: as many as the test set)")
    modes.add_argument("--constants-batch-size", type=int,
                       help="--model: its batch size (default 32 sentences or pairs, 4 windows)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--heads", help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--paired", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warm-start", action="store_true", help="also time (c) with jobs forked from a warm server")
    parser.add_argument("--forked", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    default_rows, rows_by_kind = variant_batch_sizes(args.variant_batch_size)
    args.variant_batch_size = default_rows

    if args.worker and args.forked:
        from types import SimpleNamespace

        from headprune import warm

        warm.start(SimpleNamespace(config={"warm_start": True, "device": args.device}))  # runs on in the fork
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args.heads.split("+"), args.device, args.threads,
                                args.batch_size, args.variant_batch_size, args.warm, args.paired)))
        return
    if bool(args.demo) == bool(args.model):
        parser.error("give --demo DIR or --model SIZE")
    modes = ["zero"] + [mode for mode in dict.fromkeys(args.masking) if mode != "zero"]
    with tempfile.TemporaryDirectory(prefix="ablation-sweep-") as scratch:
        if args.demo:
            studies = demo_studies(args.demo)
        elif args.model in LLAMA_SIZES:
            studies = [study for study in llama_studies(Path(scratch), args) if study["kind"] in args.scores]
        else:
            studies = [random_study(args.model, Path(scratch), args.items, train_items=args.constants_items,
                                    train_batch_size=args.constants_batch_size or 32)]
        for study in studies:
            if study["kind"] in rows_by_kind:
                study["variant_batch_size"] = rows_by_kind[study["kind"]]
        print(f"device {args.device}, {args.threads} thread(s) per process, batch size {args.batch_size}, "
              f"{os.cpu_count()} cores" + (f", masking modes {' '.join(modes)}" if len(modes) > 1 else ""))
        for number, study in enumerate(studies):
            if len(modes) == 1:
                print_sweep(study, sweep(study, args), args)
                continue
            optimal = {"steps": args.optimal_steps, "lr": args.optimal_lr, "repeats": args.optimal_repeats,
                       "seed": args.optimal_seed}
            data = mode_data(study, modes, Path(scratch) / f"modes-{number}", args.device, args.threads,
                             optimal=optimal, resample_items=args.resample_items)
            results = {}
            for mode in modes:
                results[mode] = sweep(masked(study, mode, data), args, time_b=mode == modes[0])
                print_sweep(study, results[mode], args, mode)
            print_modes(study, results, data)


def print_sweep(study: dict, r: dict, args, mode: str | None = None):
    """One study's sweep as ``sweep`` measured it (under masking ``mode``, where modes are compared)."""
    n, a, a_cpu = r["heads"], r["a"], r["a_cpu"]
    rows = study.get("variant_batch_size", args.variant_batch_size)
    about = [f"{r['heads']} heads", f"variant batch size {rows}"]
    about += [study[key] for key in ("params", "output_layer") if key in study]
    about += [f"masking {mode}"] if mode else []
    print(f"\n{r['study']} ({', '.join(about)}); ratios by wall time [by CPU time]")
    label = "(a) one full-model evaluation" + (" by lm-eval's HFLM" if study["kind"] == "lm_eval" else "")
    print(f"  {label:39}{a:8.2f} s    N a = {n * a:8.1f} s    [CPU {a_cpu:.2f} s]")
    if "own" in r:
        print(f"      the pipeline's own full-model evaluation: {r['own']:.2f} s [CPU {r['own_cpu']:.2f} s], "
              f"{a / r['own']:.1f}x faster than HFLM's [{a_cpu / r['own_cpu']:.1f}x]")
    if r["b"] is not None:
        print(f"  (b) one process per head               {r['b']:8.1f} s    b / (N a) = {r['b'] / (n * a):.2f}"
              f" [{r['b_cpu'] / (n * a_cpu):.2f}]    ({r['b_measured']} processes run)")
    for p in r["pipeline"]:
        label = "(c') warm start" if p["forked"] else "(c) pipeline   "
        cpu = "" if p["forked"] else f" [{p['c_cpu'] / (n * a_cpu):.2f}]"  # a forked job's CPU is the server's
        print(f"  {label}, {p['heads_per_job']:2d} heads per job ({p['jobs']:3d} jobs) {p['c']:8.1f} s    "
              f"c / (N a) = {p['c'] / (n * a):.2f}{cpu}    ({p['measured']} jobs run; one job: "
              f"load {p['load']:.2f} s, eval {p['eval']:.1f} s)")
        paired_cpu = "" if p["forked"] else f" [{p['paired_cpu']:.2f}]"
        print(f"      paired with a full-model evaluation in each job's process (a_job): c / (N a_job) = "
              f"{p['paired']:.2f}{paired_cpu}")
        for job in p["sampled"]:
            per, rest = len(job["heads"]), job["wall"] - job["start"] - job["load"] - job["eval"]
            line = (f"      {layer_range(job['heads']):>13}: {job['wall']:6.1f} s = start {job['start']:4.1f}"
                    f" + load {job['load']:4.2f} + eval {job['eval']:6.1f} + rest {rest:3.1f}; "
                    f"a_job {job['a_here']:5.2f} s; job / (heads a) = {job['wall'] / (per * a):.2f}, "
                    f"/ (heads a_job) = {job['wall'] / (per * job['a_here']):.2f}")
            if not p["forked"]:
                line += (f"; by CPU: job {job['cpu'] / (per * a_cpu):.2f}, "
                         f"eval {job['eval_cpu'] / (per * a_cpu):.2f}")
            print(line)


def mode_ratios(results: dict) -> list[dict]:
    """Per mode and (c) setting (heads per job, forked): c / (N a) and the ratios to zero's measurement of the
    same setting in the same run: c, c by CPU time, and the sampled jobs' evaluation time alone (the same jobs in
    every mode: ``spread`` picks them), by wall and CPU time."""
    zero = results["zero"]
    rows = []
    for mode, r in results.items():
        n = r["heads"]
        for p, z in zip(r["pipeline"], zero["pipeline"]):
            rows.append({"mode": mode, "heads_per_job": p["heads_per_job"], "forked": p["forked"], "a": r["a"],
                         "a_cpu": r["a_cpu"], "c_over_Na": p["c"] / (n * r["a"]),
                         "c_over_Na_cpu": p["c_cpu"] / (n * r["a_cpu"]), "paired": p["paired"],
                         "paired_cpu": p["paired_cpu"], "paired_ratio": p["paired"] / z["paired"],
                         "paired_ratio_cpu": p["paired_cpu"] / z["paired_cpu"],
                         "c_ratio": p["c"] / z["c"], "c_ratio_cpu": p["c_cpu"] / z["c_cpu"],
                         "eval_ratio": sum(job["eval"] for job in p["sampled"])
                         / sum(job["eval"] for job in z["sampled"]),
                         "eval_ratio_cpu": sum(job["eval_cpu"] for job in p["sampled"])
                         / sum(job["eval_cpu"] for job in z["sampled"])})
    return rows


def print_modes(study: dict, results: dict, data: dict):
    """The modes side by side, and what their data cost, in full evaluations a (zero's a of this run)."""
    print(f"\n{study['name']}: the masking modes side by side (ratios to zero's, measured in this run) "
          "[by CPU time]")
    print("  (paired: c / (N a_job), a_job timed in each job's process after its work; the ratios: the mode's "
          "c, paired c and jobs' evaluation time over zero's)")
    print(f"  {'mode':10}{'heads a job':>13}{'a (s)':>8}{'c/(N a)':>15}{'paired':>15}{'c / zero':>15}"
          f"{'paired / zero':>15}{'eval / zero':>15}")
    for row in mode_ratios(results):
        label = f"{row['heads_per_job']}{' forked' if row['forked'] else ''}"

        def pair(name):
            cpu = "" if row["forked"] else f" [{row[name + '_cpu']:.2f}]"  # a forked job's CPU is the server's
            return f"{row[name]:.2f}{cpu}"

        print(f"  {row['mode']:10}{label:>13}{row['a']:8.2f}{pair('c_over_Na'):>15}{pair('paired'):>15}"
              f"{pair('c_ratio'):>15}{pair('paired_ratio'):>15}{pair('eval_ratio'):>15}")
    if not data:
        return
    a, a_cpu = results["zero"]["a"], results["zero"]["a_cpu"]
    print(f"  the modes' data, on {data['data']}, computed in one process (a = zero's a, {a:.2f} s "
          f"[CPU {a_cpu:.2f} s]); loading the model and the batches {data['load']:.2f} s")
    for mode, entry in data.items():
        if not isinstance(entry, dict):  # load, batches, data
            continue
        line = f"    {mode:9}{entry['seconds']:8.2f} s = {entry['seconds'] / a:6.2f} a [{entry['cpu'] / a_cpu:.2f} a]"
        if "steps" in entry:  # learned step by step (optimal)
            line += (f": {entry['steps']} steps of {entry['rows']} rows, {entry['per_step']:.3f} s a step "
                     f"= {entry['per_step'] / a:.2f} a [{entry['per_step_cpu'] / a_cpu:.2f} a], after a statistics "
                     f"pass of {entry['before_steps']:.2f} s")
            if entry["loss"]:
                line += f"; loss {entry['loss'][0]:.4g} -> {entry['loss'][1]:.4g}"
        print(line)


if __name__ == "__main__":
    main()
