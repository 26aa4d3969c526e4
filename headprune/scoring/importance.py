"""Head importance (Michel et al., 2019) and the other head criteria, all in one pass.

For every batch: one forward and one backward pass through the gated model (gates are
leaves, 1 unless given). Notation: xi_h is head h's gate, L the batch's summed loss
(``adapter.loss_and_outputs``), L_x example x's term of it, N the non-pad tokens seen
(``adapter.num_tokens``: target tokens for translation), A_h the head's attention
probabilities (queries x keys). For head h at token t, a_{t,h} = Att_h(x)_t . dL/dAtt_h(x)_t
is that token's share of dL/dxi_h. The importance estimators differ only in where the
absolute value is taken before summing over the data:

- ``token``   sum_t |a_t|        the authors' code (default)
- ``example`` sum_x |sum_t a_t|  the paper's equation, E_x |dL(x)/dxi_h|
- ``batch``   |sum_batch a_t|    Hugging Face bertology (|grad of the mask| per batch)

each divided by N. All three come out of the same pass; ``estimator`` picks the one called
``importance``. The same pass gives:

- ``fisher`` (Kwon et al., 2022), the empirical Fisher information of the head mask:
  (1/#examples) sum_x (dL_x/dxi_h)^2. Examples do not interact in eval mode, so
  dL_x/dxi_h = sum_{t in x} a_t, the per-example sum that ``example`` takes |.| of.
- ``attention_gradient`` (seed 003, E|dL/dA_h|): sum over examples x, real queries q and the
  keys k that q may attend to of |dL/dA_h[x, q, k]|, divided by N. Keys a query may not attend
  to (padding, future positions) are left out: their weight is 0 in every model, yet their
  gradient is not (dL/dA[q, k] = dL/dAtt_h(x)_q . v_k), and padding keys would make the score
  depend on how the examples were batched. dL/dA is that product, the chain rule through
  Att_h(x) = A_h V_h (no dropout in eval mode), from the captured gradient and the value
  vectors: autograd cannot get it from the returned maps, as the first layer's depend on no
  gate once the parameters are frozen, and a pruned FSMT layer returns a view of its
  weights that the rest of the layer does not use.
- ``entropy``, ``entropy_normalized``, ``confidence``: statistics of A_h, mean over real queries
  (``attention_statistics``).

For a head switched off by a constant instead of by zeroing (mean or optimal ablation,
``headprune.models.masking.Constant``: a head with gate xi puts out xi o_h + (1 - xi) c_h), pass
``constants=`` (a ``HeadConstants``): the pass then runs under that masking, and a token's share of dL/dxi_h
is a_{t,h} = (o_{t,h} - c_h) . dL/d(gated output)_t, the first-order estimate of what replacing the head by
its constant changes (|(o_h - c_h) . dL/do_h| summed over tokens instead of |o_h . dL/do_h|). Every
importance estimator and fisher follow from those a_t as above; the attention statistics do not change.

``head_scores`` computes every column in the eager attention backend, the only one that returns
attention weights. ``head_importance`` computes only the gate-gradient columns (importance*,
fisher) in whatever backend the model has (sdpa is faster): I_h re-estimated after every pruning
step. Both run the same loop.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from headprune.io.progress import counted

# torch and the model code are imported where they are used: experiments.criteria imports ESTIMATORS in
# jobs that run no model (a criteria table job starts in a second, not four).
if TYPE_CHECKING:
    import torch

# Where I_h takes the absolute value: per token, per example, per batch.
ESTIMATORS = ("token", "example", "batch")
# Sums over the data, one (layers, heads) tensor per attention type each.
GATE_SUMS = (*ESTIMATORS, "fisher")
ATTENTION_SUMS = ("attention_gradient", "entropy", "entropy_normalized", "confidence")
log = logging.getLogger(__name__)


def _zeros(shape):
    import torch

    return {t: torch.zeros(layers, heads, dtype=torch.float64) for t, (layers, heads) in shape.items()}


def head_scores(model, batches: Iterable[dict], *, estimator: str = "token", normalize: bool = True,
                device: str | torch.device | None = None, gates: dict[str, torch.Tensor] | None = None,
                progress: bool = True, constants=None) -> pd.DataFrame:
    """Every criterion of every head, one row per head (switches the model to eager attention).

    Columns: attn_type, layer, head, importance (the chosen estimator, l2-normalized
    per layer and attention type if ``normalize``), importance_token /
    importance_example / importance_batch (raw, unnormalized), fisher, attention_gradient,
    entropy (nats), entropy_normalized (divided by log of the number of keys), confidence,
    estimator, normalized. ``gates`` (attn_type -> (layers, heads), default all 1) is the point
    the gradients are taken at. Heads physically pruned get 0 everywhere. ``constants`` (a
    ``HeadConstants``): the criteria of switching a head to its constant (module docstring), not off.

    >>> scores = head_scores(model, evalset_batches(tokenizer, evalset, 8), progress=False)
    >>> len(scores), scores.columns[:5].tolist()
    (8, ['attn_type', 'layer', 'head', 'importance', 'importance_token'])
    """
    _use_eager_attention(model)
    return _score_heads(model, batches, attention=True, estimator=estimator, normalize=normalize, device=device,
                        gates=gates, progress=progress, constants=constants)


def head_importance(model, batches: Iterable[dict], *, estimator: str = "token", normalize: bool = True,
                    device: str | torch.device | None = None, gates: dict[str, torch.Tensor] | None = None,
                    progress: bool = True, constants=None, first_order: bool = False) -> pd.DataFrame:
    """``head_scores``' importance columns and fisher only, without attention weights.

    Keeps the model's attention backend (no eager switch, no output_attentions), so it is the
    cheap call for re-estimating I_h after every pruning step; the numbers are head_scores'. With
    ``constants`` (a ``HeadConstants``), the first-order estimate for a head replaced by its constant:
    |(o_h - c_h) . dL/do_h| summed over tokens (the module docstring).

    ``first_order=True`` adds the column ``first_order``: -(1/N) sum_t a_t, the signed first-order (attribution
    patching) estimate of how much the mean token loss rises when the head is switched off (its gate 1 -> 0, or
    to its constant): the gate gradient of the summed loss, no absolute value anywhere (the screen of
    ``headprune.analyses.screening``).
    """
    return _score_heads(model, batches, attention=False, estimator=estimator, normalize=normalize, device=device,
                        gates=gates, progress=progress, constants=constants, first_order=first_order)


def _score_heads(model, batches, *, attention, estimator, normalize, device, gates, progress,
                 constants=None, first_order=False) -> pd.DataFrame:
    if estimator not in ESTIMATORS:
        raise ValueError(f"importance estimator must be one of {ESTIMATORS}, got {estimator!r}")
    import torch

    from headprune.models.heads import adapter_for, head_shape
    from headprune.models.masking import Constant, Zero

    adapter = adapter_for(model)
    masking = Zero() if constants is None else Constant(constants)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    shape = head_shape(model)
    start = _start_gates(model, gates)
    model.eval()  # no dropout: the authors score the deterministic model
    with _gradients_for_gates_only(model), _kept_values(adapter, model, attention) as values:
        sums = _HeadSums.zeros(shape, attention)
        for batch in counted(batches, "head scores" if attention else "head importance", "batches", enabled=progress,
                             log=log):
            batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            leaves = {t: g.to(device).clone().requires_grad_(True) for t, g in start.items()}
            sums.add_batch(model, adapter, batch, leaves, masking, constants, values)
    return sums.table(shape, estimator, normalize, first_order)


@contextlib.contextmanager
def _gradients_for_gates_only(model):
    """The model's parameters need no gradient inside (only the gates do); their flags come back after."""
    params_required = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, required in zip(model.parameters(), params_required):
            p.requires_grad_(required)


