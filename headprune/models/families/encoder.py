"""Every encoder of transformers for classification through one adapter: ``EncoderAdapter`` (issue #45).

Where the heads are is ``headprune/models/portable/headprune_encoder.py``'s (the same ``DecoderLayout`` as the
decoders', found by the names encoders use, the output projection inside the q/k/v module or beside it as BERT's
``attention.output.dense``); how a layer loses heads is ``headprune_attention.keep_heads``, as for the decoders.
Both travel with an exported model (``modeling_headprune_encoder.py``). This adapter adds the sites (encoder
self-attention, ``ENC_SELF``), the classification batch and loss (``ClassifierAdapter``, BERT's), and what a family
cannot do, each refused in one line that names why:

- a head's query (``query_problem``: uniform masking zeroes it at its query projection) is the scores' own where they
  are query . key plus the mask: the attention calls transformers' attention interface (or is of ``OWN_SCORES``),
  nothing with parameters sits beside the projections and the config adds no relative positions
  (``relative_positions``); refused elsewhere (DeBERTa's relative positions, MPNet's bias, Longformer's windows);
- a head's attention mask (``attention_problem``) is its own where the attention module hands its ``attention_mask``
  argument to transformers' attention interface; a window over the past (streaming masking) is a causal-LM idea,
  refused for every encoder;
- pruning is refused where a layer's modules span all heads (``DecoderLayout.pruning_problem``) or its class cannot
  run with fewer heads (``headprune_encoder.NOT_PRUNABLE``).

It serves every encoder (``match``: an encoder as transformers declares it, ``headprune_encoder.is_encoder``): BERT and
its copies (RoBERTa, XLM-R, ELECTRA), DistilBERT and DeBERTa-v2/v3 included, whose hand-written adapters it replaced
(their outputs kept: tests/data/hand_written_families_reference.pt).
"""
from __future__ import annotations

from headprune.models.attention_types import ENC_SELF
from headprune.models.families.causal_lm import ValueView
from headprune.models.families.classifier import ClassifierAdapter
from headprune.models.portable import headprune_attention as attention_of
from headprune.models.portable import headprune_encoder as layout_of
from headprune.models.sites import AttentionSite, mask_argument_problem

# Attention classes whose own forward (not transformers' attention interface) scores query . key, scaled, plus the
# mask, and beyond that only the relative-position terms their config turns on (``relative_positions``): DeBERTa's
OWN_SCORES = ("DisentangledSelfAttention",)


class EncoderAdapter(ClassifierAdapter):
    """``family`` is the model type (``"modernbert"``, ``"camembert"``): it names the family in tables and logs."""

    attention_types = (ENC_SELF,)

    def __init__(self, family: str = "encoder"):
        self.family = family

    def sites(self, model):
        return [_site(layout) for layout in layout_of.encoder_layouts(model)]

    def prune_site(self, site: AttentionSite, keep: list[int]):
        problem = layout_of.pruning_problem(site.layout)
        if problem is not None:
            raise ValueError(f"layer {site.layer}: {problem}")
        layout_of.keep_encoder_heads(site.layout, keep)

    def finish_pruning(self, model):
        # grouped key/value heads (Ultrabert's, EuroBERT's) that the kept query heads now read unevenly
        if any(getattr(layout.attention, "headprune_kv_index", None) is not None
               for layout in layout_of.encoder_layouts(model)):
            attention_of.run_through_headprune(model)

    def pruning_problem(self, model) -> str | None:
        for site in self.sites(model):
            problem = layout_of.pruning_problem(site.layout)
            if problem is not None:
                return f"layer {site.layer}: {problem}"
        return None

    def query_problem(self, model, sites):
        problem = relative_positions(layout_of.text_config(model))
        if problem is not None:
            return problem
        for site in sites:
            where = f"layer {site.layer} ({type(site.attention).__name__})"
            own_scores = type(site.attention).__name__ in OWN_SCORES
            if not own_scores and not attention_of.uses_attention_interface(site.attention):
                return f"{where} does not call transformers' attention interface, so its scores may be more than query . key"
            layout = site.layout
            if layout.with_queries:
                return f"{where} has {', '.join(layout.with_queries)}: a zero query leaves their terms in the scores"
            odd = layout.per_head_parameters() + layout.ambiguous_parameters()
            if odd:
                return f"{where} has {', '.join(odd)}, perhaps attention sinks"
            beside = [name for name, module in site.attention.named_children()
                      if id(module) not in layout.projections() and any(True for _ in module.parameters())]
            if beside:
                return f"{where} has {', '.join(beside)} beside its projections, which may turn a zero query into another"
        return super().query_problem(model, sites)

    def attention_problem(self, model, sites, causal_lm=False):
        if causal_lm:
            return (f"{self.family} is an encoder: its self-attention is bidirectional, and a window over the past is "
                    "a causal-LM idea")
        for site in sites:
            if site.layout.applications > 1:  # a hook on its module reaches every layer's run of it
                return (f"layer {site.layer} ({type(site.attention).__name__}) is one module that every layer runs: a "
                        "mask given to it would reach every layer's heads")
        return next(filter(None, map(mask_argument_problem, sites)), None)


