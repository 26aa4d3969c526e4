"""Any encoder-decoder of transformers with attention heads removed, for plain transformers; and where its heads
are (headprune's generic encoder-decoder adapter, ``headprune.models.families.seq2seq``, reads them here too).

Written beside a pruned model's weights by headprune (``headprune.models.export.save_pruned``), with
``headprune_decoder.py``, ``headprune_attention.py`` and ``headprune_common.py``, and named in its config.json's
``auto_map`` as ``modeling_headprune_seq2seq.Pruned<class>`` (``PrunedT5ForConditionalGeneration``, ...), so that
``AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)`` loads it without headprune.
``Pruned<class>`` is made on demand: transformers' own class with ``PrunedSeq2Seq`` mixed in first.

Where the heads are comes from what transformers gives, three stacks: the encoder (``get_encoder()``), the
decoder (``get_decoder()``), each one's layer list (``LAYER_LISTS``), in each layer its self-attention
(``SELF_NAMES``, "enc_self" / "dec_self") and in the decoder's its cross-attention (``CROSS_NAMES``, "enc_dec"),
each one a ``headprune_decoder.DecoderLayout``. What differs between families is declared data:

- the names above (BART's ``self_attn``/``encoder_attn``, T5's ``SelfAttention``/``EncDecAttention``, NLLB-MoE's and
  SeamlessM4T's ``cross_attention``, T5Gemma's ``cross_attn``);
- ``HEAD_COUNTS``: the module attributes (else its config's entries) that hold an attention's head count;
- T5's relative position bias (``headprune_decoder.POSITION_BIASES``): one embedding per stack (UMT5: per layer),
  read whole, each pruned layer adding its kept heads' bias in ``headprune_attention``, which a model with such a
  pruned layer runs (``reads_position_bias``);
- a layer left without heads runs ``headless_forward``: its output projection's bias, its cache entry kept as long
  as the others' (self- or cross-attention), and, where the family's forward returns a position bias (T5's takes a
  ``position_bias`` argument), the bias it would have passed on.

One class is written out, not made on demand: ``PrunedPreNormTransformer``, headprune's fairseq pre-norm transformer
(``headprune.models.prenorm.PreNormTransformer``, model type m2m_100), which is no class of transformers.
"""
from __future__ import annotations

import functools
import inspect
import types
import weakref

from torch import nn
from transformers.models.m2m_100 import modeling_m2m_100

from .headprune_attention import _output_projection, keep_heads, register
from .modeling_headprune_fsmt import PrunedAttention as PrunedFSMTAttention
from .headprune_common import (ADDED_BIAS_KEY, DEC_SELF, ENC_DEC, ENC_SELF, add_bias, cache_without_heads,
                               classes_made_on_demand, kept_heads, pruned_class, task_classes)
from .headprune_decoder import POSITION_BIASES, PREFIX, DecoderLayout, LayerConfig, _out_features

LAYER_LISTS = ("layers", "block", "layer")
# LongT5's encoder: local or transient-global attention, by its config's encoder_attention_type
SELF_NAMES = ("self_attn", "SelfAttention", "self_attention", "LocalSelfAttention", "TransientGlobalSelfAttention")
CROSS_NAMES = ("encoder_attn", "EncDecAttention", "cross_attn", "cross_attention")
TEXT_STACK = "text_model"
HEAD_COUNTS = ("num_heads", "n_heads", "num_attention_heads", "num_attn_heads")
# The arguments a cross-attention's forward takes the encoder's states by (BART and T5, T5Gemma)
SOURCE_ARGUMENTS = ("key_value_states", "encoder_hidden_states")
# An attention whose forward has this flag reads a relative position bias (T5's family: every layer, the first
# computes it); zeroing its query does not make its attention uniform
POSITION_BIAS_FLAG = "has_relative_attention_bias"
# Attention classes whose own forward shapes its output by its input's width, not its heads, each with the mixin
# that runs it with the heads it has (the family's modeling file's one copy; with none left too), and whether it
# works in (time, batch, dim)
PRUNED_FORWARDS = {"transformers.models.fsmt.modeling_fsmt.Attention": (PrunedFSMTAttention, True)}


class Heads:
    """The config ``DecoderLayout`` reads an attention's head count from."""

    def __init__(self, heads: int):
        self.num_attention_heads = heads


def stack(model, attn_type: str) -> nn.Module:
    """The encoder (enc_self) or the decoder (dec_self, enc_dec) that transformers' get_encoder()/get_decoder()
    gives."""
    module = model.get_encoder() if attn_type == ENC_SELF else model.get_decoder()
    if module is model or module is getattr(model, "base_model", None):
        raise ValueError(f"{type(model).__name__}'s get_{'encoder' if attn_type == ENC_SELF else 'decoder'}() finds "
                         "no stack of its own")
    return module


