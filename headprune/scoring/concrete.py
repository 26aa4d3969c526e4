"""Learned head gates (Voita et al., 2019): Hard Concrete gates under an L0 penalty.

Beyond the paper: Michel et al. rank heads by I_h; Voita et al. let the data decide which heads to
drop. Every head h gets a scalar gate g_h on its output, before the output projection (the same
place as the paper's xi_h, ``headprune.models.masking.gated``), drawn from a Hard Concrete distribution
(Louizos et al., 2018) with one learned parameter log_a per head. Following Voita's code
(lena-voita/the-story-of-heads, lib/layers/concrete_gate.py), with temperature T = 0.33 and
stretch limits (l, r) = (-0.1, 1.1):

- training: u ~ U(eps, 1 - eps), s = sigmoid((log u - log(1 - u) + log_a) / T),
  g = clip(s * (r - l) + l, 0, 1): a fresh sample per head per training batch. Stretching past
  [0, 1] and clipping gives g exact zeros and ones with non-zero probability, so a head can be
  switched off completely while log_a still gets gradients through the samples in between.
- penalty: the expected L0 norm, sum_h P(g_h != 0) = sum_h sigmoid(log_a_h - T log(-l / r)),
  each probability clipped to [eps, 1 - eps] as in her code. Her loss takes the *mean* over the
  gated attention layers of each layer's sum over heads (each layer's gate adds lambda * sum to a
  collection, ``ConcreteProblem`` averages the collection), so ``l0_penalty`` is
  (sum over every gated layer of every attention type of sum_h P(open)) / (number of gated layers).
  With all three attention types gated, lambda weighs one "average layer" of heads, not all heads.
- test time: the gate is deterministic, clip(sigmoid(log_a) * (r - l) + l, 0, 1).

Which heads are kept. Voita counts a head as alive when its test-time gate is non-zero (her
``get_sparsity_rate``, the heads her notebook lists as dead have gate 0) and reports that the gates
converge to exactly 0 or 1, so the pruned model is a standard Transformer with a subset of heads.
``kept`` follows her: kept iff deterministic gate > 0, i.e. log_a > log(-l / r) = -log(11) for the
default stretch; a kept head then runs at gate 1. ``threshold=0.5`` gives the rounding the
differentiable-subset-pruning port (Li et al., 2021) uses. ``kept_heads_table`` shows the gate
values, so heads that did not settle at 0 or 1 are visible.

Closed forms. The concrete variable s has CDF F(x) = sigmoid(T logit(x) - log_a) (s <= x iff
logit(u) <= T logit(x) - log_a, and logit(u) is standard logistic). g = 0 iff s <= -l / (r - l),
whose logit is log(-l / r); g = 1 iff s >= (1 - l) / (r - l), whose logit is log((1 - l) / (r - 1)).
The eps of the sampler moves these by at most eps and is ignored.
"""
from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from headprune.io.progress import counted
from headprune.models.heads import adapter_for, head_shape
from headprune.models.masking import Masking, gated

TEMPERATURE = 0.33
STRETCH = (-0.1, 1.1)
EPS = 1e-6
# Gates start nearly open: log_a = 3 gives a test-time gate of exactly 1 (above log(11) = 2.40), so
# training starts from the unpruned model, and P(open) = 0.98, P(g = 1) = 0.90 during training. Voita
# initialised log_a at random around 0 (TF's glorot_uniform on her [1, heads, 1, 1] variable:
# U(-sqrt(3 / heads), sqrt(3 / heads))), i.e. half-open gates; init_log_a=None reproduces that.
INIT_LOG_A = 3.0
KEEP_THRESHOLD = 0.0  # kept iff the test-time gate is above this (Voita: non-zero)
log = logging.getLogger(__name__)


# --- Closed forms, any log_a tensor ------------------------------------------------------------

def prob_nonzero(log_a: torch.Tensor, temperature: float = TEMPERATURE, stretch=STRETCH) -> torch.Tensor:
    """P(g != 0) = sigmoid(log_a - T log(-l / r)): the L0 term of one gate (unclipped)."""
    low, high = stretch
    return torch.sigmoid(log_a - temperature * math.log(-low / high))


def prob_zero(log_a: torch.Tensor, temperature: float = TEMPERATURE, stretch=STRETCH) -> torch.Tensor:
    """P(g == 0) = F(-l / (r - l)) = sigmoid(T log(-l / r) - log_a)."""
    low, high = stretch
    return torch.sigmoid(temperature * math.log(-low / high) - log_a)


