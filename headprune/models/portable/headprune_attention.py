"""How a decoder layer loses heads, and the one attention function it then runs (``headprune_decoder.py`` says
where the heads are).

Imports only torch and transformers (and its siblings): headprune builds on it and a pruned model's folder carries
it, so plain transformers runs the same code.

Removing heads (``keep_heads``) slices the kept query heads' rows of the query projection and their columns of
the output projection, the rows of the key/value heads they still read, and per-head parameters of the attention
module. It then sets the module's head counts (``num_heads``, ``num_key_value_groups``, ...), which the families'
forwards read. When the kept query heads read their key/value heads unevenly (kv head 0 by one query head, kv
head 1 by two), no ``num_key_value_groups`` says it: the module then holds ``headprune_kv_index`` (for each kept
query head, which kept kv head it reads), its ``num_key_value_groups`` becomes 1, and the model runs
``headprune_attention``, registered with transformers' ``AttentionInterface`` as "headprune_<backend>" for each
backend (eager, sdpa, flash, ...): it gathers keys and values per query head by that index, after the cache
(which keeps only the kept kv heads), and hands everything else, sliding windows, soft-capping, scaling and sinks
included, to the backend the model was loaded with. The same function lets headprune change a head's query on its
way into the backend (``headprune_modify_query``: the query place of ``headprune.models.places``, after rotary and
any q/k norm), give each head its own attention mask (``headprune_attention_mask``: the attention place) and count
the calls that reached a layer
(``headprune_reached``). A model is switched to it through the configs its attention modules read, with
transformers' own setter, so that a wrapper's text config follows (``run_through_headprune``).

A layer left without heads adds only its output projection's bias: its module's forward is replaced by
``headless_forward``, which keeps the layer's cache entry (one zero head) as long as the others'.
"""
from __future__ import annotations

import functools
import sys
import types

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from .headprune_common import cache_without_heads
from .headprune_decoder import (OUTPUT_NAMES, PREFIX, DecoderLayout, LayerConfig, _config_value, _first,
                                _out_features, attention_configs, decoder_layers)

# Attributes of an attention module that hold its head counts: (name, what they count)
COUNTS = (("num_heads", "query"), ("num_attention_heads", "query"), ("n_head", "query"),
          ("num_key_value_heads", "kv"), ("num_kv_heads", "kv"), ("n_kv_heads", "kv"))
# Attributes some forwards split or reshape the queries by (GPT-2's split_size, DBRX's hidden_size, GPT-BigCode's
# embed_dim), where they hold the query projection's width
QUERY_WIDTHS = ("split_size", "hidden_size", "embed_dim")
# Encoders' (headprune_encoder): DistilBERT's and XLM's head count, BERT's copies' width of all heads together
COUNTS += (("n_heads", "query"),)
QUERY_WIDTHS += ("all_head_size",)
# Config entries with the head counts (name, what they count), as a pruned layer's LayerConfig reports them
CONFIG_COUNTS = (("num_attention_heads", "query"), ("num_key_value_heads", "kv"), ("n_head", "query"),
                 ("num_kv_heads", "kv"))


# --- Removing heads ------------------------------------------------------------------------------------------

def _slice(module: nn.Module, name: str, dim: int, index: torch.Tensor | int):
    """Keep ``index`` (or, an int, the first that many) along ``dim`` of parameter ``name``."""
    old = getattr(module, name, None)
    if old is None:
        return
    data = old.detach()
    data = data.narrow(dim, 0, index) if isinstance(index, int) else data.index_select(dim, index.to(old.device))
    setattr(module, name, nn.Parameter(data.clone(), requires_grad=old.requires_grad))


def _cut(linear: nn.Module, index, outputs: bool):
    """Keep ``index`` of a projection's output features (``outputs``) or input features."""
    transposed = isinstance(linear, Conv1D)
    weight_dim = (1 if transposed else 0) if outputs else (0 if transposed else 1)
    _slice(linear, "weight", weight_dim, index)
    if outputs:
        _slice(linear, "bias", 0, index)
    size = linear.weight.shape[weight_dim]
    if isinstance(linear, nn.Linear):
        if outputs:
            linear.out_features = size
        else:
            linear.in_features = size
    elif transposed:
        if outputs:
            linear.nf = size
        else:
            linear.nx = size


