"""headprune.evaluation.shared_layers: gate variants share the layers below their first masked head,
and each variant's outputs are those of running it whole, for every one-stack family."""
import pytest
import torch

from tolerances import within_rounding
from headprune.evaluation.evaluate import predict_classes, predict_classes_variants
from headprune.evaluation.perplexity import window_nll_variants
from headprune.evaluation.runs import gates_without
from headprune.evaluation.shared_layers import (attention_modules, first_masked_layer, forward_variants, head_output_modules,
                                                 layer_stack)
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.masking import masked_as
from test_adapter_contract import CAUSAL, ENCODERS, FAMILIES, build

ONE_STACK = ["bert", *ENCODERS, *CAUSAL]


def whole(model, inputs, gates):
    with torch.no_grad(), gated(model, gates):
        return model(**inputs).logits


def logits(model, inputs):
    return model(**inputs).logits


def inputs_of(batch):
    return {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}


@pytest.mark.parametrize("family", ONE_STACK)
def test_variants_sharing_layers_equal_each_variant_run_whole(family):
    model, batch = build(family)
    inputs = inputs_of(batch)
    attn_type = adapter_for(model).attention_types[0]
    gates_list = [gates_without(model, [(attn_type, 1, 2)]), None, gates_without(model, [(attn_type, 0, 1)]),
                  gates_without(model, [(attn_type, 1, 0), (attn_type, 1, 3)]), full_gates(model)]
    stack = layer_stack(model)
    assert stack is not None and len(stack) == 2
    assert [first_masked_layer(g, 2) for g in gates_list] == [1, 2, 0, 1, 2]
    # count the rows layer 0 computes: its attention's query projection sees them
    query = next(site.query for site in adapter_for(model).sites(model) if site.layer == 0)
    rows_in_layer0 = []
    hook = query.register_forward_hook(lambda module, args, out: rows_in_layer0.append(args[0].shape[0]))
    with torch.no_grad():
        shared = forward_variants(model, inputs, gates_list, logits, variant_batch_size=1000)
    hook.remove()
    for gates, mine in zip(gates_list, shared):
        assert within_rounding(mine, whole(model, inputs, gates))
    assert all((shared[i] - shared[1]).abs().max() > 1e-4 for i in (0, 2, 3))  # the masks changed the model
    rows = len(inputs["input_ids"])
    # one full pass (recording layer 0, and the full model's own result); the layer-0 variant replays layer
    # 0's head outputs, so its queries are not computed again (the recorded attention output, or the output
    # projection's recorded input where the projection is inside the attention module). DeBERTa-v3 also
    # projects its one row of relative position embeddings with the query projection.
    assert [r for r in rows_in_layer0 if r != 1] == [rows]
    assert not any(module.__dict__.get("forward") for module in [*stack, *[m for m, _ in head_output_modules(model)]])


def test_a_layer_whose_attention_output_is_not_its_projection_output_is_computed_whole():
    """Something acting after the output projection inside the attention module (here a scale) would be lost
    by projecting the recorded head outputs anew: that layer is then computed, not replayed."""
    model, batch = build("llama")
    inputs = inputs_of(batch)
    attention = layer_stack(model)[1].self_attn
    plain = type(attention).forward.__get__(attention)
    attention.forward = lambda *args, **kwargs: (lambda out: (out[0] * 0.5, *out[1:]))(plain(*args, **kwargs))
    calls = []
    hook = attention.q_proj.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    gates_list = [gates_without(model, [("dec_self", 1, 2)]), gates_without(model, [("dec_self", 0, 1)])]
    with torch.no_grad():
        shared = forward_variants(model, inputs, gates_list, logits, variant_batch_size=1000)
    hook.remove()
    for gates, mine in zip(gates_list, shared):
        assert within_rounding(mine, whole(model, inputs, gates))
    rows = len(inputs["input_ids"])
    assert calls == [rows, rows, rows]  # the recording pass, the layer-1 variant (not replayed), the layer-0 one


def test_the_full_pass_stops_after_the_last_layer_the_variants_need():
    model, batch = build("bert")
    inputs = inputs_of(batch)
    top = layer_stack(model)[1]
    calls = []
    hook = top.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    with torch.no_grad():
        forward_variants(model, inputs, [gates_without(model, [("enc_self", 1, 1)])], logits, variant_batch_size=1000)
    hook.remove()
    assert calls == [len(inputs["input_ids"])]  # layer 1 ran for the variant only, not in the recording pass


