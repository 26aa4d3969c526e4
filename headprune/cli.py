"""The ``headprune`` command: score, sweep and prune the heads of one model without writing a config.

    headprune score MODEL --data FILE            I_h and the other criteria: importance.csv
    headprune sweep MODEL --data FILE            the single-head sweep with significance: ablation.csv
    headprune prune MODEL --data FILE (--percent N | --heads L-H,...) [--layout free|uniform] [--stock] --out FOLDER
    headprune gguf MODEL_DIR OUT.gguf [--outtype f16|f32]   a GGUF llama.cpp serves, any layout (Llama architecture)
    headprune recover PRUNED --data FILE --method lora|full|distill --steps N [--test FILE] --out FOLDER

MODEL is a hub id, a model folder or a fairseq tarball. FILE is what a kind of study is scored on
(``headprune.evaluation.kinds``, each kind's ``data_help``): a text corpus (.txt: language modelling, perplexity
over windows of --window tokens), a GLUE-format TSV (.tsv: header ``text_a<TAB>text_b<TAB>label``, integer labels:
classification), an lm-evaluation-harness task's YAML (.yaml: lm_eval), needle-in-a-haystack items (.jsonl:
retrieval) or, with --kind translation, sentence pairs; --kind names the kind where the extension does not say.
The CSVs have the pipeline's columns.
A bad argument or file stops with a message naming it and exit status 2; a failure of the machine (a full disk,
a read-only or forbidden folder) with one naming the path and exit status 1, nothing half-written left behind.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from headprune.analyses.layouts import LAYOUTS, paper_layout  # no torch: the CLI starts fast
from headprune.evaluation.kinds import KINDS, kind_of
from headprune.io import atomic
from headprune.io.machine_failures import machine_failure, out_of_memory

log = logging.getLogger("headprune")


class UsageError(Exception):
    """A bad argument or input: reported as ``headprune: error: ...``, exit status 2."""


def percent(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 <= number <= 100:
        raise argparse.ArgumentTypeError(f"{value} is not a percentage between 0 and 100")
    return number


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return number


def memory_size(value: str) -> int:
    from headprune.models.memory import parse_size

    try:
        return parse_size(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def head_list(value: str) -> list[tuple[str | None, int, int]]:
    """"L-H,..." (layer-head, 0-based) or "T-L-H,..." (attention type too, as in the CSVs' head names)."""
    heads = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        parts = item.rsplit("-", 2) if item.count("-") >= 2 else [None, *item.split("-")]
        try:
            attn_type, layer, head = parts[0], int(parts[1]), int(parts[2])
        except (ValueError, IndexError):
            raise argparse.ArgumentTypeError(f"{item!r} is not LAYER-HEAD (e.g. 0-3) or TYPE-LAYER-HEAD "
                                             "(e.g. enc_self-0-3)") from None
        if layer < 0 or head < 0:
            raise argparse.ArgumentTypeError(f"{item!r}: layers and heads count from 0")
        heads.append((attn_type, layer, head))
    if not heads:
        raise argparse.ArgumentTypeError("no heads given")
    return heads


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="headprune", description=__doc__.split("\n\n")[0],
                                     epilog="Each command's options: headprune COMMAND --help.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, help, out_help, out_default=None):
        sub = commands.add_parser(name, help=help, description=help)
        sub.add_argument("model", metavar="MODEL", help="a Hugging Face hub id, a model folder or a fairseq tarball")
        sub.add_argument("--data", required=True, metavar="FILE", help="what MODEL is scored on: "
                         + "; ".join(f"{name}: {kind_of(name).data_help}" for name in KINDS if kind_of(name).data_help))
        sub.add_argument("--kind", choices=list(KINDS), help="the kind of study: what --data holds and how MODEL is "
                         "scored, if --data's extension does not say (" + ", ".join(
                             f"{suffix}: {name}" for name in KINDS for suffix in kind_of(name).data_suffixes) + ")")
        sub.add_argument("--window", type=positive_int, default=128,
                         help="text: tokens per perplexity window (default: 128)")
        sub.add_argument("--metric", help="the score: a classification metric (default: accuracy) or one an "
                         "lm-evaluation-harness task computes (default: acc)")
        sub.add_argument("--num-fewshot", type=int, default=0, help="lm_eval: few-shot examples (default: 0)")
        sub.add_argument("--max-items", type=positive_int, help="use only the first N windows or examples")
        sub.add_argument("--batch-size", type=positive_int,
                         help="windows or examples a batch (default: 32, or as many as fit in memory)")
        sub.add_argument("--variant-batch-size", type=positive_int, help="(gate setting, item) rows a forward pass "
                         "evaluates (default: 256, or as many as fit in memory)")
        sub.add_argument("--max-memory", type=memory_size, metavar="SIZE",
                         help="the peak memory to stay within, e.g. 8GB (default: what is free)")
        sub.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: a GPU if there is one)")
        sub.add_argument("--study", help="the study column of the CSVs (default: MODEL's name)")
        sub.add_argument("--out", required=out_default is None, default=out_default, metavar="PATH",
                         help=out_help + (f" (default: {out_default})" if out_default else ""))
        return sub

    score = command("score", "Score every head: I_h (three estimators), Fisher, attention gradient, entropy, "
                    "confidence, as the pipeline's importance.csv.", "the CSV", "importance.csv")
    score.add_argument("--estimator", choices=("token", "example", "batch"), default="token",
                       help="where I_h takes the absolute value (default: token, the authors' code)")
    score.add_argument("--no-normalize", action="store_true", help="do not l2-normalize I_h per layer")

    sweep = command("sweep", "Switch off each head alone and test the change against the full model, as the "
                    "pipeline's eval/ablation.csv.", "the CSV", "ablation.csv")
    sweep.add_argument("--resamples", type=positive_int, default=1000, help="bootstrap resamples (default: 1000)")
    sweep.add_argument("--alpha", type=float, default=0.01, help="significance level (default: 0.01)")
    sweep.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default: 0)")

    prune = command("prune", "Remove heads physically and save the pruned model: the N%% least important by "
                    "--criterion (with the pruning curve, as pruning.csv), or the --heads named.",
                    "the folder the pruned model is saved to")
    which = prune.add_mutually_exclusive_group(required=True)
    which.add_argument("--percent", type=percent, metavar="N", help="prune N%% of the heads (0-100) in --criterion order")
    which.add_argument("--heads", type=head_list, metavar="L-H,...",
                       help="prune these heads: LAYER-HEAD or TYPE-LAYER-HEAD (enc_self, dec_self, enc_dec), 0-based")
    prune.add_argument("--criterion", default="importance",
                       help="the pruning order: importance (default), importance_example, fisher, entropy_low, "
                            "oracle, random, iterative, ... (headprune.CRITERIA)")
    prune.add_argument("--step", type=percent, default=10.0, help="the curve's step in %% of the heads (default: 10)")
    prune.add_argument("--curve", metavar="CSV", help="where the pruning curve goes (default: FOLDER/pruning.csv)")
    prune.add_argument("--seed", type=int, default=0, help="the random order's seed (default: 0)")
    prune.add_argument("--layout", choices=list(LAYOUTS), default=paper_layout(),
                       help="free (default): the least important heads wherever they are, saved with remote code "
                            "(trust_remote_code=True); uniform: every layer loses as many heads (whole key/value "
                            "groups), each layer's least important first, the curve one group per layer a step "
                            "(--step unused), saved as a stock checkpoint any transformers loads (--heads named so "
                            "too): with fewer heads in its config where the family's config holds head_dim, else "
                            "(GPT-2, BERT, Marian) the same size as the original, the removed heads' weights zeroed")
    prune.add_argument("--stock", action="store_true",
                       help="with --layout free: save a same-size stock checkpoint instead of remote code: "
                            "transformers' own class and config, every head in place, the removed heads' weights "
                            "zeroed; it loads without trust_remote_code and computes the pruned model, but is no "
                            "smaller or faster than the original (--layout uniform always saves a stock checkpoint)")
    gguf = commands.add_parser("gguf", help="Write a model folder (pruned in any layout, or not) as a GGUF file "
                               "llama.cpp runs", description="Write MODEL_DIR (a folder headprune prune --out or "
                               "save_pruned wrote, or any model folder) as a GGUF file llama.cpp runs: a Llama-"
                               "architecture model, each layer with its own heads (llama.cpp's deci architecture).")
    gguf.add_argument("model", metavar="MODEL_DIR", help="a model folder (pruned or not)")
    gguf.add_argument("out", metavar="OUT.gguf", help="the GGUF file to write")
    gguf.add_argument("--outtype", choices=("f16", "f32"), default="f16", help="the weights' type (default: f16)")
    add_recover_command(command)
    return parser


