"""Train a fairseq-architecture translation transformer from text, keeping checkpoints on the way.

Section 6 of the paper (Figure 5) trains an IWSLT 2014 de-en transformer (6 layers, 8 heads)
and prunes the checkpoints of several epochs, to see when the unimportant heads appear. The
same loop trains the offline demo's tiny en->fr model (``headprune.demo.models``) with other settings.

The model is fairseq's transformer (sinusoidal positions, scaled embeddings), post-norm in
transformers' FSMT or, with ``normalize_before`` (the authors' IWSLT setting), pre-norm in
``headprune.models.prenorm.PreNormTransformer``, with all embeddings shared over one joined dictionary. Training is fairseq's
teacher forcing: source = tokens + </s>, decoder input = </s> + target tokens, labels = target
tokens + </s>. Options follow fairseq's names:

- learning rate schedule: ``linear`` (linear warmup, then linear decay to zero: the demo) or
  ``inverse_sqrt`` (fairseq's: linear warmup from ``warmup_init_lr`` over ``warmup_updates``,
  then lr * sqrt(warmup_updates / update));
- batches: ``batch_size`` sentences, or, with ``max_tokens``, fairseq's length-bucketed batches
  (at most max_tokens = sentences x longest side; the batches are formed once and their order
  is shuffled every epoch);
- loss: cross entropy over target tokens, optionally label-smoothed as fairseq's
  label_smoothed_cross_entropy (eps_i = eps / (V - 1));
- Adam (betas 0.9, 0.98), decoupled weight decay (fairseq's Adam), gradient-norm clipping.

``on_checkpoint(epoch, model, record)`` is called at the end of each epoch in
``checkpoint_epochs`` (and only then); ``write_translation_tarball`` writes such a checkpoint as
a fairseq tarball that every loader of the pipeline reads.
"""
from __future__ import annotations

import copy
import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping

import pandas as pd
import torch
import torch.nn.functional as F

from headprune.data.datasets import read_lines
from headprune.io.progress import Progress
from headprune.models.fairseq import (EOS_ID, FAIRSEQ_SPECIAL_TOKENS, PAD_ID, build_fsmt_tokenizer, config_from_fairseq_options,
                      is_pre_norm, model_class_for, read_fairseq_dict, write_fairseq_tarball)
from headprune.training.finetune import restores_torch_threads, warmup_linear_decay

LR_SCHEDULES = ("linear", "inverse_sqrt")
log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Corpus folders and checkpoints
# ---------------------------------------------------------------------------------------------


def corpus_folder(corpus, src_lang: str, tgt_lang: str) -> Path:
    """The folder holding train.{src,tgt}, bpecodes and dict.{src,tgt}.txt.

    ``corpus`` is that folder, or the dict of paths ``headprune.demo.corpora.make_translation_corpus``
    returns; ``headprune.data.iwslt.prepare_iwslt`` writes the same layout.
    """
    folder = Path(corpus["bpecodes"]).parent if isinstance(corpus, Mapping) else Path(corpus)
    for name in (f"train.{src_lang}", f"train.{tgt_lang}", "bpecodes", f"dict.{src_lang}.txt", f"dict.{tgt_lang}.txt"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder}: missing '{name}' (expected a prepared translation corpus)")
    return folder


def read_dict_entries(path) -> list[tuple[str, int]]:
    """(token, count) pairs of a fairseq dict.xx.txt, so a written tarball keeps the counts."""
    return [(token, int(count)) for token, count in (line.rsplit(" ", 1) for line in read_lines(path) if line)]


