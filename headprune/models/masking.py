"""How a gate of 0 switches a head off: one class per masking mode, the six side by side (issue #32).

``gated(model, gates, capture, masking)`` (here; importable from ``headprune.models.heads`` too) finds the model's
attention sites, asks the mode to check the gates and the model (``Masking.check``), and to put its hooks on the
model (``Masking.install``); the hooks come off when the context closes. A mode is one class here and owns all there
is to it: its config word (``word``), its parameters, where they sit in the config and their schema (``config_key``,
``config_schema``: merged into rules/schemas/config.schema.yaml by ``headprune.config_schema``), the data file it
reads and the function that makes it (``data``, ``data_maker``: the head_constants job), how it is built from the
config (``settings_from_config``), its checks, its hooks, and what it says on a model card (``summary``,
``describe``). ``MODES`` maps each word to its class; this module imports without torch (the hooks' machinery is
``headprune.models.masking_hooks``, imported when a mode is put on a model). ``gated`` takes a mode object, or the
strings "zero" and "uniform" (``as_masking``), or none: then the mode of the ``masked_as(model, mode)`` block open
on the model (a job's evaluation runs in one), else the paper's; ``masking_for(word, ...)`` builds one from a
config word and the data it needs, as ``EvalSettings`` does from a job's params.

Each mode names the place it acts on (``headprune.models.places``: a head's output, its query, its attention) and what
it does there; the place asks the model's adapter whether its family has it (a refusal in one line) and installs it.

Modes that act on a head's OUTPUT (``places.HeadOutput``): the input of the layer's output projection is the concatenation of the
head outputs, head-major (..., heads * head_dim), so a forward pre-hook on that projection sees each head's
output o_h in every attention backend, inside generate() and beam search too. A head with gate g gets

- ``Zero()`` ("zero"): g * o_h, the paper's xi_h (gate 0: the head is zeroed, as physical removal does);
- ``Mean(constants)`` ("mean"), ``Optimal(constants)`` ("optimal"), both ``Constant``: g * o_h + (1 - g) * c_h,
  c_h a constant vector per head (``headprune.models.head_constants.HeadConstants``): gate 1 is the head as
  it is, gate 0 the constant. Mean: c_h is the head's output averaged over the real tokens of training data;
  optimal: c_h minimises the expected loss with the head replaced by it (Li and Janson 2024), learned from
  the mean (``headprune.scoring.constants``). Pruning keeps it as a bias (``prune_heads(..., constants=)``);
- ``Resample(pool, seed, draw)`` ("resample"): g * o_h + (1 - g) * r_h(p), r_h(p) the head's output at a
  token of another item of the training data (below).

These take any real gate (a leaf with requires_grad gives dL/dg, e.g. ``headprune.scoring.importance``, and
Voita's Hard Concrete gates interpolate), take a ``HeadCapture`` (each head's output o_h and the gradient at
the projection's input), and leave everything below the projection as it is (``acts_on_outputs``: a layer's
attention is unchanged, so callers may replay what is below a layer's first masked head).

Modes that act inside a head's ATTENTION (gates 0 or 1 only, no capture):

- ``Uniform()`` ("uniform"): a head with gate 0 attends uniformly to the keys it may attend to (padding and
  causality respected), so it outputs the mean of its value vectors (its query zeroed: ``masking_hooks``). It
  acts on the head's query (``places.Query``), which needs scores that are query . key plus the mask and nothing
  else (``HeadAdapter.query_problem``).
- ``Streaming(sink, recent)`` ("streaming"): a head with gate 0 attends as DuoAttention's streaming heads
  (Xiao et al. 2024): only to the first ``sink`` tokens and the last ``recent`` ones up to and including its
  query, within what it could attend to before: allowed(i, j) = allowed_before(i, j) and (j < sink or
  i - j < recent). Positions i, j count the real tokens of the row (the 2-D ``attention_mask``), so a row
  scores the same whichever side it is padded on; without padding they are the absolute positions, and
  inside generate() the query's is the keys so far minus this step's queries plus its index (the cache's
  ``get_query_offset`` and ``get_mask_sizes``, as transformers' masks take them). The window is a per-head
  attention mask (``places.Attention``): the decoder-only LMs take it, under eager or sdpa attention
  (``HeadAdapter.attention_problem`` with ``causal_lm``).

Resample ablation, defined so that it works for every kind of study and does not depend on how rows are
batched or grouped into gate variants. A ``ResamplePool`` (``headprune.models.head_constants``; recorded by
``headprune.scoring.constants.resample_pool`` on training data, never eval data) holds every head's outputs
at the real tokens of some training items, each token with its position (its rank among its item's real
tokens), per stream: "source" (encoder self-attention: source tokens) and "target" (decoder self- and
cross-attention: target tokens; a decoder-only LM's tokens). For draw k with seed s, each position p of a
stream gets ONE donor token: a token of the pool at position min(p, P) (P the longest item's last
position), picked by a generator seeded with (s, k, stream) (``ResamplePool.donors``). Every masked head of
every layer at position p of every row then outputs what it output at that donor token: the donor is the
same for all heads (they see one other input, as in activation patching) and for all rows, and depends on
nothing but (s, k, p), so batching, gate variants, beams and padding change nothing. A query's position p
is the one the model gives it: in a decoder-only LM its position id (``position_ids`` as passed, which the
adapters and generate() count over real tokens; else the cache's length plus its index); in an encoder (any
family), its index (batches are right-padded there); in a seq2seq decoder, the cache's length plus its index
(teacher forcing, greedy and beam search alike: a generated token at step t has position t, the position
the donor's reference token had). Generation needs nothing the donors lack: the pool holds target tokens of
references, and positions past the longest one take its last. Several draws (k = 0 .. K - 1) are K masking
objects whose scores ``headprune.evaluation.runs.scored_variants`` averages for every experiment (a draw cannot
ride along as a gate variant: beam search gives every row its own gate setting).
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from headprune.io.registry import Registry
from headprune.models.places import Attention, HeadOutput, Place, Query

if TYPE_CHECKING:  # torch's: imported when a mode is put on a model
    from headprune.models.sites import HeadCapture

_SEED = {"$ref": "#/definitions/seed", "default": 0}


class Masking:
    """A masking mode: everything about one way of switching a head off (see the module docstring)."""

    word: ClassVar[str]
    # Where it acts (``headprune.models.places``: the output, the query, the attention) and what it does there, in
    # the words of a refusal ("uniform masking <acts_as>: <why the family has no such place>")
    place: ClassVar[type[Place]]
    acts_as: ClassVar[str] = ""
    real_gates: ClassVar[bool] = True  # takes any real gate (else 0 or 1 only)
    # The place's: gated(..., capture=HeadCapture()) records head outputs and gradients; only the output projection's
    # input changes (see the module docstring)
    takes_capture: ClassVar[bool] = True
    acts_on_outputs: ClassVar[bool] = True
    # A masked head puts out a constant (0 or c_h): I_h and the screen's first-order estimate measure the change of
    # the loss when a head becomes it, and shared-layer replay may start at a layer's first masked head.
    constant_output: ClassVar[bool] = False
    language_models_only: ClassVar[bool] = False  # the config refuses it for studies of other kinds
    summary: ClassVar[str] = ""  # what a masked head becomes, without this object's data (model cards by word)
    hint: ClassVar[str] = ""  # how to pass it to gated() where a plain word is not enough
    # The config: where this mode's settings sit (a path of keys) and their JSON schema (the section's properties).
    config_key: ClassVar[tuple[str, ...]] = ()
    config_schema: ClassVar[dict] = {}
    # The data file it reads: the field that takes it ("constants", "pool"; None: none), and "module:function"
    # making it from a model and training batches (the head_constants job calls it).
    data: ClassVar[str | None] = None
    data_maker: ClassVar[str | None] = None

    # --- from the config (no torch) -----------------------------------------------------------------------

    @classmethod
    def section(cls, config: dict) -> dict:
        """This mode's section of the whole config (at ``config_key``; {}: none)."""
        section = config if cls.config_key else {}
        for key in cls.config_key:
            section = section.get(key, {})
        return section

    @classmethod
    def settings_from_config(cls, section: dict) -> dict:
        """The fields of this mode an experiment's ``EvalSettings`` carries, from its config section."""
        return {}

    @classmethod
    def data_settings(cls, section: dict) -> dict:
        """The settings of the job that makes this mode's data (what reruns it when changed)."""
        return dict(section)

    @classmethod
    def data_options(cls, settings: dict) -> dict:
        """``data_maker``'s keyword arguments from ``data_settings``."""
        return {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if hasattr(cls, "place"):  # a mode (not a base class): what it takes is its place's
            cls.takes_capture, cls.acts_on_outputs = cls.place.takes_capture, cls.place.acts_on_outputs

    # --- on a model -------------------------------------------------------------------------------------------

    def check(self, model, adapter, sites, gates, capture) -> None:
        """A ValueError if this mode cannot mask ``model`` with ``gates`` (and ``capture``): its place's refusal
        (the adapter's line) included."""
        if capture is not None and not self.takes_capture:
            raise ValueError("importance capture works on output gates: use masking='zero' with a HeadCapture")
        problem = self.place.problem(adapter, model, sites, self)
        if problem is not None:
            raise ValueError(f"{self.word} masking {self.acts_as}: {problem}")
        if not self.real_gates:
            _hooks().check_binary_gates(self.word, gates)

    def install(self, handles: list, model, sites, gates, capture) -> None:
        """Put this mode's hooks on ``model``, their handles into ``handles`` (removed when ``gated`` closes): its
        place's installer, with what the mode does there."""
        self.place.install(handles, model, sites, gates, capture, self)

    def each_draw(self) -> list[Masking]:
        """The maskings whose scores an experiment averages (``headprune.evaluation.runs.scored_variants``)."""
        return [self]

    def describe(self) -> str:
        """One line saying what a masked head becomes (model cards, logs)."""
        return self.summary


# Every mode, by its config word, in the order they are reported (the order the classes below are registered in).
MODES: Registry[type[Masking]] = Registry("masking mode", base=Masking)
# A mode's ``data`` field -> the class its file is read as (torch only when a file is read).
DATA_FILES: Registry = Registry("masking data file")
DATA_FILES.add("constants", "headprune.models.head_constants:HeadConstants")
DATA_FILES.add("pool", "headprune.models.head_constants:ResamplePool")


def mode(cls: type[Masking]) -> type[Masking]:
    """Registers a mode class under its word (its ``data_maker`` is registered by ``headprune.scoring.constants``:
    the room above, where the makers are)."""
    MODES.add(cls.word, cls)
    return cls


def _hooks():
    from headprune.models import masking_hooks  # torch: only once a mode is put on a model

    return masking_hooks


@functools.lru_cache(maxsize=4)
def _read(kind: str, path: str):
    """A file of constants or donors, read once per process (each resample draw is a masking of its own)."""
    return DATA_FILES[kind].load(path)


def _is_file(value) -> bool:
    return isinstance(value, (str, Path))


def _check_data(mode: Masking, value, expected: str) -> None:
    """A TypeError unless a mode's data is the object it takes or the path of its file (read on first use)."""
    if not _is_file(value) and type(value).__name__ != expected:  # the class itself needs torch; its name does not
        raise TypeError(f"{type(mode).__name__} takes a {expected} (headprune.models.head_constants) or the path of "
                        f"its file, got {type(value).__name__}")


# --- Modes that need nothing: zero (on outputs), uniform and streaming (on attention) ----------------------

class _OutputMasking(Masking):
    """A mode that replaces a head's output at the output projection's input (``places.HeadOutput``):
    g * o_h + (1 - g) * r_h."""

    place: ClassVar[type[Place]] = HeadOutput

    def replacement(self, site, per_head, state: dict):
        """What a head with gate 0 puts out, broadcastable to ``per_head`` (..., kept heads, head_dim) in the
        projection's own layout (FSMT: time first); None: zeros."""
        return None

    def prepare(self, handles: list, model, sites, gates, state: dict) -> None:
        """Hooks the replacement needs besides the output hooks (e.g. positions); ``state`` is shared with them."""


@mode
@dataclass(frozen=True)
class Zero(_OutputMasking):
    """The paper's masking: a head's output times its gate (gate 0: zeroed, as physical removal does)."""

    word: ClassVar[str] = "zero"
    constant_output: ClassVar[bool] = True
    summary: ClassVar[str] = "zero (a masked head's output multiplied by 0, as the paper masks, and as removing it does)"



@mode
@dataclass(frozen=True)
class Uniform(Masking):
    """A head with gate 0 attends uniformly to the keys it may attend to (its query is zeroed)."""

    word: ClassVar[str] = "uniform"
    place: ClassVar[type[Place]] = Query
    acts_as: ClassVar[str] = ("zeroes a head's query, which gives uniform attention only when the scores are "
                              "query . key plus the mask")
    real_gates: ClassVar[bool] = False
    summary: ClassVar[str] = "uniform (a masked head attends uniformly to the keys it may attend to)"

    def changed_query(self, query, gate):
        return query * gate  # a zero query scores 0 against every key it may see: softmax makes that uniform


@mode
@dataclass(frozen=True)
class Streaming(Masking):
    """``gated``'s masking for DuoAttention's streaming heads: a head with gate 0 attends only to the first
    ``sink`` tokens (attention sinks) and the last ``recent`` tokens up to and including its query."""

    sink: int
    recent: int
    word: ClassVar[str] = "streaming"
    place: ClassVar[type[Place]] = Attention
    acts_as: ClassVar[str] = "gives a masked head a per-head attention mask"
    real_gates: ClassVar[bool] = False
    language_models_only: ClassVar[bool] = True  # its window runs over a causal LM's past (the place checks it)
    summary: ClassVar[str] = "streaming (a masked head sees only the first and the last tokens of its context)"
    hint: ClassVar[str] = ("its window: pass masking=Streaming(sink, recent) (headprune.models.masking.Streaming), "
                           "e.g. Streaming(sink=4, recent=64)")
    config_key: ClassVar[tuple[str, ...]] = ("streaming",)
    config_schema: ClassVar[dict] = {
        "description": "the window a head masked by streaming keeps (DuoAttention's streaming heads)",
        "properties": {
            "sink": {"type": "integer", "minimum": 0, "default": 4, "description": "the first tokens (attention sinks)"},
            "recent": {"type": "integer", "minimum": 1, "default": 64,
                       "description": "the last tokens, the query's own included"}}}

    def __post_init__(self):
        for name in ("sink", "recent"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"Streaming.{name} must be an int, got {value!r}")
        if self.sink < 0:
            raise ValueError(f"Streaming.sink must be >= 0, got {self.sink}")
        if self.recent < 1:
            raise ValueError(f"Streaming.recent must be >= 1 (a query always sees itself), got {self.recent}")

    @classmethod
    def settings_from_config(cls, section):
        return {"sink": section["sink"], "recent": section["recent"]}

    def keys_seen(self, query_positions, key_positions):
        """The first ``sink`` keys and the last ``recent`` up to the query: (rows or 1, 1, queries, keys)."""
        keys = key_positions[:, None, None, :]
        return (keys < self.sink) | (query_positions[:, None, :, None] - keys < self.recent)

    def describe(self):
        return (f"streaming (a masked head sees only the first {self.sink} and the last {self.recent} tokens of its "
                "context)")


# --- Modes with data: mean, optimal (constant vectors), resample (donors) ---------------------------------

@dataclass(frozen=True, eq=False)
class Constant(_OutputMasking):
    """A head with gate g puts out g * o_h + (1 - g) * c_h, c_h its vector in ``constants`` (a ``HeadConstants``,
    or the path of its file).

    ``Mean`` and ``Optimal`` are this with the config word of their constants' kind; ``Constant`` itself takes
    constants of any kind (hand-made ones, say)."""

    constants: object  # headprune.models.head_constants.HeadConstants, or its file
    word: ClassVar[str] = "constant"
    constant_output: ClassVar[bool] = True
    data: ClassVar[str | None] = "constants"

    def __post_init__(self):
        _check_data(self, self.constants, "HeadConstants")
        if not _is_file(self.constants):
            self._check_kind(self.constants)

    def _check_kind(self, constants):
        if type(self) is not Constant and constants.kind != self.word:
            raise ValueError(f"{type(self).__name__} masking takes {self.word} constants; these are "
                             f"{constants.kind!r} (Constant(constants) uses them as they are)")

    @property
    def head_constants(self):
        """The constants (a HeadConstants), read from their file on first use (once per process)."""
        if not _is_file(self.constants):
            return self.constants
        constants = _read("constants", str(self.constants))
        self._check_kind(constants)
        return constants

    @classmethod
    def of(cls, constants) -> Constant:
        """The mode of the constants' kind: Mean, Optimal, or Constant for another kind."""
        own = MODES.get(constants.kind, None)
        return (own if isinstance(own, type) and issubclass(own, Constant) else Constant)(constants)

    def check(self, model, adapter, sites, gates, capture):
        super().check(model, adapter, sites, gates, capture)
        self.head_constants.check(sites)

    def replacement(self, site, per_head, state):
        return self.head_constants.for_site(site, per_head)

    def describe(self):
        return self.summary or (f"{self.word} (a masked head's output replaced by a constant vector: "
                                f"{self.head_constants.kind})")


@mode
@dataclass(frozen=True, eq=False)
class Mean(Constant):
    """Mean ablation: a head with gate 0 puts out its mean output over training tokens."""

    word: ClassVar[str] = "mean"
    summary: ClassVar[str] = "mean (a masked head's output replaced by its mean over the real tokens of training data)"
    hint: ClassVar[str] = ("its constants: pass masking=Mean(constants) (headprune.models.masking; constants from "
                           "headprune.scoring.constants or HeadConstants.load)")
    data_maker: ClassVar[str | None] = "headprune.scoring.constants:mean_constants"


@mode
@dataclass(frozen=True, eq=False)
class Optimal(Constant):
    """Optimal ablation (Li and Janson 2024): a head with gate 0 puts out the constant that minimises the loss
    with it replaced, learned on training data."""

    word: ClassVar[str] = "optimal"
    summary: ClassVar[str] = ("optimal (a masked head's output replaced by the constant that minimises the expected loss, "
                              "learned on training data)")
    hint: ClassVar[str] = ("its constants: pass masking=Optimal(constants) (headprune.models.masking; constants from "
                           "headprune.scoring.constants or HeadConstants.load)")
    data_maker: ClassVar[str | None] = "headprune.scoring.constants:optimal_constants"
    config_key: ClassVar[tuple[str, ...]] = ("constants", "optimal")
    config_schema: ClassVar[dict] = {
        "description": "the constant that minimises the loss with its head replaced, learned from the mean",
        "properties": {
            "steps": {"type": "integer", "minimum": 0, "default": 200, "description": "Adam steps, each over one batch"},
            "lr": {"type": "number", "exclusiveMinimum": 0, "default": 0.05,
                   "description": "in units of each head's output spread"},
            "repeats": {"type": "integer", "minimum": 1, "default": 1,
                        "description": "copies of a batch per step (a head per row)"},
            "seed": _SEED}}

    @classmethod
    def data_options(cls, settings):
        return {key: settings[key] for key in ("steps", "lr", "repeats", "seed")}


@mode
@dataclass(frozen=True, eq=False)
class Resample(_OutputMasking):
    """Resample ablation: a head with gate 0 puts out its output at the donor token of its position (see the
    module docstring): draw ``draw`` of the donors seeded by ``seed`` from ``pool`` (a ``ResamplePool`` or the
    path of its file); ``draws`` K > 1: the experiments average draws draw .. draw + K - 1 (``each_draw``)."""

    pool: object  # headprune.models.head_constants.ResamplePool, or its file
    seed: int = 0
    draw: int = 0
    draws: int = 1
    word: ClassVar[str] = "resample"
    summary: ClassVar[str] = ("resample (a masked head's output replaced by its output at another training item's token "
                              "of the same position)")
    hint: ClassVar[str] = ("its donors: pass masking=Resample(pool, seed, draw) (headprune.models.masking; the pool from "
                           "headprune.scoring.constants.resample_pool or ResamplePool.load)")
    data: ClassVar[str | None] = "pool"
    data_maker: ClassVar[str | None] = "headprune.scoring.constants:resample_pool"
    config_key: ClassVar[tuple[str, ...]] = ("constants", "resample")
    config_schema: ClassVar[dict] = {
        "description": "the donors of resample masking",
        "properties": {
            "items": {"type": "integer", "minimum": 1, "default": 64,
                      "description": "items of the importance data recorded"},
            "seed": {**_SEED, "description": "which donor token each position gets"},
            "draws": {"type": "integer", "minimum": 1, "default": 1,
                      "description": "draws of donors (0..draws-1) every experiment averages its scores over; its "
                                     "paired tests compare the first draw's outputs (docs/method.md)"}}}

    def __post_init__(self):
        _check_data(self, self.pool, "ResamplePool")
        for name, least in (("seed", 0), ("draw", 0), ("draws", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"Resample.{name} must be an int >= {least}, got {value!r}")

    @classmethod
    def settings_from_config(cls, section):
        # one draw: the settings as they were before draws existed (the jobs' params unchanged)
        return {"seed": section["seed"], **({"draws": section["draws"]} if section.get("draws", 1) > 1 else {})}

    @classmethod
    def data_settings(cls, section):
        # the draws are its users'; the donors recorded do not change with them
        return {key: value for key, value in section.items() if key != "draws"}

    @classmethod
    def data_options(cls, settings):
        return {"max_items": settings["items"]}

    @property
    def donor_pool(self):
        """The donors (a ResamplePool), read from their file on first use (once per process)."""
        return _read("pool", str(self.pool)) if _is_file(self.pool) else self.pool

    def each_draw(self):
        return [Resample(self.pool, self.seed, self.draw + k) for k in range(self.draws)]

    def check(self, model, adapter, sites, gates, capture):
        super().check(model, adapter, sites, gates, capture)
        self.donor_pool.check(sites)

    def prepare(self, handles, model, sites, gates, state):
        _hooks().watch_target_positions(handles, model, sites, state)

    def replacement(self, site, per_head, state):
        pool = self.donor_pool
        positions = _hooks().query_positions(site, per_head, state, pool.stream_of(site.attn_type))
        donors = pool.donor_outputs(site, positions, self.seed, self.draw, like=per_head)  # (1|rows, T, H, d)
        return donors.transpose(0, 1) if site.time_major else donors

    def describe(self):
        return f"{self.summary.removesuffix(')')}: seed {self.seed}, draw {self.draw})"


# --- From a word ------------------------------------------------------------------------------------------

# The paper's masking: what ``masking=None`` means in every signature, resolved here alone (``as_masking``,
# ``as_mode``, ``default_word``); the schema's default word for the masking keys is checked against it (a test).
DEFAULT: type[Masking] = Zero


def default_word(word: str | None) -> str:
    """A config word, the default mode's where None (job params keep the bare word, as they always had)."""
    return DEFAULT.word if word is None else word


def _needs(cls: type[Masking]) -> list[str]:
    """The fields a mode cannot be built without (its window, its data)."""
    return [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]


def _plain() -> list[str]:
    """The words gated takes as strings: their modes need nothing more."""
    return [word for word, cls in MODES.items() if not _needs(cls)]


def as_masking(masking: Masking | str | None) -> Masking:
    """``gated``'s masking argument as a mode: a ``Masking`` as it is, None as the paper's (``DEFAULT``), a word
    whose mode needs nothing ("zero", "uniform") as its object; a word that needs data is refused with what to
    pass instead."""
    if isinstance(masking, Masking):
        return masking
    if masking is None:
        return DEFAULT()
    plain = _plain()
    if isinstance(masking, str) and masking in plain:
        return MODES[masking]()
    if isinstance(masking, str) and masking in MODES:
        raise ValueError(f"masking must be one of {tuple(plain)} or a masking object: masking={masking!r} needs "
                         f"{MODES[masking].hint}")
    raise ValueError(f"masking must be one of {tuple(plain)} or a masking object "
                     f"({', '.join(cls.__name__ for word, cls in MODES.items() if word not in plain)}), got {masking!r}")


# --- A model's mode for a block ------------------------------------------------------------------------

# The mode of each model that a ``masked_as`` block is open on; weak, so a model that goes leaves nothing here.
_MASKED_AS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def masked_as(model, masking: Masking | str | None):
    """While the context is open, every ``gated(model, ...)`` call that names no masking masks heads as
    ``masking`` (a mode, "zero", "uniform"; None: the paper's). A job's evaluation runs in one
    (``headprune.evaluation.runs.run_variants``), so the functions that run gate settings (perplexity windows,
    classification, beam search, lm-eval requests, retrieval answers) take no masking of their own: they gate
    the model, and the block says how. One mode per model at a time: a block, or a ``gated`` call that names its
    masking, inside a block of another mode on the same model is refused (``run(...)`` with ``EvalSettings``'
    masking inside ``masked_as`` of another, say), so that no call masks otherwise than its caller was told.

    >>> import torch
    >>> batch = evalset_batches(tokenizer, evalset, 2)[0]
    >>> off = gates_without(model, [("dec_self", 0, 1)])
    >>> with torch.no_grad(), masked_as(model, "uniform"), gated(model, off):
    ...     uniform = model(**batch).loss
    >>> with torch.no_grad(), gated(model, off, masking="uniform"):
    ...     bool(model(**batch).loss == uniform)
    True
    """
    mode = _unless_another_is_open(model, as_masking(masking), "masked_as")
    before = _MASKED_AS.get(model)  # None: no block open on it
    _MASKED_AS[model] = mode
    try:
        yield mode
    finally:
        if before is None:
            _MASKED_AS.pop(model, None)
        else:
            _MASKED_AS[model] = before


def _unless_another_is_open(model, mode: Masking, what: str) -> Masking:
    """``mode``, or a ValueError where a ``masked_as`` block of another mode is open on ``model``."""
    block = _MASKED_AS.get(model)
    if block is not None and block is not mode and (type(block) is not type(mode) or block != mode):
        raise ValueError(f"{what}(..., masking={mode.word}) inside masked_as(model, {block.word}): one masking mode "
                         "per model at a time (run() and scored_variants() take theirs from EvalSettings(masking=...))")
    return mode


def masking_of(model) -> Masking:
    """How ``gated(model, ...)`` masks a head when the call names no masking: as the ``masked_as`` block open on
    this model says, else the paper's (``DEFAULT``). A model gated while a block is open on another model is
    refused: the block was meant for it (a wrapper or a part of the model handed on instead), and the paper's
    mode there would be silently wrong."""
    mode = _MASKED_AS.get(model)
    if mode is not None:
        return mode
    if len(_MASKED_AS):
        raise ValueError(f"gated() got a {type(model).__name__} that names no masking while masked_as(...) is "
                         f"open on another model ({', '.join(type(m).__name__ for m in _MASKED_AS.keys())}): "
                         "gate the model the block was opened on, or pass masking= to gated()")
    return DEFAULT()


@contextlib.contextmanager
def gated(model, gates: dict | None = None, capture: HeadCapture | None = None,
          masking: Masking | str | None = None):
    """Mask heads by their gates while the context is open.

    ``gates[attn_type]`` has shape (layers, original heads). Gates of heads that were physically
    pruned are ignored. How a gate switches a head off is ``masking``'s (``headprune.models.masking``:
    a mode object: ``Zero()``, ``Uniform()``, ``Streaming(sink, recent)``, ``Mean(constants)``,
    ``Optimal(constants)``, ``Resample(pool, seed, draw)``, or the strings "zero" and "uniform"); None is the
    mode of the ``masked_as`` block open on the model, and outside one the paper's, ``masking.DEFAULT``
    (``masking_of``).

    ``Zero()`` (the default) multiplies every head's output by its gate, which may be 0/1
    or any real value (a leaf with requires_grad gives dL/dxi). With ``capture``, each head's output
    (batch, time, heads, head_dim) and its gradient are recorded for importance scores.

    ``Mean(constants)`` / ``Optimal(constants)`` give a head g * output + (1 - g) * its constant vector,
    any real gate, with ``capture`` as zero masking; ``Resample(pool, seed, draw)`` the same with a donor
    token's output in place of the constant.

    ``masking="uniform"`` takes gates 0 or 1 only: a head with gate 0 attends uniformly to the keys
    it may attend to (its query is zeroed, see ``headprune.models.masking``), a head with gate 1 is left
    as it is. It does not take ``capture``, and refuses models whose scores have terms besides
    query . key and the mask.

    ``masking=Streaming(sink, recent)`` takes gates 0 or 1 only: a head with gate 0 attends only to the
    first ``sink`` and the last ``recent`` tokens up to its query (a streaming head), a head with gate 1 is
    left as it is. It does not take ``capture``, runs on the decoder-only LMs under eager or sdpa attention,
    and counts positions over the real tokens of the 2-D ``attention_mask``. (The string "streaming" is
    refused: the window has no default.)

    Gates of shape (variants, layers, heads) evaluate several gate settings in one pass: the batch
    must then be the evaluation batch repeated once per variant, variant-major (rows [0, B) get
    variant 0, [B, 2B) variant 1, ...). ``generate()`` keeps that order when it expands each
    example into its beams, so the same input works there too.

    >>> import torch
    >>> gates = full_gates(model)
    >>> gates["dec_self"][1, 2] = 0.0  # switch off head 2 of layer 1
    >>> batch = evalset_batches(tokenizer, evalset, 2)[0]
    >>> with torch.no_grad(), gated(model, gates):
    ...     loss = model(**batch).loss
    >>> bool(torch.isfinite(loss))
    True
    """
    import torch

    from headprune.models.families import adapter_for_model

    if masking is None:
        mode = masking_of(model)
    else:
        mode = _unless_another_is_open(model, as_masking(masking), "gated")
    adapter = adapter_for_model(model)
    sites = adapter.sites(model)
    mode.check(model, adapter, sites, gates, capture)
    handles: list = []
    try:
        mode.install(handles, model, sites, gates, capture)
        if isinstance(model, torch.nn.Module):
            from headprune.models.masking_hooks import check_reached

            check_reached(handles, model, sites, gates, capture, mode)
        yield sites
    finally:
        for handle in handles:
            handle.remove()


def masking_for(word: str, **settings) -> Masking:
    """The mode of a config word (``MASKING_WORDS``) with its fields: the window of streaming (``sink``,
    ``recent``), the data of mean and optimal (``constants``: a HeadConstants or the path of its file) and of
    resample (``pool``, with ``seed``, ``draw``, ``draws``).

    >>> masking_for("streaming", sink=4, recent=64)
    Streaming(sink=4, recent=64)
    """
    cls = MODES.get(word, None)
    if cls is None:
        raise ValueError(f"masking must be one of {tuple(MODES)}, got {word!r}")
    missing = [name for name in _needs(cls) if settings.get(name) is None]
    if missing:
        what = " and ".join(f"{name} file ({name}=..., or the object read from it)" if name == cls.data else name
                            for name in missing)
        raise ValueError(f"{word} masking needs its {what}")
    unknown = sorted(set(settings) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"{word} masking takes {[f.name for f in fields(cls)] or 'no settings'}, not {unknown}")
    return cls(**settings)


def as_mode(masking: Masking | str | dict | None) -> Masking:
    """An ``EvalSettings``' masking as its mode: a ``Masking`` as it is, None as the paper's (``DEFAULT``), a config
    word, or a job's params dict {"word": ..., its fields} (``Pipeline``'s studies write them)."""
    if isinstance(masking, Masking) or masking is None:
        return as_masking(masking)
    if isinstance(masking, dict):
        if "word" not in masking:
            raise ValueError(f"a masking's settings name its mode: {{'word': one of {tuple(MODES)}, ...}}, got {masking!r}")
        return masking_for(**masking)
    return masking_for(masking)


def __getattr__(name):  # the hook machinery's public names, importable from here as before
    if name == "MASKING_WORDS":  # read when asked: a mode class written below this line is one of them too
        return tuple(MODES)
    if name in ("check_binary_gates", "MASK_BACKENDS"):
        return getattr(_hooks(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
