"""Recovery after pruning (issue #59): a pruned model trained a few steps to win back what pruning cost.

Three methods, each a class registered by its word in ``METHODS`` (the config's ``recovery.methods``, the
command's ``--method``):

- ``lora``: peft's LoRA adapters (rank, alpha, target modules) on the attention and MLP projections, merged into
  the weights at the end (``merge_and_unload``), so that what is saved is a plain model of the pruned shape;
- ``full``: every weight, or the modules named, trained;
- ``distill``: every weight trained on the task loss mixed with the KL divergence from the unpruned model's
  (the teacher's) logits at a temperature T, times T^2 (Hinton et al. 2015; Minitron distils the pruned model so).

All three train with the study's fine-tuning settings (``headprune.training.finetune``: AdamW, weight decay 0.01
but none on biases and norms, linear warmup over the first 10% of steps then linear decay, gradient norm clipped
at 1), seeded, within a budget of steps, cycling over the training items in a seeded order; a progress line
(``headprune.io.progress``) reports the loss. The training items are an ``EvalSet`` (windows of a corpus's
training split, a GLUE task's training pairs): an item that is also one of ``test_items`` is dropped and counted,
so that recovery never sees a test item. What was done is recorded in ``config.headprune_recovery`` (the model
card reports it, with the scores before and after that the caller adds).

Bias compensation (``headprune.models.prune``, FLAP) is the fourth answer, without training:
``bias_compensated`` prunes a copy of the full model keeping the removed heads' mean outputs as biases.
"""
from __future__ import annotations

import copy
import logging
import re
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D

from headprune.evaluation.evalset import EvalSet
from headprune.io.progress import Progress
from headprune.io.registry import Registry
from headprune.training.finetune import warmup_linear_decay

log = logging.getLogger(__name__)
RECOVERY_KEY = "headprune_recovery"  # config entry: how the model was recovered (method, data, steps, scores)
NO_DECAY = ("bias", "norm")  # as BERT's fine-tuning: no weight decay on biases and normalization weights


class RecoveryError(ValueError):
    """Bad input to ``recover``: ``key`` is the argument it names (a caller maps it to its option or config key)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.why = key, message


@dataclass
class RecoverySettings:
    """How a method trains (the defaults: the study's fine-tuning settings, and the usual LoRA and distillation
    ones). ``lora_targets``: module names (the last part, as "q_proj", or whole) LoRA adapts; None, every linear
    projection inside the transformer's layers (attention and MLP). ``modules``: what ``full`` trains (names or
    their prefixes); None, every weight. ``distill_weight``: the KL term's share of the loss, the task loss having
    the rest."""

    steps: int = 100
    lr: float = 1e-4
    batch_size: int = 8
    max_length: int = 128
    seed: int = 0
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] | None = None
    modules: tuple[str, ...] | None = None
    temperature: float = 2.0
    distill_weight: float = 0.5

    def __post_init__(self):
        if not isinstance(self.steps, int) or self.steps < 1:
            raise RecoveryError("steps", f"{self.steps!r}: the step budget must be an integer of at least 1")
        for key in ("lr", "batch_size", "lora_rank", "lora_alpha", "temperature"):
            if not getattr(self, key) > 0:
                raise RecoveryError(key, f"{getattr(self, key)!r}: must be more than 0")
        if not 0 <= self.distill_weight <= 1:
            raise RecoveryError("distill_weight", f"{self.distill_weight!r}: must be between 0 and 1")


METHODS: Registry[type] = Registry("recovery method", base=object)


class Method:
    """A way to recover: what it trains (``prepare``), its loss, and the plain model it leaves (``finish``)."""

    word = ""
    needs_teacher = False

    def prepare(self, model, settings: RecoverySettings):
        """The module trained (``model`` itself, or a wrapper), with only what this method trains left trainable."""
        return model

    def loss(self, trained, batch: dict, teacher, settings: RecoverySettings):
        return trained(**batch).loss

    def finish(self, trained, model):
        """The plain model of the pruned shape that the training leaves."""
        return model


@METHODS.register("lora")
class Lora(Method):
    """peft's LoRA on the attention and MLP projections; merged into the weights by ``finish``."""

    word = "lora"

    def prepare(self, model, settings):
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=settings.lora_rank, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
                            target_modules=lora_targets(model, settings.lora_targets), bias="none")
        self.trainable = {name: p.requires_grad for name, p in model.named_parameters()}
        return get_peft_model(model, config)

    def finish(self, trained, model):
        merged = trained.merge_and_unload()  # W + (alpha / r) B A, the adapters gone: the model's own class
        for name, parameter in merged.named_parameters():
            parameter.requires_grad_(self.trainable.get(name, True))
        return merged


