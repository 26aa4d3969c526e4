"""Every decoder-only family of transformers through one adapter: ``DecoderAdapter``.

Where the heads are (``headprune/models/portable/headprune_decoder.py``), how a layer loses some and the attention
function that runs uneven key/value groups (``headprune_attention.py`` beside it) travel with an exported model.
This adapter adds what headprune needs on top: the attention sites, the causal-LM batch and loss
(``CausalLMAdapter``), and the checks of what a family cannot do (``docs/models.md`` lists every model type of transformers' registry and how it fares).

A family is recognised by its layout, not its name (``match``): the language model that ``get_decoder()`` gives
(a multimodal wrapper's text model), the layer list its config's pipeline plan names, each layer's attention with
its query/key/value projections (separate, fused or latent) and the output projection its tensor-parallel plan
declares (``headprune_decoder``: names and lengths only where nothing is declared). Uniform
masking changes a head's query inside the attention function (after rotary and any q/k norm), so it needs a family
whose attention calls transformers' attention interface, and scores that are query . key plus the mask (no
attention sinks). A per-head attention mask (streaming masking's window) reaches the backend through the same function,
in place of the module's ``attention_mask`` (``attention_problem``).

A multimodal wrapper's vision or audio tower is left out unless ``model.config.headprune_towers`` names it
(``"vision"``, ``"audio"``; ``study_towers`` sets it, ``headprune.models.loading.load_causal_lm(..., towers=)``
through it). It is a config entry so that every function that is handed the model (gates, masking, scores,
pruning) reaches the tower without being told, and a pruned tower's shapes are rebuilt when the saved model
loads. The tower is the module transformers' ``get_encoder(modality=...)`` gives, its layers the ModuleList of
its config's layer count, each layer's attention a ``headprune_decoder.DecoderLayout``; its sites are labelled by
stack (``TOWER_TYPES``: vision_self, audio_self), as heads of the encoder's bidirectional self-attention. A tower
runs only on inputs with images or audio (``pixel_values``, ``input_features``): ``gated`` raises where a gated
tower head never ran. Uniform masking zeroes a tower head's query at its query projection (a tower's attention
is not switched to headprune's attention function), exact where the attention calls transformers' attention
interface and nothing with parameters acts on the query in between; a per-head attention mask (streaming masking, a
causal-LM idea) is refused on a model whose towers are studied.
"""
from __future__ import annotations

from torch import nn

from headprune.models.attention_types import DEC_SELF, TOWER_TYPES
from headprune.models.sites import AttentionSite
from headprune.models.families.causal_lm import CausalLMAdapter, ValueView
from headprune.models.portable import headprune_attention as attention_of
from headprune.models.portable import headprune_decoder as layout_of

TOWERS_KEY = "headprune_towers"
# The modality transformers' get_encoder(modality=...) finds each tower by
MODALITIES = {"vision": "image", "audio": "audio"}
# Config entries with a tower's layer count (Whisper-like audio encoders map num_hidden_layers to encoder_layers)
LAYER_COUNTS = ("num_hidden_layers", "encoder_layers", "depth", "num_layers")


