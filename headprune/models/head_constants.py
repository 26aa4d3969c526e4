"""Per-head data a masked head is replaced by: constant vectors (mean and optimal ablation) and the donors of
resample ablation (issue #32).

A head's output here is what it puts into its layer's output projection: head_dim values at each token
(``headprune.models.heads``: the projection's input, head-major). Mean and optimal ablation replace it by a
constant c_h of that size (``headprune.models.masking.Mean`` / ``Optimal``), and physical pruning can keep
it as a bias (``headprune.models.prune.prune_heads(..., constants=)``). ``HeadConstants`` holds one such
vector per head of a model:

- ``values[(attn_type, layer)]``: a float32 tensor (original heads, head_dim), indexed by the ORIGINAL head
  numbers, whatever was pruned since (rows of heads already removed are kept, and never read);
- ``kind``: how they were made ("mean", "optimal", or another word for hand-made ones);
- ``meta``: provenance, strings only (the data they were computed on, tokens, steps, learning rate ...).

They are data, saved as safetensors (``save`` / ``load``): tensors and string metadata, nothing that runs
code when read (no pickle). ``summary()`` is a tidy table, one row per head (norm, mean, largest entry), for
a CSV beside them. Computing them is ``headprune.scoring.constants`` (mean over training data, or learned).

``ResamplePool`` holds the heads' outputs at the real tokens of some training items, with each token's
position: resample ablation's donors (``headprune.models.masking.Resample``), saved the same way.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from headprune.models.attention_types import DEC_SELF, ENC_DEC, ENC_SELF, KNOWN_TYPES

FORMAT = "headprune-head-constants/1"


@dataclass(eq=False)
class HeadConstants:
    """One constant vector per head: ``values[(attn_type, layer)]`` is (original heads, head_dim), float32.

    >>> constants = HeadConstants({("dec_self", 0): torch.zeros(4, 8), ("dec_self", 1): torch.zeros(4, 8)})
    >>> constants.shape()
    {'dec_self': (2, 4, 8)}
    """

    values: dict[tuple[str, int], torch.Tensor]
    kind: str = "mean"
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        clean = {}
        for key, value in self.values.items():
            attn_type, layer = key
            if attn_type not in KNOWN_TYPES:
                raise ValueError(f"constants for an unknown attention type {attn_type!r} (known: {KNOWN_TYPES})")
            value = torch.as_tensor(value).detach().to(torch.float32)
            if value.dim() != 2:
                raise ValueError(f"the constants of {attn_type} layer {layer} must be (heads, head_dim), got shape "
                                 f"{tuple(value.shape)}")
            clean[(str(attn_type), int(layer))] = value
        self.values = dict(sorted(clean.items(), key=lambda kv: (KNOWN_TYPES.index(kv[0][0]), kv[0][1])))
        self.meta = {str(k): str(v) for k, v in self.meta.items()}
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError(f"HeadConstants.kind must be a non-empty string, got {self.kind!r}")
        self._cache: dict = {}  # (attn_type, layer) -> (its tensor, version, heads, dtype/device; the result)

    # --- shape and lookup ---------------------------------------------------------------------------

    def shape(self) -> dict[str, tuple[int, int, int]]:
        """(layers, heads, head_dim) per attention type."""
        shape: dict[str, tuple[int, int, int]] = {}
        for (attn_type, layer), value in self.values.items():
            layers, heads, dim = shape.get(attn_type, (0, *value.shape))
            shape[attn_type] = (max(layers, layer + 1), heads, dim)
        return shape

    def check(self, sites) -> None:
        """A ValueError unless there is a (original heads, head_dim) constant for every site (``AttentionSite``)."""
        for site in sites:
            key = (site.attn_type, site.layer)
            value = self.values.get(key)
            if value is None:
                raise ValueError(f"no constants for {site.attn_type} layer {site.layer}: these constants cover "
                                 f"{sorted(self.values)[:4]}{' ...' if len(self.values) > 4 else ''} (computed for "
                                 "another model?)")
            if tuple(value.shape) != (site.original_num_heads, site.head_dim):
                raise ValueError(f"the constants of {site.attn_type} layer {site.layer} have shape "
                                 f"{tuple(value.shape)}; the model has {site.original_num_heads} heads of "
                                 f"{site.head_dim} values there (computed for another model?)")
            if not torch.isfinite(value[site.kept_heads]).all():
                raise ValueError(f"the constants of {site.attn_type} layer {site.layer} are not all finite")

    def for_site(self, site, like: torch.Tensor | None = None) -> torch.Tensor:
        """(kept heads, head_dim): the site's constants for the heads it still has, as ``like``'s dtype and device.

        Kept per (tensor, heads, dtype, device) once made, so that a forward pass copies nothing to the GPU;
        values that require grad (``headprune.scoring.constants`` learning them) are made anew every call."""
        value = self.values[(site.attn_type, site.layer)]
        key = None
        if not value.requires_grad:
            key = (value._version, tuple(site.kept_heads), None if like is None else (like.dtype, like.device))
            cached = self._cache.get((site.attn_type, site.layer))
            if cached is not None and cached[0] is value and cached[1] == key:
                return cached[2]
        if site.num_heads != value.shape[0]:
            value = value[site.kept_heads]
        if like is not None:
            value = value.to(dtype=like.dtype, device=like.device)
        if key is not None:
            self._cache[(site.attn_type, site.layer)] = (self.values[(site.attn_type, site.layer)], key, value)
        return value

    def head(self, attn_type: str, layer: int, head: int) -> torch.Tensor:
        """(head_dim,): one head's constant (original index)."""
        return self.values[(attn_type, int(layer))][int(head)]

    def with_values(self, values: dict, kind: str | None = None, **meta) -> HeadConstants:
        """A copy with other values (and kind), and ``meta`` added."""
        return HeadConstants(values, kind or self.kind, {**self.meta, **{k: str(v) for k, v in meta.items()}})

    # --- files ----------------------------------------------------------------------------------------

    def save(self, path) -> Path:
        """Write safetensors: one tensor per site named "<attn_type>.<layer>", kind and meta as metadata."""
        from headprune.io.atomic import save_safetensors

        path = Path(path)
        tensors = {f"{t}.{layer}": v.contiguous() for (t, layer), v in self.values.items()}
        metadata = {"format": FORMAT, "kind": self.kind, "meta": json.dumps(self.meta, sort_keys=True)}
        save_safetensors(tensors, path, metadata=metadata)
        return path

    @classmethod
    def load(cls, path) -> HeadConstants:
        """Read a file ``save`` wrote (safetensors: tensors and strings, no code runs)."""
        from safetensors import safe_open

        path = Path(path)
        values = {}
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            if metadata.get("format") != FORMAT:
                raise ValueError(f"{path}: not a head-constants file (format {metadata.get('format')!r}, "
                                 f"expected {FORMAT!r})")
            for name in handle.keys():
                attn_type, _, layer = name.rpartition(".")
                values[(attn_type, int(layer))] = handle.get_tensor(name)
        return cls(values, metadata.get("kind", "mean"), json.loads(metadata.get("meta", "{}")))

    def summary(self):
        """One row per head: attn_type, layer, head, kind, norm (l2), mean and max_abs of its entries."""
        import pandas as pd

        rows = []
        for (attn_type, layer), value in self.values.items():
            for head, vector in enumerate(value):
                rows.append({"attn_type": attn_type, "layer": layer, "head": head, "kind": self.kind,
                             "norm": float(vector.norm()), "mean": float(vector.mean()),
                             "max_abs": float(vector.abs().max())})
        return pd.DataFrame(rows, columns=["attn_type", "layer", "head", "kind", "norm", "mean", "max_abs"])

    def to(self, device=None) -> HeadConstants:
        return HeadConstants({k: v.to(device) for k, v in self.values.items()}, self.kind, self.meta)