@METHODS.register("full")
class Full(Method):
    """Every weight (or those of ``settings.modules``) trained on the task's loss."""

    word = "full"

    def prepare(self, model, settings):
        if settings.modules:
            chosen = trained_parameters(model, settings.modules)
            for name, parameter in model.named_parameters():
                parameter.requires_grad_(name in chosen)
        return model

    def finish(self, trained, model):
        for parameter in model.parameters():
            parameter.requires_grad_(True)
        return model


@METHODS.register("distill")
class Distill(Full):
    """Every weight (or ``settings.modules``) trained on (1 - w) task loss + w T^2 KL(teacher || student)."""

    word = "distill"
    needs_teacher = True

    def loss(self, trained, batch, teacher, settings):
        output = trained(**batch)
        with torch.no_grad():
            target = teacher(**{k: v for k, v in batch.items() if k != "labels"}).logits
        # the positions the logits are of: the target's in an encoder-decoder, the input's in a language model
        mask = batch.get("decoder_attention_mask", batch.get("attention_mask")) if output.logits.dim() == 3 else None
        kl = distillation_loss(output.logits, target, settings.temperature, mask)
        return (1 - settings.distill_weight) * output.loss + settings.distill_weight * kl


def distillation_loss(student_logits, teacher_logits, temperature: float, mask=None):
    """T^2 KL(softmax(teacher / T) || softmax(student / T)), the KL summed over classes (the vocabulary) and averaged
    over the positions ``mask`` (a 0/1 tensor of the logits' leading shape) keeps, or over all of them.

    >>> distillation_loss(torch.zeros(1, 3), torch.zeros(1, 3), 2.0).item()  # the same distribution: no loss
    0.0
    """
    dtype = torch.promote_types(student_logits.dtype, torch.float32)  # half precision in float32, float64 kept
    student = F.log_softmax(student_logits.to(dtype) / temperature, dim=-1)
    teacher = F.log_softmax(teacher_logits.to(student.dtype) / temperature, dim=-1)
    kl = (teacher.exp() * (teacher - student)).sum(-1)
    if mask is not None:
        kept = mask.to(kl.dtype)
        return (kl * kept).sum() / kept.sum() * temperature ** 2
    return kl.mean() * temperature ** 2


def projections(model) -> list[str]:
    """The names of the linear projections inside the transformer's layers (a module list's numbered entries):
    attention and MLP, not the embeddings, the LM head or a classifier."""
    return [name for name, module in model.named_modules()
            if isinstance(module, (nn.Linear, Conv1D)) and re.search(r"\.\d+\.", f".{name}.")]


def lora_targets(model, targets) -> list[str]:
    """The full names of the modules LoRA adapts: every projection (``targets`` None) or those ending in one of
    ``targets``; a target that names no projection is refused."""
    found = projections(model)
    if targets is None:
        return found
    chosen = []
    for target in targets:
        matching = [name for name in found if name == target or name.endswith(f".{target}")]
        if not matching:
            suffixes = sorted({name.rpartition(".")[2] for name in found})
            raise RecoveryError("lora_targets", f"{target!r} names no linear projection of {type(model).__name__} "
                                                f"(its projections: {', '.join(suffixes)})")
        chosen += [name for name in matching if name not in chosen]
    return chosen


def trained_parameters(model, modules) -> set[str]:
    """The parameters of the modules named (a name or a prefix of names); one that names nothing is refused."""
    names = [name for name, _ in model.named_parameters()]
    chosen = set()
    for module in modules:
        matching = {name for name in names if name.startswith(f"{module}.") or f".{module}." in f".{name}"}
        if not matching:
            raise RecoveryError("modules", f"{module!r} names no module of {type(model).__name__}")
        chosen |= matching
    return chosen


