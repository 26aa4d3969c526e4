"""The tolerances of tests/tolerances.py (issue #56): the bound worked by hand, wide enough for float32 against the
float64 references (a larger gap than two machines' float32), and narrow enough that a score moved by 1e-3 fails."""
from __future__ import annotations

import pytest
import torch

import family_reference
from tolerances import TERMS, rounding, scores_rounding, within_rounding

# the four that failed on an AMD EPYC at the old 1e-9: an encoder and an encoder-decoder each way
FLOAT32_SAMPLE, MUTATED_SAMPLE = ("electra", "mbart"), ("bert", "m2m100")


def _adapter(family):
    return "EncoderAdapter" if family in family_reference.ENCODERS else "Seq2SeqAdapter"


def test_the_bound_by_hand():
    logits = torch.tensor([[0.5, -3.0], [float("nan"), 1.0]])
    assert rounding(logits) == 2 * 512 * 2.0 ** -24 * 3.0 and TERMS == 512
    assert rounding(torch.tensor([0.01])) == 2 * 512 * 2.0 ** -24  # logits near zero: still terms of size 1
    assert scores_rounding(torch.tensor([1e-4, 2e-4], dtype=torch.float64)) == 2 * 512 * 2.0 ** -53 * 2e-4
    assert rounding(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64)) == rounding(torch.tensor([1.0]))
    assert within_rounding(torch.tensor([1.0 + 2 ** -23]), torch.tensor([1.0]))
    assert not within_rounding(torch.tensor([1.0 + 1e-3]), torch.tensor([1.0]))


@pytest.mark.parametrize("family", FLOAT32_SAMPLE)
def test_float32_outputs_keep_the_float64_reference_within_float32s_bound(family):
    """Today's outputs in float32 against the float64 reference: float32's own rounding (more than two machines'
    float32 results differ by), held by the float32 bound."""
    family_reference.assert_keeps_reference(family, _adapter(family), family_reference.outputs(family, torch.float32))


@pytest.mark.parametrize("family", MUTATED_SAMPLE)
def test_a_score_moved_by_a_thousandth_fails_the_reference(family):
    got = family_reference.outputs(family)
    got["scores"]["importance_batch"][0] *= 1 + 1e-3
    with pytest.raises(AssertionError, match="importance_batch"):
        family_reference.assert_keeps_reference(family, _adapter(family), got)