def keep_heads(layout: DecoderLayout, keep: list[int], *, copy_weights: bool = True):
    """Keep only query heads ``keep`` (original indices, a subset of the kept ones) of the layout's module.

    ``copy_weights``: slice the kept heads' weights (headprune pruning a model); False: keep the first features
    of each projection, to give a freshly built model the saved weights' shapes (from_pretrained then loads them).
    """
    attention = layout.attention
    if layout.kept and keep:
        problem = layout.pruning_problem()
        if problem is not None:
            raise ValueError(f"layer {layout.layer}: {problem}")
    device = layout.output.weight.device
    q, k, v = layout.qkv_rows(keep, device)
    out = layout._rows([layout.kept.index(h) for h in keep], layout.head_dim, device)
    per_head = layout.per_head_parameters()
    heads_index = torch.tensor([layout.kept.index(h) for h in keep], dtype=torch.long, device=device)
    if not copy_weights:
        q, k, v, out = (len(t) for t in (q, k, v, out))
        heads_index = len(keep)
    cut: set[int] = set()
    for linear, rows in ((layout.query, q), (layout.key, k), (layout.value, v)):
        if id(linear) not in cut:  # a fused projection serves two or three roles: cut it once
            cut.add(id(linear))
            _cut(linear, rows, outputs=True)
    _cut(layout.output, out, outputs=False)
    for name in getattr(layout, "with_queries", ()):  # per-head rows that a head's query rows name
        _cut(getattr(attention, name), q, outputs=True)
    for name in per_head:
        _slice(attention, name, 0, heads_index)
    # What the layout cannot read off a pruned module's shapes again (a deep copy, a saved model reloaded)
    attention.headprune_kept_heads = list(keep)
    attention.headprune_head_dim = layout.head_dim
    attention.headprune_query_dim = layout.query_dim
    attention.headprune_original_heads = layout.original_heads
    attention.headprune_original_kv_heads = layout.original_kv_heads
    attention.headprune_output_name = layout.names[3]
    attention.headprune_output_outside = getattr(layout, "outside", None) is not None
    set_head_counts(layout, keep)


def set_head_counts(layout: DecoderLayout, keep: list[int]):
    """Tell the module how many heads it has (the attributes its forward reads) and how they read kv heads."""
    attention = layout.attention
    kv = layout.kv_heads(keep)
    for name, counts in COUNTS:
        if isinstance(getattr(attention, name, None), int):
            setattr(attention, name, len(keep) if counts == "query" else len(kv))
    config = getattr(attention, "config", None)
    if config is not None:  # a forward that reads the head counts from the config (Phi-3 splits qkv_proj so)
        base = config.headprune_base if isinstance(config, LayerConfig) else config
        attention.config = LayerConfig(base, {name: len(keep) if counts == "query" else len(kv)
                                              for name, counts in CONFIG_COUNTS if hasattr(base, name)})
    width = len(layout.kept) * layout.query_dim
    for name in QUERY_WIDTHS:  # where it is the queries' width, it shrinks with them
        if isinstance(getattr(attention, name, None), int) and getattr(attention, name) == width:
            setattr(attention, name, len(keep) * layout.query_dim)
    layout.kept = list(keep)
    index = layout.kv_index()
    groups = [index.count(k) for k in range(len(kv))]
    uniform = all(c == groups[0] for c in groups)  # also with no head left
    if hasattr(attention, "num_key_value_groups"):
        attention.num_key_value_groups = groups[0] if groups and uniform else 1
    attention.headprune_kv_index = None if uniform else index
    attention.headprune_kv_index_on = {}
    if not keep:
        attention.forward = types.MethodType(headless_forward, attention)


def headless_forward(self, hidden_states=None, *args, past_key_values=None, **kwargs):
    """The forward of an attention with no heads left: its output projection's bias (zeros without one), and
    its cache entry kept as long as the other layers' (one zero head)."""
    if hidden_states is None:
        hidden_states = kwargs.pop("hidden_states")
    if getattr(self, PREFIX + "output_outside", False):  # the output projection, outside, adds its bias alone
        queries = kwargs.get("query_states")  # DeBERTa's enhanced mask decoder queries other states
        queries = hidden_states if queries is None else queries
        return queries.new_zeros(*queries.shape[:-1], 0), None
    cache = past_key_values if past_key_values is not None else kwargs.get("layer_past", kwargs.get("past_key_value"))
    batch, length = hidden_states.shape[:2]
    if getattr(self, "layer_idx", None) is not None:
        cache_without_heads(cache, False, self.layer_idx, batch, length, self.headprune_head_dim, hidden_states)
    output = _output_projection(self)
    bias = output.bias
    result = (bias.expand(*hidden_states.shape[:-1], -1).clone() if bias is not None else
              hidden_states.new_zeros(*hidden_states.shape[:-1], _out_features(output)))
    return result, None


def _output_projection(attention):
    named = getattr(attention, "headprune_output_name", None)
    if named is not None:
        return getattr(attention, named)
    out = _first(attention, OUTPUT_NAMES)
    if out is not None:
        return out
    raise ValueError(f"no output projection in {type(attention).__name__}")


# --- The attention function ---------------------------------------------------------------------------------

def _eager_of(module):
    """The family's own eager attention (each modeling file defines ``eager_attention_forward``)."""
    for cls in type(module).__mro__:
        function = getattr(sys.modules.get(cls.__module__), "eager_attention_forward", None)
        if function is not None:
            return function
    raise ValueError(f"{type(module).__name__}'s modeling file has no eager_attention_forward")