def write_translation_tarball(model, corpus, out_tarball, folder_name: str, src_lang: str = "en",
                              tgt_lang: str = "fr") -> Path:
    """Write a trained model with its corpus's dictionaries and BPE codes as a fairseq .tar.bz2.

    The tarball holds ``folder_name/`` with model.pt, dict.{src,tgt}.txt and bpecodes, like
    fairseq's published models. A model on a GPU is copied to the CPU first (the training run
    keeps its own copy where it is).
    """
    folder = corpus_folder(corpus, src_lang, tgt_lang)
    if any(p.device.type != "cpu" for p in model.parameters()):
        model = copy.deepcopy(model).to("cpu")
    return Path(write_fairseq_tarball(
        model, read_dict_entries(folder / f"dict.{src_lang}.txt"), read_dict_entries(folder / f"dict.{tgt_lang}.txt"),
        folder / "bpecodes", out_tarball, folder_name, src_lang=src_lang, tgt_lang=tgt_lang,
    ))


# ---------------------------------------------------------------------------------------------
# Pieces of the training loop
# ---------------------------------------------------------------------------------------------


def fairseq_init_(model) -> None:
    """Initialize like fairseq's transformer: xavier-uniform projections, N(0, d^-1/2) embeddings.

    With scaled embeddings (x sqrt(d)) this puts token embeddings on the same scale as the
    sinusoidal positions, which trains much faster than transformers' default N(0, 0.02).
    """
    for name, param in model.named_parameters():
        if "embed_positions" in name:
            continue
        if "embed_tokens" in name or name == "model.shared.weight":  # M2M100 names its tied table "shared"
            torch.nn.init.normal_(param, mean=0.0, std=param.shape[1] ** -0.5)
            with torch.no_grad():
                param[PAD_ID].zero_()
        elif "layer_norm" in name:
            torch.nn.init.ones_(param) if name.endswith("weight") else torch.nn.init.zeros_(param)
        elif name.endswith("weight"):
            torch.nn.init.xavier_uniform_(param)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(param)


def pad_batch(sequences: list[list[int]], pad_id: int = PAD_ID) -> torch.Tensor:
    width = max(len(s) for s in sequences)
    return torch.tensor([s + [pad_id] * (width - len(s)) for s in sequences], dtype=torch.long)


def inverse_sqrt_schedule(optimizer, warmup_updates: int, warmup_init_lr: float = 1e-7):
    """fairseq's inverse_sqrt: lr rises linearly from warmup_init_lr to the optimizer's lr over
    warmup_updates updates, then decays as lr * sqrt(warmup_updates / update)."""
    if warmup_updates < 1:
        raise ValueError(f"warmup_updates must be >= 1, got {warmup_updates}")
    peak = optimizer.param_groups[0]["lr"]
    start = min(warmup_init_lr, peak) / peak

    def factor(update: int) -> float:
        if update < warmup_updates:
            return start + update * (1.0 - start) / warmup_updates
        return math.sqrt(warmup_updates / max(update, 1))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def token_batches(source_lengths: list[int], target_lengths: list[int], max_tokens: int,
                  seed: int = 0) -> list[list[int]]:
    """fairseq's batch_by_size: sentences sorted by length (random tie order), cut into batches
    whose size x longest side (source or target, in tokens) stays within max_tokens.

    A pair longer than max_tokens on its own gets a batch of one.
    """
    order = list(range(len(source_lengths)))
    random.Random(seed).shuffle(order)
    order.sort(key=lambda i: (source_lengths[i], target_lengths[i]))
    batches, current, longest = [], [], 0
    for i in order:
        size = max(source_lengths[i], target_lengths[i])
        if current and max(longest, size) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    if current:
        batches.append(current)
    return batches


