"""Pruning layouts: which heads a pruning order removes at each step (``pruning.layouts``).

- ``free`` (the paper's): the first round(p N / 100) heads of the order, wherever they are. Layers end up with
  different head counts, which only headprune's modeling files (remote code) can load.
- ``uniform`` (Minitron-style width pruning): step k removes the k first removal units of every layer, a layer's
  units ranked by where their heads come in the order. A unit is one head, or with grouped-query attention one
  key/value group with all of its query heads, so every layer keeps the same number of query heads and of whole
  key/value groups: what a model's own config class can describe (``headprune.models.stock``). A layer has U units,
  so the uniform curve has U + 1 steps, at 100 k / U % of the heads.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from headprune.io.registry import Registry

if TYPE_CHECKING:  # torch is imported where heads are counted, not where a table is read (the scorecard, figures)
    import pandas as pd

HeadId = tuple[str, int, int]

Units = dict[tuple[str, int], list[tuple[HeadId, ...]]]


def removal_units(model, attn_type: str | None = None) -> Units:
    """{(attention type, layer): its removal units}: each head alone, or each key/value group's query heads
    together where a layer has fewer key/value heads than query heads. Only ``attn_type``'s layers if given."""
    from headprune.models.heads import adapter_for

    units: Units = {}
    for site in adapter_for(model).sites(model):
        if attn_type not in (None, site.attn_type):
            continue
        heads = site.original_num_heads
        kv_heads = int(getattr(site.layout, "original_kv_heads", None) or heads)
        size = heads // kv_heads
        units[site.attn_type, site.layer] = [tuple((site.attn_type, site.layer, h) for h in range(g * size, (g + 1) * size))
                                            for g in range(kv_heads)]
    return units


def _ranked(order: Sequence[HeadId], units: Units) -> dict[tuple[str, int], list[tuple[HeadId, ...]]]:
    """Each layer's units, the one whose heads come first in ``order`` (on average) first."""
    rank = {tuple(head): i for i, head in enumerate(order)}
    missing = [head for layer_units in units.values() for unit in layer_units for head in unit if head not in rank]
    if missing or len(rank) != sum(len(unit) for layer_units in units.values() for unit in layer_units):
        raise ValueError(f"the order and the model's heads differ ({len(rank)} heads ordered; "
                         f"{len(missing)} of the model's heads not in the order, e.g. {missing[:3]})")
    counts = {len(layer_units) for layer_units in units.values()}
    if len(counts) > 1:
        found = ", ".join(f"{t} layer {layer}: {len(u)}" for (t, layer), u in sorted(units.items()))
        raise ValueError(f"a uniform layout needs as many removal units in every layer; found {found}")
    return {where: sorted(layer_units, key=lambda unit: sum(rank[h] for h in unit) / len(unit))
            for where, layer_units in units.items()}


def uniform_steps(order: Sequence[HeadId], units: Units) -> list[tuple[float, list[HeadId]]]:
    """(percent pruned, heads removed) for k = 0 .. U units removed from every layer; the heads removed listed
    in ``order``'s order."""
    ranked = _ranked(order, units)
    per_layer = len(next(iter(ranked.values()))) if ranked else 0
    position = {tuple(head): i for i, head in enumerate(order)}
    steps = []
    for k in range(per_layer + 1):
        removed = sorted((head for layer_units in ranked.values() for unit in layer_units[:k] for head in unit),
                         key=position.__getitem__)
        steps.append((round(100.0 * k / per_layer, 6) if per_layer else 0.0, removed))
    return steps


