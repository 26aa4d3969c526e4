"""What the hand-written encoder and encoder-decoder adapters computed, kept after they were deleted (issue #45).

``families/bert.py``, ``roberta.py``, ``electra.py``, ``distilbert.py``, ``deberta_v2.py`` (encoders) and ``m2m100.py``,
``bart.py``, ``mbart.py``, ``marian.py`` (encoder-decoders) were replaced by the generic adapters (``encoder.py``,
``seq2seq.py``). ``outputs`` below ran with them (commit 2b35c43, the last that has them) on the tiny models of
tests/test_adapter_contract.py in float64 and wrote tests/data/hand_written_families_reference.pt (how, where and
on which machine: tests/data/README.md):

- ``plain``, ``masked`` (heads gated 0: ``removal``, a layer left without heads), ``gated`` (random gates in [0, 1)),
  ``mean`` (the removed heads replaced by random constants) and ``uniform`` logits (or the refusal's text);
- ``scores``: head_scores' columns (importance, fisher, attention gradient, entropy, confidence) on the batch;
- ``pruned``: the logits of the model with ``removal``'s heads removed physically;
- encoder-decoders also: headprune's beam search (3 beams) under the full and the masked gates
  (``beams_gated``) and on the pruned model (``beams_pruned``), and the pruned model's greedy ``generate()``.

``assert_keeps_reference`` computes the same with the adapter that serves the family today and holds it to them.
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch

from test_adapter_contract import FAMILIES
from tolerances import assert_within_rounding
from headprune.evaluation.beam_search import beam_search
from headprune.models.head_constants import HeadConstants
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.masking import Mean, Uniform
from headprune.models.prune import prune_heads
from headprune.scoring.importance import head_scores

REFERENCE = Path(__file__).parent / "data" / "hand_written_families_reference.pt"
ENCODERS = ("bert", "roberta", "xlm_roberta", "electra", "distilbert", "deberta_v3", "deberta_v2")
SEQ2SEQ = ("m2m100", "bart", "mbart", "marian", "nllb")  # m2m100: headprune's PreNormTransformer
ENCODER_REMOVAL = {0: [1], 1: [0, 1, 2, 3]}
# each attention type on its own: layers left with 3, 2, 1 and no heads
SEQ2SEQ_REMOVAL = {"enc_self": {0: [1], 1: [0, 1, 2, 3]}, "dec_self": {0: [0, 3], 1: [2]},
                   "enc_dec": {0: [0, 1, 2, 3], 1: [1, 2, 3]}}
# Both sides in float64: the reference and today's outputs sum in other orders on another CPU or thread count, and
# differ by float64's rounding (tests/tolerances.py: 1.1e-13 of a tensor's largest value), where float32 put the batch
# importance 9e-5 apart; a score changed by 1e-3 or a gate that does nothing is far outside that.
DTYPE = torch.float64
# a gate of 0 moves these models' logits by more than half their size: less than this share is a gate that did nothing
CHANGED = 0.1


def removal(family: str) -> dict:
    return {"enc_self": ENCODER_REMOVAL} if family in ENCODERS else SEQ2SEQ_REMOVAL


def _binary_gates(model, family):
    gates = full_gates(model)
    for attn_type, layers in removal(family).items():
        for layer, heads in layers.items():
            gates[attn_type][layer, heads] = 0.0
    return gates


def _random_gates(model):
    generator = torch.Generator().manual_seed(1)
    return {t: torch.rand(g.shape, generator=generator) for t, g in full_gates(model).items()}


def _mean_constants(model):
    generator = torch.Generator().manual_seed(2)
    dtype = next(model.parameters()).dtype
    return HeadConstants({(s.attn_type, s.layer): torch.randn(s.num_heads, s.head_dim, generator=generator).to(dtype)
                          for s in adapter_for(model).sites(model)}, kind="mean")


def _logits(model, batch, gates=None, masking="zero"):
    with torch.no_grad(), gated(model, gates, masking=masking):
        return adapter_for(model).loss_and_outputs(model, batch)[1].logits


def outputs(family: str, dtype: torch.dtype = DTYPE) -> dict:
    """Everything the reference holds for ``family`` (the module docstring), computed now."""
    make_model, make_batch, _ = FAMILIES[family]
    model, batch = make_model().to(dtype), make_batch()
    adapter = adapter_for(model)
    masked = _binary_gates(model, family)
    entry = {"adapter": type(adapter).__name__, "family": adapter.family,
             "first_weights": next(model.parameters()).detach().flatten()[:8].clone(),
             "plain": _logits(model, batch), "masked": _logits(model, batch, masked),
             "gated": _logits(model, batch, _random_gates(model)),
             "mean": _logits(model, batch, masked, Mean(_mean_constants(model)))}
    try:
        entry["uniform"] = _logits(model, batch, masked, Uniform())
    except ValueError as error:
        entry["uniform"] = str(error)
    scores = head_scores(model, [batch], normalize=False, progress=False)
    # float64 accumulators hold float32 gradients in a float32 model: the scores carry the model's precision
    entry["scores"] = {c: torch.tensor(scores[c].to_numpy()).to(dtype) for c in scores.columns
                       if scores[c].dtype.kind == "f"}
    entry["score_columns"] = list(scores.columns)
    encoded = {k: batch[k] for k in ("input_ids", "attention_mask")}
    if family in SEQ2SEQ:
        entry["beams_gated"] = beam_search(model, encoded, [None, masked], beam=3, lenpen=1.0, max_new=6)
    pruned = prune_heads(copy.deepcopy(model), removal(family))
    entry["pruned"] = _logits(pruned, batch)
    if family in SEQ2SEQ:
        entry["beams_pruned"] = beam_search(pruned, encoded, [None], beam=3, lenpen=1.0, max_new=6)
        with torch.no_grad():
            entry["greedy_pruned"] = pruned.generate(batch["input_ids"], attention_mask=batch["attention_mask"],
                                                     max_new_tokens=6, do_sample=False, num_beams=1)
    return entry


def _tokens(got, want) -> bool:
    if isinstance(want, torch.Tensor):
        return torch.equal(got, want)
    return len(got) == len(want) and all(_tokens(g, w) for g, w in zip(got, want))


def assert_keeps_reference(family: str, adapter_class: str, got: dict | None = None) -> None:
    """``family``'s outputs now (``got``, else ``outputs(family)``), through ``adapter_class``, equal the
    hand-written adapter's."""
    want = torch.load(REFERENCE)[family]
    got = outputs(family) if got is None else got
    assert got["adapter"] == adapter_class, (family, got["adapter"])
    assert want["plain"].dtype == DTYPE
    assert torch.equal(got["first_weights"].to(DTYPE), want["first_weights"]), "another model than the reference's"
    assert_within_rounding(got["plain"], want["plain"], f"{family} plain")
    change = float((got["masked"] - got["plain"]).abs().max() / got["plain"].abs().max())
    assert change > CHANGED, f"the gates change the logits by {change:.1e} of their size: they do nothing"
    for key in ("masked", "gated", "mean", "pruned"):
        assert_within_rounding(got[key], want[key], f"{family} {key}")
    if isinstance(want["uniform"], str):  # refused then (DeBERTa's relative positions): refused now, as it said
        assert got["uniform"] == want["uniform"]
    else:
        assert_within_rounding(got["uniform"], want["uniform"], f"{family} uniform")
    assert got["score_columns"] == want["score_columns"]
    for column, values in want["scores"].items():
        assert_within_rounding(got["scores"][column], values, f"{family} {column}", scores=True)
    for key in ("beams_gated", "beams_pruned", "greedy_pruned"):
        if key in want:
            assert _tokens(got[key], want[key]), (family, key)

