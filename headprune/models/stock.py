"""Save a uniformly pruned model as a stock checkpoint: transformers' own config and class, no remote code (#46).

``save_pruned`` (``headprune.models.export``) writes remote code because each layer may keep its own heads. A model
pruned with a uniform layout (``headprune.experiments.layouts``: every layer of an attention stack keeps as many
query heads, and with grouped-query attention as many whole key/value groups) is what the family's own config
describes with smaller ``num_attention_heads`` / ``num_key_value_heads``. ``save_stock(model, tokenizer, folder)``
writes that: config.json of the family's config class (``head_dim`` kept where the config has it, no ``auto_map``,
no ``headprune_*`` key), safetensors weights, the tokenizer and a model card. Anyone loads it with

    AutoModelForCausalLM.from_pretrained(folder)        # no trust_remote_code, no headprune

Nothing is written unless the stock class, built from the new config, holds every pruned weight in its shape and
computes the pruned model's logits on a few tokens. What it cannot hold is refused with a one-line ValueError:
layers keeping different head counts, uneven key/value groups, counts the config class's own validation refuses
(Llama's and Gemma's: hidden_size a multiple of the heads), a class that derives a head's size from
hidden_size / heads (GPT-2, BERT, Marian: fewer heads there are wider heads), output biases added by bias
compensation, pruned tower heads, layers left without heads, or a class that is not transformers' own. A
multimodal wrapper whose language model alone was pruned gets smaller counts in its text config.
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch

from headprune.io.atomic import atomic_dir
from headprune.models.attention_types import DEC_SELF, ENC_DEC, ENC_SELF, TOWER_TYPES

PREFIX = "headprune_"
# The config entries that hold an attention stack's query head count, the first the config has
QUERY_KEYS = {ENC_SELF: ("encoder_attention_heads", "num_attention_heads", "n_head", "num_heads", "n_heads"),
              DEC_SELF: ("decoder_attention_heads", "num_attention_heads", "n_head", "num_heads", "n_heads"),
              ENC_DEC: ("decoder_attention_heads", "num_attention_heads", "num_heads", "n_heads")}
KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads")


def save_stock(model, tokenizer, folder, **card_kwargs) -> Path:
    """Write uniformly pruned ``model`` (or an unpruned one) and ``tokenizer`` (or None) to ``folder`` as a stock
    checkpoint of its own transformers class (see the module docstring); ``card_kwargs`` go to the model card
    (``export.model_card``: base_model, criterion, masking, curve_point). Written to a temporary sibling and
    renamed. Returns the folder; a ValueError, with nothing written, where a stock class cannot hold the model."""
    folder = Path(folder)
    stock = stock_model(model)
    card = stock_card(model, folder.name, **card_kwargs)
    with atomic_dir(folder) as staging:
        stock.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        (staging / "README.md").write_text(card)
    return folder


def stock_model(model):
    """Transformers' own class of ``model``, built from ``stock_config(model)``, holding the model's tensors (shared,
    not copied); checked to give the model's logits. A ValueError where it cannot."""
    import transformers

    from headprune.models.prune import ADDED_BIAS_KEY

    cls, name = type(model), type(model).__name__
    if not cls.__module__.startswith("transformers.") or getattr(transformers, name, None) is not cls:
        raise refused(model, f"{name} is not transformers' own class (export it with remote code: save_pruned)")
    if getattr(model.config, ADDED_BIAS_KEY, None):  # {attn_type: [layers]}
        raise refused(model, f"bias compensation gave output projections a bias {name} does not have "
                             f"({getattr(model.config, ADDED_BIAS_KEY)}); export it with remote code (save_pruned)")
    config = stock_config(model)
    try:  # what save_pretrained and from_pretrained check (Llama, Gemma: hidden_size a multiple of the heads)
        config.validate()
    except Exception as error:
        cause = error.__cause__ or error  # the validator's own words, not its dataclass wrapper's
        raise refused(model, f"{type(config).__name__} refuses the heads kept: {_first_line(cause)}") from None
    try:
        with torch.device("meta"):  # shapes only: the tensors are the model's own, assigned below
            stock = cls(config)
    except Exception as error:  # BERT, Marian: hidden_size not a multiple of the heads kept
        raise refused(model, f"{name} cannot be built with the heads kept ({type(error).__name__}: "
                             f"{_first_line(error)})") from None
    state, wanted = model.state_dict(), stock.state_dict()
    problem = _shape_problem(state, wanted)
    if problem is not None:
        raise refused(model, problem + _why(model, config))
    stock.load_state_dict(state, assign=True)
    for key, buffer in model.named_buffers():  # not saved (rotary frequencies): the model's own, as computed
        owner, _, leaf = key.rpartition(".")
        module = stock.get_submodule(owner)
        if getattr(module, leaf, None) is not None and getattr(module, leaf).is_meta:
            setattr(module, leaf, buffer)
    left = [key for key, t in [*stock.named_parameters(), *stock.named_buffers()] if t.is_meta]
    if left:
        raise refused(model, f"{name} has {left[0]}, which the model lacks")
    stock.generation_config = copy.deepcopy(model.generation_config)
    _check_logits(model, stock)
    return stock


