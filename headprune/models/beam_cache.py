"""The decoding caches of beam search over an encoder-decoder (headprune.evaluation.beam_search).

``SourceSharingCache`` leaves the cross-attention entries alone when the beams are reordered: a step only
picks among the beams of one sentence, which share one source. ``BeamLayer`` is the self-attention half's
layer for our own beam search: transformers' layer appends a step by concatenation (a copy of the whole
cache) and the search then reorders it (a second copy); this one keeps the keys and values time-major,
(time, rows, heads, head_dim), in two buffers, writes a step in place and gathers the filled prefix into
the other buffer when reordering: one copy per step, the same numbers. A family's own beam step
(``HeadAdapter.beam_decoding``) may read and append the time-major tensors directly (``append``).
"""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, EncoderDecoderCache


class BeamLayer(DynamicLayer):
    """Self-attention keys and values of one decoder layer, time-major, reordered with one copy per step.

    The model reads ``keys``/``values`` as (rows, heads, time, head_dim) views of the time-major buffer, as
    transformers' layers give them. The buffers grow (doubling) as the output grows, so they hold up to four
    times the keys and values in use (two buffers, each up to twice its need), where transformers' layer holds
    them once and twice for a moment: size ``variant_batch_size`` with that in mind on a GPU.
    """

    def lazy_initialization(self, key_states, value_states):
        self.dtype, self.device = key_states.dtype, key_states.device
        self.length, self.rows, self.step_shape = 0, key_states.shape[0], (key_states.shape[1], key_states.shape[3])
        empty = torch.empty(0, dtype=self.dtype, device=self.device)
        self.buffers = [[empty, empty], [empty, empty]]  # [current, spare] x [keys, values], flat
        self.is_initialized = True

    def _view(self, which: int, kind: int, length: int, rows: int) -> torch.Tensor:
        """Buffer ``which`` (0 current, 1 spare) of keys (kind 0) or values (1) as (length, rows, heads, head_dim),
        grown to hold it (the filled prefix copied along)."""
        flat = self.buffers[which][kind]
        size = length * rows * self.step_shape[0] * self.step_shape[1]
        if flat.numel() < size:
            grown = torch.empty(max(size, 2 * flat.numel()), dtype=self.dtype, device=self.device)
            if which == 0 and self.length:
                filled = self.length * self.rows * self.step_shape[0] * self.step_shape[1]
                grown[:filled] = flat[:filled]
            self.buffers[which][kind] = flat = grown
        return flat[:size].view(length, rows, *self.step_shape)

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add (steps, rows, heads, head_dim) keys and values; the whole (time, rows, heads, head_dim) ones."""
        if not self.is_initialized:
            self.lazy_initialization(keys.permute(1, 2, 0, 3), values.permute(1, 2, 0, 3))
        length = self.length + keys.shape[0]
        out = []
        for kind, states in enumerate((keys, values)):
            view = self._view(0, kind, length, self.rows)
            view[self.length:] = states
            out.append(view)
        self.length = length
        return out[0], out[1]

    def update(self, key_states, value_states, *args, **kwargs):
        """transformers' interface: (rows, heads, steps, head_dim) in, (rows, heads, time, head_dim) views out."""
        keys, values = self.append(key_states.permute(2, 0, 1, 3), value_states.permute(2, 0, 1, 3))
        return keys.permute(1, 2, 0, 3), values.permute(1, 2, 0, 3)

    def _batch_major(self, kind: int):
        return self._view(0, kind, self.length, self.rows).permute(1, 2, 0, 3) if self.is_initialized else None

    # DynamicLayer's constructor and reset assign None; anything else would bypass the buffers.
    keys = property(lambda self: self._batch_major(0), lambda self, value: self._refuse(value))
    values = property(lambda self: self._batch_major(1), lambda self, value: self._refuse(value))

    @staticmethod
    def _refuse(value):
        if value is not None:
            raise AttributeError("a BeamLayer's keys and values change through update/append and reorder_cache only")

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def reset(self) -> None:
        self.is_initialized, self.length = False, 0

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("a BeamLayer is beam search's cache; it is never cropped")

    def reorder_cache(self, beam_idx: torch.Tensor) -> None:
        """Row r becomes row beam_idx[r] (beam reordering, and finished sentences leaving: fewer rows)."""
        if not self.get_seq_length():
            return
        rows = beam_idx.shape[0]
        beam_idx = beam_idx.to(self.device)
        for kind in (0, 1):
            torch.index_select(self._view(0, kind, self.length, self.rows), 1, beam_idx,
                               out=self._view(1, kind, self.length, rows))
        self.buffers.reverse()
        self.rows = rows


class SourceSharingCache(EncoderDecoderCache):
    """An encoder-decoder cache whose beam reordering leaves the cross-attention entries alone.

    Beam search reorders the cache every step, but a step only picks among the beams of the same
    sentence, and those share one source: their cross-attention keys and values are the same rows.
    Copying them anyway (transformers does) took a quarter of the demo's decoding time.
    """

    @classmethod
    def for_model(cls, model):
        """For generate(): transformers' own self-attention layers."""
        return cls(DynamicCache(config=model.config), DynamicCache(config=model.config))

    @classmethod
    def for_beam_search(cls, model):
        """For headprune's beam search: ``BeamLayer`` self-attention layers where the model has plain dynamic
        ones (not sliding-window ones, say)."""
        cache = cls.for_model(model)
        layers = cache.self_attention_cache.layers
        if layers and all(type(layer) is DynamicLayer for layer in layers):
            cache.self_attention_cache.layers = [BeamLayer() for _ in layers]
        return cache

    def reorder_cache(self, beam_idx):
        self.self_attention_cache.reorder_cache(beam_idx)