class DecoderAdapter(CausalLMAdapter):
    """``family`` is the model type (``"llama"``, ``"qwen3"``): it names the family in tables and logs."""

    def __init__(self, family: str = "decoder"):
        self.family = family

    def layouts(self, model) -> list[layout_of.DecoderLayout]:
        return layout_of.layouts(model)

    def sites(self, model):
        sites = [_site(DEC_SELF, layout, attention_of.uses_attention_interface(layout.attention))
                 for layout in self.layouts(model)]
        for name in studied_towers(model):
            # a tower's attention stays on its own backend: the query place hooks its query projection instead
            sites += [_site(TOWER_TYPES[name], layout, False) for layout in tower_layouts(model, name)]
        return sites

    def prune_site(self, site: AttentionSite, keep: list[int]):
        attention_of.keep_heads(site.layout, keep)

    def finish_pruning(self, model):
        if attention_of.needs_headprune_attention(model):
            if not all(attention_of.uses_attention_interface(a) for _, a in layout_of.decoder_layers(model)):
                raise ValueError(f"{type(model).__name__}'s attention does not call transformers' attention "
                                 "interface, so it cannot read key/value heads unevenly: remove whole key/value "
                                 "groups")
            attention_of.run_through_headprune(model)

    def pruning_problem(self, model) -> str | None:
        for site in self.sites(model):
            problem = site.layout.pruning_problem()
            if problem is not None:
                stack = "" if site.attn_type == DEC_SELF else f"{site.attn_type} "
                return f"{stack}layer {site.layer}: {problem}"
        return None

    def query_problem(self, model, sites):
        for site in sites:
            if site.attn_type != DEC_SELF:
                problem = _tower_uniform_problem(site)
                if problem is not None:
                    return f"{_where(site)} {problem}"
                continue
            where = f"layer {site.layer} ({type(site.attention).__name__})"
            if not site.through_attention_function:
                return f"{where} does not call transformers' attention interface, where a head's query is changed"
            if site.layout.per_head_parameters():
                return (f"{where} has per-head {', '.join(site.layout.per_head_parameters())} (attention sinks): a "
                        "zero query's attention would not be uniform")
            if site.layout.ambiguous_parameters():
                return (f"{where} has {', '.join(site.layout.ambiguous_parameters())}, one entry per head or per "
                        "feature (nothing declares which): it may be an attention sink")
        return None

    def attention_problem(self, model, sites, causal_lm=False):
        for site in sites:
            if site.attn_type != DEC_SELF:
                tower = site.attn_type.removesuffix('_self')
                return (f"{_where(site)} is a {tower} tower's bidirectional attention, and a window over the past is "
                        "a causal-LM idea: study the language model without its towers" if causal_lm else
                        f"{_where(site)} is a {tower} tower's attention, which keeps its own backend and mask: study "
                        "the language model without its towers")
            if not site.through_attention_function:
                return (f"layer {site.layer} ({type(site.attention).__name__}) does not call transformers' attention "
                        "interface with its attention_mask argument")
        return None


def layout_problem(model) -> str | None:
    """Why the generic adapter does not serve ``model`` (None: it does)."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder"
    if getattr(config, "add_cross_attention", False):
        return "its decoder layers have cross-attention (add_cross_attention), which the generic adapter leaves out"
    try:
        layout_of.layouts(model)
    except (ValueError, AttributeError, TypeError) as error:
        return str(error)
    return None


def match(model) -> DecoderAdapter | None:
    """The generic adapter where it finds the model's decoder layers (``headprune_decoder.layouts``), else None."""
    if layout_problem(model) is not None:
        return None
    return DecoderAdapter(str(getattr(layout_of.text_config(model.config), "model_type", None)
                              or getattr(model.config, "model_type", None) or "decoder"))


def _site(attn_type: str, layout: layout_of.DecoderLayout, through_attention_function: bool) -> AttentionSite:
    grouped = layout.fused is not None or layout.groups != 1
    values = ValueView(layout.value, layout.value_features) if grouped else layout.value
    site = AttentionSite(attn_type, layout.layer, layout.attention, layout.query, layout.key, values, layout.output,
                         head_dim=layout.head_dim, original_num_heads=layout.original_heads, time_major=False)
    site.through_attention_function = through_attention_function
    site.layout = layout
    return site


def _where(site: AttentionSite) -> str:
    return f"{site.attn_type} layer {site.layer} ({type(site.attention).__name__})"


# --- Towers: a multimodal wrapper's vision or audio encoder, studied where asked ----------------------------

