"""What headprune's modeling files share (exported beside each of them, and imported as ``.headprune_common``).

A pruned model's config is transformers' own, with the original head counts and one more entry:
``headprune_pruned_heads``, {attention type: {"<layer>": [removed heads, original indices]}}, the attention
types being "enc_self" (encoder self-attention), "dec_self" (decoder or causal self-attention) and
"enc_dec" (cross-attention). Each modeling file subclasses transformers' model classes with a mixin first
(FSMT's ``PrunedModel`` here, the generic files' their own, made on demand by ``classes_made_on_demand``): the
model is built as transformers builds it, then every attention with heads removed gets the shapes of the saved
weights (the kept heads' rows of the query, key and value projections, columns of the output projection), so
that from_pretrained loads them. Only the shapes change, not the order: the kept heads were saved in their
original order. Imports only torch and transformers.

A model pruned with bias compensation (headprune's ``prune_heads(..., constants=)``: the removed heads'
constant outputs folded into their output projection's bias) may have biases its family's projections lack
(Llama's ``o_proj``): ``headprune_added_output_bias``, {attention type: [layers]}, names them, and each gets a
bias here (zeros, which from_pretrained then loads).
"""
from __future__ import annotations

import functools

from torch import nn
from transformers.cache_utils import EncoderDecoderCache

PRUNED_HEADS_KEY = "headprune_pruned_heads"
ADDED_BIAS_KEY = "headprune_added_output_bias"
# Where a family's attention module keeps its output projection (the families whose projections may lack a bias)
OUTPUT_PROJECTIONS = ("o_proj", "out_proj", "c_proj", "out_lin")
ENC_SELF, ENC_DEC, DEC_SELF = "enc_self", "enc_dec", "dec_self"
# The Auto classes a pruned model loads with, one per head type transformers has, and transformers' table of the
# classes each builds (by model type), in the order a class several tables list takes its first (Gemma 3's
# multimodal class: AutoModelForMultimodalLM, as headprune's loader, AutoModelForImageTextToText beside it).
# headprune.models.export names them in config.json's auto_map; each modeling file makes Pruned<class> for any.
AUTO_CLASSES = {"AutoModelForCausalLM": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
                "AutoModelForMultimodalLM": "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
                "AutoModelForImageTextToText": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
                "AutoModelForSequenceClassification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
                "AutoModelForSeq2SeqLM": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
                "AutoModelForSpeechSeq2Seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
                "AutoModel": "MODEL_MAPPING_NAMES"}


def kept_heads(config, attn_type: str, layer: int, num_heads: int) -> list[int]:
    """The original indices of the heads that layer ``layer``'s ``attn_type`` attention keeps."""
    removed = set((getattr(config, PRUNED_HEADS_KEY, None) or {}).get(attn_type, {}).get(str(layer), []))
    return [h for h in range(num_heads) if h not in removed]


def keep_first(linear: nn.Linear, out_features: int | None = None, in_features: int | None = None):
    """Give ``linear`` the shapes of the saved weights (which from_pretrained then loads into it)."""
    out_features = linear.out_features if out_features is None else out_features
    in_features = linear.in_features if in_features is None else in_features
    linear.weight = nn.Parameter(linear.weight.detach()[:out_features, :in_features].clone())
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias.detach()[:out_features].clone())
    linear.out_features, linear.in_features = out_features, in_features


def add_bias(linear: nn.Module):
    """Give a projection without a bias a zero one (its saved value loads into it)."""
    if linear.bias is None:
        weight = linear.weight
        out = weight.shape[1] if type(linear).__name__ == "Conv1D" else weight.shape[0]
        linear.bias = nn.Parameter(weight.new_zeros(out))


def keep_width(width: int, projections, output: nn.Linear):
    """Cut head-major ``projections`` (query, key, value ...) to ``width`` output rows and ``output`` to as
    many input columns: what is left of an attention whose kept heads are ``width`` wide together."""
    for linear in projections:
        keep_first(linear, out_features=width)
    keep_first(output, in_features=width)


@functools.cache
def pruned_class(mixin, attention_class):
    """``attention_class`` with ``mixin``'s methods first. It stays a subclass of the family's own class:
    transformers records attention maps (output_attentions) from the modules of that class."""
    return type(f"Pruned{attention_class.__name__}", (mixin, attention_class), {"__module__": mixin.__module__})