def stack_layers(model, attn_type: str) -> nn.ModuleList:
    found = stack(model, attn_type)
    text = getattr(found, TEXT_STACK, None)  # a multimodal encoder's text stack (T5Gemma 2's)
    found = text if isinstance(text, nn.Module) else found
    for name in LAYER_LISTS:
        layers = getattr(found, name, None)
        if isinstance(layers, nn.ModuleList) and len(layers):
            return layers
    raise ValueError(f"{type(found).__name__} has no layer list ({', '.join(LAYER_LISTS)})")


def _attention_of(layer: nn.Module, names) -> nn.Module | None:
    """The layer's first module (itself or nested, T5's ``layer.0.SelfAttention``) named one of ``names``."""
    for name, module in layer.named_modules():
        if name.rpartition(".")[2] in names:
            return module
    return None


def head_count(attention: nn.Module) -> int:
    stored = getattr(attention, PREFIX + "original_heads", None)
    if stored is not None:
        return int(stored)
    for name in HEAD_COUNTS:
        if isinstance(getattr(attention, name, None), int):
            return getattr(attention, name)
    config = getattr(attention, "config", None)
    config = config.headprune_base if isinstance(config, LayerConfig) else config
    count = getattr(config, "num_attention_heads", None)
    if isinstance(count, int):
        return count
    raise ValueError(f"{type(attention).__name__} says nothing of its head count ({', '.join(HEAD_COUNTS)})")


_LAYOUTS: "weakref.WeakKeyDictionary[nn.Module, list]" = weakref.WeakKeyDictionary()


def layouts(model) -> list[tuple[str, DecoderLayout]]:
    """(attention type, layout) of every attention of the three stacks: enc_self, enc_dec, dec_self, each in layer
    order (as FSMT's adapter lists them); computed once per model."""
    cached = _LAYOUTS.get(model)
    if cached is not None and all(layout.current() for _, layout in cached):
        return cached
    found = []
    for attn_type, names in ((ENC_SELF, SELF_NAMES), (ENC_DEC, CROSS_NAMES), (DEC_SELF, SELF_NAMES)):
        for i, layer in enumerate(stack_layers(model, attn_type)):
            attention = _attention_of(layer, names)
            if attention is None:
                what = "cross-attention" if attn_type == ENC_DEC else "self-attention"
                raise ValueError(f"{attn_type} layer {i} ({type(layer).__name__}) has no {what} module headprune "
                                 f"knows ({', '.join(names)})")
            layout = DecoderLayout(i, attention, Heads(head_count(attention)))
            layout.position_biases = POSITION_BIASES
            found.append((attn_type, layout))
    _LAYOUTS[model] = found
    return found


def reads_position_bias(attention: nn.Module) -> bool:
    return hasattr(attention, POSITION_BIAS_FLAG)


def prune_layout(layout: DecoderLayout, keep: list[int], copy_weights: bool = True) -> None:
    """Keep query heads ``keep`` of the layout's module; with none left it runs ``headless_forward``."""
    keep_heads(layout, keep, copy_weights=copy_weights)
    attention = layout.attention
    # UMT5 reshapes its queries by n_heads; T5 builds by it the zero bias its cross-attention passes on to the
    # next layers, which must keep every head (each layer picks its own)
    if isinstance(getattr(attention, "n_heads", None), int):
        attention.n_heads = layout.original_heads if _returns_position_bias(type(attention)) else len(keep)
    override = pruned_forward(attention)
    if override is not None:
        attention.__dict__.pop("forward", None)  # its mixin runs a layer without heads too
        if not isinstance(attention, override):
            attention.__class__ = pruned_class(override, type(attention))
    elif not keep:
        attention.forward = types.MethodType(headless_forward, attention)


def _class_name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def pruned_forward(attention: nn.Module):
    """The mixin a pruned ``attention`` runs with (``PRUNED_FORWARDS``), or None: its own forward."""
    for cls in type(attention).__mro__:
        if _class_name(cls) in PRUNED_FORWARDS:
            return PRUNED_FORWARDS[_class_name(cls)][0]
    return None


def time_major(attention: nn.Module) -> bool:
    return any(PRUNED_FORWARDS.get(_class_name(cls), (None, False))[1] for cls in type(attention).__mro__)


def needs_headprune_attention(model) -> bool:
    """Whether a pruned layer reads a position bias of every original head (its kept heads' are picked in
    ``headprune_attention``)."""
    return any(reads_position_bias(layout.attention) and getattr(layout.attention, PREFIX + "kept_heads", None)
               is not None for _, layout in layouts(model))


def run_through_headprune(model) -> None:
    """Every attention module's config switched to ``headprune_attention`` over the backend it runs (the stacks
    read copies of the model's config: T5's encoder and decoder each their own)."""
    configs = {}
    for _, layout in layouts(model):
        config = getattr(layout.attention, "config", None)
        config = config.headprune_base if isinstance(config, LayerConfig) else config
        if config is not None:
            configs.setdefault(id(config), config)
    for config in [model.config, *configs.values()]:
        current = config._attn_implementation or "eager"
        config._attn_implementation = register(current)


