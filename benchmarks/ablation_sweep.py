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
``--sample`` only that many processes of each kind run, and their mean is scaled to the whole sweep.

    python benchmarks/ablation_sweep.py --demo results/demo-run        # a finished demo's models, CPU
    python benchmarks/ablation_sweep.py --model bert-base --device cuda --sample 8
    python benchmarks/ablation_sweep.py --model transformer-big --device cuda --sample 8

``--demo DIR`` reads the demo's translation model folder and newstest2013 and its fine-tuned
MNLI-like model and dev set from a directory where the demo ran; ``--model`` builds a random-weight
model of that size with a synthetic vocabulary (nothing is downloaded), so the numbers measure the
machinery, not the model.
"""
from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the imports: a worker's time includes them, as a job's does

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
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
    rows = yaml.safe_load((Path(__file__).resolve().parents[1] / "demo" / "config.yaml").read_text())["ablation"]
    for study in (translation, mnli):
        study["variant_batch_size"] = rows.get("variant_batch_size", {}).get(study["kind"], 256)
        for key in ("folder", "source", "reference", "tsv"):
            if key in study and not Path(study[key]).exists():
                raise FileNotFoundError(f"{study[key]}: run the demo in {workdir} first (README)")
    return [translation, mnli]


def random_study(size: str, folder: Path, items: int, seed: int = 0) -> dict:
    """A random-weight BERT-base or WMT transformer-big in a model folder, with a synthetic test set."""
    import random

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(2000)]
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) for _ in range(items)]
    folder.mkdir(parents=True, exist_ok=True)
    if size == "bert-base":
        from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

        vocab = folder / "vocab.txt"
        vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
        tokenizer = BertTokenizer(str(vocab))
        config = BertConfig(vocab_size=30522, num_labels=3, attn_implementation="eager")
        BertForSequenceClassification(config).eval().save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")
        tsv = folder / "dev.tsv"
        tsv.write_text("text_a\ttext_b\tlabel\n" + "".join(f"{s}\t{s[::-1]}\t{i % 3}\n" for i, s in enumerate(sentences)))
        return {"name": size, "kind": "classification", "folder": folder / "model", "tsv": tsv}
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
        return {"name": size, "kind": "translation", "folder": model_folder, "source": source, "reference": reference}
    raise ValueError(f"unknown model size {size!r}")


# --------------------------------------------------------------------------- one job, as the pipeline runs it


def worker(study: dict, heads: list[str], device: str, threads: int, batch_size: int, variant_batch_size: int,
           warm: bool = False) -> dict:
    """Load the model folder and evaluate each head off (or the full model) in one pass; times in seconds.
    ``warm``: evaluate once untimed first (caches, lazy initialization), then time three runs and report
    their median (a full-model evaluation of the demo's models takes 0.1-0.5 s: one run is noisy)."""
    import torch

    from headprune.experiments.runs import EvalSet, EvalSettings, gates_without, parse_head_name, run_variants
    from headprune.models.loading import load_classifier, load_translation
    from headprune.workflow import keep_freed_memory

    keep_freed_memory()  # as every pipeline job does (headprune.workflow.logged)
    torch.set_num_threads(threads)
    loaded = time.perf_counter()
    if study["kind"] == "translation":
        model, tokenizer = load_translation(study["folder"], device=device)
        from headprune.data.datasets import read_lines

        evalset = EvalSet("translation", read_lines(study["reference"]), read_lines(study["source"]), "bleu")
    else:
        model, tokenizer = load_classifier(study["folder"], device=device)
        from headprune.data.datasets import read_glue_split

        pairs, labels = read_glue_split(study["tsv"])
        evalset = EvalSet("classification", labels, pairs, "accuracy")
    evaluated = time.perf_counter()
    gates = [None if head == "full" else gates_without(model, [parse_head_name(head)]) for head in heads]
    settings = EvalSettings(batch_size=batch_size, variant_batch_size=int(study.get("variant_batch_size",
                                                                                  variant_batch_size)))
    if warm:
        run_variants(model, tokenizer, evalset, gates, settings)
        times = []
        for _ in range(3):
            began = time.perf_counter()
            run_variants(model, tokenizer, evalset, gates, settings)
            times.append(time.perf_counter() - began)
        return {"start": loaded - STARTED, "load": evaluated - loaded, "eval": sorted(times)[1],
                "variants": len(gates), "heads": heads}
    outputs = run_variants(model, tokenizer, evalset, gates, settings)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    done = time.perf_counter()
    return {"start": loaded - STARTED, "load": evaluated - loaded, "eval": done - evaluated, "variants": len(outputs),
            "heads": heads}


def run_worker(study: dict, heads: list[str], args, warm: bool = False, forked: bool = False) -> tuple[float, dict]:
    """Wall time of one worker process (``forked``: one that hands its work to the warm server), and what it
    reported."""
    command = [sys.executable, __file__, "--worker", json.dumps({k: str(v) for k, v in study.items()}),
               "--heads", "+".join(heads), "--device", args.device, "--threads", str(args.threads),
               "--batch-size", str(args.batch_size), "--variant-batch-size", str(args.variant_batch_size)] \
        + (["--warm"] if warm else []) + (["--forked"] if forked else [])
    began = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if result.returncode != 0:
        raise RuntimeError(f"worker failed:\n{result.stderr[-3000:]}")
    return wall, json.loads(result.stdout.strip().splitlines()[-1])


def sweep(study: dict, args) -> dict:
    import torch

    from headprune.experiments.runs import all_heads, head_name
    from headprune.models.loading import load_classifier, load_translation

    load = load_translation if study["kind"] == "translation" else load_classifier
    model, _ = load(study["folder"], device=args.device)
    heads = [head_name(h) for h in all_heads(model)]
    del model
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    n = len(heads)

    # (a) the full model once, in a warm process
    a = run_worker(study, ["full"], args, warm=True)[1]["eval"]
    # (b) one process per head
    one = [run_worker(study, [head], args)[0] for head in heads[:args.sample or n]]
    b = sum(one) / len(one) * n
    # (c) the pipeline's jobs: heads_per_job heads each, evaluated in batched variants
    pipeline = []
    for forked in ([False, True] if args.warm_start else [False]):
        if forked:  # the server's own start is paid once per run, by the first job: not timed here
            run_worker(study, heads[:1], args, forked=True)
        for k in args.heads_per_job:
            jobs = [heads[i:i + k] for i in range(0, n, k)]
            # each job --repeats times, its median wall time kept: a demo job takes about a second, and one
            # run of it on a shared machine can be off by a third
            timed = [sorted((run_worker(study, job, args, forked=forked) for _ in range(args.repeats)),
                            key=lambda timing: timing[0])[args.repeats // 2] for job in jobs[:args.sample or len(jobs)]]
            last = timed[-1][1]
            pipeline.append({"c": sum(wall for wall, _ in timed) / len(timed) * len(jobs), "jobs": len(jobs),
                             "heads_per_job": k, "measured": len(timed), "load": last["load"],
                             "eval": last["eval"], "forked": forked})
    return {"study": study["name"], "heads": n, "a": a, "b": b, "b_measured": len(one), "pipeline": pipeline}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", type=Path, help="a directory where the demo ran")
    parser.add_argument("--model", choices=["bert-base", "transformer-big"], help="a random-weight model of this size")
    parser.add_argument("--items", type=int, default=64, help="test items of the random model's test set")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (the demo's jobs use 1)")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--heads-per-job", type=int, nargs="+", default=[4], help="ablation.heads_per_job: one or more")
    parser.add_argument("--variant-batch-size", type=int, default=256,
                        help="(gate setting, item) rows per forward or generate() (EvalSettings.variant_batch_size); "
                             "with --demo, the demo config's ablation.variant_batch_size of each study's kind")
    parser.add_argument("--sample", type=int, default=0, help="processes of each kind actually run (0: all)")
    parser.add_argument("--repeats", type=int, default=1, help="(c): runs of each job, the median kept")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--heads", help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warm-start", action="store_true", help="also time (c) with jobs forked from a warm server")
    parser.add_argument("--forked", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker and args.forked:
        from types import SimpleNamespace

        from headprune import warm

        warm.start(SimpleNamespace(config={"warm_start": True, "device": args.device}))  # runs on in the fork
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker), args.heads.split("+"), args.device, args.threads,
                                args.batch_size, args.variant_batch_size, args.warm)))
        return
    if bool(args.demo) == bool(args.model):
        parser.error("give --demo DIR or --model SIZE")
    with tempfile.TemporaryDirectory(prefix="ablation-sweep-") as scratch:
        studies = demo_studies(args.demo) if args.demo else [random_study(args.model, Path(scratch), args.items)]
        print(f"device {args.device}, {args.threads} thread(s) per process, batch size {args.batch_size}, "
              f"{os.cpu_count()} cores")
        for study in studies:
            r = sweep(study, args)
            n, a = r["heads"], r["a"]
            print(f"\n{r['study']} ({r['heads']} heads, variant batch size "
                  f"{study.get('variant_batch_size', args.variant_batch_size)})")
            print(f"  (a) one full-model evaluation          {a:8.2f} s    N a = {n * a:8.1f} s")
            print(f"  (b) one process per head               {r['b']:8.1f} s    b / (N a) = {r['b'] / (n * a):.2f}"
                  f"    ({r['b_measured']} processes run)")
            for p in r["pipeline"]:
                label = "(c') warm start" if p["forked"] else "(c) pipeline   "
                print(f"  {label}, {p['heads_per_job']:2d} heads per job ({p['jobs']:3d} jobs) {p['c']:8.1f} s    "
                      f"c / (N a) = {p['c'] / (n * a):.2f}    ({p['measured']} jobs run; one job: "
                      f"load {p['load']:.2f} s, eval {p['eval']:.1f} s)")


if __name__ == "__main__":
    main()