def study_kind(args):
    """The kind of study --data is scored as: --kind, else the one whose files end as --data does."""
    path = Path(args.data)
    if not path.is_file():
        raise UsageError(f"--data {args.data}: no such file")
    if args.kind:
        return kind_of(args.kind)
    by_suffix = {suffix: name for name in KINDS for suffix in kind_of(name).data_suffixes}
    if path.suffix.lower() not in by_suffix:
        raise UsageError(f"--data {args.data}: cannot tell its format from the extension: name it "
                         f"{', '.join(f'{suffix} ({name})' for suffix, name in by_suffix.items())}, or give --kind")
    return kind_of(by_suffix[path.suffix.lower()])


def evalset_of(args, path, option, kind, tokenizer):
    """(EvalSet, its name in the tables) of ``path`` (the value of ``option``), read as ``kind`` reads it."""
    options = {"window": args.window, "metric": args.metric, "max_items": args.max_items,
               "num_fewshot": args.num_fewshot}
    try:
        evalset, testset, what = kind.evalset_from_file(path, tokenizer, options)
    except ValueError as error:  # a file not of the kind's format, a metric it does not compute, ...
        raise UsageError(f"{option} {path}: {error}") from None
    if not len(evalset):
        raise UsageError(f"{option} {path}: no items")
    log.info("%s %s: %s", option, path, what)
    return evalset, testset