def studied_towers(model) -> tuple[str, ...]:
    """The towers ``model.config.headprune_towers`` names ("vision", "audio"), in that order; () by default."""
    asked = tuple(getattr(model.config, TOWERS_KEY, None) or ())
    unknown = [name for name in asked if name not in TOWER_TYPES]
    if unknown:
        raise ValueError(f"config.{TOWERS_KEY} names {unknown}: the towers are {sorted(TOWER_TYPES)}")
    return asked


def study_towers(model, towers) -> None:
    """Have every later ``sites`` of ``model`` include the heads of these towers ("vision", "audio"; () for the
    language model alone), checked now: a tower the model does not have, or whose attention headprune does not
    find, raises here."""
    towers = list(dict.fromkeys(towers))
    unknown = [name for name in towers if name not in TOWER_TYPES]
    if unknown:
        raise ValueError(f"no tower {unknown}: the towers are {sorted(TOWER_TYPES)}")
    for name in towers:
        tower_layouts(model, name)
    setattr(model.config, TOWERS_KEY, towers)


def tower(model, name: str) -> nn.Module:
    """The wrapper's ``name`` tower, the module transformers' ``get_encoder(modality=...)`` finds (``vision_tower``,
    ``audio_tower``, ``visual``, ... of the wrapper or its base model)."""
    get = getattr(model, "get_encoder", None)
    try:
        found = get(modality=MODALITIES[name]) if callable(get) else None
    except (TypeError, ValueError):  # a get_encoder that takes no modality
        found = None
    # get_encoder falls back to the model itself (or its base model) where it finds no such encoder
    if not isinstance(found, nn.Module) or found is model or found is getattr(model, "base_model", None) or \
            found is layout_of.language_model(model):
        raise ValueError(f"{type(model).__name__} has no {name} tower (transformers' get_encoder(modality="
                         f"{MODALITIES[name]!r}) finds none)")
    return found


def tower_layouts(model, name: str) -> list[layout_of.DecoderLayout]:
    """Each layer's attention of the ``name`` tower: the ModuleList of its config's layer count whose layers all hold
    an attention module (``headprune_decoder.ATTENTION_NAMES``), in order."""
    encoder = tower(model, name)
    config = encoder.config
    count = next((getattr(config, key) for key in LAYER_COUNTS if isinstance(getattr(config, key, None), int)), None)
    for layers in encoder.modules():
        if isinstance(layers, nn.ModuleList) and count and len(layers) == count:
            found = [_attention_of(layer) for layer in layers]
            if all(attention is not None for _, attention in found):
                try:
                    return [layout_of.DecoderLayout(i, attention, config, getattr(config, "model_type", None),
                                                    owner=(layer, attribute))
                            for i, (layer, (attribute, attention)) in enumerate(zip(layers, found))]
                except ValueError as error:
                    raise ValueError(f"the {name} tower of {type(model).__name__}, {error}") from None
    raise ValueError(f"the {name} tower of {type(model).__name__} ({type(encoder).__name__}) has no list of {count} "
                     "layers with an attention module headprune knows")


def _attention_of(layer: nn.Module) -> tuple[str | None, nn.Module | None]:
    for attribute in layout_of.ATTENTION_NAMES:
        if isinstance(getattr(layer, attribute, None), nn.Module):
            return attribute, getattr(layer, attribute)
    return None, None


def _tower_uniform_problem(site: AttentionSite) -> str | None:
    """Why zeroing a tower head's query projection output would not make the head attend uniformly (None: it
    would: the scores are query . key plus the mask, and a zero query stays zero up to them)."""
    if not attention_of.uses_attention_interface(site.attention):
        return "does not call transformers' attention interface, so its scores may be more than query . key"
    layout = site.layout
    if layout.per_head_parameters() or layout.ambiguous_parameters():
        return f"has {', '.join(layout.per_head_parameters() + layout.ambiguous_parameters())}, perhaps attention sinks"
    between = [name for name, module in site.attention.named_children()
               if id(module) not in layout.projections() and any(True for _ in module.parameters())]
    if between:
        return f"has {', '.join(between)} beside its projections, which may turn a zero query into another"
    return None