def item_key(source):
    """An item as a hashable value: a window's token ids, a sentence pair, a source sentence."""
    if isinstance(source, (list, tuple)):
        return tuple(item_key(part) for part in source)
    if hasattr(source, "tolist"):
        return item_key(source.tolist())
    return source


def without_test_items(train_items: EvalSet, test_items: EvalSet | None) -> tuple[EvalSet, int]:
    """``train_items`` less every item that is also a test item (the same window, pair or sentence), and how many
    went; refused if none is left."""
    if test_items is None:
        return train_items, 0
    test = {item_key(source) for source in test_items.sources}
    keep = [i for i, source in enumerate(train_items.sources) if item_key(source) not in test]
    dropped = len(train_items) - len(keep)
    if not keep:
        raise RecoveryError("train_items", f"all {len(train_items)} training items are test items")
    if dropped:
        log.warning("recovery: dropped %d of %d training items that are test items", dropped, len(train_items))
    kept = copy.copy(train_items)
    kept.sources = [train_items.sources[i] for i in keep]
    kept.references = [train_items.references[i] for i in keep]
    return kept, dropped


def optimizer_for(trained, settings: RecoverySettings):
    """AdamW as the study's fine-tuning: weight decay but none on biases and norms, over what is trainable."""
    named = [(n, p) for n, p in trained.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if not any(k in n.lower() for k in NO_DECAY)],
               "weight_decay": settings.weight_decay},
              {"params": [p for n, p in named if any(k in n.lower() for k in NO_DECAY)], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=settings.lr)


def training_batches(tokenizer, train_items: EvalSet, settings: RecoverySettings) -> list[dict]:
    from headprune.analyses.sweeps import evalset_batches

    return evalset_batches(tokenizer, train_items, settings.batch_size, settings.max_length)


def method_of(word: str) -> Method:
    try:
        return METHODS.get(word)()
    except KeyError as error:
        raise RecoveryError("method", error.args[0]) from None


def recover(model, tokenizer, train_items: EvalSet, method: str = "lora", steps: int = 100, teacher=None, *,
            test_items: EvalSet | None = None, settings: RecoverySettings | None = None, data: str = "",
            progress: bool = True, **options):
    """Train the pruned ``model`` ``steps`` steps on ``train_items`` by ``method`` (``METHODS``: lora, full, distill;
    see the module docstring) and return it recovered, a plain model of the pruned shape (LoRA merged). ``teacher``:
    the unpruned model, which ``distill`` needs. ``test_items``: the test set, none of whose items is trained on
    (dropped, and counted). ``settings`` or ``options`` (``RecoverySettings``' fields: lr, batch_size, seed,
    lora_rank, lora_alpha, lora_targets, modules, temperature, distill_weight, ...). ``data``: a few words on the
    training data, for the model card. ``config.headprune_recovery`` records what was done.

    >>> pruned = remove_heads(model, [("dec_self", 0, 1)])
    >>> train = evalset_from_text(tokenizer, "the dog sat on the mat and the cat sat on the log . " * 10, window=16)
    >>> recovered = recover(pruned, tokenizer, train, "lora", steps=2, lora_rank=4, test_items=evalset)
    >>> recovered.config.headprune_recovery["method"], type(recovered).__name__
    ('lora', 'LlamaForCausalLM')
    """
    chosen = method_of(method)
    settings = settings or RecoverySettings(steps=steps, **options)
    if chosen.needs_teacher and teacher is None:
        raise RecoveryError("teacher", f"method {method!r} distils from the unpruned model: give it as teacher")
    train_items, dropped = without_test_items(train_items, test_items)
    torch.manual_seed(settings.seed)
    batches = training_batches(tokenizer, train_items, settings)
    device = model.get_input_embeddings().weight.device
    if teacher is not None:
        teacher.eval()
    started = time.perf_counter()
    losses = train(chosen, model, teacher, batches, settings, device, progress)
    recovered = losses.pop("model")
    recovered.eval()
    setattr(recovered.config, RECOVERY_KEY, {
        "method": chosen.word, "steps": settings.steps, "train_items": len(train_items),
        "dropped_test_items": dropped, "test_items_excluded": test_items is not None, "data": data, "seed": settings.seed, "lr": settings.lr,
        "seconds": round(time.perf_counter() - started, 3), **losses,
        **({"lora_rank": settings.lora_rank, "lora_alpha": settings.lora_alpha} if isinstance(chosen, Lora) else {}),
        **({"temperature": settings.temperature, "distill_weight": settings.distill_weight}
           if chosen.needs_teacher else {})})
    return recovered