def translation_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0):
    """(loss to optimize, nll, number of target tokens): means over the non-pad target tokens.

    Without smoothing the loss is the plain cross entropy (the nll); with it, fairseq's
    label_smoothed_nll_loss: (1 - eps - eps_i) * nll + eps_i * sum over the vocabulary of -log p,
    eps_i = eps / (V - 1).
    """
    flat_logits, flat_labels = logits.reshape(-1, logits.size(-1)), labels.reshape(-1)
    tokens = int(flat_labels.ne(PAD_ID).sum())
    if not label_smoothing:
        loss = F.cross_entropy(flat_logits, flat_labels, ignore_index=PAD_ID)
        return loss, loss, tokens
    keep = flat_labels.ne(PAD_ID)
    lprobs = F.log_softmax(flat_logits[keep].float(), dim=-1)
    nll = -lprobs.gather(-1, flat_labels[keep].unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.sum(-1)
    eps_i = label_smoothing / (lprobs.size(-1) - 1)
    loss = ((1.0 - label_smoothing - eps_i) * nll + eps_i * smooth).mean()
    return loss, nll.mean(), tokens


def _checked_epochs(checkpoint_epochs: Iterable[int], epochs: int) -> list[int]:
    wanted = sorted({int(e) for e in checkpoint_epochs})
    bad = [e for e in wanted if not 1 <= e <= epochs]
    if bad:
        raise ValueError(f"checkpoint epochs {bad} are outside 1..{epochs} (the number of training epochs)")
    return wanted


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------


@dataclass
class TrainingRun:
    """A finished run: the model (eval mode), the source tokenizer, one record per epoch."""

    model: object
    tokenizer: object
    history: list[dict] = field(default_factory=list)

    def history_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.history)