@contextlib.contextmanager
def _kept_values(adapter, model, attention: bool):
    """(attn_type, layer) -> the batch's value vectors, for dL/dA (kept only for the attention criteria)."""
    values = {}
    value_hooks = [site.value.register_forward_hook(_keep_values(site, values))
                   for site in adapter.sites(model)] if attention else []
    try:
        yield values
    finally:
        for handle in value_hooks:
            handle.remove()


@dataclass
class _HeadSums:
    """The pass's sums over the data, per criterion one (layers, heads) tensor per attention type, and what
    they are divided by: target tokens, examples, real queries (with more than one key, for the normalized
    entropy)."""

    sums: dict
    attention: bool
    queries: dict
    queries_norm: dict
    num_tokens: int = 0
    num_examples: int = 0

    @classmethod
    def zeros(cls, shape: dict, attention: bool) -> _HeadSums:
        sums = {name: _zeros(shape) for name in GATE_SUMS + ("signed",) + (ATTENTION_SUMS if attention else ())}
        return cls(sums, attention, {t: 0 for t in shape}, {t: 0 for t in shape})

    def add_batch(self, model, adapter, batch: dict, leaves: dict, masking, constants, values: dict) -> None:
        """One forward and backward pass through the model gated by ``leaves``; its terms added."""
        from headprune.models.heads import HeadCapture
        from headprune.models.masking import gated

        capture = HeadCapture()
        with gated(model, leaves, capture, masking=masking) as sites:
            loss, outputs = adapter.loss_and_outputs(model, batch, output_attentions=self.attention)
            loss.backward()
        maps = _attention_maps(adapter, outputs, sites) if self.attention else {}
        self.num_tokens += adapter.num_tokens(batch)
        masks = {t: (adapter.query_mask(batch, t), adapter.key_mask(batch, t)) for t in self.queries}
        self.num_examples += len(adapter.query_mask(batch, adapter.attention_types[0]))  # a row per example
        for site in sites:
            if not site.num_heads:
                continue  # a layer with no heads left scores 0
            query_mask, key_mask = masks[site.attn_type]
            self._add_gate_terms(site, capture, query_mask, constants)
            if self.attention:
                self._add_attention_terms(site, capture, leaves, query_mask, key_mask, values,
                                          maps, adapter.eos_keys(model, batch, site.attn_type))
        for t, (query_mask, key_mask) in masks.items():
            self.queries[t] += int(query_mask.sum())
            self.queries_norm[t] += int((query_mask & (key_mask.sum(-1) > 1)).sum())

    def _add(self, name: str, site, scores) -> None:
        """Scores of the site's kept heads, into their original columns."""
        self.sums[name][site.attn_type][site.layer, site.kept_heads] += scores.cpu()

    def _add_gate_terms(self, site, capture, query_mask, constants) -> None:
        """The importance estimators, fisher and the signed sum, from each token's a_t."""
        key = (site.attn_type, site.layer)
        # (B, T, H): each token's contribution to dL/dxi_h: (o_h - c_h) . dL/d(gated output), c_h = 0
        # under zero masking
        outputs = capture.head_outputs[key].double()
        if constants is not None:
            outputs = outputs - constants.for_site(site, outputs)
        per_token = (outputs * capture.gradients[key].double()).sum(-1)
        per_token = per_token * query_mask[..., None]
        per_example = per_token.sum(1)  # (B, H): dL_x/dxi_h
        self._add("token", site, per_token.abs().sum((0, 1)))
        self._add("example", site, per_example.abs().sum(0))
        self._add("batch", site, per_token.sum((0, 1)).abs())
        self._add("fisher", site, per_example.pow(2).sum(0))
        self._add("signed", site, per_token.sum((0, 1)))

    def _add_attention_terms(self, site, capture, leaves, query_mask, key_mask, values, maps, eos) -> None:
        """The attention gradient and the statistics of the attention maps."""
        import torch

        key = (site.attn_type, site.layer)
        # dL/dA_h[q, k] = dL/dAtt_h(x)_q . v_{h,k}, as the head output is A_h V_h (no dropout in
        # eval mode), and dL/dAtt_h = xi_h dL/d(gated output).
        gate = leaves[site.attn_type][site.layer, site.kept_heads].detach().double()
        grad_output = capture.gradients[key].double() * gate[:, None]  # (B, Q, H, d)
        grad_attention = torch.einsum("bqhd,bkhd->bhqk", grad_output, values[key].double())
        allowed = (query_mask[:, :, None] & key_mask)[:, None]  # (B, 1, Q, K)
        self._add("attention_gradient", site, (grad_attention.abs() * allowed).sum((0, 2, 3)))
        ent, ent_norm, conf = attention_statistics([maps[key]], query_mask, key_mask, eos)[0]
        self._add("entropy", site, ent)
        self._add("entropy_normalized", site, ent_norm)
        self._add("confidence", site, conf)

    def table(self, shape: dict, estimator: str, normalize: bool, first_order: bool) -> pd.DataFrame:
        """One row per head: the sums divided by what they count."""
        sums, num_tokens = self.sums, self.num_tokens
        rows = []
        for attn_type, (layers, heads) in shape.items():
            raw = {name: sums[name][attn_type] / max(num_tokens, 1) for name in ESTIMATORS}
            chosen = raw[estimator].clone()
            if normalize:
                chosen = normalize_per_layer(chosen)
            columns = {"importance": chosen, **{f"importance_{name}": raw[name] for name in ESTIMATORS},
                       "fisher": sums["fisher"][attn_type] / max(self.num_examples, 1)}
            if first_order:
                columns["first_order"] = -sums["signed"][attn_type] / max(num_tokens, 1)
            if self.attention:
                columns.update({
                    "attention_gradient": sums["attention_gradient"][attn_type] / max(num_tokens, 1),
                    "entropy": sums["entropy"][attn_type] / max(self.queries[attn_type], 1),
                    "entropy_normalized": sums["entropy_normalized"][attn_type] / max(self.queries_norm[attn_type], 1),
                    "confidence": sums["confidence"][attn_type] / max(self.queries[attn_type], 1),
                })
            for layer in range(layers):
                for head in range(heads):
                    rows.append({"attn_type": attn_type, "layer": layer, "head": head,
                                 **{name: float(values[layer, head]) for name, values in columns.items()},
                                 "estimator": estimator, "normalized": normalize})
        return pd.DataFrame(rows)