def train(method: Method, model, teacher, batches: list[dict], settings: RecoverySettings, device,
          progress: bool) -> dict:
    """The training loop: ``settings.steps`` steps over ``batches`` in a seeded order, reshuffled each pass.
    Returns the recovered model and the loss of the first and last steps."""
    trained = method.prepare(model, settings)
    trained.train()
    optimizer = optimizer_for(trained, settings)
    schedule = warmup_linear_decay(optimizer, max(1, int(settings.warmup_fraction * settings.steps)), settings.steps)
    shuffle = torch.Generator().manual_seed(settings.seed)
    counter = Progress(settings.steps, f"recover {type(model).__name__} ({method.word})", "steps", enabled=progress,
                       log=log)
    losses: list[float] = []
    counter.note = lambda: f"loss {losses[-1]:.4f}" if losses else ""
    order: list[int] = []
    for _ in range(settings.steps):
        if not order:
            order = torch.randperm(len(batches), generator=shuffle).tolist()
        batch = {k: v.to(device) for k, v in batches[order.pop(0)].items()}
        loss = method.loss(trained, batch, teacher, settings)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in trained.parameters() if p.requires_grad], settings.clip_norm)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        counter.update()
    counter.close()
    return {"model": method.finish(trained, model), "first_loss": round(losses[0], 6), "last_loss": round(losses[-1], 6)}


def bias_compensated(full_model, heads, batches: list[dict], *, data: str = "", progress: bool = True):
    """A pruned copy of ``full_model`` without ``heads`` ([(attn_type, layer, head)]) whose removed heads' mean
    outputs over ``batches`` (training data, never the test set) are kept in their layers' output-projection
    biases (``headprune.models.prune.prune_heads(..., constants=)``): the answer without training."""
    from headprune.analyses.sweeps import heads_by_layer
    from headprune.models.prune import prune_heads
    from headprune.scoring.constants import mean_constants

    constants = mean_constants(full_model, batches, data=data, progress=progress)
    return prune_heads(copy.deepcopy(full_model), heads_by_layer(heads), constants=constants)


def export_recovered(model, tokenizer, folder, record: dict, *, base_model: str | None = None, **card):
    """Save the recovered ``model`` as a pruned one leaves the project: a stock checkpoint (transformers' own class
    with fewer heads, no remote code) where its layout allows, else the remote-code export
    (``headprune.models.export.save_pruned``); the model card says how it was recovered (``record``: the method,
    data, steps, and the scores before and after; ``card``: the rest of the card, criterion and curve_point as
    ``save_pruned`` takes them). Returns (the folder, True where it is a stock checkpoint)."""
    from headprune.analyses.layouts import LAYOUTS, UNIFORM
    from headprune.models.export import save_pruned
    from headprune.models.stock import save_stock

    try:  # a smaller stock checkpoint holds a uniform layout only
        return save_stock(model, tokenizer, folder, base_model=base_model, recovery=record,
                          layout_line=LAYOUTS[UNIFORM].card_line(), **card), True
    except ValueError as why:  # a free layout, bias compensation, a family whose class cannot hold the heads
        log.info("recovered model: no stock checkpoint (%s); saved with remote code", str(why).splitlines()[0])
        return save_pruned(model, tokenizer, folder, base_model=base_model, recovery=record, **card), False


# --- The recovery stage's table (rules/recovery.smk) ----------------------------------------------------------

BIAS_COMPENSATION = "bias_compensation"  # recovery.csv's method of the rows without training (steps 0)
# recovery.csv's columns, in their order
RECOVERY_COLUMNS = ("study", "percent_pruned", "heads_pruned", "method", "metric", "score_unpruned", "score_pruned",
                    "score_recovered", "steps", "train_items", "seconds", "seed")