def prob_one(log_a: torch.Tensor, temperature: float = TEMPERATURE, stretch=STRETCH) -> torch.Tensor:
    """P(g == 1) = 1 - F((1 - l) / (r - l)) = sigmoid(log_a - T log((1 - l) / (r - 1)))."""
    low, high = stretch
    return torch.sigmoid(log_a - temperature * math.log((1 - low) / (high - 1)))


def expected_gate(log_a: torch.Tensor, temperature: float = TEMPERATURE, stretch=STRETCH,
                  nodes: int = 64) -> torch.Tensor:
    """E[g], the mean of the clipped stretched concrete, by numerical integration over u.

    E[g] = int_0^1 g(u) du. g is 0 for u below P(g == 0) and 1 above 1 - P(g == 1), so
    E[g] = P(g == 1) + int over the middle of the stretched concrete. That middle part is
    integrated in z = logit(u) (du = sigmoid'(z) dz), where the integrand is smooth, with
    ``nodes``-point Gauss-Legendre: exact to float64 rounding for any log_a.
    """
    low, high = stretch
    log_a = torch.as_tensor(log_a, dtype=torch.float64)
    z0 = temperature * math.log(-low / high) - log_a  # u = sigmoid(z0): g starts to leave 0
    z1 = temperature * math.log((1 - low) / (high - 1)) - log_a  # g reaches 1
    x, w = (torch.as_tensor(a, dtype=torch.float64) for a in np.polynomial.legendre.leggauss(nodes))
    half = (z1 - z0)[..., None] / 2
    z = (z0 + z1)[..., None] / 2 + half * x
    stretched = torch.sigmoid((z + log_a[..., None]) / temperature) * (high - low) + low
    density = torch.sigmoid(z) * torch.sigmoid(-z)
    return prob_one(log_a, temperature, stretch) + (half * w * stretched * density).sum(-1)


def deterministic_gate(log_a: torch.Tensor, stretch=STRETCH) -> torch.Tensor:
    """The test-time gate: clip(sigmoid(log_a) * (r - l) + l, 0, 1)."""
    low, high = stretch
    return (torch.sigmoid(log_a) * (high - low) + low).clamp(0, 1)


# --- The gates of a model ----------------------------------------------------------------------

class HardConcreteGates(nn.Module):
    """One log_a per head, a (layers, heads) tensor per attention type, as ``full_gates`` shapes them.

    ``sample``, ``deterministic`` and ``kept`` return dicts attn_type -> (layers, heads) that
    ``headprune.models.masking.gated`` takes.
    """

    def __init__(self, shape: dict[str, tuple[int, int]], *, temperature: float = TEMPERATURE,
                 stretch: tuple[float, float] = STRETCH, eps: float = EPS, init_log_a: float | None = INIT_LOG_A,
                 seed: int = 0):
        super().__init__()
        low, high = stretch
        if not (low < 0 and high > 1):
            raise ValueError(f"stretch limits must be below 0 and above 1 (exact zeros and ones), got {stretch}")
        self.temperature, self.stretch, self.eps = float(temperature), (float(low), float(high)), float(eps)
        generator = torch.Generator().manual_seed(seed)
        self.log_a = nn.ParameterDict()
        for attn_type, (layers, heads) in shape.items():
            if init_log_a is None:  # Voita's glorot_uniform init, see INIT_LOG_A
                limit = math.sqrt(3 / heads)
                init = (torch.rand(layers, heads, generator=generator) * 2 - 1) * limit
            else:
                init = torch.full((layers, heads), float(init_log_a))
            self.log_a[attn_type] = nn.Parameter(init)

    @classmethod
    def for_model(cls, model, **options) -> HardConcreteGates:
        """Gates for every attention type the model's head adapter exposes."""
        return cls(head_shape(model), **options)

    @property
    def num_layers(self) -> int:
        """Gated attention layers, all attention types together: what the penalty averages over."""
        return sum(log_a.shape[0] for log_a in self.log_a.values())

    def sample(self, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """One training sample per head (differentiable in log_a): a fresh u on every call."""
        low, high = self.stretch
        gates = {}
        for attn_type, log_a in self.log_a.items():
            u = torch.rand(log_a.shape, generator=generator, device=log_a.device, dtype=log_a.dtype)
            u = self.eps + (1 - 2 * self.eps) * u
            concrete = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_a) / self.temperature)
            gates[attn_type] = (concrete * (high - low) + low).clamp(0, 1)
        return gates

    def deterministic(self) -> dict[str, torch.Tensor]:
        """Test-time gates clip(sigmoid(log_a) * (r - l) + l, 0, 1), in [0, 1]."""
        return {t: deterministic_gate(log_a, self.stretch) for t, log_a in self.log_a.items()}

    def kept(self, threshold: float = KEEP_THRESHOLD) -> dict[str, torch.Tensor]:
        """0/1 gates: 1 where the test-time gate is above ``threshold`` (Voita: non-zero)."""
        with torch.no_grad():
            return {t: (gate > threshold).to(gate.dtype) for t, gate in self.deterministic().items()}

    def p_open(self) -> dict[str, torch.Tensor]:
        """P(g != 0) per head, unclipped."""
        return {t: prob_nonzero(log_a, self.temperature, self.stretch) for t, log_a in self.log_a.items()}

    def l0_penalty(self) -> torch.Tensor:
        """Expected open gates as Voita's loss has it: mean over gated layers of the sum over heads.

        Each P(open) is clipped to [eps, 1 - eps] as in her code.
        """
        total = sum(p.clamp(self.eps, 1 - self.eps).sum() for p in self.p_open().values())
        return total / self.num_layers