def cache_without_heads(cache, is_cross: bool, layer_idx: int, batch: int, length: int, head_dim: int, like):
    """Give a layer with no heads left its key/value cache entry: one all-zero head, never attended.

    Its cache must grow as the other layers' do: decoders read the generated length from the cache (FSMT
    its positions from layer 0), and an empty tensor counts as length 0.
    """
    if cache is None:
        return
    layers = cache
    if isinstance(cache, EncoderDecoderCache):
        if is_cross and cache.is_updated.get(layer_idx):
            return
        layers = cache.cross_attention_cache if is_cross else cache.self_attention_cache
    zeros = like.new_zeros(batch, 1, length, head_dim)
    layers.update(zeros, zeros, layer_idx)
    if is_cross and isinstance(cache, EncoderDecoderCache):
        cache.is_updated[layer_idx] = True


class PrunedModel:
    """Mixed in before a transformers model class: builds the model as that class does, then cuts each
    attention with heads removed to the heads the config keeps.

    A family says where its attentions are (``attention_sites``: (attention type, layer, module, original
    head count) each) and how one is cut (``keep_heads(module, heads)``).
    """

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        added = getattr(self.config, ADDED_BIAS_KEY, None) or {}
        for attn_type, layer, attention, num_heads in self.attention_sites():
            heads = kept_heads(self.config, attn_type, layer, num_heads)
            if len(heads) < num_heads:
                self.keep_heads(attention, heads)
            if layer in added.get(attn_type, []):
                add_bias(self.output_projection(attention))

    def output_projection(self, attention) -> nn.Module:
        """The attention's output projection (for a bias the config adds)."""
        for name in OUTPUT_PROJECTIONS:
            if isinstance(getattr(attention, name, None), nn.Module):
                return getattr(attention, name)
        raise ValueError(f"no output projection found in {type(attention).__name__} to give a bias")

    def attention_sites(self):
        raise NotImplementedError

    def keep_heads(self, attention, heads: list[int]):
        raise NotImplementedError


class EncoderDecoderModel(PrunedModel):
    """An encoder-decoder whose layers hold ``self_attn`` (and, in the decoder, ``encoder_attn``) modules with
    q/k/v/out projections and ``num_heads``, as fairseq's do: FSMT. ``headless`` is the mixin the family's attention
    runs with when heads are removed."""

    headless = None

    def attention_sites(self):
        config, base = self.config, self.base_model
        sites = [(ENC_SELF, i, layer.self_attn, config.encoder_attention_heads)
                 for i, layer in enumerate(base.encoder.layers)]
        for i, layer in enumerate(base.decoder.layers):
            sites.append((DEC_SELF, i, layer.self_attn, config.decoder_attention_heads))
            sites.append((ENC_DEC, i, layer.encoder_attn, config.decoder_attention_heads))
        return sites

    def keep_heads(self, attention, heads):
        keep_width(len(heads) * attention.head_dim, (attention.q_proj, attention.k_proj, attention.v_proj),
                   attention.out_proj)
        attention.__class__ = pruned_class(self.headless, type(attention))
        attention.num_heads = len(heads)


def task_classes() -> set[str]:
    """Every class name the tables of ``AUTO_CLASSES`` list (Funnel's base model lists two)."""
    from transformers.models.auto import modeling_auto

    names = set()
    for table in AUTO_CLASSES.values():
        for value in getattr(modeling_auto, table).values():
            names.update((value,) if isinstance(value, str) else value)
    return names


def classes_made_on_demand(module_name: str, mixin: type, classes) -> "callable":
    """A modeling file's module ``__getattr__``: ``Pruned<class>`` for each transformers class in ``classes``, made
    on first use as that class with ``mixin`` first (the name config.json's ``auto_map`` gives)."""
    import transformers

    made: dict[str, type] = {}

    def __getattr__(name: str):
        base = name.removeprefix("Pruned")
        if not name.startswith("Pruned") or base not in classes:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        if name not in made:
            made[name] = type(name, (mixin, getattr(transformers, base)), {"__module__": module_name})
        return made[name]

    return __getattr__
