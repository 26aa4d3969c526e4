"""Head importance (Michel et al., 2019), attention entropy and confidence in one pass.

For every batch: one forward and one backward pass through the gated model (gates
are leaves at 1). For head h at token t, a_{t,h} = Att_h(x)_t . dL/dAtt_h(x)_t is
that token's share of dL/dxi_h. The estimators differ only in where the absolute
value is taken before summing over the data:

- ``token``   sum_t |a_t|        the authors' code (default)
- ``example`` sum_x |sum_t a_t|  the paper's equation, E_x |dL(x)/dxi_h|
- ``batch``   |sum_batch a_t|    Hugging Face bertology (|grad of the mask| per batch)

each divided by the number of non-pad tokens seen. All three come out of the same
pass; ``estimator`` picks the one called ``importance``.
"""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import torch
from tqdm.auto import tqdm

from .heads import HeadCapture, adapter_for, full_gates, gated, head_shape

ESTIMATORS = ("token", "example", "batch")


def _zeros(shape):
    return {t: torch.zeros(layers, heads, dtype=torch.float64) for t, (layers, heads) in shape.items()}


def head_scores(model, batches: Iterable[dict], *, estimator: str = "token", normalize: bool = True,
                device: str | torch.device | None = None, progress: bool = True) -> pd.DataFrame:
    """Importance, attention entropy and confidence of every head, one row per head.

    Columns: attn_type, layer, head, importance (the chosen estimator, l2-normalized
    per layer and attention type if ``normalize``), importance_token /
    importance_example / importance_batch (raw, unnormalized), entropy (nats),
    entropy_normalized (divided by log of the number of keys), confidence, estimator,
    normalized.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"importance estimator must be one of {ESTIMATORS}, got {estimator!r}")
    adapter = adapter_for(model)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    shape = head_shape(model)
    _use_eager_attention(model)
    model.eval()  # no dropout: the authors score the deterministic model
    params_required = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)  # only the gates need gradients

    sums = {name: _zeros(shape) for name in ("token", "example", "batch")}
    entropy, entropy_norm, confidence = _zeros(shape), _zeros(shape), _zeros(shape)
    queries = {t: 0 for t in shape}
    queries_norm = {t: 0 for t in shape}
    num_tokens = 0
    try:
        for batch in tqdm(batches, desc="head importance", disable=not progress):
            batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            gates = {t: g.to(device).requires_grad_(True) for t, g in full_gates(model).items()}
            capture = HeadCapture()
            with gated(model, gates, capture) as sites:
                loss, outputs = adapter.loss_and_outputs(model, batch, output_attentions=True)
                loss.backward()
            num_tokens += adapter.num_tokens(batch)
            for site in sites:
                key = (site.attn_type, site.layer)
                heads = site.kept_heads
                query_mask = adapter.query_mask(batch, site.attn_type)  # (B, T)
                # (B, T, H): each token's contribution to dL/dxi_h
                per_token = (capture.head_outputs[key].double() * capture.gradients[key].double()).sum(-1)
                per_token = per_token * query_mask[..., None]
                sums["token"][site.attn_type][site.layer, heads] += per_token.abs().sum((0, 1)).cpu()
                sums["example"][site.attn_type][site.layer, heads] += per_token.sum(1).abs().sum(0).cpu()
                sums["batch"][site.attn_type][site.layer, heads] += per_token.sum((0, 1)).abs().cpu()

            for attn_type in shape:
                query_mask = adapter.query_mask(batch, attn_type)
                key_mask = adapter.key_mask(batch, attn_type)
                eos = adapter.eos_keys(model, batch, attn_type)
                stats = attention_statistics(adapter.attention_weights(outputs, attn_type), query_mask, key_mask, eos)
                for layer, (ent, ent_norm, conf) in enumerate(stats):
                    heads = _kept(sites, attn_type, layer)
                    entropy[attn_type][layer, heads] += ent.cpu()
                    entropy_norm[attn_type][layer, heads] += ent_norm.cpu()
                    confidence[attn_type][layer, heads] += conf.cpu()
                queries[attn_type] += int(query_mask.sum())
                queries_norm[attn_type] += int((query_mask & (key_mask.sum(-1) > 1)).sum())
    finally:
        for p, required in zip(model.parameters(), params_required):
            p.requires_grad_(required)

    rows = []
    for attn_type, (layers, heads) in shape.items():
        raw = {name: sums[name][attn_type] / max(num_tokens, 1) for name in sums}
        chosen = raw[estimator].clone()
        if normalize:
            chosen = normalize_per_layer(chosen)
        for layer in range(layers):
            for head in range(heads):
                rows.append({
                    "attn_type": attn_type, "layer": layer, "head": head,
                    "importance": float(chosen[layer, head]),
                    **{f"importance_{name}": float(raw[name][layer, head]) for name in ESTIMATORS},
                    "entropy": float(entropy[attn_type][layer, head] / max(queries[attn_type], 1)),
                    "entropy_normalized": float(entropy_norm[attn_type][layer, head] / max(queries_norm[attn_type], 1)),
                    "confidence": float(confidence[attn_type][layer, head] / max(queries[attn_type], 1)),
                    "estimator": estimator, "normalized": normalize,
                })
    return pd.DataFrame(rows)


def normalize_per_layer(scores: torch.Tensor) -> torch.Tensor:
    """Divide each layer's scores (a row) by their l2 norm (Molchanov et al., 2017)."""
    norm = scores.norm(dim=-1, keepdim=True)
    return scores / torch.where(norm > 0, norm, torch.ones_like(norm))


def attention_statistics(weights_per_layer, query_mask, key_mask, eos_keys):
    """Per layer, per head sums over real queries of: entropy, normalized entropy, confidence.

    weights: (B, H, Q, K); query_mask: (B, Q); key_mask: (B, Q, K) allowed keys;
    eos_keys: (B, K). Entropy is in nats; the normalized entropy divides it by
    log(number of allowed keys) and skips queries with a single key (0/0).
    Confidence (Voita et al., 2019) is the largest weight on a non-EOS key.
    """
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


def _kept(sites, attn_type, layer):
    for site in sites:
        if site.attn_type == attn_type and site.layer == layer:
            return site.kept_heads
    raise KeyError((attn_type, layer))


def _use_eager_attention(model):
    """Attention weights exist only in the eager backend (sdpa returns None)."""
    if getattr(model.config, "_attn_implementation", "eager") != "eager" and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
