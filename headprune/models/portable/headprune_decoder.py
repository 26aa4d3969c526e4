"""Decoder attention, generic over transformers' families: where the heads are, how a layer loses some, and the
one attention function that runs a layer whose key/value groups became uneven.

Imports only torch and transformers: headprune builds on it (``headprune.models.families.decoder``) and a pruned
model's folder carries it (``modeling_headprune_decoder.py`` imports it), so plain transformers runs the same code.

Where the heads are comes from what transformers declares about the model, names and lengths only as a fallback:

- the language model is what ``get_decoder()`` returns, asked until it returns itself (a multimodal wrapper's
  text model: Gemma 3's ``Gemma3TextModel``, never its vision or audio tower), and its config is the text config;
- its layers are the ModuleList its config's ``base_model_pp_plan`` names (else the ModuleList of
  ``num_hidden_layers`` layers under the language model whose attention reads the text config);
- a layer's attention module, its output projection and its per-head parameters come from the config's
  ``base_model_tp_plan`` (``layers.*.self_attn.o_proj: rowwise``, ``layers.*.self_attn.sinks: colwise``); the
  query/key/value roles from the names below.

What differs between families is declared data, never a copy of a forward:

- ``ATTENTION_NAMES``: the attribute of a decoder layer that holds its attention module (the fallback);
- ``SEPARATE``: names of separate query, key and value projections, ``OUTPUT_NAMES`` of output projections where the
  tp plan declares none; ``FUSED``: a fused q/k/v projection
  and its output projection, with the fused layout: "blocks" ([all queries | all keys | all values], each
  head-major: Phi-3's ``qkv_proj``, GPT-2's ``c_attn``, MPT's ``Wqkv``) or "heads" (per head [q | k | v]:
  GPT-NeoX's and Persimmon's ``query_key_value``); ``FUSED_LAYOUTS`` overrides a layout per model type;
- ``LATENT``: multi-head latent attention (DeepSeek V2/V3 and their descendants): a head is its rows of the
  query projection (``q_b_proj`` or ``q_proj``: its no-rope and rope parts), its rows of ``kv_b_proj`` (its
  no-rope key and its value: the "kv_heads" layout) and its columns of ``o_proj``; the rope key, one head shared
  by every head, and the compressed cache stay as they are;
- ``PER_HEAD``: names of direct parameters with one entry per query head where the tp plan does not declare them
  (GPT-OSS's attention ``sinks``).

Head counts come from the config (``num_attention_heads``, ``num_key_value_heads``) and are checked against the
projections' shapes; ``head_dim`` is the output projection's width over the heads. Query head h reads key/value
head h // (heads / kv heads), as transformers' ``repeat_kv`` makes it. A layout is computed once per model
(``layouts``) and finding it writes nothing to the model.

How a layer loses heads and the one attention function it then runs (uneven key/value groups, and the
masking modes that act inside the attention) are ``headprune_attention.py``'s.

What cannot be pruned exactly is refused (``pruning_problem``): a normalisation over the whole query or key
projection (OLMo 2's ``q_norm``), a parameter of another shape that spans the heads, or a direct parameter with
one entry per head that nothing declares per head while the heads are as many as a head's features (it could be
either).
"""
from __future__ import annotations

import weakref

import torch
from torch import nn
from transformers.modeling_utils import PreTrainedModel
from transformers.pytorch_utils import Conv1D


ATTENTION_NAMES = ("self_attn", "attn", "attention", "self_attention")
OUTPUT_NAMES = ("o_proj", "out_proj", "dense", "c_proj", "Wo")
SEPARATE = (("q_proj", "k_proj", "v_proj"),)
# Encoder-decoder attention (headprune_seq2seq): T5's q/k/v/o, appended so the names above are tried first
SEPARATE += (("q", "k", "v"), ("query_proj", "key_proj", "value_proj"))  # ProphetNet's the latter
OUTPUT_NAMES += ("o",)
# Children holding a per-head relative position bias (T5's nn.Embedding(buckets, heads)) that the first layer
# computes for every layer: kept whole, each layer's kept heads of it picked in headprune_attention; a layout
# skips them in pruning_problem only where its caller runs the model through that function (position_biases)
POSITION_BIASES = ("relative_attention_bias",)
# Encoders (headprune_encoder): BERT's copies' query/key/value, DistilBERT's and XLM's q_lin/k_lin/v_lin/out_lin
SEPARATE += (("query", "key", "value"), ("q_lin", "k_lin", "v_lin"))
OUTPUT_NAMES += ("out_lin",)
# Projections with one block of rows per head that a head's query rows name (its own positions or global attention:
# DeBERTa's pos_key_proj/pos_query_proj, Longformer's query_global/key_global/value_global, LUKE's entity-aware
# queries): cut with the queries
WITH_QUERIES = ("pos_key_proj", "pos_query_proj", "query_global", "key_global", "value_global", "w2e_query",
                "e2w_query", "e2e_query")
