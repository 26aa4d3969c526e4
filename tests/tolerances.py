"""How far apart two computations of one result may be when they differ only in the order of their sums.

Another CPU's kernels, another thread count, a batched against a sliced matrix multiply: each sums the same terms in
another order, and each result is then within ``n * u * S`` of the exact one (Higham, "Accuracy and Stability of
Numerical Algorithms", eq. 3.4), where ``u`` is the dtype's unit roundoff (float32 2**-24 = 6.0e-8, float64
2**-53 = 1.1e-16), ``n`` the number of terms on the longest chain of sums and ``S`` the size of what is summed. The
size of one number in a tensor is a poor stand-in for ``S``: a head's batch importance sums signed products that
cancel, so a score 100 times smaller than its column's largest carries that largest score's rounding (the 1e-9
absolute tolerance of the hand-written families' reference failed so on an AMD EPYC: 9e-5 of the score, 1.8e-8 in
all). So a tensor's largest value is the scale: two computations may differ by ``2 * TERMS * u * max|reference|``.

``TERMS = 512`` bounds the chains of the test zoo's models: every logit or score is a chain of at most layers x
(hidden + feed-forward + tokens) sums, 3 x (48 + 64 + 9) = 363 in tests/decoder_zoo.py, fewer in the encoder and
encoder-decoder zoos. Measured (tests/data/README.md): float32 against float64 on an AMD EPYC, at most 28 u of the
largest value (logits 22 u, scores 28 u), so the bound holds them with a margin of 36; a change of 1e-3 of a score
is 16 times the float32 bound and 10 billion times the float64 one.
"""
from __future__ import annotations

import torch

TERMS = 512
UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24}
# bfloat16 and float16 (the GPU check's runs): 8 and 11 bits of mantissa round each product so coarsely that the
# chain bound says nothing; two kernels' results there differ by a share of their size (tests/conftest.py)
COARSE_SHARE = 0.05


def rounding(reference: torch.Tensor, other: torch.Tensor | None = None) -> float:
    """The largest difference two computations of ``reference`` (and ``other``, the second: its dtype may be the
    coarser) may show (module docstring): ``2 * TERMS * u`` of its largest finite value (a padding row may hold
    NaN), with 1 the least scale (logits near zero still sum terms of size about 1)."""
    return _bound(reference, other, least_scale=1.0)


def scores_rounding(reference: torch.Tensor, other: torch.Tensor | None = None) -> float:
    """As ``rounding``, for a column of head scores: their size is their own (a column of 1e-4 scores sums terms of
    that size), not at least 1."""
    return _bound(reference, other, least_scale=0.0)


def _bound(reference, other, least_scale: float) -> float:
    values = reference.detach()
    scale = max(float(values.abs().nan_to_num(0.0, 0.0, 0.0).max()) if values.numel() else 0.0, least_scale)
    dtypes = {values.dtype} | ({other.dtype} if other is not None else set())
    if not dtypes <= set(UNIT_ROUNDOFF):
        return COARSE_SHARE * scale
    return 2 * TERMS * max(UNIT_ROUNDOFF[d] for d in dtypes) * scale


def assert_within_rounding(got: torch.Tensor, want: torch.Tensor, what: str = "", *, scores: bool = False) -> None:
    bound = (scores_rounding if scores else rounding)(want, got)
    gap = _gap(got, want)
    assert gap <= bound, f"{what}: differs by {gap:.3e}, more than {want.dtype}'s rounding allows ({bound:.3e})"


def within_rounding(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether ``got`` and ``want`` (two computations of one result) are no further apart than ``rounding(want)``."""
    return _gap(got, want) <= rounding(want, got)


def _gap(got: torch.Tensor, want: torch.Tensor) -> float:
    dtype = torch.promote_types(got.dtype, want.dtype)
    return float((got.detach().to(dtype) - want.detach().to(dtype)).abs().nan_to_num(0.0, 0.0, 0.0).max())
