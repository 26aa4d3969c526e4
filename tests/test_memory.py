"""Memory as a goal (issue #57): the LM head's logits reduced in chunks of positions equal the whole-tensor
reductions (float64), whatever the family does after its output layer."""
import numpy as np
import pytest
import torch
from transformers import (CohereConfig, CohereForCausalLM, Gemma2Config, Gemma2ForCausalLM, LlamaConfig,
                          LlamaForCausalLM)

from headprune.experiments.loglikelihoods import loglikelihood_variants
from headprune.experiments.perplexity import window_batches, window_nll_variants
from headprune.experiments.runs import all_heads, gates_without
from headprune.experiments.screening import gradient_screens
from headprune.models import lm_head
from headprune.models.families.causal_lm import CausalLMAdapter

VOCAB = 97
SMALL = 3 * VOCAB  # three positions of logits at a time


def small(family):
    """A tiny float64 decoder of ``family`` (llama; gemma2: soft-capped logits; cohere: scaled logits)."""
    shape = dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=4, max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(0)
    if family == "gemma2":
        model = Gemma2ForCausalLM(Gemma2Config(**shape, final_logit_softcapping=0.5, query_pre_attn_scalar=4))
    elif family == "cohere":
        model = CohereForCausalLM(CohereConfig(**shape, logit_scale=3.0))
    else:
        model = LlamaForCausalLM(LlamaConfig(**shape, initializer_range=0.3))
    return model.double().eval()


def windows(n=5, length=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n, length), generator=g).tolist()


@pytest.fixture(params=["llama", "gemma2", "cohere"])
def model(request):
    return small(request.param)


def chunked(monkeypatch, budget=SMALL):
    monkeypatch.setattr(lm_head, "LOGITS_AT_ONCE", budget)


def test_final_logits_are_the_models_own(model):
    ids = torch.tensor(windows(2))
    hidden, _ = lm_head.hidden_and_outputs(model, input_ids=ids)
    torch.testing.assert_close(lm_head.logits_of(model, hidden), model(input_ids=ids).logits, rtol=0, atol=1e-12)


def test_perplexity_chunked_equals_whole(model, monkeypatch):
    batches = window_batches(windows(), 5)
    heads = all_heads(model)
    gates = [None, gates_without(model, heads[:1]), gates_without(model, heads[3:6])]
    whole = window_nll_variants(model, batches, gates, variant_batch_size=8)
    calls = []
    monkeypatch.setattr(lm_head, "logits_of", lambda m, h, own=lm_head.logits_of: calls.append(len(h)) or own(m, h))
    chunked(monkeypatch)
    parts = window_nll_variants(model, batches, gates, variant_batch_size=8)
    assert calls and max(calls) <= 3  # the chunked path ran, three positions at a time
    np.testing.assert_allclose(np.asarray(parts), np.asarray(whole), rtol=0, atol=1e-6)
    assert np.ptp(np.asarray(whole)[:, :, 0], axis=0).max() > 1e-3  # the gates change the NLLs


def test_loglikelihoods_chunked_equal_whole(model, monkeypatch):
    chunks = windows(6, 7, seed=1)
    pairs = [(c[:4], c[4:]) for c in chunks] + [(chunks[0][:4], chunks[1][4:]), (chunks[0][:5], chunks[0][5:6])]
    gates = [None, gates_without(model, all_heads(model)[2:5])]
    kwargs = dict(max_length=16, batch_size=4, variant_batch_size=8)
    whole = loglikelihood_variants(model, pairs, gates, **kwargs)
    chunked(monkeypatch, budget=VOCAB)
    parts = loglikelihood_variants(model, pairs, gates, **kwargs)
    np.testing.assert_allclose([[s for s, _ in v] for v in parts], [[s for s, _ in v] for v in whole], atol=1e-6, rtol=0)
    assert [[g for _, g in v] for v in parts] == [[g for _, g in v] for v in whole]


def test_loss_and_its_gradient_chunked_equal_whole(model, monkeypatch):
    ids = torch.tensor(windows(3, 8))
    mask = torch.ones_like(ids)
    mask[0, -2:] = 0  # padding: positions that predict nothing
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(ids % 5 == 0, -100)}

    def loss_and_grad():
        model.zero_grad()
        loss, _ = CausalLMAdapter().loss_and_outputs(model, batch)
        loss.backward()
        return loss.detach(), model.model.norm.weight.grad.clone()

    whole = loss_and_grad()
    chunked(monkeypatch)
    parts = loss_and_grad()
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-6)


def test_screens_chunked_equal_whole(monkeypatch):
    model = small("llama")
    batches = window_batches(windows(4, 10), 2)
    whole = gradient_screens(model, batches)
    chunked(monkeypatch)
    parts = gradient_screens(model, batches)
    np.testing.assert_allclose(parts[["first_order", "fisher", "importance"]].to_numpy(),
                               whole[["first_order", "fisher", "importance"]].to_numpy(), rtol=0, atol=1e-6)
    assert whole.first_order.abs().max() > 1e-4


def test_an_unknown_final_processing_is_refused(monkeypatch):
    model = small("llama")
    forward = model.forward

    def doubled(*args, **kwargs):  # a family that processes its logits in a way not declared
        out = forward(*args, **kwargs)
        out.logits = out.logits * 2
        return out

    model.forward = doubled
    with pytest.raises(ValueError, match="processes its output layer's logits"):
        lm_head.hidden_and_outputs(model, input_ids=torch.tensor(windows(1)))