def curve_points(curve, steps: dict, percents) -> list[dict]:
    """Each of ``percents`` as a point of the importance order's pruning curve (free layout; its step at or below the
    percent, the first step being 0%): the heads removed
    ([(attn_type, layer, head)]), its score and the unpruned one. ``curve``: the prune job's table; ``steps``: its
    outputs.json."""
    from headprune.analyses.criteria import reference_order
    from headprune.analyses.layouts import paper_layout

    free = curve[(curve["order"] == reference_order()) & (curve["layout"] == paper_layout())]
    unpruned = float(free.loc[free["percent_pruned"] == 0, "score"].iloc[0])
    points = []
    for percent in percents:  # the curve's step at or below it (pruning.step_percent may not divide it)
        step = max((s for s in steps["orders"][reference_order()] if s["percent_pruned"] <= percent + 1e-6),
                   key=lambda s: s["percent_pruned"])
        if abs(step["percent_pruned"] - percent) > 1e-6:
            log.info("recovery at %g%%: the pruning curve's step at or below it, %g%%", percent, step["percent_pruned"])
        heads = [(t, int(layer), int(head)) for t, layer, head in (name.rsplit("-", 2) for name in step["removed"])]
        score = float(free.loc[(free["percent_pruned"] - step["percent_pruned"]).abs() < 1e-6, "score"].iloc[0])
        points.append({"percent_pruned": float(step["percent_pruned"]), "heads": heads, "score_pruned": score,
                       "score_unpruned": unpruned, "metric": free["metric"].iloc[0]})
    return points


def recovery_table(full, tokenizer, train: EvalSet, test: EvalSet, points: list[dict], methods, settings, *,
                   study: str = "", export: str | None = None, eval_settings=None, progress: bool = True):
    """recovery.csv's rows (``RECOVERY_COLUMNS``): at each point, the full model pruned there, recovered by each of
    ``methods`` (a copy each; ``full`` is the teacher) and by bias compensation, scored on ``test``. Returns (the
    table, the model of ``export``'s method at the first point, with its record and scores, or None)."""
    import pandas as pd

    from headprune.evaluation.runs import EvalSettings, run, score
    from headprune.analyses.sweeps import remove_heads

    eval_settings = eval_settings or EvalSettings(progress=progress)
    scored = lambda model: float(score(test, run(model, tokenizer, test, None, eval_settings),  # noqa: E731
                                       eval_settings.bleu))
    rows, kept = [], None
    for index, point in enumerate(points):
        base = {"study": study, "percent_pruned": point["percent_pruned"], "heads_pruned": len(point["heads"]),
                "metric": point["metric"], "score_unpruned": point["score_unpruned"],
                "score_pruned": point["score_pruned"], "seed": settings.seed}
        for method in methods:
            pruned = remove_heads(copy.deepcopy(full), point["heads"])
            recovered = recover(pruned, tokenizer, train, method, teacher=full, test_items=test, settings=settings,
                                progress=progress, data=getattr(train, "name", "") or "")
            record = getattr(recovered.config, RECOVERY_KEY)
            rows.append({**base, "method": method, "score_recovered": scored(recovered), "steps": settings.steps,
                         "train_items": record["train_items"], "seconds": record["seconds"]})
            log.info("%s at %g%% pruned: %s %.4g -> %.4g by %s (%d steps)", study, point["percent_pruned"],
                     point["metric"], point["score_pruned"], rows[-1]["score_recovered"], method, settings.steps)
            if index == 0 and method == export:
                record.update({key: rows[-1][key] for key in ("metric", "score_unpruned", "score_pruned",
                                                               "score_recovered")})
                kept = recovered
        rows.append(bias_row(full, tokenizer, train, test, point, base, settings, scored, progress))
    return pd.DataFrame(rows, columns=list(RECOVERY_COLUMNS)), kept


def bias_row(full, tokenizer, train, test, point, base: dict, settings, scored, progress) -> dict:
    """Bias compensation's row: the removed heads' mean outputs over the training items kept as biases."""
    started = time.perf_counter()
    items, _ = without_test_items(train, test)
    compensated = bias_compensated(full, point["heads"], training_batches(tokenizer, items, settings),
                                   data="recovery training items", progress=progress)
    return {**base, "method": BIAS_COMPENSATION, "score_recovered": scored(compensated), "steps": 0,
            "train_items": len(items), "seconds": round(time.perf_counter() - started, 3)}
