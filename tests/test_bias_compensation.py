"""Bias compensation (issue #32, FLAP): pruning a head keeps its constant in the output projection's bias.

For every family headprune prunes (tiny random models of tests/test_adapter_contract.py; grouped-query attention
with 3 query heads per kv head; tied embeddings; a layer left with no heads; bfloat16), a model pruned with
``prune_heads(..., constants=)`` gives the logits of the full model with those heads masked by
``Constant(constants)`` (gate 0: the head's output replaced by its constant), within 1e-5 in float32; the bias
added equals b + W_o[:, h] c_h computed here by hand; pruning step by step equals pruning at once. Saved with
``save_pruned``, it loads in plain transformers (``trust_remote_code``, a child Python that cannot import
headprune: tests/test_export.py's child) and in ``load_pruned_weights`` with the same logits, families without
an output-projection bias (Llama without attention biases, Mistral, Qwen2) included.
"""
import copy
import json

import numpy as np
import pytest
import torch
from transformers.pytorch_utils import Conv1D

from test_adapter_contract import FAMILIES, REMOVALS, build, gates_for, removal_for
from test_export import (CASES, CAUSAL_LM, SEQ2SEQ, beam_search_config, child_job, run_child, tiny_llama_6_on_2,
                         tiny_prenorm_shared_all)
from tolerances import within_rounding
from headprune.models.export import save_pruned
from headprune.models.head_constants import HeadConstants
from headprune.models.heads import adapter_for, gated
from headprune.models.masking import Constant, Mean
from headprune.models.prune import (ADDED_BIAS_KEY, COMPENSATION_KEY, count_heads, load_pruned_weights, prune_heads,
                                    pruned_heads)


def random_constants(model, seed=0, scale=0.5, kind="mean") -> HeadConstants:
    g = torch.Generator().manual_seed(seed)
    return HeadConstants({(s.attn_type, s.layer): scale * torch.randn(s.original_num_heads, s.head_dim, generator=g)
                          for s in adapter_for(model).sites(model)}, kind)


def logits(model, batch, gates=None, masking="zero"):
    with torch.no_grad(), gated(model, gates, masking=masking):
        return adapter_for(model).loss_and_outputs(model, batch)[1].logits


def real_rows(model, batch, values):
    """Causal LMs: the logits at real tokens (padding positions mean nothing)."""
    if adapter_for(model).attention_types == ("dec_self",):
        return values[batch["attention_mask"].bool()]
    return values


EXTRA = {"llama_6_on_2": (tiny_llama_6_on_2, FAMILIES["llama"][1]),
         "prenorm_shared_all": (tiny_prenorm_shared_all, FAMILIES["m2m100"][1])}


def build_any(family):
    if family in EXTRA:
        make_model, make_batch = EXTRA[family]
        return make_model(), make_batch()
    return build(family)