def relative_positions(config) -> str | None:
    """Why the config's relative positions keep a zero query from attending uniformly (None: it adds none), whatever
    computes the scores: BERT's copies' position_embedding_type other than "absolute" (transformers 5's BERT ignores
    it: a checkpoint asking for it is refused rather than masked as a model it is not), DeBERTa's pos_att_type terms
    under relative_attention."""
    kind = getattr(config, "position_embedding_type", None)
    if kind not in (None, "absolute"):
        return (f"the model's config asks for position_embedding_type={kind!r}: relative positions add to the "
                "attention scores")
    terms = getattr(config, "pos_att_type", None) or []
    if getattr(config, "relative_attention", False) and terms:
        return f"DeBERTa's disentangled attention adds relative-position terms ({', '.join(terms)}) to its scores"
    return None


def layout_problem(model) -> str | None:
    """Why the generic encoder adapter does not serve ``model`` (None: it does)."""
    if not layout_of.is_encoder(model):
        return "not an encoder (transformers declares its attention causal, or it is an encoder-decoder)"
    try:
        layout_of.encoder_layouts(model)
    except (ValueError, AttributeError, TypeError) as error:
        return str(error)
    return None


def match(model) -> EncoderAdapter | None:
    """The generic adapter where ``model`` is an encoder whose layers it finds, else None."""
    if layout_problem(model) is not None:
        return None
    return EncoderAdapter(str(getattr(layout_of.text_config(model), "model_type", None) or "encoder"))


def _site(layout) -> AttentionSite:
    grouped = layout.fused is not None or layout.groups != 1
    query, key, value, output = layout.query, layout.key, layout.value, layout.output
    if layout.applications > 1:  # ALBERT's shared layer: this layer's hooks act on its own run of it only
        query, key, value, output = (Application(m, layout.application, layout.applications)
                                     for m in (query, key, value, output))
    values = ValueView(value, layout.value_features) if grouped else value
    site = AttentionSite(ENC_SELF, layout.layer, layout.attention, query, key, values, output,
                         head_dim=layout.head_dim, original_num_heads=layout.original_heads, time_major=False)
    site.extra_features = layout.extra_features  # ConvBERT's convolution heads: passed as they are
    site.layout = layout
    return site


class Application:
    """One run of a module that a forward runs several times (ALBERT's layer, shared by all layers): a hook registered
    here acts on this run only, call ``index`` of every ``period`` calls of the module (a forward runs each layer
    once, in order). Everything else is the module's."""

    def __init__(self, module, index: int, period: int):
        self.__dict__.update(module=module, index=index, period=period)

    def __getattr__(self, name):
        return getattr(self.__dict__["module"], name)

    def _this_run(self, hook):
        calls = [0]

        def on_this_run(*args, **kwargs):
            run, calls[0] = calls[0] % self.period, calls[0] + 1
            return hook(*args, **kwargs) if run == self.index else None
        return on_this_run

    def register_forward_pre_hook(self, hook, **kwargs):
        return self.module.register_forward_pre_hook(self._this_run(hook), **kwargs)

    def register_forward_hook(self, hook, **kwargs):
        return self.module.register_forward_hook(self._this_run(hook), **kwargs)

    def __repr__(self):
        return f"Application({type(self.module).__name__}, {self.index} of {self.period})"