def test_an_accelerate_style_forward_is_put_back():
    model, batch = build("llama")
    stack = layer_stack(model)
    wrapped = stack[0].forward  # accelerate's dispatch stores such a wrapper on the instance
    stack[0].forward = lambda *args, **kwargs: wrapped(*args, **kwargs)
    mine = stack[0].forward
    with torch.no_grad():
        forward_variants(model, inputs_of(batch), [gates_without(model, [("dec_self", 1, 0)])], logits,
                         variant_batch_size=1000)
    assert stack[0].__dict__["forward"] is mine


@pytest.mark.parametrize("family, separable", [("bert", True), ("roberta", True), ("electra", True),
                                               ("deberta_v3", True), ("distilbert", False), ("llama", False),
                                               ("gpt2", False)])
def test_head_outputs_are_replayed_where_the_output_projection_is_apart(family, separable):
    model, _ = build(family)
    assert (attention_modules(model) is not None) == separable
    sites = {site.layer: site for site in adapter_for(model).sites(model)}
    for layer, (module, projection) in enumerate(head_output_modules(model)):
        assert module is sites[layer].attention and projection is (None if separable else sites[layer].output)


def test_uniform_masking_recomputes_the_masked_layer():
    """Uniform masking acts on a head's query, inside the attention module: that module is not replayed."""
    model, batch = build("bert")
    inputs = inputs_of(batch)
    gates_list = [gates_without(model, [("enc_self", 1, 2)]), gates_without(model, [("enc_self", 0, 0)])]
    with torch.no_grad():
        with masked_as(model, "uniform"):
            shared = forward_variants(model, inputs, gates_list, logits, variant_batch_size=1000)
        for gates, mine in zip(gates_list, shared):
            with gated(model, gates, masking="uniform"):
                assert within_rounding(mine, model(**inputs).logits)


def test_an_encoder_decoder_has_no_shared_stack():
    model, _ = build("fsmt")
    assert layer_stack(model) is None


def test_classification_and_perplexity_use_it_with_the_same_results():
    model, batch = build("bert")
    batches = [batch, {k: v[:3] for k, v in batch.items()}]
    gates_list = [gates_without(model, [("enc_self", layer, head)]) for layer in (0, 1) for head in range(4)]
    batched = predict_classes_variants(model, batches, gates_list, variant_batch_size=8)
    assert batched.tolist() == [predict_classes(model, batches, gates).tolist() for gates in gates_list]
    lm, lm_batch = build("llama_gqa")
    windows = [{"input_ids": lm_batch["input_ids"]}]
    gates_list = [None] + [gates_without(lm, [("dec_self", layer, 1)]) for layer in (0, 1)]
    together = window_nll_variants(lm, windows, gates_list, variant_batch_size=64)
    for gates, mine in zip(gates_list, together):
        alone = window_nll_variants(lm, windows, [gates], variant_batch_size=64)[0]
        assert [n for n, _ in mine] == pytest.approx([n for n, _ in alone], abs=1e-4)


def test_a_model_dispatched_by_accelerate_gives_the_same_gated_perplexities(tmp_path):
    """A model spread by a device map (here one layer offloaded to disk, as a map spreads layers over
    GPUs) runs under accelerate's hooks: gates and shared layers must work through them."""
    from transformers import AutoModelForCausalLM

    model, batch = build("llama_gqa")
    model.save_pretrained(tmp_path / "model")
    device_map = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
                  "model.layers.1": "disk", "model.norm": "cpu", "lm_head": "cpu"}
    spread = AutoModelForCausalLM.from_pretrained(tmp_path / "model", device_map=device_map, attn_implementation="eager",
                                                  offload_folder=tmp_path / "offload").eval()
    wrappers = [layer.__dict__.get("forward") for layer in layer_stack(spread)]
    assert all(w is not None for w in wrappers)  # accelerate's dispatch wrappers
    windows = [{"input_ids": batch["input_ids"]}]
    gates_list = [None, gates_without(model, [("dec_self", 1, 1)]), gates_without(model, [("dec_self", 0, 2)])]
    expected = [[nll for nll, _ in variant] for variant in window_nll_variants(model, windows, gates_list)]
    got = [[nll for nll, _ in variant] for variant in window_nll_variants(spread, windows, gates_list)]
    for mine, theirs in zip(got, expected):
        assert mine == pytest.approx(theirs, abs=1e-4)
    assert [layer.__dict__.get("forward") for layer in layer_stack(spread)] == wrappers
    assert expected[1] != pytest.approx(expected[0], abs=1e-3)  # the gates changed something