FUSED = (("qkv_proj", ("o_proj", "dense", "out_proj")), ("c_attn", ("c_proj",)), ("Wqkv", ("out_proj", "Wo")),
         ("query_key_value", ("dense",)))
# Multi-head latent attention: query projection (LoRA-factored or not), the per-head key/value expansion, output
LATENT = (("q_b_proj", "q_proj"), "kv_b_proj", ("o_proj",))
LATENT_MARKS = ("kv_a_proj_with_mqa", "kv_b_proj")
# Latent attention's compressions before the per-head expansions: every head reads them, no head owns a part
LATENT_SHARED = ("kv_a_proj_with_mqa", "kv_a_layernorm", "q_a_proj", "q_a_layernorm")
PER_HEAD = ("sinks",)
# Layer kinds a config's ``layer_types`` declares that are not softmax attention (a hybrid's linear-attention,
# state-space or convolution layers): their modules may carry q/k/v projections, but their heads are not these
NOT_SOFTMAX = ("linear", "mamba", "ssm", "conv", "recurrent", "delta", "rwkv")
FUSED_LAYOUTS = {"gpt_neox": "heads", "persimmon": "heads", "bloom": "heads"}
# Names of query projections in a tp plan: the entry that marks a layer's attention module
QUERY_NAMES = ("q_proj", "q_b_proj", "qkv_proj", "c_attn", "Wqkv", "query_key_value")
PREFIX = "headprune_"


# --- Where the language model, its layers and their attention are ----------------------------------------------

def language_model(model) -> nn.Module:
    """The module that runs the model's text stack: ``get_decoder()``, asked until it returns itself."""
    module, seen = model, set()
    while id(module) not in seen:
        seen.add(id(module))
        get = getattr(module, "get_decoder", None)
        try:
            inner = get() if callable(get) else None
        except (AttributeError, NotImplementedError, ValueError):
            inner = None
        # a PreTrainedModel only: ModernBERT's decoder get_decoder() gives its LM head
        if not isinstance(inner, PreTrainedModel) or inner is module:
            break
        module = inner
    return module


def text_config(config):
    """The decoder's config: a multimodal model's text config (Gemma 3's), else the config itself."""
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if get is not None else config


def _language_config(model, lm):
    config = getattr(lm, "config", None)
    return text_config(config if config is not None and hasattr(config, "to_dict") else model.config)


class Declared:
    """What the language model's config declares about its layers: the layer list's name (``base_model_pp_plan``),
    and from ``base_model_tp_plan`` the attention module's name in a layer, its output projection and its
    per-head parameters (each None or empty where nothing is declared)."""

    def __init__(self, config, layers_name: str | None):
        self.layers, self.attention, self.outputs, self.per_head = layers_name, None, (), ()
        plan = getattr(config, "base_model_tp_plan", None) or {}
        prefix = f"{layers_name}.*."
        groups: dict[str, dict[str, str]] = {}
        for key, style in plan.items():
            if layers_name and key.startswith(prefix):
                parent, _, leaf = key[len(prefix):].rpartition(".")
                if parent and "*" not in parent:
                    groups.setdefault(parent, {})[leaf] = str(style)
        for parent, entries in groups.items():
            if any(leaf in QUERY_NAMES or style == "mla_kv_a_proj" for leaf, style in entries.items()):
                self.attention = parent
                self.outputs = tuple(leaf for leaf, style in entries.items() if style.startswith("rowwise"))
                self.per_head = tuple(leaf for leaf, style in entries.items() if style.startswith("colwise"))
                break


