"""Uniform masking (heads.gated(masking="uniform")): a masked head attends uniformly to the keys it may attend to."""
import copy

import numpy as np
import pytest
import torch

from conftest import (EOS, FAMILIES, PAD, TRANSLATION_FAMILIES, DigitTokenizer, repeated, tiny_fsmt, tiny_model_and_batch,
                      variants)
from tolerances import within_rounding
from headprune.evaluation.evaluate import predict_classes, predict_classes_variants, stack_gates, translate, translate_variants
from headprune.evaluation.runs import EvalSet, EvalSettings, gates_without, run_variants
from headprune.models.heads import HeadCapture, adapter_for, full_gates, gated
from headprune.models.masking import masked_as
from headprune.models.prune import prune_heads

ATTN_TYPES = ("enc_self", "enc_dec", "dec_self")
CASES = [("bert", "enc_self")] + [(family, t) for family in TRANSLATION_FAMILIES for t in ATTN_TYPES]
# FSMT has one attention implementation of its own; BERT and M2M100 take transformers' backends.
BACKENDS = {"bert": ("eager", "sdpa"), "fsmt": ("eager",), "m2m100": ("eager", "sdpa")}
BACKEND_CASES = [(family, t, backend) for family, t in CASES for backend in BACKENDS[family]]
MASKED = {0: [2], 1: [1, 3]}  # layer: heads masked in the tests that look inside the model
BEAM = dict(num_beams=4, max_new_tokens=8, max_length=None, do_sample=False, early_stopping=True)


def masked_gates(model, attn_type, masked=MASKED):
    return gates_without(model, [(attn_type, layer, h) for layer, heads in masked.items() for h in heads])


def forward(model, batch, gates=None, masking="uniform", output_attentions=False):
    with torch.no_grad(), gated(model, gates, masking=masking):
        return adapter_for(model).loss_and_outputs(model, batch, output_attentions=output_attentions)[1]


def site_of(model, attn_type, layer):
    return next(s for s in adapter_for(model).sites(model) if s.attn_type == attn_type and s.layer == layer)


def batch_major(t, site):
    return t.transpose(0, 1) if site.time_major else t


@pytest.mark.parametrize("family, attn_type", CASES)
def test_masked_head_attends_uniformly_to_its_allowed_keys(family, attn_type):
    model, batch = tiny_model_and_batch(family)
    adapter = adapter_for(model)
    allowed = adapter.key_mask(batch, attn_type)  # (batch, queries, keys)
    real = adapter.query_mask(batch, attn_type)  # (batch, queries)
    uniform = allowed.double() / allowed.sum(-1, keepdim=True)
    assert (~allowed[real]).any()  # the batch has padding (and causality) for the test to respect

    outputs = forward(model, batch, masked_gates(model, attn_type), output_attentions=True)
    attentions = adapter.attention_weights(outputs, attn_type)
    for layer, heads in MASKED.items():
        for h in heads:
            probs = attentions[layer][:, h][real]
            assert (probs.double() - uniform[real]).abs().max() <= 1e-7
            assert (probs[~allowed[real]] == 0).all()

    # Masking heads of layer 1 leaves its other heads' attention, and every earlier layer's, as it was.
    full = adapter.attention_weights(forward(model, batch, output_attentions=True), attn_type)
    only_layer_1 = adapter.attention_weights(
        forward(model, batch, masked_gates(model, attn_type, {1: MASKED[1]}), output_attentions=True), attn_type)
    others = [h for h in range(4) if h not in MASKED[1]]
    assert torch.equal(only_layer_1[1][:, others], full[1][:, others])
    assert torch.equal(only_layer_1[0], full[0])
    assert (only_layer_1[1][:, MASKED[1]] - full[1][:, MASKED[1]]).abs().max() > 1e-2  # it did change


@pytest.mark.parametrize("family, attn_type, backend", BACKEND_CASES)
def test_masked_head_outputs_the_mean_of_its_values(family, attn_type, backend):
    """What the output projection receives for a masked head is the mean of that head's value vectors over the
    allowed keys, computed here from the value projection's output."""
    model, batch = tiny_model_and_batch(family)
    model.set_attn_implementation(backend)
    adapter = adapter_for(model)
    allowed = adapter.key_mask(batch, attn_type).to(torch.float32)
    real = adapter.query_mask(batch, attn_type)
    seen, handles = {}, []
    for layer in MASKED:
        site = site_of(model, attn_type, layer)
        handles.append(site.value.register_forward_hook(
            lambda m, args, out, layer=layer, site=site: seen.__setitem__(("value", layer), batch_major(out, site))))
        handles.append(site.output.register_forward_pre_hook(
            lambda m, args, layer=layer, site=site: seen.__setitem__(("heads", layer), batch_major(args[0], site))))
    try:
        forward(model, batch, masked_gates(model, attn_type))
    finally:
        for handle in handles:
            handle.remove()
    d = site_of(model, attn_type, 0).head_dim
    for layer, heads in MASKED.items():
        for h in heads:
            values = seen["value", layer][..., h * d:(h + 1) * d]  # (batch, keys, head_dim)
            expected = allowed @ values / allowed.sum(-1, keepdim=True)  # (batch, queries, head_dim)
            got = seen["heads", layer][..., h * d:(h + 1) * d]
            assert within_rounding(got[real], expected[real])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_gates_of_one_are_the_ungated_model(family):
    model, batch = tiny_model_and_batch(family)
    assert torch.equal(forward(model, batch, full_gates(model)).logits, forward(model, batch).logits)
    assert torch.equal(forward(model, batch, None).logits, forward(model, batch, masking="zero").logits)