def headprune_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' attention call, with keys/values gathered per kept query head where the groups are uneven
    and the query changed where headprune asks (``headprune_modify_query``); then the model's own backend."""
    reached = getattr(module, "headprune_reached", None)
    if reached is not None:  # a masking mode counts the layers its change reached
        reached()
    index = getattr(module, "headprune_kv_index", None)
    if index is not None:
        on = module.headprune_kv_index_on
        if key.device not in on:
            on[key.device] = torch.tensor(index, dtype=torch.long, device=key.device)
        key, value = key.index_select(1, on[key.device]), value.index_select(1, on[key.device])
    bias, kept = kwargs.get("position_bias"), getattr(module, "headprune_kept_heads", None)
    if bias is not None and kept is not None and bias.dim() == 4 and bias.shape[1] != len(kept) and \
            bias.shape[1] == getattr(module, PREFIX + "original_heads", None):
        # T5's relative position bias holds every original head (the first layer computes it for all the layers,
        # cross-attention builds zeros of its unpruned n_heads): this layer adds its kept heads' only
        kwargs["position_bias"] = bias.index_select(1, torch.tensor(kept, dtype=torch.long, device=bias.device))
    modify = getattr(module, "headprune_modify_query", None)
    if modify is not None:
        query = modify(query)
    per_head = getattr(module, "headprune_attention_mask", None)
    if per_head is not None:  # the attention place: (rows, heads, queries, keys), made from this call's own mask
        attention_mask = per_head
    backend = module.config._attn_implementation.removeprefix(PREFIX)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    inner = _eager_of(module) if backend == "eager" else ALL_ATTENTION_FUNCTIONS[backend]
    return inner(module, query, key, value, attention_mask, **kwargs)


def register(backend: str) -> str:
    """Register ``headprune_attention`` (and the backend's mask) as "headprune_<backend>"; returns that name."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    backend = backend.removeprefix(PREFIX)
    name = PREFIX + backend
    AttentionInterface.register(name, headprune_attention)
    if backend in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[backend])
    return name


def uses_attention_interface(attention: nn.Module) -> bool:
    """Whether the module's forward calls transformers' attention interface (as transformers itself tells)."""
    return _calls_interface(type(attention))


@functools.cache
def _calls_interface(cls: type) -> bool:
    import inspect

    try:
        return "ALL_ATTENTION_FUNCTIONS" in inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return False


def _configs(model) -> list:
    """The configs a model's decoder attention reads, or (a model the generic adapter does not serve) its own."""
    try:
        return attention_configs(model)
    except (ValueError, AttributeError, TypeError):
        return [model.config]


def run_through_headprune(model) -> list[tuple[object, str]]:
    """Run the model's decoder attention through ``headprune_attention``, over the backend it was loaded with:
    each config its attention modules read is switched with transformers' own setter (its sub-configs follow),
    never the wrapper's config alone. Returns (config, backend before) of each config switched."""
    switched = []
    for config in _configs(model):
        current = config._attn_implementation or "eager"
        name = register(current)
        if current != name:
            switched.append((config, current))
            config._attn_implementation = name
    return switched


def restore_backends(switched: list[tuple[object, str]]) -> None:
    """Undo ``run_through_headprune``'s switches."""
    for config, before in reversed(switched):
        config._attn_implementation = before


def query_kv_index(attention) -> list[int]:
    """Which of the attention's kept kv heads each kept query head reads."""
    index = getattr(attention, "headprune_kv_index", None)
    if index is not None:
        return list(index)
    heads = len(getattr(attention, "headprune_kept_heads", ())) or None
    groups = getattr(attention, "num_key_value_groups", 1)
    if heads is None:
        config = getattr(attention, "config", None)
        heads = _config_value(config, ("num_attention_heads", "n_head", "num_heads"))
    return [h // groups for h in range(heads)]


def backend_of(model_or_config) -> str:
    """The attention backend a model's decoder attention runs (under headprune_attention or directly): "eager",
    "sdpa", ...; given a model, as its language model's attention reads it (a wrapper's text config)."""
    config = _configs(model_or_config)[0] if isinstance(model_or_config, nn.Module) else model_or_config
    return (getattr(config, "_attn_implementation", None) or "eager").removeprefix(PREFIX)


def set_backend(model, backend: str) -> None:
    """Switch the model's attention backend (transformers checks the family supports it), keeping it under
    headprune_attention if it ran there: a pruned model with uneven key/value groups needs it in every backend."""
    through = any((config._attn_implementation or "").startswith(PREFIX) for config in _configs(model))
    backend = backend.removeprefix(PREFIX)
    if backend_of(model) != backend:
        model.set_attn_implementation(backend)
    if through:
        run_through_headprune(model)


def needs_headprune_attention(model) -> bool:
    return any(getattr(attention, "headprune_kv_index", None) is not None for _, attention in decoder_layers(model))