@pytest.mark.parametrize("removal", ["uneven", "group_and_layer"])
@pytest.mark.parametrize("family", [*FAMILIES, *EXTRA])
def test_pruned_with_constants_equals_constant_masking(family, removal):
    model, batch = build_any(family)
    layers = REMOVALS[removal]
    if family == "llama_6_on_2":  # 6 query heads on 2 kv heads: a whole group, part of one, a whole layer
        layers = {0: [1], 1: [0, 1, 2, 3, 4, 5], 2: [3, 4, 5], 3: [0, 1, 5]}
    heads = removal_for(model, layers)
    constants = random_constants(model)
    expected = logits(model, batch, gates_for(model, heads), Constant(constants))
    pruned = prune_heads(copy.deepcopy(model), heads, constants=constants)
    got = logits(pruned, batch)
    assert within_rounding(real_rows(model, batch, got), real_rows(model, batch, expected))
    zeroed = logits(model, batch, gates_for(model, heads))
    assert (real_rows(model, batch, got) - real_rows(model, batch, zeroed)).abs().max() > 1e-3  # the constants mattered
    assert count_heads(pruned) == count_heads(model) - sum(len(h) for t in heads.values() for h in t.values())
    record = getattr(pruned.config, COMPENSATION_KEY)
    assert record["kind"] == "mean"
    assert {t: {int(k): v for k, v in layers_.items()} for t, layers_ in record["heads"].items()} == pruned_heads(pruned)


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama_gqa", "fsmt"])
def test_the_bias_is_the_removed_columns_applied_to_the_constants(family):
    """b' = b + W_o[:, removed columns] c, by hand: Linear (out, in), GPT-2's Conv1D (in, out), no bias (zeros)."""
    model, _ = build(family)
    constants = random_constants(model, seed=3)
    site = adapter_for(model).sites(model)[0]
    weight = site.output.weight.detach().double().clone()
    bias = torch.zeros(weight.shape[1 if isinstance(site.output, Conv1D) else 0], dtype=torch.float64) \
        if site.output.bias is None else site.output.bias.detach().double().clone()
    removed = [0, 2]
    prune_heads(model, {site.attn_type: {site.layer: removed}}, constants=constants)
    d = site.head_dim
    c = torch.cat([constants.head(site.attn_type, site.layer, h).double() for h in removed])
    columns = [h * d + i for h in removed for i in range(d)]
    expected = bias + (c @ weight[columns] if isinstance(site.output, Conv1D) else weight[:, columns] @ c)
    new = adapter_for(model).sites(model)[0].output
    assert torch.allclose(new.bias.detach().double(), expected, atol=1e-6)
    assert (getattr(model.config, ADDED_BIAS_KEY, None) or {}) == ({"dec_self": [0]} if family == "llama_gqa" else {})


@pytest.mark.parametrize("family", ["llama_gqa", "bart", "gpt2"])
def test_step_by_step_with_constants_equals_at_once(family):
    model, batch = build(family)
    constants = random_constants(model, seed=1)
    first = removal_for(model, {0: [0, 2]})
    second = removal_for(model, {0: [1, 2], 1: [3]})  # head 2 of layer 0 is already gone: not added twice
    stepwise = prune_heads(prune_heads(copy.deepcopy(model), first, constants=constants), second, constants=constants)
    at_once = prune_heads(copy.deepcopy(model), removal_for(model, {0: [0, 1, 2], 1: [3]}), constants=constants)
    a, b = logits(stepwise, batch), logits(at_once, batch)
    assert within_rounding(real_rows(model, batch, a), real_rows(model, batch, b))
    masked = logits(model, batch, gates_for(model, removal_for(model, {0: [0, 1, 2], 1: [3]})), Mean(constants))
    assert within_rounding(real_rows(model, batch, a), real_rows(model, batch, masked))


def test_bfloat16_keeps_its_dtype_and_matches_within_its_precision():
    model, batch = build("llama_gqa")
    model = model.to(torch.bfloat16)
    constants = random_constants(model)
    heads = removal_for(model, REMOVALS["uneven"])
    pruned = prune_heads(copy.deepcopy(model), heads, constants=constants)
    site = adapter_for(pruned).sites(pruned)[0]
    assert site.output.bias.dtype == torch.bfloat16 and site.output.weight.dtype == torch.bfloat16
    expected = real_rows(model, batch, logits(model, batch, gates_for(model, heads), Constant(constants))).float()
    got = real_rows(model, batch, logits(pruned, batch)).float()
    assert (got - expected).abs().max() <= 0.05 * max(1.0, float(expected.abs().max()))


def test_wrong_constants_are_refused():
    model, _ = build("bert")
    other, _ = build("llama")
    with pytest.raises(ValueError, match="no constants for enc_self layer 0"):
        prune_heads(model, {"enc_self": {0: [1]}}, constants=random_constants(other))
    bad = random_constants(model)
    bad.values[("enc_self", 1)] = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="have shape \\(4, 3\\)"):
        prune_heads(model, {"enc_self": {0: [1]}}, constants=bad)