# --- Training ----------------------------------------------------------------------------------

def loss_terms(adapter, batch) -> int:
    """How many terms ``adapter.loss_and_outputs`` sums: one per example when the batch has a label
    per example (classification), else one per target token (``adapter.num_tokens``)."""
    labels = batch.get("labels")
    if labels is not None and labels.dim() == 1:
        return max(int(labels.shape[0]), 1)
    return max(adapter.num_tokens(batch), 1)


def train_gates(model, batches: Iterable[dict], *, penalty: float, steps: int, lr: float,
                train_model: bool = False, model_lr: float | None = None, seed: int = 0,
                temperature: float = TEMPERATURE, init_log_a: float | None = INIT_LOG_A,
                device: str | torch.device | None = None, masking: Masking | None = None,
                progress: bool = True) -> tuple[HardConcreteGates, pd.DataFrame]:
    """Learn Hard Concrete head gates on ``batches`` (cycled for ``steps`` Adam steps).

    The loss of a step is the batch's summed loss (``adapter.loss_and_outputs``, gated by a fresh
    gate sample) divided by the number of terms it sums (``loss_terms``: target tokens for
    translation, examples for classification), plus ``penalty`` * ``gates.l0_penalty()``, as Voita's
    ``ConcreteProblem`` (mean loss per token plus lambda times the averaged L0 term). A classifier's
    loss is one term per example, so lambda means the same trade-off for both kinds of study.

    ``train_model=False`` (the default of the differentiable-subset-pruning port) trains the gates
    alone: the model's weights are frozen and it runs in eval mode, since dropout on a frozen model
    would only add noise to the gates' gradients. ``train_model=True`` is Voita's setting: the model
    fine-tunes with its gates (Adam, ``model_lr``, required) in train mode, its dropout on as in her
    training. The model's mode and requires_grad flags are restored afterwards.

    ``masking`` is how a gate acts (``gated``'s argument: None or ``Zero()``, Voita's g * o_h, or a mode of
    ``headprune.models.masking`` that takes real gates: ``Mean``/``Optimal``, g * o_h + (1 - g) * c_h, and
    ``Resample``, g * o_h + (1 - g) * r_h, the donors of its one draw). Uniform and streaming masking take gates
    0 or 1 only, which a gate sample is not: they are refused.

    Deterministic for a ``seed``: the gate noise has its own generator, and dropout draws from the
    global RNG seeded inside ``torch.random.fork_rng`` (the caller's RNG state is left untouched).

    Returns the gates and one log row per step, taken before that step's update: step (1..steps),
    loss (the total), task_loss (per token), l0 (the averaged penalty term, without lambda),
    expected_open (sum of P(open) over all heads) and kept (heads whose test-time gate is non-zero).
    """
    mode = _checked_gate_training(masking, train_model, model_lr)
    batches = list(batches)
    if not batches:
        raise ValueError("train_gates needs at least one batch")
    adapter = adapter_for(model)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    gates = HardConcreteGates.for_model(model, temperature=temperature, init_log_a=init_log_a, seed=seed).to(device)
    noise = torch.Generator(device=device).manual_seed(seed)
    with _model_in_gate_training(model, train_model):
        groups = [{"params": list(gates.parameters()), "lr": lr}]
        if train_model:
            groups.append({"params": [p for p in model.parameters() if p.requires_grad], "lr": model_lr})
        training = _GateTraining(model, adapter, gates, torch.optim.Adam(groups), penalty, mode, noise, device)
        # dropout draws from the global RNG, seeded here and given back to the caller as it was
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            steps_taken = counted(range(steps), f"concrete gates, penalty {penalty:g}", "steps", enabled=progress,
                                  log=log)
            rows = [training.step(batches[step % len(batches)], step) for step in steps_taken]
    return gates, pd.DataFrame(rows)


