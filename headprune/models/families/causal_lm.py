"""What the decoder-only LMs share (the generic ``decoder`` adapter's): the batch, the next-token loss and the masks
of a causal LM (every attention is decoder self-attention, ``DEC_SELF``), and ``ValueView`` (the generic adapters'
view of grouped or fused values). Streaming masking (``headprune.models.masking.Streaming``) runs on them: their
attention modules take the causal mask as an ``attention_mask`` argument.

A causal-LM batch is a dict of (batch, time) tensors: ``input_ids``, ``attention_mask`` (1 on real
tokens; left or right padding) and optionally ``labels``, aligned with ``input_ids`` as in
Hugging Face (``labels[t]`` is token t; -100 marks tokens not to predict; missing: ``input_ids``).
Position t's logits predict token t + 1, and a target counts when it is a real token, its label is
not -100, and the position before it is a real token too (so the first real token of a
left-padded row is never predicted). Positions are counted over real tokens only
(``attention_mask.cumsum - 1``), as ``generate()`` does, so a row scores the same whichever side
it is padded on.
"""
from __future__ import annotations

import torch
from torch import nn

from headprune.models.attention_types import DEC_SELF
from headprune.models.sites import HeadAdapter, _causal


class CausalLMAdapter(HeadAdapter):
    """What every decoder-only family shares: the batch, the next-token loss and the masks.

    Subclasses say where the heads are (``sites``) and how to slice them (``prune_site``).
    """

    attention_types = (DEC_SELF,)

    def loss_and_outputs(self, model, batch, output_attentions=False):
        """Summed next-token cross entropy over the predicted tokens (``num_tokens`` of them)."""
        from headprune.models.lm_head import hidden_and_outputs, logits_fit, per_position

        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
                  "position_ids": positions(batch["attention_mask"]), "output_attentions": output_attentions,
                  "use_cache": False}
        targets = next_tokens(batch).masked_fill(~predicted(batch), -100)
        if not logits_fit(model, targets.numel()):  # a chunk of positions at a time (models.lm_head)
            hidden, outputs = hidden_and_outputs(model, **inputs)
            return per_position(model, hidden[:, :-1], targets.to(hidden.device), _token_losses).sum(), outputs
        outputs = model(**inputs)
        logits = outputs.logits[:, :-1]
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()  # a sum over many tokens: do it in float32
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                           ignore_index=-100, reduction="sum")
        return loss, outputs

    def query_mask(self, batch, attn_type):
        _tokens_only(attn_type)
        return batch["attention_mask"].bool()

    def key_mask(self, batch, attn_type):
        _tokens_only(attn_type)
        return _causal(batch["attention_mask"].bool())

    def eos_keys(self, model, batch, attn_type):
        """The BOS and EOS tokens (``model.config.bos_token_id`` / ``eos_token_id``, ints or lists).

        Voita's confidence leaves out attention parked on a no-op token. In causal LMs that is the
        sequence-start token (the attention sink) as much as the end one: GPT-2 has a single special
        token, <|endoftext|>, that is its BOS, EOS and document separator; Llama starts every sequence
        with <s> and ends it with </s>. The configs carry the tokenizer's ids; a model whose config
        has neither excludes no key.
        """
        _tokens_only(attn_type)
        ids = batch["input_ids"]
        special = [i for name in ("bos_token_id", "eos_token_id")
                   for i in _as_list(getattr(model.config, name, None))]
        if not special:
            return torch.zeros_like(ids, dtype=torch.bool)
        return torch.isin(ids, torch.tensor(special, device=ids.device))

    def attention_weights(self, outputs, attn_type):
        _tokens_only(attn_type)
        # Layers with no heads left return no weights, and transformers leaves them out of the tuple.
        return list(outputs.attentions)

    def num_tokens(self, batch):
        """The predicted tokens (see the package docstring): the terms of the summed loss."""
        return int(predicted(batch).sum())


def _token_losses(logits, targets):
    """Each position's cross entropy (0 where its target is -100), in float32 at least (a sum over many tokens)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return nn.functional.cross_entropy(logits, targets, ignore_index=-100, reduction="none")


def _tokens_only(attn_type: str):
    """The batch lays out the language model's tokens; a studied tower's queries are patches or audio frames."""
    if attn_type != DEC_SELF:
        raise ValueError(f"{attn_type} heads attend over a tower's patches or frames, which a causal-LM batch does not "
                         "lay out: a tower's heads are gated and pruned, not scored by importance or attention "
                         "statistics")


def _as_list(token_id) -> list[int]:
    if token_id is None:
        return []
    return [int(i) for i in token_id] if isinstance(token_id, (list, tuple)) else [int(token_id)]


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids counted over real tokens, as generate() makes them (padding gets 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def next_tokens(batch) -> torch.Tensor:
    """(batch, time - 1): the token each position predicts."""
    labels = batch.get("labels")
    return (batch["input_ids"] if labels is None else labels)[:, 1:]


def predicted(batch) -> torch.Tensor:
    """(batch, time - 1) bool: targets that count (a real token, predicted from a real one, label not -100)."""
    mask = batch["attention_mask"].bool()
    return mask[:, 1:] & mask[:, :-1] & (next_tokens(batch) != -100)


class ValueView:
    """Stands for a value projection inside a module that puts out more, or one value per key/value head.

    ``AttentionSite.value`` is watched with forward hooks that expect (..., heads * head_dim): one
    value vector per query head (``headprune.scoring.importance`` takes dL/dA from them). GPT-2's values are
    the last third of the fused ``c_attn``'s output; under grouped-query attention a value vector
    serves several query heads. A hook registered here sees ``select(output)`` instead; it may only
    read it (returning a new output would have nothing to replace).
    """

    def __init__(self, module: nn.Module, select):
        self.module = module
        self.select = select

    def register_forward_hook(self, hook):
        def view_hook(module, args, output):
            if hook(module, args, self.select(output)) is not None:
                raise RuntimeError("a hook on a ValueView may only read the values, not replace them")
        return self.module.register_forward_hook(view_hook)

    def __repr__(self):
        return f"ValueView({type(self.module).__name__})"