@functools.cache
def _returns_position_bias(cls) -> bool:
    """T5's attention takes a ``position_bias`` and returns it for the next layer (UMT5's neither)."""
    return "position_bias" in inspect.signature(cls.forward).parameters


def headless_forward(self, *args, **kwargs):
    """The forward of an encoder-decoder attention with no heads left: its output projection's bias (zeros without
    one), its cache entry kept as long as the other layers' (a cross-attention's in the cross-attention cache), and
    where the family passes a position bias on (T5), the bias the layer would have passed."""
    signature = inspect.signature(type(self).forward)
    arguments = dict(signature.bind(self, *args, **kwargs).arguments)
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            arguments.update(arguments.pop(parameter.name, {}))
    hidden = arguments["hidden_states"]
    source = next((arguments[n] for n in SOURCE_ARGUMENTS if arguments.get(n) is not None), None)
    cache = arguments.get("past_key_values")
    keys = source if source is not None else hidden
    batch, queries = hidden.shape[:2]
    layer = getattr(self, "layer_idx", None)
    past = cache.get_seq_length(layer) if cache is not None and layer is not None and source is None else 0
    if layer is not None:
        cache_without_heads(cache, source is not None, layer, batch, keys.shape[1], self.headprune_head_dim, hidden)
    output = _output_projection(self)
    result = (output.bias.expand(*hidden.shape[:-1], -1).clone() if output.bias is not None else
              hidden.new_zeros(*hidden.shape[:-1], _out_features(output)))
    if not _returns_position_bias(type(self)):
        return result, None
    bias = arguments.get("position_bias")
    if bias is None:
        key_length = keys.shape[1] + (int(past) if source is None else 0)
        if getattr(self, POSITION_BIAS_FLAG, False):
            bias = self.compute_bias(queries, key_length, device=hidden.device, past_seen_tokens=past)
        else:
            bias = hidden.new_zeros(1, self.n_heads, queries, key_length)
    return result, bias, None


class PrunedSeq2Seq:
    """Mixed in before a transformers encoder-decoder class: after building, each attention keeps the heads the
    config keeps, and the model runs ``headprune_attention`` where a pruned layer reads a position bias."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        added = getattr(self.config, ADDED_BIAS_KEY, None) or {}
        for attn_type, layout in layouts(self):
            heads = kept_heads(self.config, attn_type, layout.layer, layout.original_heads)
            if len(heads) < layout.original_heads:
                prune_layout(layout, heads, copy_weights=False)
            if layout.layer in added.get(attn_type, []):
                add_bias(layout.output)
        if needs_headprune_attention(self):
            run_through_headprune(self)


class PrunedPreNormTransformer(PrunedSeq2Seq, modeling_m2m_100.M2M100ForConditionalGeneration):
    """fairseq's pre-norm transformer (headprune.models.prenorm.PreNormTransformer): M2M100, with a source
    vocabulary of its own (the config's ``source_vocab_size``; ``vocab_size`` is the target one) and fairseq's
    three ways of sharing embeddings:

    - ``tie_word_embeddings`` (``--share-all-embeddings``): one matrix for source, target and output, M2M100
      as it is;
    - ``share_decoder_input_output_embed`` alone: the output projection is the target embedding matrix, the
      source has its own;
    - neither: three matrices.
    """

    def __init__(self, config):
        super().__init__(config)
        if config.tie_word_embeddings:
            return
        base = self.model
        source_vocab_size = getattr(config, "source_vocab_size", None) or config.vocab_size
        source_embeddings = modeling_m2m_100.M2M100ScaledWordEmbedding(
            source_vocab_size, config.d_model, config.pad_token_id, embed_scale=base.encoder.embed_tokens.embed_scale)
        # M2M100's "shared" table is only a tying anchor: here it is the source one, which the encoder reads.
        base.encoder.embed_tokens = base.shared = source_embeddings
        if getattr(config, "share_decoder_input_output_embed", False):
            self.lm_head.weight = base.decoder.embed_tokens.weight

    def get_expanded_tied_weights_keys(self, all_submodels=False):
        """What is one matrix under several names (save_pretrained writes it once; from_pretrained must not
        count the others missing): M2M100's own tying with ``tie_word_embeddings``, else the above."""
        if all_submodels or self.config.tie_word_embeddings:
            return super().get_expanded_tied_weights_keys(all_submodels)
        tied = {"model.encoder.embed_tokens.weight": "model.shared.weight"}
        if getattr(self.config, "share_decoder_input_output_embed", False):
            tied["lm_head.weight"] = "model.decoder.embed_tokens.weight"
        return tied


_CLASSES = task_classes()  # every class of the Auto tables: the task's class and the base model
__getattr__ = classes_made_on_demand(__name__, PrunedSeq2Seq, _CLASSES)