def _attention_in(layer: nn.Module, declared: Declared):
    """(the module holding the layer's attention, its attribute name there, the attention module), or Nones: the
    tp plan's attention, else a child named in ``ATTENTION_NAMES``, else such a module nested deeper (DBRX's
    ``norm_attn_norm.attn``)."""
    if isinstance(getattr(layer, declared.attention or "", None), nn.Module):
        return layer, declared.attention, getattr(layer, declared.attention)
    for parent in layer.modules():
        name = next((n for n in ATTENTION_NAMES if isinstance(getattr(parent, n, None), nn.Module)), None)
        if name is not None:
            return parent, name, getattr(parent, name)
    return None, None, None


def _reads_other_config(attention, config) -> bool:
    """Whether an attention module reads a config other than the text model's (a vision or audio tower's)."""
    own = getattr(attention, "config", None)
    own = own.headprune_base if isinstance(own, LayerConfig) else own
    return hasattr(own, "to_dict") and own is not config and type(own) is not type(config)


def _layer_list(model) -> tuple[nn.Module, object, Declared, nn.ModuleList]:
    """(language model, its config, what it declares, its layer list)."""
    lm = language_model(model)
    config = _language_config(model, lm)
    for name in getattr(config, "base_model_pp_plan", None) or {}:
        layers = getattr(lm, name, None)
        if isinstance(layers, nn.ModuleList) and len(layers):
            return lm, config, Declared(config, name), layers
    count = _config_value(config, ("num_hidden_layers", "n_layer", "num_layers"))
    for name, layers in lm.named_modules():
        if isinstance(layers, nn.ModuleList) and len(layers) == count and count:
            declared = Declared(config, name)
            found = [_attention_in(layer, declared)[2] for layer in layers]
            if any(a is not None for a in found) and not any(_reads_other_config(a, config) for a in found if a):
                return lm, config, declared, layers
    raise ValueError(f"no list of {count} decoder layers with an attention module found in {type(lm).__name__}")


def decoder_layers(model) -> list:
    """(layer index, attention module) of every decoder layer of the model's language model, in order.

    A layer without an attention module (a linear-attention or state-space layer of a hybrid) is refused: its
    heads are not softmax heads.
    """
    return [(layout.layer, layout.attention) for layout in layouts(model)]


_LAYOUTS: "weakref.WeakKeyDictionary[nn.Module, list]" = weakref.WeakKeyDictionary()


def layouts(model) -> list[DecoderLayout]:
    """Every decoder layer's ``DecoderLayout``, computed once per model (again only if a module was replaced)."""
    cached = _LAYOUTS.get(model)
    if cached is not None and all(layout.current() for layout in cached):
        return cached
    lm, config, declared, layers = _layer_list(model)
    model_type = getattr(config, "model_type", None)
    kinds = getattr(config, "layer_types", None) or ()
    found = []
    for i, layer in enumerate(layers):
        kind = str(kinds[i]) if i < len(kinds) else ""
        if any(word in kind for word in NOT_SOFTMAX):
            raise ValueError(f"decoder layer {i} of {type(model).__name__} is {kind!r} (its config's layer_types): "
                             "linear-attention and state-space layers are not softmax heads and are not supported")
        parent, name, attention = _attention_in(layer, declared)
        if attention is None:
            raise ValueError(f"decoder layer {i} of {type(model).__name__} has no softmax attention "
                             f"({', '.join(ATTENTION_NAMES)}): linear-attention and state-space layers are not "
                             "supported")
        found.append(DecoderLayout(i, attention, config, model_type, declared=declared, owner=(parent, name)))
    _LAYOUTS[model] = found
    return found


def attention_configs(model) -> list:
    """The configs the language model's attention modules read (a wrapper's text config), each once."""
    configs: dict[int, object] = {}
    for layout in layouts(model):
        config = getattr(layout.attention, "config", None)
        config = config.headprune_base if isinstance(config, LayerConfig) else config
        if config is not None:
            configs.setdefault(id(config), config)
    if not configs:
        configs[id(model.config)] = model.config
    return list(configs.values())