@restores_torch_threads
def train_translation_model(
    corpus,
    *,
    layers: int = 2,
    heads: int = 4,
    d_model: int = 64,
    ffn: int = 128,
    epochs: int = 8,
    seed: int = 0,
    batch_size: int = 64,
    max_tokens: int | None = None,
    lr: float = 3e-3,
    lr_schedule: str = "linear",
    warmup_fraction: float = 0.05,
    warmup_updates: int | None = None,
    warmup_init_lr: float = 1e-7,
    betas: tuple[float, float] = (0.9, 0.98),
    weight_decay: float = 0.0,
    clip_norm: float | None = 1.0,
    label_smoothing: float = 0.0,
    dropout: float = 0.1,
    attention_dropout: float = 0.0,
    activation_dropout: float = 0.0,
    normalize_before: bool = False,
    src_lang: str = "en",
    tgt_lang: str = "fr",
    valid: tuple | None = None,
    checkpoint_epochs: Iterable[int] = (),
    on_checkpoint: Callable[[int, object, dict], None] | None = None,
    device="cpu",
    amp: bool = False,
    max_positions: int = 1024,
    num_threads: int | None = 1,
    progress: bool = True,
) -> TrainingRun:
    """Train a translation transformer on a prepared corpus folder; return a TrainingRun.

    ``corpus``: a folder (or make_translation_corpus's dict) with train.{src,tgt} (detokenized
    text, one sentence per line), bpecodes and ONE joined dictionary as dict.{src,tgt}.txt.
    Text is tokenized with the tokenizers the pipeline builds from a model folder (Moses + BPE +
    dictionary; the target with the target language's Moses rules, as fairseq's data was).

    ``valid``: optional (source file, reference file); its loss is recorded after every epoch.
    ``checkpoint_epochs`` / ``on_checkpoint``: see the module docstring. ``history`` has one
    record per epoch: epoch, updates, lr, train_loss, train_nll, valid_nll (or None), seconds.

    Schedules: ``linear`` warms up over ``warmup_updates`` (default: warmup_fraction of all
    updates) then decays linearly to 0; ``inverse_sqrt`` needs ``warmup_updates``.
    ``amp``: bfloat16 autocast on a CUDA device (ignored on the CPU).

    num_threads defaults to 1: a tiny model gains little from intra-op parallelism, and on a
    busy 2-core machine a second thread made training 5x slower (spin-waiting).
    """
    wanted_epochs = _checked_settings(lr_schedule, warmup_updates, checkpoint_epochs, epochs, on_checkpoint)
    device = torch.device(device)
    torch.manual_seed(seed)
    folder = corpus_folder(corpus, src_lang, tgt_lang)
    vocab_size = _joined_vocabulary_size(folder, src_lang, tgt_lang)
    pairs = _TranslationPairs(folder, src_lang, tgt_lang, max_positions)
    train_pairs = pairs.encoded(folder / f"train.{src_lang}", folder / f"train.{tgt_lang}")
    if not train_pairs:
        raise ValueError(f"{folder}: no training pairs")
    valid_pairs = pairs.encoded(*valid) if valid else None

    model = _initialized_model(_fairseq_options(layers, heads, d_model, ffn, dropout, attention_dropout,
                                                activation_dropout, normalize_before, max_positions),
                               vocab_size, [src_lang, tgt_lang], device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = _adam(trainable, lr, betas, weight_decay)
    fixed_batches = None
    if max_tokens:
        fixed_batches = token_batches([len(s) for s, _ in train_pairs], [len(t) for _, t in train_pairs], max_tokens, seed)
    total_steps = epochs * (len(fixed_batches) if fixed_batches else math.ceil(len(train_pairs) / batch_size))
    schedule = _lr_schedule(optimizer, lr_schedule, total_steps, warmup_updates, warmup_fraction, warmup_init_lr)
    trainer = _Trainer(model, trainable, optimizer, schedule, device, bool(amp) and device.type == "cuda",
                       batch_size, max_tokens, label_smoothing, clip_norm)
    counter = Progress(total_steps, f"train translation model, {epochs} epochs", "updates", enabled=progress, log=log)
    history = trainer.train(epochs, train_pairs, valid_pairs, fixed_batches, random.Random(seed), counter,
                            wanted_epochs, on_checkpoint)
    return TrainingRun(_ready_for_use(model), pairs.source_tokenizer, history)


def _checked_settings(lr_schedule: str, warmup_updates, checkpoint_epochs, epochs: int, on_checkpoint) -> list[int]:
    """The epochs to checkpoint, once the schedule and checkpoint settings are known to make sense."""
    if lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, not {lr_schedule!r}")
    if lr_schedule == "inverse_sqrt" and not warmup_updates:
        raise ValueError("the inverse_sqrt schedule needs warmup_updates")
    wanted_epochs = _checked_epochs(checkpoint_epochs, epochs)
    if wanted_epochs and on_checkpoint is None:
        raise ValueError("checkpoint_epochs given without an on_checkpoint callback")
    return wanted_epochs


def _joined_vocabulary_size(folder: Path, src_lang: str, tgt_lang: str) -> int:
    dict_tokens = read_fairseq_dict(folder / f"dict.{src_lang}.txt")
    if dict_tokens != read_fairseq_dict(folder / f"dict.{tgt_lang}.txt"):
        raise ValueError("the model shares all embeddings: it needs one joined dictionary")
    return len(FAIRSEQ_SPECIAL_TOKENS) + len(dict_tokens)


class _TranslationPairs:
    """Text files to (source ids, label ids) pairs, with the tokenizers the pipeline builds from a model
    folder (Moses + BPE + dictionary)."""

    def __init__(self, folder: Path, src_lang: str, tgt_lang: str, max_positions: int):
        self.source_tokenizer = build_fsmt_tokenizer(folder, src_lang, tgt_lang)
        self.target_tokenizer = build_fsmt_tokenizer(folder, tgt_lang, src_lang)
        self.max_positions = max_positions

    def encoded(self, source_path, target_path) -> list[tuple[list[int], list[int]]]:
        sources, targets = read_lines(source_path), read_lines(target_path)
        if len(sources) != len(targets):
            raise ValueError(f"{source_path} has {len(sources)} lines but {target_path} has {len(targets)}")
        # Both tokenizers append </s>: exactly fairseq's source and label layout.
        pairs = [(self.source_tokenizer(s)["input_ids"], self.target_tokenizer(t)["input_ids"])
                 for s, t in zip(sources, targets)]
        # fairseq skips pairs longer than the model's positions (skip_invalid_size_inputs_valid_test)
        return [p for p in pairs if len(p[0]) <= self.max_positions and len(p[1]) <= self.max_positions]


def _fairseq_options(layers: int, heads: int, d_model: int, ffn: int, dropout: float, attention_dropout: float,
                     activation_dropout: float, normalize_before: bool, max_positions: int) -> dict:
    """The architecture as fairseq-train's options: the loader's own mapping then picks the class
    (FSMT post-norm, or M2M100 for --encoder/decoder-normalize-before)."""
    options = {"arch": "transformer", "share_all_embeddings": True, "share_decoder_input_output_embed": True,
               "dropout": dropout, "attention_dropout": attention_dropout, "activation_dropout": activation_dropout,
               "max_source_positions": max_positions, "max_target_positions": max_positions}
    for side in ("encoder", "decoder"):
        options.update({f"{side}_embed_dim": d_model, f"{side}_ffn_embed_dim": ffn, f"{side}_layers": layers,
                        f"{side}_attention_heads": heads, f"{side}_normalize_before": normalize_before})
    return options


def _initialized_model(options: dict, vocab_size: int, langs: list[str], device: torch.device):
    config = config_from_fairseq_options(options, vocab_size, vocab_size, langs)
    model = model_class_for(config)(config)
    fairseq_init_(model)
    for name, param in model.named_parameters():
        if "embed_positions" in name:  # sinusoidal, not learned
            param.requires_grad_(False)
    return model.to(device)


def _adam(trainable: list, lr: float, betas, weight_decay: float) -> torch.optim.Optimizer:
    if weight_decay:  # fairseq's Adam decays weights decoupled from the gradient, like AdamW
        return torch.optim.AdamW(trainable, lr=lr, betas=tuple(betas), weight_decay=weight_decay)
    return torch.optim.Adam(trainable, lr=lr, betas=tuple(betas))


def _lr_schedule(optimizer, lr_schedule: str, total_steps: int, warmup_updates: int | None, warmup_fraction: float,
                 warmup_init_lr: float):
    if lr_schedule == "linear":
        warmup = warmup_updates or max(1, int(warmup_fraction * total_steps))
        return warmup_linear_decay(optimizer, warmup, total_steps)
    return inverse_sqrt_schedule(optimizer, warmup_updates, warmup_init_lr)


def _epoch_batches(shuffle_rng: random.Random, fixed_batches: list[list[int]] | None, pairs: int,
                   batch_size: int) -> list[list[int]]:
    """This epoch's batches (pair indices): the token batches in a new order, or a new shuffle cut into batches."""
    if fixed_batches is not None:
        batches = list(fixed_batches)
        shuffle_rng.shuffle(batches)
        return batches
    order = list(range(pairs))
    shuffle_rng.shuffle(order)
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


@dataclass
class _Trainer:
    """A model in training: its optimizer and schedule, how it batches and scores pairs, the updates so far."""

    model: torch.nn.Module
    trainable: list
    optimizer: torch.optim.Optimizer
    schedule: object
    device: torch.device
    use_amp: bool
    batch_size: int
    max_tokens: int | None
    label_smoothing: float
    clip_norm: float | None
    updates: int = 0

    def train(self, epochs: int, train_pairs: list, valid_pairs: list | None, fixed_batches: list | None,
              shuffle_rng: random.Random, counter: Progress, wanted_epochs: list[int], on_checkpoint) -> list[dict]:
        """One record per epoch; the model is handed to ``on_checkpoint`` in eval mode after each wanted epoch."""
        history = []
        self.model.train()
        last = {"epoch": 0, "loss": float("nan")}  # for the progress lines
        counter.note = lambda: f"epoch {last['epoch']}, loss {last['loss']:.3f}"
        for epoch in range(1, epochs + 1):
            started = time.perf_counter()
            loss_sum = nll_sum = 0.0
            token_sum = 0
            for batch in _epoch_batches(shuffle_rng, fixed_batches, len(train_pairs), self.batch_size):
                loss_value, nll_value, tokens = self.update([train_pairs[i] for i in batch])
                loss_sum += loss_value * tokens
                nll_sum += nll_value * tokens
                token_sum += tokens
                last["epoch"], last["loss"] = epoch, loss_value
                counter.update()
            record = {"epoch": epoch, "updates": self.updates, "lr": self.optimizer.param_groups[0]["lr"],
                      "train_loss": loss_sum / max(token_sum, 1), "train_nll": nll_sum / max(token_sum, 1),
                      "valid_nll": self.valid_nll(valid_pairs) if valid_pairs else None,
                      "seconds": time.perf_counter() - started}
            history.append(record)
            if epoch in wanted_epochs:
                self.model.eval()
                on_checkpoint(epoch, self.model, record)
                self.model.train()
        counter.close()
        return history

    def update(self, batch_pairs: list) -> tuple[float, float, int]:
        """One optimizer step on a batch: (loss, nll, target tokens) of the batch before the step."""
        logits, labels = self.logits(batch_pairs)
        loss, nll, tokens = translation_loss(logits, labels, self.label_smoothing)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.trainable, self.clip_norm)
        self.optimizer.step()
        self.schedule.step()
        self.updates += 1
        loss_value = loss.item()
        return loss_value, loss_value if nll is loss else nll.item(), tokens

    def logits(self, batch_pairs: list) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: (logits, labels) of the batch, the decoder reading </s> + the target tokens."""
        input_ids = pad_batch([p[0] for p in batch_pairs]).to(self.device)
        labels = pad_batch([p[1] for p in batch_pairs]).to(self.device)
        decoder_input_ids = pad_batch([[EOS_ID] + p[1][:-1] for p in batch_pairs]).to(self.device)
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.use_amp):
            logits = self.model(
                input_ids=input_ids,
                attention_mask=input_ids.ne(PAD_ID).long(),
                decoder_input_ids=decoder_input_ids,
                use_cache=False,  # FSMT only applies its causal mask without the cache
            ).logits
        return logits, labels

    @torch.no_grad()
    def valid_nll(self, pairs: list) -> float:
        """Mean nll per target token over ``pairs`` (in eval mode, back in train mode after)."""
        self.model.eval()
        total, tokens = 0.0, 0
        if self.max_tokens:
            batches = token_batches([len(s) for s, _ in pairs], [len(t) for _, t in pairs], self.max_tokens)
        else:
            batches = [list(range(i, min(i + self.batch_size, len(pairs)))) for i in range(0, len(pairs), self.batch_size)]
        for batch in batches:
            logits, labels = self.logits([pairs[i] for i in batch])
            _, nll, n = translation_loss(logits, labels)
            total += nll.item() * n
            tokens += n
        self.model.train()
        return total / max(tokens, 1)


def _ready_for_use(model):
    """The trained model in eval mode, its cache settings as headprune.models.fairseq's loader leaves them."""
    model.eval()
    if not is_pre_norm(model.config):
        # FSMT builds its causal decoder mask only without the cache, so plain forward passes must not use
        # it; generate() still does.
        model.config.use_cache = False
        model.generation_config.use_cache = True
    return model


def fit_translation_model(corpus_paths, **options):
    """Train the translation model in memory; returns (model in eval mode, source tokenizer).

    The demo's settings are train_translation_model's defaults: plain cross entropy (no label
    smoothing), Adam with linear warmup then linear decay, gradient norm clipped at 1, dropout
    0.1 (fairseq's default; it spreads the work over heads, so that, as in real models, many
    heads are redundant). Any option of train_translation_model can be passed.
    """
    run = train_translation_model(corpus_paths, **options)
    return run.model, run.tokenizer