def load(args):
    """(model, tokenizer, evalset, testset name), checked, with what was detected logged."""
    kind = study_kind(args)
    if args.command == "prune" and args.percent is not None and args.criterion not in _criteria():
        raise UsageError(f"--criterion {args.criterion}: unknown; expected one of {', '.join(_criteria())}")

    import torch

    from headprune.evaluation.kinds import load_model
    from headprune.models.loading import dropped_heads

    partial = dropped_heads(args.model, kind.model_kind)  # a whisper folder given text: never its decoder alone
    if partial is not None:
        raise UsageError(f"MODEL {args.model}: {partial}")
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model, tokenizer = load_model(args.model, kind.name, device=device)
    except Exception as error:  # a missing folder, no network, not a model of this kind: say which argument
        raise UsageError(f"MODEL {args.model}: cannot load it as a {kind.model_kind.replace('_', ' ')} model: "
                         f"{type(error).__name__}: {error}") from None
    log.info("MODEL %s: %s, %d heads, on %s (a %s study)", args.model, type(model).__name__, _count(model), device,
             kind.name)
    evalset, testset = evalset_of(args, args.data, "--data", kind, tokenizer)
    fit_to_memory(args, model, tokenizer, evalset, device)
    return model, tokenizer, evalset, testset


def fit_to_memory(args, model, tokenizer, evalset, device):
    """--batch-size and --variant-batch-size as set, or as many rows as fit in the memory there is (--max-memory,
    else what is free; headprune.models.memory), rows as long as --data's longest (the kind's ``row_positions``);
    a size set by hand that does not fit is refused here."""
    from headprune.evaluation.kinds import kind_of
    from headprune.evaluation.runs import EvalSettings
    from headprune.models.memory import free_bytes, gigabytes, sized

    budget = free_bytes(model, device, args.max_memory)
    positions = kind_of(evalset.kind).row_positions(model, tokenizer, evalset, EvalSettings())
    try:
        args.batch_size = sized(model, positions, budget, args.batch_size, 32, "--batch-size", gradients=True)
        args.variant_batch_size = sized(model, positions, budget, args.variant_batch_size, 256,
                                        "--variant-batch-size")
    except ValueError as error:
        raise UsageError(f"{error} (--max-memory {gigabytes(args.max_memory)})" if args.max_memory else
                         str(error)) from None
    log.info("%s to use: batches of %d, %d variant rows a pass of %d tokens", gigabytes(budget), args.batch_size,
             args.variant_batch_size, positions)


def _criteria():
    from headprune.analyses.criteria import CRITERIA

    # a study's head roles: none from the shell
    return [name for name, criterion in CRITERIA.items() if criterion.reads != "roles"]


def _count(model) -> int:
    from headprune.evaluation.runs import all_heads

    return len(all_heads(model))


def study_name(args) -> str:
    return args.study or Path(args.model.rstrip("/")).name.removesuffix(".tar.gz")