class DecoderLayout:
    """One decoder attention module: its projections, head counts, per-head widths and fused layout.

    ``fused``: None (separate projections), "blocks", "heads" (a fused q/k/v projection) or "kv_heads" (latent
    attention: separate queries, keys and values per head [key | value] from one expansion). Widths per head:
    ``query_dim`` rows of the query projection, ``key_dim`` and ``value_dim`` rows of the key and value ones per
    key/value head, ``head_dim`` columns of the output projection.
    """

    position_biases: tuple[str, ...] = ()  # POSITION_BIASES where headprune_attention picks each layer's heads

    def __init__(self, layer: int, attention: nn.Module, config, model_type: str | None = None, *,
                 declared: Declared | None = None, owner: tuple | None = None, output: tuple | None = None,
                 extra_features: int = 0):
        self.layer, self.attention, self.owner = layer, attention, owner
        # (module, attribute) of an output projection outside the attention module (BERT's attention.output.dense)
        self.outside = output
        # Input features of the output projection after the heads' that are no head's (ConvBERT's convolution heads)
        self.extra_features = extra_features
        self.fused = None
        declared_outputs = [n for n in (declared.outputs if declared else ()) if _is_projection(getattr(attention, n, None))]
        output_names = tuple(declared_outputs[:1]) + OUTPUT_NAMES if len(declared_outputs) == 1 else OUTPUT_NAMES
        output_holder = attention
        if output is not None:
            output_holder, output_names = output[0], (output[1],)
        self.declared_per_head = tuple(declared.per_head) if declared else ()
        names = None
        for q, k, v in SEPARATE:
            if all(_is_projection(getattr(attention, n, None)) for n in (q, k, v)):
                out = _first_name(output_holder, output_names, _is_projection)
                if out is not None:
                    names = (q, k, v, out)
                    break
        if names is None:
            for name, outputs in FUSED:
                out = _first_name(attention, outputs, _is_projection)
                if _is_projection(getattr(attention, name, None)) and out is not None:
                    names = (name, name, name, out)
                    self.fused = FUSED_LAYOUTS.get(model_type, "blocks")
                    break
        if names is None and all(hasattr(attention, n) for n in LATENT_MARKS):
            query, out = _first_name(attention, LATENT[0], _is_projection), _first_name(attention, LATENT[2],
                                                                                        _is_projection)
            if query is not None and out is not None and _is_projection(getattr(attention, LATENT[1])):
                names, self.fused = (query, LATENT[1], LATENT[1], out), "kv_heads"
        if names is None:
            raise ValueError(f"layer {layer}: {type(attention).__name__} has no query/key/value projections "
                             f"headprune knows ({', '.join(n for n, _ in FUSED)}, q_proj/k_proj/v_proj or latent "
                             "attention's q_b_proj/kv_b_proj/o_proj)")
        self.names = names
        self.holders = (attention,) * 3 + (output[0] if output is not None else attention,)
        self.query, self.key, self.value, self.output = (getattr(h, n) for h, n in zip(self.holders, names))
        self.with_queries = tuple(n for n in WITH_QUERIES if _is_projection(getattr(attention, n, None)))
        self.original_heads = int(getattr(attention, PREFIX + "original_heads", None)
                                  or _config_value(config, ("num_attention_heads", "n_head", "num_heads")))
        self.kept = list(getattr(attention, PREFIX + "kept_heads", range(self.original_heads)))
        width = _out_features(self.output, inputs=True) - extra_features
        self.head_dim = width // len(self.kept) if self.kept else int(getattr(attention, PREFIX + "head_dim"))
        if self.kept and width != len(self.kept) * self.head_dim:
            raise ValueError(f"layer {layer}: the output projection reads {width} features, not a multiple of "
                             f"{len(self.kept)} heads")
        self.query_dim = int(getattr(attention, PREFIX + "query_dim", 0)) or self._per_query_head(self.query)
        stored = getattr(attention, PREFIX + "original_kv_heads", None)
        self.original_kv_heads = int(stored if stored is not None else self._kv_heads_in_projections())
        if self.original_heads % self.original_kv_heads:
            raise ValueError(f"layer {layer}: {self.original_heads} query heads cannot share "
                             f"{self.original_kv_heads} key/value heads evenly")
        self.key_dim, self.value_dim = self._kv_widths()

    def current(self) -> bool:
        """Whether the model still holds this layout's modules (a cached layout is used only then)."""
        layer, name = self.owner or (None, None)
        if layer is not None and getattr(layer, name, None) is not self.attention:
            return False
        return all(getattr(h, n, None) is m for h, n, m in zip(self.holders, self.names, (self.query, self.key,
                                                                                     self.value, self.output)))

    def _per_query_head(self, query) -> int:
        if not self.kept:
            return self.head_dim
        if self.fused in ("blocks", "heads"):
            return self.head_dim
        width = _out_features(query)
        if width % len(self.kept):
            raise ValueError(f"layer {self.layer}: the query projection puts out {width} features, not a multiple "
                             f"of {len(self.kept)} heads")
        return width // len(self.kept)

    def _kv_heads_in_projections(self) -> int:
        d, heads = self.head_dim, self.original_heads
        if self.fused in ("heads", "kv_heads"):
            return heads
        if len(self.kept) != heads:
            raise ValueError(f"layer {self.layer}: a pruned attention without its original key/value heads recorded")
        if self.fused == "blocks":
            kv = (_out_features(self.query) // d - heads) // 2
        else:
            kv = _out_features(self.key) // self.query_dim
        if kv <= 0 or heads % kv:
            raise ValueError(f"layer {self.layer}: {kv} key/value heads for {heads} query heads")
        return kv

    def _kv_widths(self) -> tuple[int, int]:
        """(key rows, value rows) per key/value head."""
        if self.fused in ("blocks", "heads"):
            return self.head_dim, self.head_dim
        kv = len(self.kv_heads(self.kept))
        if not kv:
            return self.query_dim, self.head_dim
        if self.fused == "kv_heads":
            per_head = _out_features(self.key) // kv
            return per_head - self.head_dim, self.head_dim
        return _out_features(self.key) // kv, _out_features(self.value) // kv

    @property
    def groups(self) -> int:
        """Query heads per key/value head, as the model was built."""
        return self.original_heads // self.original_kv_heads

    def kv_heads(self, heads: list[int]) -> list[int]:
        """Original indices of the key/value heads that query heads ``heads`` read."""
        return sorted({h // self.groups for h in heads})

    def kv_index(self) -> list[int]:
        """For each kept query head, the position of the kv head it reads among the kept kv heads."""
        kept_kv = self.kv_heads(self.kept)
        return [kept_kv.index(h // self.groups) for h in self.kept]

    # --- The features of heads in each projection --------------------------------------------------------

    def _rows(self, positions: list[int], dim: int, device) -> torch.Tensor:
        return torch.tensor([p * dim + i for p in positions for i in range(dim)], dtype=torch.long, device=device)

    def qkv_rows(self, keep: list[int], device) -> tuple[torch.Tensor, ...]:
        """Output features to keep of the query, key and value projections (a projection that serves two or
        three of them gets one index, returned for each), for query heads ``keep`` (a subset of the kept ones)."""
        d = self.head_dim
        kv_now, kv_after = self.kv_heads(self.kept), self.kv_heads(keep)
        positions = [self.kept.index(h) for h in keep]
        kv_positions = [kv_now.index(k) for k in kv_after]
        q = self._rows(positions, self.query_dim, device)
        if self.fused is None:
            return q, self._rows(kv_positions, self.key_dim, device), self._rows(kv_positions, self.value_dim, device)
        if self.fused == "kv_heads":
            kv = self._rows(kv_positions, self.key_dim + self.value_dim, device)
            return q, kv, kv
        queries, keys = len(self.kept) * d, len(kv_now) * d
        if self.fused == "blocks":
            kv = self._rows(kv_positions, d, device)
            rows = torch.cat([q, kv + queries, kv + queries + keys])
        elif self.fused == "heads":  # per head [q | k | v], no grouped key/values
            if self.groups != 1:
                raise ValueError(f"layer {self.layer}: a per-head fused layout with grouped key/values")
            rows = self._rows(positions, 3 * d, device)
        else:
            raise ValueError(f"unknown fused layout {self.fused!r}")
        return rows, rows, rows

    def value_features(self, value: torch.Tensor) -> torch.Tensor:
        """One value vector per kept query head, (..., kept heads * head_dim), from the value projection's output."""
        d, heads = self.head_dim, len(self.kept)
        if self.fused == "heads":
            return value.unflatten(-1, (heads, 3, d))[..., 2, :].flatten(-2)
        if self.fused == "kv_heads":
            return value.unflatten(-1, (-1, self.key_dim + d))[..., self.key_dim:].flatten(-2)
        if self.fused == "blocks":
            kv = len(self.kv_heads(self.kept))
            value = value[..., heads * d + kv * d:]
        per_kv = value.unflatten(-1, (-1, d))
        index = torch.tensor(self.kv_index(), dtype=torch.long, device=value.device)
        return per_kv.index_select(-2, index).flatten(-2)

    # --- Per-head parameters and what cannot be pruned ------------------------------------------------------

    def projections(self) -> set[int]:
        return {id(m) for m in (self.query, self.key, self.value, self.output)} | {
            id(getattr(self.attention, n)) for n in self.with_queries}

    def _one_per_head(self) -> list[str]:
        heads = len(self.kept)
        return [name for name, p in self.attention.named_parameters(recurse=False) if p.dim() == 1 and
                p.shape[0] == heads and heads]

    def per_head_parameters(self) -> list[str]:
        """Direct parameters of the attention module with one entry per query head (GPT-OSS's ``sinks``): those
        the tp plan declares per head or ``PER_HEAD`` names; by their length alone only where no feature width of
        a head has that length."""
        widths = {self.head_dim, self.query_dim, self.key_dim, self.value_dim}
        return [name for name in self._one_per_head() if name in self.declared_per_head or name in PER_HEAD or
                len(self.kept) not in widths]

    def ambiguous_parameters(self) -> list[str]:
        """Direct 1-D parameters as long as the heads are many and as a head is wide, declared as neither."""
        known = set(self.per_head_parameters())
        return [name for name in self._one_per_head() if name not in known]

    def pruning_problem(self) -> str | None:
        """Why removing a head would change the other heads' function (None: it would not)."""
        kv = len(self.kv_heads(self.kept))
        spans = {len(self.kept) * self.query_dim, kv * self.key_dim, kv * self.value_dim,
                 len(self.kept) * self.head_dim}
        spans -= {self.head_dim, self.query_dim, self.key_dim, self.value_dim, 0}
        for name, module in self.attention.named_children():
            if id(module) in self.projections() or (self.fused == "kv_heads" and name in LATENT_SHARED):
                continue
            if name in self.position_biases:
                continue
            for pname, p in module.named_parameters():
                if any(size in spans for size in p.shape):
                    return (f"{type(self.attention).__name__}.{name} ({type(module).__name__}, {pname} of shape "
                            f"{tuple(p.shape)}) spans all heads: removing a head would change the others' "
                            "normalisation or mixing")
        ambiguous = self.ambiguous_parameters()
        if ambiguous:
            return (f"{type(self.attention).__name__}.{ambiguous[0]} has {len(self.kept)} entries, as many as the "
                    "heads and as a head's features, and nothing declares it per head")
        for pname, p in self.attention.named_parameters(recurse=False):
            if pname not in self.per_head_parameters() and any(size in spans for size in p.shape):
                return f"{type(self.attention).__name__}.{pname} of shape {tuple(p.shape)} spans all heads"
        return None


def _first_name(module, names, accept=lambda m: isinstance(m, nn.Module)):
    for name in names:
        if accept(getattr(module, name, None)):
            return name
    return None


def _first(module, names, accept=lambda m: isinstance(m, nn.Module)):
    name = _first_name(module, names, accept)
    return getattr(module, name) if name is not None else None


def _is_projection(module) -> bool:
    """A linear projection headprune can slice: nn.Linear or transformers' Conv1D (a 2-D ``weight``), or a class of
    ``LINEAR_CLASSES``."""
    linear = isinstance(module, (nn.Linear, Conv1D)) or type(module).__name__ in LINEAR_CLASSES
    return linear and module.weight.dim() == 2


# Classes that are nn.Linear but for their name: I-BERT's QuantLinear (a linear map while not quantized)
LINEAR_CLASSES = ("QuantLinear",)


def _config_value(config, names, default=...):
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    if default is ...:
        raise ValueError(f"{type(config).__name__} has none of {names}")
    return default


def _out_features(linear: nn.Module, inputs: bool = False) -> int:
    """A projection's output width (or with ``inputs``, its input width); Conv1D stores its weight (in, out)."""
    weight = linear.weight
    transposed = isinstance(linear, Conv1D)
    return weight.shape[0 if transposed == inputs else 1]


class LayerConfig:
    """A pruned layer's view of the model's config: its own head counts, everything else the model's (read live,
    so that switching the model's attention backend reaches every layer)."""

    def __init__(self, base, counts: dict):
        self.__dict__["headprune_base"], self.__dict__["headprune_counts"] = base, dict(counts)

    def __getattr__(self, name):
        if name.startswith("__") or name.startswith("headprune_base") or name == "headprune_counts":
            raise AttributeError(name)
        counts = self.__dict__.get("headprune_counts", {})
        return counts[name] if name in counts else getattr(self.__dict__["headprune_base"], name)

    def __setattr__(self, name, value):
        setattr(self.headprune_base, name, value)
