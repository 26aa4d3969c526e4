"""Batched gate variants: K gate settings in one forward or generate() equal K runs one by one."""
import numpy as np
import pytest
import torch

from conftest import (FAMILIES, PAD, TRANSLATION_FAMILIES, DigitTokenizer, needs_exact_decoding, repeated, tiny_fsmt,
                      tiny_model_and_batch, tolerance, variants)
from headprune.evaluation.evaluate import SourceSharingCache, predict_classes, predict_classes_variants, stack_gates, translate, translate_variants
from headprune.evaluation.runs import gates_without
from headprune.models.heads import adapter_for, gated
from headprune.models.prune import prune_heads

BEAM = dict(num_beams=4, max_new_tokens=8, max_length=None, do_sample=False, early_stopping=True)


def logits(model, batch, gates):
    with torch.no_grad(), gated(model, gates):
        return adapter_for(model).loss_and_outputs(model, batch)[1].logits


@pytest.mark.parametrize("family, attn_type", [("bert", "enc_self")] + [
    (family, attn_type) for family in TRANSLATION_FAMILIES for attn_type in ("enc_self", "enc_dec", "dec_self")])
def test_batched_forward_equals_one_by_one(family, attn_type):
    model, batch = tiny_model_and_batch(family)
    gates_list = variants(model, attn_type)
    batched = logits(model, repeated(batch, len(gates_list)), stack_gates(model, gates_list))
    alone = [logits(model, batch, gates) for gates in gates_list]
    assert (batched - torch.cat(alone)).abs().max() <= tolerance(1e-5, batched)
    assert all((a - alone[-1]).abs().max() > 1e-3 for a in alone[:-1])  # every variant changed the model


def generate(model, batch, gates):
    with torch.no_grad(), gated(model, gates):
        return model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], **BEAM)


@pytest.mark.parametrize("family", TRANSLATION_FAMILIES)
@pytest.mark.parametrize("attn_type", ["enc_self", "enc_dec", "dec_self"])
def test_batched_beam_search_equals_one_by_one(family, attn_type):
    needs_exact_decoding()
    model, batch = tiny_model_and_batch(family)
    gates_list = variants(model, attn_type)
    batched = generate(model, repeated(batch, len(gates_list)), stack_gates(model, gates_list))
    rows = len(batch["input_ids"])
    alone = [generate(model, batch, gates) for gates in gates_list]
    for k, ids in enumerate(alone):
        mine = batched[k * rows:(k + 1) * rows]
        # the batched output is padded to the longest hypothesis of all variants
        assert torch.equal(mine[:, :ids.shape[1]], ids) and (mine[:, ids.shape[1]:] == PAD).all()
    # a mixed-up variant would show (a tiny model may still map two of the settings to one output)
    assert len({str(ids.tolist()) for ids in alone}) >= 3


def test_a_batch_that_does_not_hold_the_variants_is_refused():
    model, batch = tiny_model_and_batch("fsmt")
    gates = stack_gates(model, variants(model, "enc_dec"))  # 4 variants, 3 rows
    with pytest.raises(ValueError, match="cannot hold 4 gate variants"):
        logits(model, batch, gates)


def test_predict_classes_variants_equals_one_by_one():
    needs_exact_decoding()  # the argmax of each variant's logits
    make_model, make_batch = FAMILIES["bert"]
    model = make_model()
    batches = [make_batch(seed) for seed in (1, 2, 3)]
    gates_list = variants(model, "enc_self")
    # 4 rows per batch and 8 rows per forward: the variants run in two groups of two
    batched = predict_classes_variants(model, batches, gates_list, variant_batch_size=8)
    alone = np.stack([predict_classes(model, batches, gates) for gates in gates_list])
    assert batched.shape == (4, 12) and np.array_equal(batched, alone)


def test_translate_variants_equals_one_by_one():
    needs_exact_decoding()
    model, tokenizer = tiny_fsmt(), DigitTokenizer()
    g = torch.Generator().manual_seed(0)
    sources = [" ".join(map(str, torch.randint(4, 40, (n,), generator=g).tolist())) for n in (5, 3, 6, 2, 4, 6, 3)]
    gates_list = variants(model, "enc_dec") + [gates_without(model, [("dec_self", 1, 0), ("enc_self", 0, 3)])]
    options = dict(beam=3, batch_size=3, max_len_a=1.0, max_len_b=3)
    # 3 sentences per batch and 6 rows per generate(): the 5 variants run in groups of two
    batched = translate_variants(model, tokenizer, sources, gates_list, variant_batch_size=6, **options)
    alone = [translate(model, tokenizer, sources, gates, **options) for gates in gates_list]
    assert batched == alone
    assert len({tuple(t) for t in alone}) == len(alone)  # the variants translate differently


@pytest.mark.parametrize("family", TRANSLATION_FAMILIES)
@pytest.mark.parametrize("pruned", [False, True])
def test_beam_search_without_cross_attention_reordering_is_unchanged(family, pruned):
    """SourceSharingCache skips reordering the cross-attention cache; the beams must not notice,
    with heads gated, heads removed, and a decoder layer left with no encoder-attention heads."""
    model, batch = tiny_model_and_batch(family)
    if pruned:
        prune_heads(model, {"enc_dec": {0: [0, 1, 2, 3]}, "dec_self": {1: [2]}, "enc_self": {0: [1]}})
    gates = gates_without(model, [("enc_dec", 1, 2), ("dec_self", 0, 1)])
    with torch.no_grad(), gated(model, gates):
        default = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], **BEAM)
        shared = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"],
                                past_key_values=SourceSharingCache.for_model(model), **BEAM)
    assert torch.equal(default, shared)
    assert default.shape[1] > 3  # several decoding steps, so several reorderings