# --- Resample ablation's donors ------------------------------------------------------------------------------

# Which tokens a head's outputs are recorded at, and its queries sit on: an encoder's source tokens, a
# decoder's (or a decoder-only LM's) target tokens.
STREAMS = {ENC_SELF: "source", ENC_DEC: "target", DEC_SELF: "target"}
POOL_FORMAT = "headprune-resample-pool/1"


@dataclass(eq=False)
class ResamplePool:
    """Heads' outputs at the real tokens of some training items: the donors of resample ablation
    (``headprune.models.masking.Resample``, whose docstring defines it).

    ``outputs[(attn_type, layer)]``: (tokens of its stream, original heads, head_dim) float32; ``positions[stream]``
    ("source" or "target"): (tokens,) long, each token's position in its item (its rank among the item's real
    tokens), in the order of the outputs' rows. Every stream has tokens at every position from 0 to its
    longest item's last (an item of length n has its positions 0 .. n - 1). ``meta``: provenance, strings.
    """

    outputs: dict[tuple[str, int], torch.Tensor]
    positions: dict[str, torch.Tensor]
    meta: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self.positions = {str(s): torch.as_tensor(p).detach().long().flatten().cpu() for s, p in self.positions.items()}
        clean = {}
        for (attn_type, layer), value in self.outputs.items():
            value = torch.as_tensor(value).detach().to(torch.float32).cpu()
            stream = STREAMS.get(attn_type)
            if stream is None:
                raise ValueError(f"a pool for an unknown attention type {attn_type!r}")
            if stream not in self.positions:
                raise ValueError(f"a pool with {attn_type} outputs needs the positions of its {stream} tokens")
            if value.dim() != 3 or value.shape[0] != len(self.positions[stream]):
                raise ValueError(f"the pool's {attn_type} layer {layer} outputs must be ({len(self.positions[stream])} "
                                 f"tokens, heads, head_dim), got {tuple(value.shape)}")
            clean[(str(attn_type), int(layer))] = value
        self.outputs = dict(sorted(clean.items(), key=lambda kv: (KNOWN_TYPES.index(kv[0][0]), kv[0][1])))
        for stream, positions in self.positions.items():
            if not len(positions):
                raise ValueError(f"the pool has no {stream} tokens")
            counts = torch.bincount(positions)
            if positions.min() < 0 or (counts == 0).any():
                raise ValueError(f"the pool's {stream} positions must cover 0 .. {int(positions.max())} (whole items)")
        self.meta = {str(k): str(v) for k, v in self.meta.items()}
        self._tables: dict = {}

    @staticmethod
    def stream_of(attn_type: str) -> str:
        return STREAMS[attn_type]

    def longest(self, stream: str) -> int:
        """The last position the pool has tokens at, P: a query further on takes P's donor."""
        return int(self.positions[stream].max())

    def check(self, sites) -> None:
        for site in sites:
            value = self.outputs.get((site.attn_type, site.layer))
            if value is None:
                raise ValueError(f"the resample pool has no outputs of {site.attn_type} layer {site.layer} (recorded "
                                 "on another model?)")
            if tuple(value.shape[1:]) != (site.original_num_heads, site.head_dim):
                raise ValueError(f"the resample pool's {site.attn_type} layer {site.layer} outputs are "
                                 f"{tuple(value.shape[1:])} per token; the model has {site.original_num_heads} heads "
                                 f"of {site.head_dim} values there (recorded on another model?)")

    def donors(self, stream: str, seed: int, draw: int) -> torch.Tensor:
        """(P + 1,) long: for each position q = 0 .. P, the pool row of its donor token in draw ``draw`` of seed
        ``seed``: one of the tokens at position q, chosen by numpy's PCG64 generator seeded with (seed, draw,
        stream); the same on every machine and for every batch."""
        import numpy as np

        positions = self.positions[stream].numpy()
        order = np.argsort(positions, kind="stable")
        counts = np.bincount(positions)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rng = np.random.default_rng([int(seed), int(draw), 0 if stream == "source" else 1])
        picks = rng.integers(0, counts)
        return torch.from_numpy(order[starts + picks]).long()

    def donor_outputs(self, site, positions: torch.Tensor, seed: int, draw: int, like: torch.Tensor) -> torch.Tensor:
        """(rows or 1, queries, kept heads, head_dim): the site's donor outputs at each query's position (beyond
        the pool's last position, the last's), as ``like``'s dtype and device."""
        stream = self.stream_of(site.attn_type)
        key = (site.attn_type, site.layer, seed, draw, like.device, like.dtype)
        table = self._tables.get(key)
        if table is None:
            table = self.outputs[(site.attn_type, site.layer)][self.donors(stream, seed, draw)]
            table = self._tables[key] = table.to(device=like.device, dtype=like.dtype)  # (P + 1, heads, head_dim)
        donors = table[positions.to(table.device).clamp(0, table.shape[0] - 1)]
        if site.num_heads != table.shape[1]:
            donors = donors[..., site.kept_heads, :]
        return donors

    def save(self, path) -> Path:
        """Write safetensors: "outputs.<attn_type>.<layer>" and "positions.<stream>", meta as metadata."""
        from headprune.io.atomic import save_safetensors

        tensors = {f"outputs.{t}.{layer}": v.contiguous() for (t, layer), v in self.outputs.items()}
        tensors.update({f"positions.{s}": p.contiguous() for s, p in self.positions.items()})
        save_safetensors(tensors, Path(path), metadata={"format": POOL_FORMAT,
                                                        "meta": json.dumps(self.meta, sort_keys=True)})
        return Path(path)

    def summary(self):
        """One row per stream: stream, tokens recorded, longest (the longest item's length)."""
        import pandas as pd

        return pd.DataFrame([{"stream": stream, "tokens": len(positions), "longest": int(positions.max()) + 1}
                             for stream, positions in self.positions.items()])

    @classmethod
    def load(cls, path) -> ResamplePool:
        from safetensors import safe_open

        outputs, positions = {}, {}
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            if metadata.get("format") != POOL_FORMAT:
                raise ValueError(f"{path}: not a resample pool (format {metadata.get('format')!r}, expected "
                                 f"{POOL_FORMAT!r})")
            for name in handle.keys():
                what, _, rest = name.partition(".")
                if what == "positions":
                    positions[rest] = handle.get_tensor(name)
                else:
                    attn_type, _, layer = rest.rpartition(".")
                    outputs[(attn_type, int(layer))] = handle.get_tensor(name)
        return cls(outputs, positions, json.loads(metadata.get("meta", "{}")))
