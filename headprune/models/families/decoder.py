"""Every decoder-only family of transformers through one adapter: ``DecoderAdapter``.

Where the heads are, how a layer loses some and the attention function that runs uneven key/value groups live
in ``headprune/models/remote/headprune_decoder.py`` (it travels with an exported model). This adapter adds what
headprune needs on top: the attention sites, the causal-LM batch and loss (``CausalLMAdapter``), and the checks
of what a family cannot do (``docs/models.md`` lists every model type of transformers' registry and how it fares).

A family is recognised by its layout, not its name (``match``): the language model that ``get_decoder()`` gives
(a multimodal wrapper's text model), the layer list its config's pipeline plan names, each layer's attention with
its query/key/value projections (separate, fused or latent) and the output projection its tensor-parallel plan
declares (``headprune_decoder``: names and lengths only where nothing is declared). Uniform
masking changes a head's query inside the attention function (after rotary and any q/k norm), so it needs a family
whose attention calls transformers' attention interface, and scores that are query . key plus the mask (no
attention sinks). Streaming masking gives the module a per-head mask through its ``attention_mask`` argument
(``CausalLMAdapter``).
"""
from __future__ import annotations

from headprune.models.attention_types import DEC_SELF
from headprune.models.sites import AttentionSite
from headprune.models.families.causal_lm import CausalLMAdapter, ValueView
from headprune.models.remote import headprune_decoder as layout_of


class DecoderAdapter(CausalLMAdapter):
    """``family`` is the model type (``"llama"``, ``"qwen3"``): it names the family in tables and logs."""

    def __init__(self, family: str = "decoder"):
        self.family = family

    def layouts(self, model) -> list[layout_of.DecoderLayout]:
        return layout_of.layouts(model)

    def sites(self, model):
        sites = []
        for layout in self.layouts(model):
            grouped = layout.fused is not None or layout.groups != 1
            values = ValueView(layout.value, layout.value_features) if grouped else layout.value
            site = AttentionSite(DEC_SELF, layout.layer, layout.attention, layout.query, layout.key, values,
                                 layout.output, head_dim=layout.head_dim, original_num_heads=layout.original_heads,
                                 time_major=False)
            site.through_attention_function = layout_of.uses_attention_interface(layout.attention)
            site.layout = layout
            sites.append(site)
        return sites

    def prune_site(self, site: AttentionSite, keep: list[int]):
        layout_of.keep_heads(site.layout, keep)

    def finish_pruning(self, model):
        if layout_of.needs_headprune_attention(model):
            if not all(layout_of.uses_attention_interface(a) for _, a in layout_of.decoder_layers(model)):
                raise ValueError(f"{type(model).__name__}'s attention does not call transformers' attention "
                                 "interface, so it cannot read key/value heads unevenly: remove whole key/value "
                                 "groups")
            layout_of.run_through_headprune(model)

    def pruning_problem(self, model) -> str | None:
        for layout in self.layouts(model):
            problem = layout.pruning_problem()
            if problem is not None:
                return f"layer {layout.layer}: {problem}"
        return None

    def uniform_masking_problem(self, model, sites):
        for site in sites:
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

    def streaming_masking_problem(self, model, sites):
        for site in sites:
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