def _checked_gate_training(masking, train_model: bool, model_lr):
    """The masking mode, once it and the learning rates make sense for learning gates."""
    if train_model and model_lr is None:
        raise ValueError("train_model=True needs model_lr (the gates' lr would wreck the model's weights)")
    from headprune.models.masking import as_masking

    mode = as_masking(masking)
    if not mode.real_gates:
        raise ValueError(f"Hard Concrete gates are real numbers in [0, 1]; {mode.word} masking takes gates 0 or 1 "
                         "only: train them under zero, mean, optimal or resample masking")
    return mode


@contextlib.contextmanager
def _model_in_gate_training(model, train_model: bool):
    """The model in train mode with its weights trainable (``train_model``), or in eval mode with its weights
    frozen (gradients for log_a only); its mode and requires_grad flags come back after."""
    was_training = model.training
    params_required = [p.requires_grad for p in model.parameters()]
    if not train_model:
        for p in model.parameters():
            p.requires_grad_(False)
    model.train(train_model)
    try:
        yield
    finally:
        for p, required in zip(model.parameters(), params_required):
            p.requires_grad_(required)
        model.train(was_training)


@dataclass
class _GateTraining:
    """What one step of learning the gates uses: the model and its adapter, the gates, their optimizer, the
    penalty's weight, how a gate acts and the generator of the gate noise."""

    model: nn.Module
    adapter: object
    gates: HardConcreteGates
    optimizer: torch.optim.Optimizer
    penalty: float
    mode: object
    noise: torch.Generator
    device: torch.device

    def step(self, batch: dict, step: int) -> dict:
        """One Adam step on a batch under a fresh gate sample; the step's log row, taken before the update."""
        model, adapter, gates = self.model, self.adapter, self.gates
        batch = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        with gated(model, gates.sample(self.noise), masking=self.mode):
            loss, _ = adapter.loss_and_outputs(model, batch)
        task_loss = loss / loss_terms(adapter, batch)
        l0 = gates.l0_penalty()
        total = task_loss + self.penalty * l0
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        with torch.no_grad():
            row = {"step": step + 1, "loss": float(total), "task_loss": float(task_loss), "l0": float(l0),
                   "expected_open": float(sum(p.sum() for p in gates.p_open().values())),
                   "kept": int(sum(k.sum() for k in gates.kept().values()))}
        self.optimizer.step()
        return row


# --- Reading the gates -------------------------------------------------------------------------

def kept_heads_table(gates: HardConcreteGates, threshold: float = KEEP_THRESHOLD) -> pd.DataFrame:
    """One row per head: attn_type, layer, head, log_a, p_open, gate (test-time value), kept (bool)."""
    with torch.no_grad():
        p_open, gate, kept = gates.p_open(), gates.deterministic(), gates.kept(threshold)
        rows = []
        for attn_type, log_a in gates.log_a.items():
            layers, heads = log_a.shape
            for layer in range(layers):
                for head in range(heads):
                    rows.append({"attn_type": attn_type, "layer": layer, "head": head,
                                 "log_a": float(log_a[layer, head]), "p_open": float(p_open[attn_type][layer, head]),
                                 "gate": float(gate[attn_type][layer, head]),
                                 "kept": bool(kept[attn_type][layer, head])})
    return pd.DataFrame(rows)


def closed_heads(gates: HardConcreteGates, threshold: float = KEEP_THRESHOLD) -> dict[str, dict[int, list[int]]]:
    """{attn_type: {layer: [heads]}} of the heads not kept, as ``headprune.models.prune.prune_heads`` takes them.

    Only layers with a closed head are listed; every attention type is.
    """
    closed = {}
    for attn_type, kept in gates.kept(threshold).items():
        closed[attn_type] = {layer: (row == 0).nonzero().flatten().tolist()
                             for layer, row in enumerate(kept.cpu()) if (row == 0).any()}
    return closed