def write_csv(table, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(table, path, index=False)
    log.info("wrote %s (%d rows)", path, len(table))
    return path


def settings(args):
    from headprune.evaluation.runs import EvalSettings

    return EvalSettings(batch_size=args.batch_size, variant_batch_size=args.variant_batch_size, progress=True)


def scores(args, model, tokenizer, evalset):
    from headprune.analyses.sweeps import evalset_batches
    from headprune.scoring.importance import head_scores

    try:
        batches = evalset_batches(tokenizer, evalset, args.batch_size)
    except ValueError as error:  # a kind whose heads are scored on other data (its language model's text)
        raise UsageError(f"--data {args.data}: {error}") from None
    return head_scores(model, batches, estimator=getattr(args, "estimator", "token"),
                       normalize=not getattr(args, "no_normalize", False))


def run_score(args):
    model, tokenizer, evalset, _ = load(args)
    table = scores(args, model, tokenizer, evalset)
    table.insert(0, "study", study_name(args))
    write_csv(table, args.out)


def run_sweep(args):
    from headprune.analyses.sweeps import single_head_sweep

    model, tokenizer, evalset, testset = load(args)
    table = single_head_sweep(model, tokenizer, evalset, settings(args), resamples=args.resamples, seed=args.seed,
                              alpha=args.alpha, study=study_name(args), testset=testset)
    log.info("%d of %d heads significant at p < %s", table.significant.sum(), len(table), args.alpha)
    write_csv(table, args.out)


def named_heads(heads, model) -> list[tuple[str, int, int]]:
    """--heads against the model: the attention type filled in where the model has only one, each checked."""
    from headprune.models.heads import head_shape

    shape = head_shape(model)
    named = []
    for attn_type, layer, head in heads:
        if attn_type is None:
            if len(shape) != 1:
                raise UsageError(f"--heads: the model has several attention types ({', '.join(shape)}): name "
                                 "each head TYPE-LAYER-HEAD")
            attn_type = next(iter(shape))
        if attn_type not in shape:
            raise UsageError(f"--heads: the model has no attention type {attn_type!r} (it has {', '.join(shape)})")
        layers, per_layer = shape[attn_type]
        if layer >= layers or head >= per_layer:
            raise UsageError(f"--heads {attn_type}-{layer}-{head}: the model's {attn_type} attention has {layers} "
                             f"layers x {per_layer} heads (0-based)")
        named.append((attn_type, layer, head))
    return named


def cut_point(args, model, tokenizer, evalset, testset, curve, removed, total_heads) -> dict:
    """The pruning curve's point where the model is cut, for its model card: the curve's row at that many heads,
    or, when the cut falls between the curve's steps, those heads scored here."""
    from headprune.analyses.sweeps import pruning_tables

    rows = curve[curve.heads_pruned == len(removed)]
    if rows.empty:
        cut, _ = pruning_tables(model, tokenizer, evalset, {args.criterion: removed}, step_percent=100.0,
                                settings=settings(args), study=study_name(args), total_heads=total_heads)
        rows = cut[cut.heads_pruned == len(removed)]
    return {"percent_pruned": 100.0 * len(removed) / total_heads, "heads_pruned": len(removed),
            "score": float(rows.score.iloc[0]), "metric": rows.metric.iloc[0],
            "unpruned_score": float(curve[curve.heads_pruned == 0].score.iloc[0]), "data": testset}


def run_prune(args):
    from headprune.analyses.criteria import CRITERIA, criterion_order, importance_on_pruned, iterative_order
    from headprune.evaluation.runs import all_heads
    from headprune.analyses.sweeps import evalset_batches, pruning_tables, remove_heads, single_head_sweep

    model, tokenizer, evalset, testset = load(args)
    heads = all_heads(model)
    if args.heads is None and not args.step:
        raise UsageError("--step 0: the curve's step must be more than 0%")
    if args.heads is not None:
        removed = named_heads(args.heads, model)
    else:
        criterion, layout = CRITERIA[args.criterion], LAYOUTS[args.layout]
        if not criterion.static:
            estimate = importance_on_pruned(model, evalset_batches(tokenizer, evalset, args.batch_size))
            order = iterative_order(estimate, heads, args.step)
        else:
            importance = scores(args, model, tokenizer, evalset) if criterion.scored else None
            ablation = (single_head_sweep(model, tokenizer, evalset, settings(args), resamples=1)
                        if criterion.reads == "ablation" else None)
            order = criterion_order(args.criterion, importance, heads, ablation=ablation, seed=args.seed)
        curve, _ = pruning_tables(model, tokenizer, evalset, {args.criterion: order}, step_percent=args.step,
                                  settings=settings(args), study=study_name(args), total_heads=len(heads),
                                  layouts=(args.layout,))
        removed = layout.removal(order, model, args.percent)
        if layout.stock:
            log.info("--layout %s: %d of %d heads (%.1f%%), as many in every layer, for --percent %g", args.layout,
                     len(removed), len(heads), 100.0 * len(removed) / len(heads), args.percent)
        point = cut_point(args, model, tokenizer, evalset, testset, curve, removed, len(heads))
    from headprune.models.export import same_size_line, save_pruned
    from headprune.models.stock import NoSmallerStock, save_stock

    remove_heads(model, removed)
    # its model card says how it was pruned
    chosen = {} if args.heads is not None else {"criterion": args.criterion, "masking": settings(args).masking,
                                                  "curve_point": point}
    same_size = same_size_line(len(removed), len(heads))
    layout = LAYOUTS[args.layout]
    if layout.stock:  # transformers' own class and config: loads anywhere, no remote code
        try:
            try:
                out = save_stock(model, tokenizer, args.out, base_model=args.model,
                                 layout_line=layout.card_line(), **chosen)
            except NoSmallerStock as error:  # the family's class cannot hold fewer heads: all in place, zeroed
                out = save_stock(model, tokenizer, args.out, zeroed=True, base_model=args.model,
                                 layout_line=layout.card_line(same_size=True), **chosen)
                log.info("--layout %s: no smaller stock checkpoint (%s); saved a same-size one instead, %s",
                         args.layout, error.why, same_size)
        except ValueError as error:  # the heads a stock class cannot hold
            raise UsageError(f"--layout {args.layout}: {error}") from None
    elif args.stock:
        try:
            out = save_stock(model, tokenizer, args.out, zeroed=True, base_model=args.model,
                             layout_line=layout.card_line(same_size=True), **chosen)
        except ValueError as error:  # what no stock class holds, smaller or same-size
            raise UsageError(f"--stock: {error}") from None
        log.info("--stock: saved a same-size stock checkpoint, %s (the remote-code export, without --stock, is "
                 "smaller)", same_size)
    else:  # layers keep their own heads: loads in headprune, and in transformers with trust_remote_code
        out = save_pruned(model, tokenizer, args.out, base_model=args.model, layout_line=layout.card_line(), **chosen)
    if args.heads is None:  # after the model: save_pruned replaces the folder
        write_csv(curve, args.curve or out / "pruning.csv")
    log.info("removed %d of %d heads (%s); saved the pruned model to %s", len(removed), len(heads),
             ", ".join("-".join(map(str, h)) for h in removed) or "none", out)


def run_gguf(args):
    from headprune.models.gguf_export import save_gguf
    from headprune.models.loading import load_model

    try:
        model, tokenizer = load_model(args.model, "language_modeling")
    except Exception as error:
        raise UsageError(f"MODEL_DIR {args.model}: cannot load it as a causal language model: "
                         f"{type(error).__name__}: {error}") from None
    try:
        path = save_gguf(model, tokenizer, args.out, outtype=args.outtype)
    except ValueError as error:
        raise UsageError(f"MODEL_DIR {args.model}: {error}") from None
    log.info("%s written: %s, %d heads, %s weights (llama.cpp's deci architecture)", path, type(model).__name__,
             _count(model), args.outtype)


# --- headprune recover (issue #59) ----------------------------------------------------------------------

# headprune.training.recovery's argument -> the option that sets it (its errors name the argument)
RECOVER_OPTIONS = {"method": "--method", "steps": "--steps", "lr": "--lr", "batch_size": "--batch-size",
                   "seed": "--seed", "lora_rank": "--lora-rank", "lora_alpha": "--lora-alpha",
                   "lora_targets": "--lora-targets", "temperature": "--temperature", "distill_weight": "--distill-weight",
                   "teacher": "--teacher", "train_items": "--data", "modules": "--modules"}


def add_recover_command(command):
    recover = command("recover", "Train a pruned model a few steps to win back what pruning cost (LoRA merged into "
                      "the weights, full fine-tuning, or distillation from the unpruned model) and save it as a pruned "
                      "model is saved; --data is the training data.", "the folder the recovered model is saved to")
    recover.add_argument("--method", default="lora", help="lora (default), full or distill")
    recover.add_argument("--steps", type=int, required=True, metavar="N", help="the step budget")
    recover.add_argument("--test", metavar="FILE", help="the test set, in --data's format: scored before and after, "
                         "and no item of it trained on")
    recover.add_argument("--teacher", metavar="MODEL", help="distill: the unpruned model")
    recover.add_argument("--lr", type=float, default=1e-4, help="the peak learning rate (default: 1e-4)")
    recover.add_argument("--seed", type=int, default=0, help="default: 0")
    recover.add_argument("--lora-rank", type=int, default=8, help="default: 8")
    recover.add_argument("--lora-alpha", type=float, default=16.0, help="default: 16")
    recover.add_argument("--lora-targets", type=lambda v: tuple(filter(None, v.split(","))), metavar="NAME,...",
                         help="the projections LoRA adapts, e.g. q_proj,v_proj (default: every linear projection of "
                              "the attention and MLP)")
    recover.add_argument("--modules", type=lambda v: tuple(filter(None, v.split(","))), metavar="NAME,...",
                         help="full, distill: the modules trained (default: every weight)")
    recover.add_argument("--temperature", type=float, default=2.0, help="distill: the temperature (default: 2)")
    recover.add_argument("--distill-weight", type=float, default=0.5,
                         help="distill: the KL term's share of the loss, the task loss having the rest (default: 0.5)")


def run_recover(args):
    from headprune.training.recovery import RecoveryError, RecoverySettings, export_recovered, recover

    model, tokenizer, train, testset = load(args)
    test = _test_set(args, tokenizer) if args.test else None
    try:
        settings = RecoverySettings(steps=args.steps, lr=args.lr, batch_size=args.batch_size, seed=args.seed,
                                    lora_rank=args.lora_rank, lora_alpha=args.lora_alpha, lora_targets=args.lora_targets,
                                    modules=args.modules, temperature=args.temperature,
                                    distill_weight=args.distill_weight)
        teacher = None
        if args.teacher:
            from headprune.evaluation.kinds import load_model

            try:
                teacher = load_model(args.teacher, train.kind, device=model.device)[0]
            except Exception as error:  # a missing folder, not a model of this kind: say which argument
                raise UsageError(f"--teacher {args.teacher}: cannot load it: {type(error).__name__}: {error}") from None
        before = _scored(model, tokenizer, test, args)
        recovered = recover(model, tokenizer, train, args.method, args.steps, teacher, test_items=test,
                            settings=settings, data=args.data)
    except RecoveryError as error:
        raise UsageError(f"{RECOVER_OPTIONS.get(error.key, error.key)}: {error.why}") from None
    record = {**recovered.config.headprune_recovery, "metric": getattr(test, "metric", None),
              "score_pruned": before, "score_recovered": _scored(recovered, tokenizer, test, args),
              "score_unpruned": _scored(teacher, tokenizer, test, args) if teacher is not None else None}
    recovered.config.headprune_recovery = record
    out, stock = export_recovered(recovered, tokenizer, args.out, record, base_model=args.model)
    if test is not None:
        log.info("%s on %s: %.4g pruned, %.4g recovered", test.metric, args.test, record["score_pruned"],
                 record["score_recovered"])
    log.info("recovered by %s in %d steps; saved to %s (%s)", args.method, args.steps, out,
             "a stock checkpoint" if stock else "remote code: trust_remote_code=True")


def _test_set(args, tokenizer):
    """--test read as --data is (as the same kind of study)."""
    if not Path(args.test).is_file():
        raise UsageError(f"--test {args.test}: no such file")
    return evalset_of(args, args.test, "--test", study_kind(args), tokenizer)[0]


def _scored(model, tokenizer, test, args):
    """The test set's score of ``model``, or None without a test set."""
    if test is None:
        return None
    from headprune.evaluation.runs import run, score

    return float(score(test, run(model, tokenizer, test, None, settings(args))))


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="headprune: %(message)s", stream=sys.stderr)
    try:
        {"score": run_score, "sweep": run_sweep, "prune": run_prune, "gguf": run_gguf,
         "recover": run_recover}[args.command](args)
    except UsageError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except Exception as error:
        failure = machine_failure(error)  # a full disk, a read-only folder, ...: one line, not a traceback
        memory = out_of_memory(error) if failure is None else None
        if memory is not None:
            failure = f"{memory}: lower --variant-batch-size, --batch-size or --window, or give --max-memory"
        if failure is None:
            raise
        parser.exit(1, f"{parser.prog}: error: {failure}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
