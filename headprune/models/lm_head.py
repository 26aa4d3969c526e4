"""A language model's output layer applied in chunks of positions, where only a reduction of its logits is used.

A (rows x positions x vocabulary) logits tensor is the largest thing an evaluation holds: 256 gate variants of
127 positions over SmolLM2's 49,152 tokens are 6.4 GB of float32, and the cross entropy's log-softmax as much
again (issue #57). Next-token NLL, a continuation's log-likelihood and the loss of the gradient screens only
reduce it per position, so where it would pass ``LOGITS_AT_ONCE`` elements the model is run with its output
layer stubbed (``hidden_and_outputs``: the layer's input, the last hidden states, is kept, whatever family
computes it), and ``per_position`` applies the layer and the family's final processing of its logits
(``final_logits``) to ``LOGITS_AT_ONCE // vocabulary`` positions at a time, keeping only each chunk's reduction.
Under autograd each chunk is checkpointed, so the backward pass recomputes one chunk at a time too.

Callers keep their whole-tensor code where the logits fit (``logits_fit``): the same ops on the same shapes, so
a run that fits gives the bits it always gave.

The final processing is declared data, the config attributes that transformers' families read after the
output layer (Gemma's ``final_logit_softcapping``, Cohere's ``logit_scale``, Granite's ``logits_scaling``).
The stub checks it: it hands the model one position's real logits, and a model whose returned logits differ
from ``final_logits`` of them (a processing not declared here) is refused rather than scored otherwise.
"""
from __future__ import annotations

import contextlib

import torch

# Logit elements held at once on the chunked path: 64 MiB of float32 (a chunk's log-softmax as much again).
LOGITS_AT_ONCE = 1 << 24

# config attribute -> how the logits are processed after the output layer (in transformers' order: first the
# scale, then the soft cap)
SCALED_BY = ("logit_scale",)
DIVIDED_BY = ("logits_scaling",)
SOFT_CAPPED_BY = ("final_logit_softcapping", "logit_softcap", "logits_soft_cap", "output_logit_soft_cap")


def output_layer(model):
    """The model's output layer (``get_output_embeddings``), or None when it has none."""
    getter = getattr(model, "get_output_embeddings", None)
    return getter() if getter is not None else None


def vocabulary(model) -> int | None:
    """How many logits the output layer puts out per position (None: no output layer)."""
    head = output_layer(model)
    weight = getattr(head, "weight", None)
    return None if weight is None else int(weight.shape[0])


def logits_fit(model, positions: int, budget: int | None = None) -> bool:
    """Whether ``positions`` (rows x positions) of logits fit in ``budget`` elements (``LOGITS_AT_ONCE``): the
    caller then computes them whole, as it always did. A model without an output layer always fits.

    >>> class Model:  # an output layer of 10 logits
    ...     def get_output_embeddings(self): return torch.nn.Linear(4, 10)
    >>> logits_fit(Model(), 3, budget=30), logits_fit(Model(), 4, budget=30)
    (True, False)
    """
    vocab = vocabulary(model)
    return vocab is None or positions * vocab <= (LOGITS_AT_ONCE if budget is None else budget)


def _config_value(model, names):
    configs = [model.config]
    text = getattr(model.config, "get_text_config", None)
    if text is not None:
        configs.append(text())
    for config in configs:
        for name in names:
            value = getattr(config, name, None)
            if value:
                return value
    return None


def final_logits(model, raw: torch.Tensor) -> torch.Tensor:
    """The output layer's ``raw`` logits processed as the model's family processes them (module docstring)."""
    scale = _config_value(model, SCALED_BY)
    if scale is not None:
        raw = raw * scale
    divisor = _config_value(model, DIVIDED_BY)
    if divisor is not None:
        raw = raw / divisor
    cap = _config_value(model, SOFT_CAPPED_BY)
    if cap is not None:
        raw = torch.tanh(raw / cap) * cap
    return raw


def logits_of(model, hidden: torch.Tensor) -> torch.Tensor:
    """The model's logits at the last hidden states ``hidden``: its output layer and its final processing."""
    return final_logits(model, output_layer(model)(hidden))


@contextlib.contextmanager
def _stubbed_output_layer(model, seen: dict):
    """The output layer records its input in ``seen["hidden"]`` and puts out the real logits of its first
    position alone (``seen["raw"]``), which the model processes as it does all of them."""
    head = output_layer(model)
    own = head.__dict__.get("forward")  # accelerate's hook lives there: put it back afterwards
    call = head.forward

    def forward(hidden, *args, **kwargs):
        seen["hidden"] = hidden
        seen["raw"] = call(hidden[(slice(0, 1),) * (hidden.dim() - 1)], *args, **kwargs)
        return seen["raw"]

    head.forward = forward
    try:
        yield seen
    finally:
        if own is None:
            head.__dict__.pop("forward", None)
        else:
            head.forward = own


def hidden_and_outputs(model, **inputs):
    """(the last hidden states that reach the output layer, the model's outputs but their logits) of
    ``model(**inputs)``, no logits computed but one position's, which check ``final_logits``."""
    with _stubbed_output_layer(model, {}) as seen:
        outputs = model(**inputs)
    expected = final_logits(model, seen["raw"]).to(outputs.logits.dtype)
    if not torch.allclose(outputs.logits.detach(), expected.detach(), rtol=1e-5, atol=1e-5,
                          equal_nan=True):  # (a padded first position may be NaN)
        raise ValueError(f"{type(model).__name__} processes its output layer's logits in a way headprune does not "
                         "know (headprune.models.lm_head declares the config attributes it reads): it cannot reduce "
                         "them in chunks")
    return seen["hidden"], outputs


def per_position(model, hidden: torch.Tensor, targets: torch.Tensor, reduce, *, budget: int | None = None):
    """``reduce(logits, targets)`` at every position of ``hidden`` (..., hidden size), its ``targets`` (same
    leading dims, then any), the logits computed ``budget // vocabulary`` positions at a time: (..., what
    ``reduce`` puts out per position). ``reduce`` maps (n, vocabulary) logits and (n, ...) targets to (n, ...)."""
    lead = hidden.shape[:-1]
    flat, flat_targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(lead.numel(), *targets.shape[len(lead):])
    step = max(1, (LOGITS_AT_ONCE if budget is None else budget) // vocabulary(model))

    def chunk(h, t):
        return reduce(logits_of(model, h), t)

    parts = []
    for start in range(0, len(flat), step):
        h, t = flat[start:start + step], flat_targets[start:start + step]
        if torch.is_grad_enabled() and h.requires_grad:  # the backward recomputes one chunk's logits at a time
            parts.append(torch.utils.checkpoint.checkpoint(chunk, h, t, use_reentrant=False))
        else:
            parts.append(chunk(h, t))
    out = torch.cat(parts)
    return out.view(*lead, *out.shape[1:])