@pytest.mark.parametrize("family, attn_type", CASES)
def test_uniform_masking_differs_from_zero_masking(family, attn_type):
    model, batch = tiny_model_and_batch(family)
    gates = masked_gates(model, attn_type)
    uniform = forward(model, batch, gates).logits
    zero = forward(model, batch, gates, masking="zero").logits
    full = forward(model, batch).logits
    assert (uniform - zero).abs().max() > 1e-3
    assert (uniform - full).abs().max() > 1e-3


@pytest.mark.parametrize("family", list(FAMILIES))
def test_uniform_masking_of_a_pruned_model(family):
    """Gates name original heads: after physical pruning, the right query slice is still the one masked."""
    model, batch = tiny_model_and_batch(family)
    attn_type = "enc_self"
    adapter = adapter_for(model)
    pruned = prune_heads(copy.deepcopy(model), {attn_type: {1: [0, 2]}})  # layer 1 keeps heads 1 and 3
    gates = masked_gates(pruned, attn_type, {1: [3]})
    gates[attn_type][1, 0] = 1.0  # a pruned head's gate is ignored, 0 or 1
    attentions = adapter.attention_weights(forward(pruned, batch, gates, output_attentions=True), attn_type)
    allowed, real = adapter.key_mask(batch, attn_type), adapter.query_mask(batch, attn_type)
    assert attentions[1].shape[1] == 2
    uniform = allowed.float() / allowed.sum(-1, keepdim=True)
    assert within_rounding(attentions[1][:, 1][real], uniform[real])  # original head 3
    full = adapter.attention_weights(forward(pruned, batch, output_attentions=True), attn_type)
    assert torch.equal(attentions[1][:, 0], full[1][:, 0])  # original head 1


# --- batched variants, generate() --------------------------------------------------------------


@pytest.mark.parametrize("family, attn_type", CASES)
def test_batched_forward_equals_one_by_one(family, attn_type):
    model, batch = tiny_model_and_batch(family)
    gates_list = variants(model, attn_type)
    batched = forward(model, repeated(batch, len(gates_list)), stack_gates(model, gates_list)).logits
    alone = [forward(model, batch, gates).logits for gates in gates_list]
    assert within_rounding(batched, torch.cat(alone))
    assert all((a - alone[-1]).abs().max() > 1e-3 for a in alone[:-1])  # every variant changed the model


def generate(model, batch, gates, masking="uniform", **options):
    with torch.no_grad(), gated(model, gates, masking=masking):
        return model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], **{**BEAM, **options})


@pytest.mark.parametrize("family, attn_type", [c for c in CASES if c[0] in TRANSLATION_FAMILIES])
def test_batched_beam_search_equals_one_by_one(family, attn_type):
    model, batch = tiny_model_and_batch(family)
    gates_list = variants(model, attn_type)
    scored = dict(return_dict_in_generate=True, output_scores=True)
    batched = generate(model, repeated(batch, len(gates_list)), stack_gates(model, gates_list), **scored)
    rows = len(batch["input_ids"])
    alone = [generate(model, batch, gates, **scored) for gates in gates_list]
    for k, out in enumerate(alone):
        ids, mine = out.sequences, batched.sequences[k * rows:(k + 1) * rows]
        assert torch.equal(mine[:, :ids.shape[1]], ids) and (mine[:, ids.shape[1]:] == PAD).all()
        assert within_rounding(batched.sequences_scores[k * rows:(k + 1) * rows], out.sequences_scores)
    # A mixed-up variant would show in the beam scores (the tiny models often decode the same tokens).
    for k, out in enumerate(alone):
        for other in alone[k + 1:]:
            assert (out.sequences_scores - other.sequences_scores).abs().max() > 1e-3


@pytest.mark.parametrize("family, attn_type, backend", [c for c in BACKEND_CASES if c[0] in TRANSLATION_FAMILIES])
def test_cached_decoding_equals_a_full_forward(family, attn_type, backend):
    """generate() masks each step's new query against the cached keys: its logits equal a forward over the
    whole decoded prefix, where the masked heads are uniform (the first two tests)."""
    model, batch = tiny_model_and_batch(family)
    model.set_attn_implementation(backend)
    gates = masked_gates(model, attn_type)
    greedy = dict(num_beams=1, min_new_tokens=6, max_new_tokens=6, early_stopping=False, output_logits=True,
                  return_dict_in_generate=True)  # the tiny models would often stop at once
    out = generate(model, batch, gates, **greedy)
    step_logits = torch.stack(out.logits, 1)  # (batch, steps, vocab)
    decoded = out.sequences[:, :-1]
    with torch.no_grad(), gated(model, gates, masking="uniform"):
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoded,
                     decoder_attention_mask=torch.ones_like(decoded), use_cache=False).logits
    compared = 0
    for row, ids in enumerate(decoded.tolist()):
        steps = next((i for i, t in enumerate(ids[1:], 1) if t in (EOS, PAD)), len(ids))  # up to the row's end
        assert (step_logits[row, :steps] - full[row, :steps]).abs().max() <= 1e-4
        compared += steps
    assert compared >= 12
    ungated = generate(model, batch, None, **greedy)  # (dec_self differs from the second step: one key at the first)
    assert (torch.stack(ungated.logits, 1) - step_logits).abs().max() > 1e-3


