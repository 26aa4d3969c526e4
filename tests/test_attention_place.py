"""A new mode that acts inside the attention is its class and its test (issue #60): the toy mode below, written here
alone and registered nowhere (the config's words and the demo stay as they are), names the attention place
(``headprune.models.places.Attention``) and what it does there, and masks heads of a decoder-only LM, an encoder and
an encoder-decoder (its three attention types).

The toy: a masked head attends to its first token only, so it puts out that token's value vector at every query.
The reference is the test's own: a hook on the attention's value projection (the model's own module) keeps the
values, and a pre-hook on its output projection puts the first token's value of the head into the head's slice of
that projection's input (the concatenated head outputs), as the attention would with all its weight on that key.
"""
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

from conftest import bert_batch, fsmt_batch, on_test_device, tiny_bert, tiny_fsmt, tiny_m2m100, tolerance
from test_streaming import causal_batch, tiny_llama_gqa6
from headprune.models.heads import full_gates, gated
from headprune.models.masking import MODES, Masking
from headprune.models.places import Attention


@dataclass(frozen=True)
class FirstToken(Masking):
    """A head with gate 0 attends to its first token only (a toy: tests/test_attention_place.py)."""

    word: ClassVar[str] = "first_token"
    place: ClassVar = Attention
    acts_as: ClassVar[str] = "lets a masked head see its first token alone"
    real_gates: ClassVar[bool] = False

    def keys_seen(self, query_positions, key_positions):
        first = key_positions[:, None, None, :] == 0
        return first & (query_positions[:, None, :, None] >= 0)  # (rows or 1, 1, queries, keys)


def first_token_by_hand(value: torch.nn.Module, output: torch.nn.Module, head: int, kv_head: int, head_dim: int,
                        first: torch.Tensor, handles: list):
    """Hooks of the test's own: ``head``'s slice of ``output``'s input becomes ``value``'s output (the same
    forward's) at each row's ``first`` token (rows,), the features of ``kv_head``."""
    seen = {}

    def keep_values(module, args, values):
        seen["values"] = values

    def put_first_value(module, args):
        (x, *rest) = args
        values = seen["values"][torch.arange(x.shape[0]), first.to(x.device)]  # (rows, kv features)
        x = x.clone()
        x[..., head * head_dim:(head + 1) * head_dim] = values[:, None, kv_head * head_dim:(kv_head + 1) * head_dim]
        return (x, *rest)

    handles.append(value.register_forward_hook(keep_values))
    handles.append(output.register_forward_pre_hook(put_first_value))


def outputs(model, batch, gates=None, masking=None, by_hand=()):
    handles = []
    try:
        for hooks in by_hand:
            first_token_by_hand(*hooks, handles)
        with torch.no_grad(), gated(model, gates, masking=masking):
            return model(**batch).logits
    finally:
        for handle in handles:
            handle.remove()


def check(masked, plain, reference, where=None):
    """The toy as the reference computes it, and not the model as it was (a mode that changed nothing fails)."""
    if where is not None:
        masked, plain, reference = masked[where], plain[where], reference[where]
    assert (masked - plain).abs().max() > 1e-3, "the toy mode changed nothing"
    assert (masked - reference).abs().max() <= tolerance(1e-5, reference)


def test_the_toy_is_no_mode_of_the_config():
    assert "first_token" not in MODES


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_first_token_on_a_decoder_only_lm(backend):
    """Llama, 6 query heads on 2 key/value heads, left-padded: positions count each row's real tokens, so a row's
    first token is its first real one."""
    model = on_test_device(tiny_llama_gqa6())
    model.set_attn_implementation(backend)
    batch = causal_batch(length=8, padding_side="left")
    first = batch["attention_mask"].argmax(-1)  # each row's first real token
    gates = full_gates(model)
    gates["dec_self"][1, 4] = 0.0  # layer 1, head 4 reads key/value head 1 (groups of 3)
    attention = model.model.layers[1].self_attn
    reference = outputs(model, batch, by_hand=[(attention.v_proj, attention.o_proj, 4, 1, attention.head_dim, first)])
    real = batch["attention_mask"].bool()  # a padding query's output means nothing
    check(outputs(model, batch, gates, FirstToken()), outputs(model, batch), reference, real)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_first_token_on_an_encoder(backend):
    model = tiny_bert()
    model.set_attn_implementation(backend)
    batch = {k: v for k, v in bert_batch().items() if k != "labels"}
    gates = full_gates(model)
    gates["enc_self"][0, 2] = 0.0
    layer = model.bert.encoder.layer[0].attention
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    first = torch.zeros(len(batch["input_ids"]), dtype=torch.long)  # right-padded: index 0 is every row's first
    reference = outputs(model, batch, by_hand=[(layer.self.value, layer.output.dense, 2, 2, head_dim, first)])
    check(outputs(model, batch, gates, FirstToken()), outputs(model, batch), reference)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_first_token_on_an_encoder_decoder(backend):
    """One head of each attention type: the source's first token (encoder self- and cross-attention), the target's
    (decoder self-attention)."""
    model = tiny_m2m100()
    model.set_attn_implementation(backend)
    batch = fsmt_batch()
    gates = full_gates(model)
    heads = {"enc_self": (1, 3), "dec_self": (0, 1), "enc_dec": (1, 2)}
    for attn_type, (layer, head) in heads.items():
        gates[attn_type][layer, head] = 0.0
    encoder, decoder = model.model.encoder.layers, model.model.decoder.layers
    modules = {"enc_self": encoder[1].self_attn, "dec_self": decoder[0].self_attn, "enc_dec": decoder[1].encoder_attn}
    first = torch.zeros(len(batch["input_ids"]), dtype=torch.long)  # right-padded
    by_hand = [(modules[t].v_proj, modules[t].out_proj, head, head, modules[t].head_dim, first)
               for t, (_, head) in heads.items()]
    check(outputs(model, batch, gates, FirstToken()), outputs(model, batch), outputs(model, batch, by_hand=by_hand))
    for attn_type, (layer, head) in heads.items():  # each attention type's head alone: every one is reached
        alone = full_gates(model)
        alone[attn_type][layer, head] = 0.0
        index = list(heads).index(attn_type)
        check(outputs(model, batch, alone, FirstToken()), outputs(model, batch),
              outputs(model, batch, by_hand=by_hand[index:index + 1]))


def albert():
    import encoder_zoo

    return encoder_zoo.tiny_model("albert").eval()


@pytest.mark.parametrize("build, why", [
    # FSMT's attention (its own forward, time-major) takes no per-head mask
    (tiny_fsmt, "the fsmt family's attention takes no per-head mask"),
    # ALBERT's layers run one attention module: a mask given to it would reach every layer's heads
    (albert, r"layer 0 \(\w+\) is one module that every layer runs")])
def test_a_family_without_the_place_refuses_the_toy_in_one_line(build, why):
    """The adapter says why, and the toy is refused with that line before any hook is put on the model."""
    model = build()
    with pytest.raises(ValueError, match=rf"^first_token masking lets a masked head see its first token alone: "
                                         rf"(?:{why})[^\n]*$"):
        with gated(model, full_gates(model, 0.0), masking=FirstToken()):
            pass