# --- Saved, and loaded by plain transformers --------------------------------------------------------------------

# family -> removal; the builders and inputs are tests/test_export.py's. Llama without attention biases, Mistral and
# Qwen2 have no o_proj bias: it is added, and must be rebuilt on load.
SAVED = {"llama_gqa": {"dec_self": {0: [1], 1: [0, 1, 2, 3]}}, "mistral": None, "qwen2": None, "llama_6_on_2": None,
         "gpt2": None, "bert": None, "distilbert": None, "fsmt": None, "prenorm_shared_all": None, "bart": None,
         "marian": None}


def saved_case(family):
    if family == "llama_gqa":
        from test_adapter_contract import tiny_llama_gqa
        from test_export import causal_inputs

        return tiny_llama_gqa, causal_inputs, SAVED[family], CAUSAL_LM
    return CASES[family]


@pytest.fixture(scope="module")
def exported_with_constants(tmp_path_factory):
    root = tmp_path_factory.mktemp("compensated")
    cases, jobs = {}, []
    for family in SAVED:
        builder, make_inputs, removal, auto = saved_case(family)
        model = builder()
        if auto in (CAUSAL_LM, SEQ2SEQ):
            beam_search_config(model)
        constants = random_constants(model, seed=5)
        pruned = prune_heads(copy.deepcopy(model), removal, constants=constants)
        inputs = make_inputs()
        folder = save_pruned(pruned, None, root / family)
        job, out = child_job(root, family, auto, folder, inputs, ["input_ids", "attention_mask"]
                             if auto in (CAUSAL_LM, SEQ2SEQ) else None)
        jobs.append(job)
        cases[family] = (model, pruned, constants, removal, inputs, folder, out)
    run_child(root, jobs)
    return cases


@pytest.mark.parametrize("family", list(SAVED))
def test_saved_compensated_model_loads_in_plain_transformers(exported_with_constants, family):
    model, pruned, constants, removal, inputs, folder, out = exported_with_constants[family]
    auto = saved_case(family)[3]
    gates = gates_for(model, removal)
    with torch.no_grad(), gated(model, gates, masking=Constant(constants)):
        expected = model(**inputs).logits
    got = np.load(out / "output.npy")
    assert np.abs(got - expected.numpy()).max() <= 1e-5
    with torch.no_grad(), gated(model, gates):
        assert np.abs(got - model(**inputs).logits.numpy()).max() > 1e-3  # not the zeroed model
    parameters = json.loads((out / "parameters.json").read_text())
    assert parameters["parameters"] == sum(p.numel() for p in pruned.parameters())
    if auto in (CAUSAL_LM, SEQ2SEQ):  # generate() with the saved generation config: beam search, cached steps
        with torch.no_grad(), gated(model, gates, masking=Constant(constants)):
            tokens = model.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        assert np.array_equal(np.load(out / "generated.npy"), tokens.numpy())
    config = json.loads((folder / "config.json").read_text())
    assert config[COMPENSATION_KEY]["kind"] == "mean"
    if family in ("llama_gqa", "mistral", "qwen2"):
        assert config[ADDED_BIAS_KEY] == {"dec_self": sorted(int(k) for k in removal["dec_self"])}
    assert "bias compensation" in (folder / "README.md").read_text()


@pytest.mark.parametrize("family", ["llama_gqa", "qwen2", "gpt2", "fsmt", "prenorm_shared_all"])
def test_load_pruned_weights_reads_the_compensated_folder(exported_with_constants, family):
    _, pruned, _, _, inputs, folder, _ = exported_with_constants[family]
    reloaded = load_pruned_weights(type(pruned), folder, attn_implementation="eager")
    with torch.no_grad():
        assert within_rounding(reloaded(**inputs).logits, pruned(**inputs).logits)
    assert pruned_heads(reloaded) == pruned_heads(pruned)
    assert getattr(reloaded.config, ADDED_BIAS_KEY, None) == getattr(pruned.config, ADDED_BIAS_KEY, None)