def test_predict_classes_variants_equals_one_by_one():
    make_model, make_batch = FAMILIES["bert"]
    model = make_model()
    batches = [make_batch(seed) for seed in (1, 2, 3)]
    gates_list = variants(model, "enc_self")
    with masked_as(model, "uniform"):
        batched = predict_classes_variants(model, batches, gates_list, variant_batch_size=8)
        alone = np.stack([predict_classes(model, batches, gates) for gates in gates_list])
    assert batched.shape == (4, 12) and np.array_equal(batched, alone)
    zero = predict_classes_variants(model, batches, gates_list, variant_batch_size=8)
    assert not np.array_equal(batched, zero)


def sentences():
    g = torch.Generator().manual_seed(0)
    return [" ".join(map(str, torch.randint(4, 40, (n,), generator=g).tolist())) for n in (5, 3, 6, 2, 4, 6, 3)]


def test_translate_variants_equals_one_by_one_and_run_variants_passes_masking_on():
    model, tokenizer, sources = tiny_fsmt(), DigitTokenizer(), sentences()
    gates_list = variants(model, "enc_dec") + [gates_without(model, [("dec_self", 1, 0), ("enc_self", 0, 3)])]
    options = dict(beam=3, batch_size=3, max_len_a=1.0, max_len_b=3)
    with masked_as(model, "uniform"):
        batched = translate_variants(model, tokenizer, sources, gates_list, variant_batch_size=6, **options)
        alone = [translate(model, tokenizer, sources, gates, **options) for gates in gates_list]
    assert batched == alone
    assert len({tuple(t) for t in alone}) == len(alone)  # the variants translate differently
    zero = translate_variants(model, tokenizer, sources, gates_list, variant_batch_size=6, **options)
    assert [z == u for z, u in zip(zero, batched)] == [False, False, False, True, False]  # the full model: equal

    evalset = EvalSet(kind="translation", references=sources, sources=sources)
    settings = dict(beam=3, batch_size=3, variant_batch_size=6)
    via_settings = run_variants(model, tokenizer, evalset, gates_list, EvalSettings(masking="uniform", **settings))
    with masked_as(model, "uniform"):
        direct = translate_variants(model, tokenizer, sources, gates_list, **settings)
    assert via_settings == direct
    assert run_variants(model, tokenizer, evalset, gates_list, EvalSettings(**settings)) == \
        translate_variants(model, tokenizer, sources, gates_list, **settings)


# --- what uniform masking refuses ------------------------------------------------------------------


@pytest.mark.parametrize("value", [0.5, -1.0, 2.0, float("nan")])
def test_non_binary_gates_are_refused(value):
    model, batch = tiny_model_and_batch("fsmt")
    gates = full_gates(model)
    gates["dec_self"][1, 2] = value
    with pytest.raises(ValueError, match=r"gates 0 \(masked\) or 1 \(kept\) only; dec_self"):
        forward(model, batch, gates)
    forward(model, batch, gates, masking="zero")  # zero masking takes any real gate
    stacked = stack_gates(model, [full_gates(model), gates])  # one bad variant is enough
    with pytest.raises(ValueError, match="gates 0"):
        forward(model, repeated(batch, 2), stacked)


def test_unknown_masking_capture_and_relative_positions_are_refused():
    model, batch = tiny_model_and_batch("bert")
    with pytest.raises(ValueError, match="masking must be one of"):
        forward(model, batch, full_gates(model), masking="mean")
    with pytest.raises(ValueError, match="masking must be one of"):
        EvalSettings(masking="median")
    with pytest.raises(ValueError, match="mean masking needs its constants file"):
        EvalSettings(masking="mean")
    with pytest.raises(ValueError, match="capture works on output gates"):
        with gated(model, full_gates(model), HeadCapture(), masking="uniform"):
            pass
    model.config.position_embedding_type = "relative_key"
    with pytest.raises(ValueError, match="position_embedding_type='relative_key'"):
        forward(model, batch, full_gates(model))
    model.config.position_embedding_type = "absolute"
    forward(model, batch, full_gates(model))
    site_of(model, "enc_self", 1).attention.distance_embedding = torch.nn.Embedding(3, 4)
    with pytest.raises(ValueError, match=r"layer 1 \(BertSelfAttention\) has distance_embedding beside"):
        forward(model, batch, full_gates(model))
