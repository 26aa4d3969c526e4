"""Where a head can be changed: the places a masking mode acts on, one installer each (issue #60).

A masking mode (``headprune.models.masking``) names its place (``Masking.place``) and what it does there; the place
asks the model's adapter whether its family supports it, and puts the mode's change on the model:

- ``HeadOutput`` ("output"): the head's slice of its output projection's input, o_h (the concatenation of the heads'
  outputs is that input, head-major, in every attention backend). The mode gives r_h (``replacement``; None: zeros)
  and a head with gate g puts out g * o_h + (1 - g) * r_h. Every family has it. Zero, mean, optimal, resample.
- ``Query`` ("query"): the head's query as it enters the scores (after rotary and any q/k norm inside headprune's
  attention function, else at the query projection). The mode gives the changed query (``changed_query(query,
  gate)``). A family has it where the scores are query . key (scaled) plus the mask and nothing else, and the query
  is the query projection's alone (``HeadAdapter.query_problem``). Uniform.
- ``Attention`` ("attention"): which keys the head attends to, as a per-head attention mask handed to the attention
  backend (eager or sdpa take one as it is) within what the head could attend to before. The mode gives, for a head
  with gate 0, the keys it keeps (``keys_seen(query_positions, key_positions)``: bool, (rows or 1, 1, queries, keys))
  from the positions of the queries and keys: in a decoder-only LM they count the real tokens of the 2-D
  ``attention_mask`` (a row reads the same whichever side it is padded on) and the cache; elsewhere they are the
  indices (encoders' and encoder-decoders' batches are right-padded), a decoder's queries after its cache. A family
  has it where its attention modules hand their ``attention_mask`` argument to transformers' attention interface as
  it is (``HeadAdapter.attention_problem``; ``causal_lm``: the mode's window runs over a causal LM's past, which
  only the decoder-only LMs have). Streaming.

A new mode that acts at one of these places is its class and its tests; a new place is a class here, its installer
in ``masking_hooks`` and its line in every adapter. This module imports without torch (the installers are
``headprune.models.masking_hooks``'s, imported when a mode is put on a model).
"""
from __future__ import annotations

from typing import ClassVar

from headprune.io.registry import Registry


def _hooks():
    from headprune.models import masking_hooks  # torch: only once a mode is put on a model

    return masking_hooks


class Place:
    """A point of an attention layer where a head can be changed, and the one installer that changes it there."""

    word: ClassVar[str]
    acts_on_outputs: ClassVar[bool] = False  # only the output projection's input changes: all below it is as it was
    takes_capture: ClassVar[bool] = False  # a HeadCapture records each head's output and its gradient here

    @classmethod
    def problem(cls, adapter, model, sites, mode) -> str | None:
        """Why ``mode`` cannot act here on ``model`` (None: it can), as the model's adapter declares it."""
        raise NotImplementedError

    @classmethod
    def install(cls, handles: list, model, sites, gates, capture, mode) -> None:
        """Put ``mode``'s change of the gated heads here on ``model``, the hooks' handles into ``handles``."""
        raise NotImplementedError


# Every place, by its word (docs and tests list them; a mode names its class).
PLACES: Registry[type[Place]] = Registry("place", base=Place)


def place(cls: type[Place]) -> type[Place]:
    PLACES.add(cls.word, cls)
    return cls


@place
class HeadOutput(Place):
    """The head's slice of the output projection's input: g * o_h + (1 - g) * r_h, r_h the mode's ``replacement``."""

    word: ClassVar[str] = "output"
    acts_on_outputs: ClassVar[bool] = True
    takes_capture: ClassVar[bool] = True

    @classmethod
    def problem(cls, adapter, model, sites, mode):
        return adapter.output_problem(model, sites)

    @classmethod
    def install(cls, handles, model, sites, gates, capture, mode):
        state: dict = {}
        if gates is not None:
            mode.prepare(handles, model, sites, gates, state)
        _hooks().install_output_hooks(handles, sites, gates, capture, state, mode.replacement)


@place
class Query(Place):
    """The head's query as it enters the scores: the mode's ``changed_query(query, gate)``."""

    word: ClassVar[str] = "query"

    @classmethod
    def problem(cls, adapter, model, sites, mode):
        return adapter.query_problem(model, sites)

    @classmethod
    def install(cls, handles, model, sites, gates, capture, mode):
        if gates is not None:
            _hooks().install_query_changes(handles, model, sites, gates, mode.changed_query)


@place
class Attention(Place):
    """Which keys the head attends to: a per-head attention mask, the keys the mode's ``keys_seen`` keeps for a head
    with gate 0 (gates 0 or 1 only)."""

    word: ClassVar[str] = "attention"

    @classmethod
    def problem(cls, adapter, model, sites, mode):
        # language_models_only: the mode's positions are a causal LM's past (streaming's window)
        return (adapter.attention_problem(model, sites, causal_lm=mode.language_models_only)
                or _hooks().mask_backend_problem(model))

    @classmethod
    def install(cls, handles, model, sites, gates, capture, mode):
        if gates is not None:
            _hooks().install_attention_masks(handles, model, sites, gates, mode.keys_seen)