def _start_gates(model, gates):
    """The gates to differentiate at: copies (they become leaves), all 1 unless given."""
    import torch

    from headprune.models.heads import full_gates, head_shape

    if gates is None:
        return full_gates(model)
    start = {}
    for attn_type, (layers, heads) in head_shape(model).items():
        gate = torch.as_tensor(gates[attn_type]).detach().float().clone()
        if gate.shape != (layers, heads):
            raise ValueError(f"{attn_type} gates must have shape ({layers}, {heads}) (one setting), "
                             f"got {tuple(gate.shape)}")
        start[attn_type] = gate
    return start


def _keep_values(site, values):
    """A forward hook on a value projection: keeps its output as (batch, keys, heads, head_dim)."""
    def hook(module, args, output):
        per_head = output.detach().unflatten(-1, (site.num_heads, site.head_dim))
        values[(site.attn_type, site.layer)] = per_head.transpose(0, 1) if site.time_major else per_head
    return hook


def _attention_maps(adapter, outputs, sites) -> dict[tuple[str, int], torch.Tensor]:
    """(attn_type, layer) -> (batch, kept heads, queries, keys) attention probabilities.

    A layer with no heads left has no weights: FSMT puts None in its place, transformers 5's BERT
    and M2M100 leave it out of the tuple, so the maps go to the layers that have heads, in order.
    """
    maps = {}
    for attn_type in adapter.attention_types:
        weights = [w for w in adapter.attention_weights(outputs, attn_type) if w is not None]
        layers = sorted(s.layer for s in sites if s.attn_type == attn_type and s.num_heads)
        if len(weights) != len(layers):
            raise RuntimeError(f"{attn_type}: {len(weights)} attention maps for {len(layers)} layers with heads")
        maps.update({(attn_type, layer): w for layer, w in zip(layers, weights)})
    return maps