def refused(model, why: str) -> ValueError:
    """The one-line error of a model a stock class cannot hold."""
    return ValueError(f"a pruned {type(model).__name__} (model type {model.config.model_type!r}) cannot be saved as "
                      f"a stock checkpoint: {why}")


def _first_line(error) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def stock_config(model):
    """A copy of ``model.config`` with each attention stack's kept head counts (``uniform_counts``), its head size
    kept where the config has ``head_dim``, and no headprune entries."""
    from headprune.models.prune import pruned_heads

    config = copy.deepcopy(model.config)
    subs = [getattr(config, key, None) for key in getattr(config, "sub_configs", None) or {}]
    for sub in [config, *filter(None, subs)]:  # a wrapper's text config too
        for key in [k for k in vars(sub) if k.startswith(PREFIX) or k == "auto_map"]:
            delattr(sub, key)
        backend = getattr(sub, "_attn_implementation", None)
        if isinstance(backend, str) and backend.startswith(PREFIX):  # a stock folder runs its family's attention
            sub._attn_implementation = backend.removeprefix(PREFIX)
    if not any(any(layers.values()) for layers in pruned_heads(model).values()):
        return config  # nothing removed: a normal save (of a family headprune may not even know)
    # a decoder-only wrapper's heads are in its text config; an encoder-decoder's in the config itself
    target = config if getattr(config, "is_encoder_decoder", False) else config.get_text_config(decoder=True)
    written: dict[str, tuple[int, str]] = {}  # config key -> (count, the stack that set it)
    for attn_type, (heads, kv_heads, head_dim) in uniform_counts(model).items():
        query_key = next((k for k in QUERY_KEYS.get(attn_type, ()) if getattr(target, k, None) is not None), None)
        kv_keys = KV_KEYS if attn_type == DEC_SELF else ()
        kv_key = next((k for k in kv_keys if getattr(target, k, None) is not None), None)
        for key, count in ((query_key, heads), (kv_key, kv_heads)):
            if key is None:
                continue
            if written.get(key, (count,))[0] != count:  # Marian's decoder_attention_heads: dec_self and enc_dec
                raise refused(model, f"{written[key][1]} keeps {written[key][0]} heads, {attn_type} {count}, and "
                                     f"{type(target).__name__} has one {key} for both")
            written[key] = (count, attn_type)
            setattr(target, key, count)
        if getattr(target, "head_dim", None) is not None:
            target.head_dim = head_dim  # unchanged, written out: the class must not derive it from the new count
    return config


