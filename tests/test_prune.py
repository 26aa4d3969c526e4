"""Physical pruning: any set of heads, dtype kept, save and reload, step by step."""
import copy

import pytest
import torch
from transformers import BertForSequenceClassification, FSMTForConditionalGeneration

from conftest import on_test_device, tiny_bert, tiny_model_and_batch, tolerance
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.prenorm import PreNormTransformer
from headprune.models.prune import count_heads, load_pruned_weights, prune_heads, pruned_heads


def logits(model, batch):
    with torch.no_grad():
        return adapter_for(model).loss_and_outputs(model, batch)[1].logits


def random_removal(model, fraction, seed):
    g = torch.Generator().manual_seed(seed)
    removal = {}
    for site in adapter_for(model).sites(model):
        chosen = (torch.rand(site.original_num_heads, generator=g) < fraction).nonzero().flatten().tolist()
        removal.setdefault(site.attn_type, {})[site.layer] = chosen
    return removal


@pytest.mark.parametrize("seed", range(4))
def test_random_head_sets_match_gates(model_and_batch, seed):
    model, batch = model_and_batch
    removal = random_removal(model, 0.5, seed)
    gates = full_gates(model)
    for t, layers in removal.items():
        for layer, heads in layers.items():
            gates[t][layer, heads] = 0
    with gated(model, gates):
        expected = logits(model, batch)
    pruned = prune_heads(copy.deepcopy(model), removal)
    assert (logits(pruned, batch) - expected).abs().max() <= tolerance(1e-5, expected)
    removed = sum(len(h) for layers in removal.values() for h in layers.values())
    assert count_heads(pruned) == count_heads(model) - removed


def test_pruning_step_by_step_equals_at_once(model_and_batch):
    model, batch = model_and_batch
    first = {t: {0: [0, 2]} for t in adapter_for(model).attention_types}
    second = {t: {0: [1, 2], 1: [3]} for t in adapter_for(model).attention_types}  # 2 is already gone
    stepwise = prune_heads(prune_heads(copy.deepcopy(model), first), second)
    at_once = prune_heads(copy.deepcopy(model), {t: {0: [0, 1, 2], 1: [3]} for t in first})
    assert torch.equal(logits(stepwise, batch), logits(at_once, batch))
    assert pruned_heads(stepwise) == pruned_heads(at_once)
    assert pruned_heads(stepwise)[next(iter(first))] == {0: [0, 1, 2], 1: [3]}
    # gates on a pruned model address heads by their original index
    gates = full_gates(model)
    for t in first:
        gates[t][0, 3] = 0
    full = copy.deepcopy(model)
    full_gates_ = full_gates(model)
    for t in first:
        full_gates_[t][0, :] = 0
        full_gates_[t][1, 3] = 0
    with gated(stepwise, gates):
        a = logits(stepwise, batch)
    with gated(full, full_gates_):
        b = logits(full, batch)
    assert (a - b).abs().max() <= tolerance(1e-5, b)


def test_dtype_and_requires_grad_are_kept():
    model = tiny_bert().to(torch.bfloat16)
    prune_heads(model, {"enc_self": {0: [1, 2]}})
    site = adapter_for(model).sites(model)[0]
    for linear in (site.query, site.key, site.value, site.output):
        assert linear.weight.dtype == torch.bfloat16
        assert linear.weight.requires_grad
    assert site.query.weight.shape == (2 * site.head_dim, 16)
    assert site.output.weight.shape == (16, 2 * site.head_dim)


def test_unknown_head_is_refused():
    with pytest.raises(ValueError, match="enc_self layer 0 has no head 7"):
        prune_heads(tiny_bert(), {"enc_self": {0: [7]}})


@pytest.mark.parametrize("family, cls", [("bert", BertForSequenceClassification), ("fsmt", FSMTForConditionalGeneration),
                                         ("m2m100", PreNormTransformer)])
def test_pruned_model_saves_and_reloads(tmp_path, family, cls):
    model, batch = tiny_model_and_batch(family)
    removal = {t: {0: [0, 1, 2, 3], 1: [1]} for t in adapter_for(model).attention_types}
    prune_heads(model, removal)
    expected = logits(model, batch)
    model.save_pretrained(tmp_path)
    reloaded = on_test_device(load_pruned_weights(cls, tmp_path))
    assert (logits(reloaded, batch) - expected).abs().max() <= tolerance(1e-5, expected)
    assert pruned_heads(reloaded) == pruned_heads(model)
    assert count_heads(reloaded) == count_heads(model)