def normalize_per_layer(scores: torch.Tensor) -> torch.Tensor:
    """Divide each layer's scores (a row) by their l2 norm (Molchanov et al., 2017)."""
    import torch

    norm = scores.norm(dim=-1, keepdim=True)
    return scores / torch.where(norm > 0, norm, torch.ones_like(norm))


def attention_statistics(weights_per_layer, query_mask, key_mask, eos_keys):
    """Per layer, per head sums over real queries of: entropy, normalized entropy, confidence.

    weights: (B, H, Q, K); query_mask: (B, Q); key_mask: (B, Q, K) allowed keys;
    eos_keys: (B, K). Entropy is in nats; the normalized entropy divides it by
    log(number of allowed keys) and skips queries with a single key (0/0).
    Confidence (Voita et al., 2019) is the largest weight on a non-EOS key.
    """
    import torch

    allowed_keys = key_mask.sum(-1)  # (B, Q)
    log_keys = torch.log(allowed_keys.clamp(min=2).double())
    norm_queries = query_mask & (allowed_keys > 1)
    results = []
    for weights in weights_per_layer:
        p = weights.detach().double()
        plogp = torch.where(p > 0, p * torch.log(p.clamp(min=1e-300)), torch.zeros_like(p))
        ent = -plogp.sum(-1)  # (B, H, Q)
        ent_norm = ent / log_keys[:, None, :]
        conf = p.masked_fill(eos_keys[:, None, None, :], 0.0).amax(-1)
        q = query_mask[:, None, :].double()
        qn = norm_queries[:, None, :].double()
        results.append(((ent * q).sum((0, 2)), (ent_norm * qn).sum((0, 2)), (conf * q).sum((0, 2))))
    return results


def _use_eager_attention(model):
    """Attention weights exist only in the eager backend (sdpa returns None)."""
    from headprune.models.portable.headprune_attention import backend_of, set_backend

    if backend_of(model) != "eager" and hasattr(model, "set_attn_implementation"):
        set_backend(model, "eager")
