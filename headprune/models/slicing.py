"""Slicing a site's projections to the heads it keeps, and the cache entry of a layer without heads: what the
encoder and encoder-decoder families' ``prune_site`` use (``headprune.models.prune`` drives them). Below the
families, so that they import nothing that imports them (``headprune.models.heads`` finds a model's family).
"""
from __future__ import annotations

import torch
from torch import nn

# One copy, in the file an exported model carries (it imports only torch and transformers)
from headprune.models.portable.headprune_common import cache_without_heads  # noqa: F401
from headprune.models.sites import AttentionSite


def slice_projections(site: AttentionSite, keep: list[int]):
    """Keep only the heads ``keep`` (original indices) of a site whose query, key, value and output are
    separate linear projections, head-major: rows of q/k/v, input columns of the output projection.
    The family's ``prune_site`` then makes its attention module run with that many heads."""
    positions = [site.kept_heads.index(h) for h in keep]  # where the kept heads sit now
    device = site.output.weight.device
    rows = torch.tensor(
        [p * site.head_dim + i for p in positions for i in range(site.head_dim)], dtype=torch.long, device=device
    )
    for linear in (site.query, site.key, site.value):
        _keep_rows(linear, rows)
    _keep_input_columns(site.output, rows)
    site.attention.headprune_kept_heads = list(keep)


def _keep_rows(linear: nn.Linear, rows: torch.Tensor):
    linear.weight = nn.Parameter(linear.weight.detach().index_select(0, rows).clone(),
                                 requires_grad=linear.weight.requires_grad)
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias.detach().index_select(0, rows).clone(),
                                   requires_grad=linear.bias.requires_grad)
    linear.out_features = len(rows)


def _keep_input_columns(linear: nn.Linear, columns: torch.Tensor):
    linear.weight = nn.Parameter(linear.weight.detach().index_select(1, columns).clone(),
                                 requires_grad=linear.weight.requires_grad)
    linear.in_features = len(columns)
