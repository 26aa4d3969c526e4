"""Head gates: gate 0 equals physical removal; real-valued gates; generate() with beam search."""
import copy

import pytest
import torch

from conftest import FAMILIES, TRANSLATION_FAMILIES, tiny_model_and_batch
from tolerances import within_rounding
from headprune.models.heads import adapter_for, full_gates, gated, head_shape
from headprune.models.prune import prune_heads


def logits(model, batch):
    with torch.no_grad():
        _, outputs = adapter_for(model).loss_and_outputs(model, batch)
    return outputs.logits


ENCODER_REMOVAL = {"enc_self": {0: [1], 1: [0, 1, 2, 3]}}  # includes a whole layer
TRANSLATION_REMOVAL = {**ENCODER_REMOVAL, "enc_dec": {0: [0, 1, 2, 3], 1: [3]}, "dec_self": {0: [2, 3], 1: [0, 1, 2, 3]}}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_gate_zero_equals_physical_removal(family):
    model, batch = tiny_model_and_batch(family)
    removal = TRANSLATION_REMOVAL if family in TRANSLATION_FAMILIES else ENCODER_REMOVAL
    gates = full_gates(model)
    for attn_type, layers in removal.items():
        for layer, heads in layers.items():
            gates[attn_type][layer, heads] = 0.0
    with gated(model, gates):
        gated_logits = logits(model, batch)
    full_logits = logits(model, batch)
    pruned = prune_heads(copy.deepcopy(model), removal)
    pruned_logits = logits(pruned, batch)
    assert within_rounding(gated_logits, pruned_logits)
    assert (gated_logits - full_logits).abs().max() > 1e-3  # the removed heads mattered


def test_gates_shape_and_default_is_identity(model_and_batch):
    model, batch = model_and_batch
    shape = head_shape(model)
    assert all(v == (2, 4) for v in shape.values())
    assert set(shape) == set(adapter_for(model).attention_types)
    before = logits(model, batch)
    with gated(model, full_gates(model)):
        assert torch.equal(logits(model, batch), before)
    assert torch.equal(logits(model, batch), before)  # hooks are gone after the context


def test_real_valued_gate_scales_value_projection(model_and_batch):
    """A gate g on a head equals multiplying that head's value projection by g (attention is linear in V)."""
    model, batch = model_and_batch
    site = [s for s in adapter_for(model).sites(model) if s.layer == 1][0]
    head, g = 2, 0.37
    gates = full_gates(model)
    gates[site.attn_type][1, head] = g
    with gated(model, gates):
        gated_logits = logits(model, batch)
    rows = slice(head * site.head_dim, (head + 1) * site.head_dim)
    with torch.no_grad():
        site.value.weight[rows] *= g
        site.value.bias[rows] *= g
    assert within_rounding(logits(model, batch), gated_logits)


@pytest.mark.parametrize("family", TRANSLATION_FAMILIES)
def test_gates_act_inside_beam_search_generate(family):
    model, batch = tiny_model_and_batch(family)
    src, mask = batch["input_ids"], batch["attention_mask"]
    gates = full_gates(model)
    gates["enc_dec"][1, :3] = 0.0
    gates["dec_self"][0, 1] = 0.0
    kwargs = dict(num_beams=5, max_new_tokens=8, max_length=None, do_sample=False)
    with torch.no_grad(), gated(model, gates):
        gated_out = model.generate(src, attention_mask=mask, **kwargs)
    with torch.no_grad():
        full_out = model.generate(src, attention_mask=mask, **kwargs)
    pruned = prune_heads(copy.deepcopy(model), {"enc_dec": {1: [0, 1, 2]}, "dec_self": {0: [1]}})
    with torch.no_grad():
        pruned_out = pruned.generate(src, attention_mask=mask, **kwargs)
    assert torch.equal(gated_out, pruned_out)
    assert not torch.equal(gated_out, full_out)


@pytest.mark.parametrize("family", TRANSLATION_FAMILIES)
def test_generate_with_whole_layers_removed_equals_gated(family):
    """A layer with no heads left still keeps its (empty) key/value cache: decoding positions stay right."""
    model, batch = tiny_model_and_batch(family)
    removal = {"dec_self": {0: [0, 1, 2, 3]}, "enc_dec": {1: [0, 1, 2, 3]}}
    gates = full_gates(model)
    for attn_type, layers in removal.items():
        for layer, heads in layers.items():
            gates[attn_type][layer, heads] = 0.0
    kwargs = dict(num_beams=3, max_new_tokens=8, max_length=None, do_sample=False)
    src, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad(), gated(model, gates):
        gated_out = model.generate(src, attention_mask=mask, **kwargs)
    pruned = prune_heads(copy.deepcopy(model), removal)
    with torch.no_grad():
        pruned_out = pruned.generate(src, attention_mask=mask, **kwargs)
    assert torch.equal(gated_out, pruned_out)
    assert gated_out.shape[1] > 3  # decoding went on past the first steps
