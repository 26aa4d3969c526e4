"""Encoder self-attention, generic over transformers' families: where an encoder's heads are, as
``headprune_decoder.py`` finds a decoder's, through the same ``DecoderLayout`` (how a layer loses heads is
``headprune_attention.py``'s, for both).

Imports only torch and transformers (and its siblings): headprune builds on it (``headprune.models.families.encoder``)
and a pruned encoder's folder carries it (``modeling_headprune_encoder.py`` imports it).

transformers 5 declares no tensor- or pipeline-parallel plan for its encoders, so the names are the fallback here:

- the encoder is the base model's (a vision-language encoder's: its text model, the one ``get_text_config`` describes);
  its layers are the ModuleList of its config's layer count whose layers all hold a query/key/value module whose
  config is the text model's;
- a layer's attention is the first module in it with query/key/value projections ``headprune_decoder`` names
  (``SEPARATE``, ``FUSED``); its output projection is its own (``OUTPUT_NAMES``) or, as in BERT and its copies,
  outside it: ``OUTSIDE`` names where, beside the q/k/v module in their common parent (``attention.output.dense``);
- per-head projections read with the queries (DeBERTa's positions, Longformer's global attention) are
  ``headprune_decoder.WITH_QUERIES``; ALBERT's one layer, run by every layer, is found through its config's
  ``num_hidden_groups`` (each layer one run of it: gated on its own, never pruned); ConvBERT's output projection
  reads its convolution heads' features after its attention heads' (``EXTRA_OUTPUT_FEATURES``: gated, never pruned).

What else a family differs by is declared data below (``HEAD_BIASES``, ``NOT_PRUNABLE``, ``HEADLESS_RESULTS``,
``PER_HEAD_CHANNELS``, ``REBUILDS``), applied by ``keep_encoder_heads`` (headprune's pruning and the exported modeling
file alike).

Whether a model is an encoder is what transformers declares: a class of its causal-LM table is not, nor an
encoder-decoder; attention modules that say ``is_causal`` decide; else the config's ``is_decoder`` or ``causal``
(XLM), else whether the model type has a causal LM at all.
"""
from __future__ import annotations

import functools
import inspect
import sys
import types
import weakref

import torch
from torch import nn
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from .headprune_attention import COUNTS, QUERY_WIDTHS, keep_heads
from .headprune_decoder import FUSED, OUTPUT_NAMES, SEPARATE, DecoderLayout, _is_projection, _out_features