def uniform_counts(model) -> dict[str, tuple[int, int, int]]:
    """{attn_type: (query heads, key/value heads, head_dim)} each layer keeps, the same in every layer of a stack;
    a ValueError where they differ, where a layer's query heads read their key/value heads unevenly or not as the
    stock class maps them (kept query head i reads kept kv head i // (heads / kv heads)), or no head is left."""
    from headprune.models.heads import adapter_for
    from headprune.models.prune import pruned_heads

    towers = [t for t, layers in pruned_heads(model).items() if t in TOWER_TYPES.values() and any(layers.values())]
    if towers:
        raise refused(model, f"heads of its {', '.join(towers)} were removed, and a tower's config is not rewritten "
                             "here (export it with remote code: save_pruned)")
    found: dict[str, dict[int, tuple[int, int, int]]] = {}
    for site in adapter_for(model).sites(model):
        heads = site.num_heads
        # which kept kv head each kept query head reads (no grouped-query attention: its own)
        index = site.layout.kv_index() if site.layout is not None else list(range(heads))
        kv_heads = len(set(index))
        if heads and (heads % kv_heads or index != [i // (heads // kv_heads) for i in range(heads)]):
            groups = [index.count(k) for k in range(kv_heads)]
            raise refused(model, f"{site.attn_type} layer {site.layer} keeps {heads} query heads on {kv_heads} "
                                 f"key/value heads unevenly (query heads per key/value head: {groups}): remove whole "
                                 "key/value groups")
        found.setdefault(site.attn_type, {})[site.layer] = (heads, kv_heads, site.head_dim)
    counts = {}
    for attn_type, layers in found.items():
        if len(set(layers.values())) > 1:
            kept = ", ".join(f"layer {layer}: {heads}" + (f" on {kv} kv" if kv != heads else "")
                             for layer, (heads, kv, _) in sorted(layers.items()))
            raise refused(model, f"its {attn_type} layers keep different head counts ({kept}): a stock config has "
                                 "one count for all (prune with a uniform layout, or export with remote code)")
        counts[attn_type] = next(iter(layers.values()))
        if counts[attn_type][0] == 0:
            raise refused(model, f"its {attn_type} layers have no heads left, which a stock class cannot build")
    return counts


def _shape_problem(state: dict, wanted: dict) -> str | None:
    """Why tensors ``state`` do not load into a model whose state dict is ``wanted`` (None: they do)."""
    missing, unexpected = sorted(set(wanted) - set(state)), sorted(set(state) - set(wanted))
    if missing or unexpected:
        return f"missing {missing[:3]}, unexpected {unexpected[:3]}"
    for key, tensor in state.items():
        if tuple(tensor.shape) != tuple(wanted[key].shape):
            return (f"the stock class builds {key} as {tuple(wanted[key].shape)}, the pruned weights are "
                    f"{tuple(tensor.shape)}")
    return None


def _why(model, config) -> str:
    """The cause of a shape mismatch where it is the usual one: the class derives a head's size from the hidden
    size over the heads, so a stock model with fewer heads has wider ones, not fewer."""
    from headprune.models.export import transformers_class
    from headprune.models.heads import adapter_for

    site = adapter_for(model).sites(model)[0]
    attention = transformers_class(type(site.attention)).__name__  # not headprune's pruned subclass
    hidden = getattr(config.get_text_config(decoder=True), "hidden_size", None) or getattr(config, "d_model", None)
    if site.num_heads and hidden and hidden // site.num_heads != site.head_dim:
        return (f": {attention} derives its head size from hidden_size / heads ({hidden} / "
                f"{site.num_heads} = {hidden // site.num_heads}, not {site.head_dim}), so a stock "
                f"{type(model).__name__} cannot hold fewer heads of the same size (export it with remote code: "
                "save_pruned)")
    return ""


def _check_logits(model, stock) -> None:
    """The stock model's logits on a few tokens equal the pruned model's (the same tensors, its own class)."""
    embeddings = model.get_input_embeddings().weight
    ids = torch.randint(1, embeddings.shape[0], (1, 8), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids.to(embeddings.device)}
    if getattr(model.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = inputs["input_ids"]
    modes = model.training
    try:
        model.eval(), stock.eval()
        with torch.no_grad():
            want, got = model(**inputs)[0].float(), stock(**inputs)[0].float()
    finally:
        model.train(modes)
    # the same kernels on the same tensors: equal but for summation order; lower precision within its rounding
    eps = 1e-5 if embeddings.dtype == torch.float32 else 8 * torch.finfo(embeddings.dtype).eps
    gap = float((want - got).abs().max())
    if not gap <= eps * max(1.0, float(want.abs().max())):
        raise refused(model, f"the stock {type(stock).__name__} computes other logits (differing by {gap:.2g})")


# --- The model card ------------------------------------------------------------------------------------

def stock_card(model, name: str, **card_kwargs) -> str:
    """README.md: ``export.model_card``'s card for a stock checkpoint (no remote code, a uniform layout)."""
    from headprune.models.export import auto_class, model_card

    auto = auto_class(type(model)) or type(model).__name__
    return model_card(model, {auto: type(model).__name__}, name, [], layout="uniform", stock=True, **card_kwargs)