class Layout:
    """A pruning layout: the heads an order removes at each step of a curve (``steps``) and for a --percent cut
    (``removal``). One class each, registered in ``LAYOUTS`` by its word (``pruning.layouts``, --layout): the
    schema's enum and the command line's choices are its words, and no code outside the class compares one."""

    # The paper's layout: the criteria are compared on its curves, Figures 4 and 5 draw it, and a pruning table
    # written before layouts existed is in it
    paper: ClassVar[bool] = False
    # Every layer keeps as many heads and whole key/value groups, which transformers' own config class describes:
    # the command line saves it as a stock checkpoint
    stock: ClassVar[bool] = False
    # Whether its steps need the model's removal units (``removal_units``)
    needs_units: ClassVar[bool] = False

    word: ClassVar[str]  # its name in LAYOUTS (``layout`` sets it)

    def steps(self, order: Sequence[HeadId], *, step_percent: float, units: Units | None):
        """(percent pruned, heads removed) of each step of a curve, first the full model."""
        raise NotImplementedError

    def card_line(self, same_size: bool = False) -> str:
        """What a pruned model's card says of its layout (``headprune.models.export.model_card``); ``same_size``: a
        same-size stock export (``headprune prune --stock``: the removed heads' weights zeroed)."""
        return f"- layout: {self.word}"

    def removal(self, order: Sequence[HeadId], model, percent: float) -> list[HeadId]:
        """The heads removed for about ``percent`` % of the heads (``order``: every head of the model)."""
        raise NotImplementedError


LAYOUTS: Registry[Layout] = Registry("pruning layout", base=Layout)
FREE, UNIFORM = "free", "uniform"  # their words, where a claim names one (the scorecard's U1)


def layout(name: str):
    """A class decorator registering one instance of the class as the layout ``name``."""
    def register(cls):
        cls.word = name
        LAYOUTS.add(name, cls())
        return cls
    return register


@layout(FREE)
class Free(Layout):
    """The paper's: the first round(p N / 100) heads of the order, wherever they are (remote code loads it)."""
    paper = True

    def steps(self, order, *, step_percent, units=None):
        from headprune.evaluation.runs import pruning_steps

        return pruning_steps(list(order), step_percent)

    def removal(self, order, model, percent):
        return list(order[:int(round(percent * len(order) / 100.0))])

    def card_line(self, same_size=False):
        if same_size:
            return ("- layout: free (each layer keeps its own heads): a same-size stock checkpoint (`headprune prune "
                    "--stock`); the remote-code export is smaller")
        return ("- layout: free (each layer keeps its own heads): loads as remote code (`trust_remote_code=True`); "
                "`headprune prune --layout uniform` writes a stock checkpoint")


@layout(UNIFORM)
class Uniform(Layout):
    """Minitron-style width pruning: one removal unit of every layer a step (``uniform_steps``)."""
    stock, needs_units = True, True

    def steps(self, order, *, step_percent, units=None):
        if units is None:
            raise ValueError("the uniform layout needs the model's removal units (removal_units(model))")
        return uniform_steps(order, units)

    def removal(self, order, model, percent):
        return uniform_removal(order, model, percent)

    def card_line(self, same_size=False):
        return ("- layout: uniform (every layer keeps as many heads and whole key/value groups): a "
                + ("same-size stock checkpoint" if same_size else "stock checkpoint"))


def paper_layout() -> str:
    """The paper's layout's word (free)."""
    return next(name for name, entry in LAYOUTS.items() if entry.paper)


def layout_steps(order: Sequence[HeadId], layout: str, *, step_percent: float = 10.0,
                 units: Units | None = None) -> list[tuple[float, list[HeadId]]]:
    """A pruning curve's steps in ``layout``: the paper's steps of ``step_percent`` % (free), or one removal
    unit per layer a step (uniform; ``units`` from ``removal_units``)."""
    if layout not in LAYOUTS:
        raise ValueError(LAYOUTS.unknown(layout))
    return LAYOUTS[layout].steps(order, step_percent=step_percent, units=units)


def uniform_removal(order: Sequence[HeadId], model, percent: float) -> list[HeadId]:
    """The heads a uniform layout removes for about ``percent`` % of the heads: round(percent U / 100) units of
    every layer (U units a layer), the first in ``order``."""
    attn_types = {head[0] for head in order}
    units = {where: u for where, u in removal_units(model).items() if where[0] in attn_types}
    steps = uniform_steps(order, units)
    per_layer = len(steps) - 1
    return steps[int(round(percent * per_layer / 100.0))][1]


def free_layout(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a pruning table in the free layout (a table written before layouts existed is all free)."""
    return table if "layout" not in table else table[table["layout"] == paper_layout()]