# The module beside the q/k/v one that holds the output projection, and its attribute there (BERT's attention.output)
OUTSIDE = (("output", OUTPUT_NAMES),)
LAYER_COUNTS = ("num_hidden_layers", "n_layers", "num_layers")
# Arguments of an attention's forward with one (rows, heads, queries, keys) slice per original head, added to its
# scores (MPNet's relative position bias, LayoutLMv3's 1-D and 2-D ones, computed once for every layer): a pruned
# layer takes its kept heads' slices (``pick_head_biases``)
HEAD_BIASES = ("position_bias", "rel_pos", "rel_2d_pos")
# Attention classes whose output projection, beside them, reads features after their heads' that are no head's:
# ConvBERT's convolution heads (its config's num_attention_heads counts them too; the module's own count does not)
EXTRA_OUTPUT_FEATURES = ("ConvBertSelfAttention",)
# Attention classes that cannot run with fewer heads, and why (their forward's own assumptions)
NOT_PRUNABLE = {
    "ConvBertSelfAttention": "has an output projection that also reads its convolution heads' features, and a "
                             "convolution that reads every head's query: its attention heads are gated, not pruned",
    "LongformerSelfAttention": "reshapes its heads' output to the hidden size (embed_dim), so it cannot run with "
                               "fewer heads",
    "LSHSelfAttention": "(Reformer's LSH attention) is not checked with fewer heads (the tiny models of "
                        "tests/test_encoder_families.py use local attention): refused until it is",
}
# What an attention class with no heads left returns where its layer reads more than (output, weights), from its
# empty output (rows, queries, 0): Reformer's output object, I-BERT's outputs with their quantisation scales
HEADLESS_RESULTS = {
    "LocalSelfAttention": lambda module, empty: _output_class(module, "LocalSelfAttentionOutput")(
        hidden_states=empty, attention_probs=None),
    "IBertSelfAttention": lambda module, empty: ((empty,), (None,)),
}
# Methods of the module that holds an attention (``DecoderLayout.owner``) that replace it by a new one built from the
# config, with every head: BigBird's set_attention_type (full <-> block-sparse, which its model's forward calls on
# input too short for block-sparse attention) builds the other class and hands it the projections. A pruned layer's
# new attention takes its predecessor's head counts and widths, and what headprune set on it (``follow_rebuilds``).
REBUILDS = ("set_attention_type",)
# Children that are one channel per head (a depthwise convolution: Nystromformer's conv over each head's values):
# their channels are cut with the heads
PER_HEAD_CHANNELS = ("conv",)
CAUSAL_CLASSES = frozenset(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


def is_encoder(model) -> bool:
    """Whether the model's self-attention is bidirectional, as transformers declares it (module docstring)."""
    config = model.config
    if type(model).__name__ in CAUSAL_CLASSES or getattr(config, "is_encoder_decoder", False):
        return False
    declared = {getattr(m, "is_causal") for m in model.modules()
                if type(m).__name__.endswith("Attention") and isinstance(getattr(m, "is_causal", None), bool)}
    if declared:
        return declared == {False}
    for name in ("is_decoder", "causal"):
        if isinstance(getattr(config, name, None), bool) and name in config.to_dict():
            return not getattr(config, name)
    return getattr(config, "model_type", None) not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def text_config(model):
    get = getattr(model.config, "get_text_config", None)
    return get() if get is not None else model.config


def _qkv_holder(layer: nn.Module):
    """(name in the layer, module) of the first module holding query/key/value projections, or (None, None)."""
    for name, module in layer.named_modules():
        if any(all(_is_projection(getattr(module, n, None)) for n in names) for names in SEPARATE):
            return name, module
        if any(_is_projection(getattr(module, fused, None)) for fused, _ in FUSED):
            return name, module
    return None, None


def _reads_other_config(attention, config) -> bool:
    own = getattr(attention, "config", None)
    return hasattr(own, "to_dict") and own is not config and type(own) is not type(config)


def _query_width(attention: nn.Module) -> int | None:
    return next((_out_features(getattr(attention, q)) for q, _, _ in SEPARATE
                 if _is_projection(getattr(attention, q, None))), None)


def _outside_output(layer: nn.Module, name: str, attention: nn.Module):
    """(module, attribute) of the output projection beside ``attention`` (``OUTSIDE``), where it has none itself and
    its parent is not the layer (whose own ``output`` is the feed-forward's); it reads the heads' features alone, or
    after them features of ``EXTRA_OUTPUT_FEATURES``."""
    if any(_is_projection(getattr(attention, n, None)) for n in OUTPUT_NAMES) or "." not in name:
        return None
    parent = layer.get_submodule(name.rpartition(".")[0])
    width = _query_width(attention)
    wider = type(attention).__name__ in EXTRA_OUTPUT_FEATURES
    for child, names in OUTSIDE:
        holder = getattr(parent, child, None)
        for out in names:
            if not _is_projection(getattr(holder, out, None)):
                continue
            inputs = _out_features(getattr(holder, out), inputs=True)
            if inputs == width or (wider and width is not None and inputs > width):
                return holder, out
    return None


def _extra_features(attention: nn.Module, output) -> int:
    """Input features of the output projection beside ``attention`` after its heads' (``EXTRA_OUTPUT_FEATURES``)."""
    if output is None or type(attention).__name__ not in EXTRA_OUTPUT_FEATURES:
        return 0
    return _out_features(getattr(*output), inputs=True) - _query_width(attention)


def layer_list(model) -> tuple[object, nn.ModuleList]:
    """(text config, the encoder's layer list) of the model (module docstring)."""
    config = text_config(model)
    count = next((getattr(config, k) for k in LAYER_COUNTS if isinstance(getattr(config, k, None), int)), None)
    base = getattr(model, "base_model", model)
    if count is None:
        raise ValueError(f"{type(config).__name__} has no layer count ({', '.join(LAYER_COUNTS)})")
    for _, layers in base.named_modules():
        if isinstance(layers, nn.ModuleList) and count and len(layers) == count:
            found = [_qkv_holder(layer)[1] for layer in layers]
            if all(a is not None and not _reads_other_config(a, config) for a in found):
                return config, layers
    shared = _shared_layers(base, config, count)
    if shared is not None:
        return config, shared
    raise ValueError(f"no list of {count} encoder layers with query/key/value projections headprune knows in "
                     f"{type(base).__name__}")


def _shared_layers(base: nn.Module, config, count) -> list | None:
    """ALBERT's layers: ``num_hidden_groups`` groups of one layer each (``inner_group_num``), each group's layer run
    by ``count / groups`` consecutive layers; the layer each of the ``count`` layers runs, or None."""
    groups = getattr(config, "num_hidden_groups", None)
    if not isinstance(groups, int) or not count or getattr(config, "inner_group_num", 1) != 1:
        return None
    for _, group_list in base.named_modules():
        if isinstance(group_list, nn.ModuleList) and len(group_list) == groups:
            inner = [next((m for m in group.modules() if isinstance(m, nn.ModuleList) and len(m) == 1), None)
                     for group in group_list]
            if all(m is not None and _qkv_holder(m[0])[1] is not None for m in inner):
                return [inner[i * groups // count][0] for i in range(count)]
    return None


_LAYOUTS: "weakref.WeakKeyDictionary[nn.Module, list]" = weakref.WeakKeyDictionary()


def encoder_layouts(model) -> list[DecoderLayout]:
    """Every encoder layer's ``DecoderLayout``, computed once per model (again only if a module was replaced)."""
    cached = _LAYOUTS.get(model)
    if cached is not None and all(layout.current() for layout in cached):
        return cached
    config, layers = layer_list(model)
    model_type = getattr(config, "model_type", None)
    found = []
    for i, layer in enumerate(layers):
        name, attention = _qkv_holder(layer)
        owner = (layer.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2]) if name else None
        output = _outside_output(layer, name, attention)
        if output is None and not any(_is_projection(getattr(attention, n, None)) for n in OUTPUT_NAMES):
            raise ValueError(f"layer {i}: {type(attention).__name__} has no output projection of its own "
                             f"({', '.join(OUTPUT_NAMES)}) nor one beside it that reads its heads' features")
        extra = _extra_features(attention, output)
        # where the output reads more than the heads, the module's own head count (ConvBERT's config counts more)
        found.append(DecoderLayout(i, attention, attention if extra else config, model_type, owner=owner,
                                   output=output, extra_features=extra))
    for layout in found:  # a module that several layers run (ALBERT): each layer is one of its applications
        runs = [other for other in found if other.attention is layout.attention]
        layout.applications, layout.application = len(runs), runs.index(layout)
    _LAYOUTS[model] = found
    return found


def pruning_problem(layout: DecoderLayout) -> str | None:
    """Why removing heads of this encoder layer would change what the others do or would not run (None: it
    would not): ``DecoderLayout.pruning_problem``, the attention classes of ``NOT_PRUNABLE``, and modules with
    parameters beside the projections, whose share of a head nothing declares (LiLT's layout stream, Nystromformer's
    per-head convolution)."""
    name = type(layout.attention).__name__
    if getattr(layout, "applications", 1) > 1:
        return (f"{name} is run by {layout.applications} layers, one module whose weights they share (ALBERT's "
                "num_hidden_groups): removing a head would remove it from all of them; its heads are gated per layer")
    if name in NOT_PRUNABLE:
        return f"{name} {NOT_PRUNABLE[name]}"
    beside = [child for child, module in layout.attention.named_children()
              if id(module) not in layout.projections() and any(True for _ in module.parameters())
              and not _per_head_channels(layout, child)]
    if beside:
        return (f"{name} has {', '.join(beside)} beside its projections, and nothing declares which of its "
                "parameters are whose head")
    return layout.pruning_problem()


def pick_head_biases(attention: nn.Module) -> None:
    """Have a pruned attention take its kept heads' slices of the per-head score biases it is handed
    (``HEAD_BIASES``), once: a forward pre-hook (which a deep copy keeps)."""
    if getattr(attention, "headprune_picks_head_biases", False):
        return
    signature = inspect.signature(attention.forward)
    names = [n for n in HEAD_BIASES if n in signature.parameters]
    if not names:
        return

    def pick(module, args, kwargs):
        kept, original = module.headprune_kept_heads, module.headprune_original_heads
        bound = signature.bind_partial(*args, **kwargs)
        for name in names:
            bias = bound.arguments.get(name)
            if isinstance(bias, torch.Tensor) and bias.dim() == 4 and bias.shape[1] == original != len(kept):
                bound.arguments[name] = bias.index_select(1, torch.tensor(kept, dtype=torch.long, device=bias.device))
        return bound.args, bound.kwargs

    attention.register_forward_pre_hook(pick, with_kwargs=True)
    attention.headprune_picks_head_biases = True


def _per_head_channels(layout: DecoderLayout, name: str) -> bool:
    conv = getattr(layout.attention, name, None)
    return name in PER_HEAD_CHANNELS and isinstance(conv, (nn.Conv1d, nn.Conv2d)) and \
        conv.groups == conv.in_channels == conv.out_channels == len(layout.kept)


def keep_encoder_heads(layout: DecoderLayout, keep: list[int], *, copy_weights: bool = True) -> None:
    """``headprune_attention.keep_heads``, and what an encoder family adds to it: its per-head channels cut
    (``PER_HEAD_CHANNELS``), what it returns with no heads left where its layer reads more than a tuple
    (``HEADLESS_RESULTS``), and the per-head score biases it is handed picked (``pick_head_biases``)."""
    attention = layout.attention
    channels = [name for name in PER_HEAD_CHANNELS if _per_head_channels(layout, name)]
    positions = [layout.kept.index(h) for h in keep]
    keep_heads(layout, keep, copy_weights=copy_weights)
    for name in channels:
        conv = getattr(attention, name)
        index = torch.tensor(positions, dtype=torch.long, device=conv.weight.device)
        for pname in ("weight", "bias"):
            old = getattr(conv, pname)
            if old is not None:
                data = old.detach().index_select(0, index) if copy_weights else old.detach()[:len(keep)]
                setattr(conv, pname, nn.Parameter(data.clone(), requires_grad=old.requires_grad))
        conv.in_channels = conv.out_channels = conv.groups = len(keep)
    if not keep and type(attention).__name__ in HEADLESS_RESULTS:
        attention.forward = types.MethodType(_headless_result, attention)
    pick_head_biases(attention)
    if layout.owner is not None:
        follow_rebuilds(*layout.owner)


def follow_rebuilds(owner: nn.Module, name: str) -> None:
    """Make each method of ``REBUILDS`` that ``owner`` has hand the pruned attention's head counts and widths (the
    attributes its forward reshapes by: ``COUNTS``, ``QUERY_WIDTHS``), what headprune set on it and a headless
    forward to the attention it builds in place of ``owner.<name>``."""
    for method in REBUILDS:
        if hasattr(owner, method) and method not in vars(owner):
            setattr(owner, method, types.MethodType(functools.partial(_rebuild_keeping_heads, method=method,
                                                                      name=name), owner))


def _rebuild_keeping_heads(owner: nn.Module, *args, method: str, name: str, **kwargs):
    before = getattr(owner, name)
    result = getattr(type(owner), method)(owner, *args, **kwargs)
    after = getattr(owner, name)
    if after is not before:
        carried = {n for n, _ in COUNTS} | set(QUERY_WIDTHS)
        for attribute, value in vars(before).items():
            if isinstance(value, types.MethodType) and value.__self__ is before:  # a headless forward
                value = types.MethodType(value.__func__, after)
            if attribute.startswith("headprune_") or attribute == "forward" or \
                    (attribute in carried and hasattr(after, attribute)):
                setattr(after, attribute, value)
    return result


def _headless_result(self, hidden_states, *args, **kwargs):
    empty = hidden_states.new_zeros(*hidden_states.shape[:-1], 0)
    return HEADLESS_RESULTS[type(self).__name__](self, empty)


def _output_class(module: nn.Module, name: str):
    return getattr(sys.modules[type(module).__module__], name)
