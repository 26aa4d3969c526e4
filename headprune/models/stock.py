"""Save a uniformly pruned model as a stock checkpoint: transformers' own config and class, no remote code (#46).

``save_pruned`` (``headprune.models.export``) writes remote code because each layer may keep its own heads. A model
pruned with a uniform layout (``headprune.analyses.layouts``: every layer of an attention stack keeps as many
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

``save_stock(..., zeroed=True)`` writes the honest alternative where no smaller stock checkpoint exists: a same-size
one. The family's own config and class with the original geometry, every head in place, and the removed heads'
weights zero (their query, key and value rows and biases, a key/value head only once no kept head reads it, and
their input columns of the output projection): each removed head then contributes exactly nothing, so the model
computes the pruned model's function and loads wherever a stock checkpoint loads (vLLM, TGI, plain transformers).
It is as large and as slow as the original: no speed or memory gain. The pruned model is re-inflated to the
original shapes from the kept head indices its attention modules hold (``headprune_kept_heads``), by the same
row and column indices pruning sliced with. It holds any layout (layers keeping different heads, partial key/value
groups, a layer with no head left) of GPT-2, BERT, Marian or any family; refused still: output biases added by
bias compensation, pruned tower heads, a class that is not transformers' own. ``NoSmallerStock``, a ValueError, is
what the smaller export raises where the layout is uniform but the class or its config cannot hold the counts (a
head size derived from hidden_size / heads, counts the config refuses, one count for two stacks): the cases where
``headprune prune --layout uniform`` writes the same-size export instead.
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


class NoSmallerStock(ValueError):
    """The smaller export's refusal of a model pruned as a stock config describes it (the same heads kept in every
    layer) whose class or config still cannot hold the counts; ``why``: the reason alone. ``save_stock(...,
    zeroed=True)`` writes the same-size export of it."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


def save_stock(model, tokenizer, folder, *, zeroed: bool = False, **card_kwargs) -> Path:
    """Write pruned ``model`` (or an unpruned one) and ``tokenizer`` (or None) to ``folder`` as a stock checkpoint of
    its own transformers class (see the module docstring); ``card_kwargs`` go to the model card
    (``export.model_card``: base_model, criterion, masking, curve_point, layout). ``zeroed``: False, the smaller
    export (fewer heads in the config; a uniform layout only); True, the same-size export (every head in place, the
    removed heads' weights zero: it computes the pruned model but is no smaller and no faster than the original).
    Written to a temporary sibling and renamed. Returns the folder; a ValueError, with nothing written, where a stock
    class cannot hold the model (``NoSmallerStock`` where only the same-size export can)."""
    folder = Path(folder)
    stock = same_size_model(model) if zeroed else stock_model(model)
    card = stock_card(model, folder.name, zeroed=stock if zeroed else None, **card_kwargs)
    with atomic_dir(folder) as staging:
        stock.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        (staging / "README.md").write_text(card)
    return folder


def stock_model(model):
    """Transformers' own class of ``model``, built from ``stock_config(model)``, holding the model's tensors (shared,
    not copied); checked to give the model's logits. A ValueError where it cannot (``NoSmallerStock`` where the
    layout is uniform but the class or its config cannot hold the counts)."""
    _check_exportable(model)
    config = stock_config(model)
    try:  # what save_pretrained and from_pretrained check (Llama, Gemma: hidden_size a multiple of the heads)
        config.validate()
    except Exception as error:
        cause = error.__cause__ or error  # the validator's own words, not its dataclass wrapper's
        raise refused(model, f"{type(config).__name__} refuses the heads kept: {_first_line(cause)}",
                      smaller=True) from None
    name = type(model).__name__
    try:
        with torch.device("meta"):  # shapes only: the tensors are the model's own, assigned below
            stock = type(model)(config)
    except Exception as error:  # BERT, Marian: hidden_size not a multiple of the heads kept
        raise refused(model, f"{name} cannot be built with the heads kept ({type(error).__name__}: "
                             f"{_first_line(error)})", smaller=True) from None
    state = model.state_dict()
    problem = _shape_problem(state, stock.state_dict())
    if problem is not None:
        raise refused(model, _why(model, config) or problem, smaller=True)
    return _filled(model, stock, state)


def same_size_model(model):
    """Transformers' own class of ``model`` at its original geometry (its config without headprune's entries), every
    head in place and each removed head's weights zero, so that it contributes nothing; checked to give the pruned
    model's logits. The attention projections are new tensors, everything else the model's own (shared)."""
    _check_exportable(model)
    config = _plain_config(model)
    with torch.device("meta"):
        stock = type(model)(config)
    state, wanted = dict(model.state_dict()), stock.state_dict()
    try:
        _inflate(model, state, wanted)
    except ValueError as error:
        raise refused(model, f"its pruned attention is not laid out as headprune reads it ({error})") from None
    problem = _shape_problem(state, wanted)
    if problem is not None:
        raise refused(model, f"its re-inflated weights do not fit {type(model).__name__}: {problem}")
    return _filled(model, stock, state)


def _check_exportable(model) -> None:
    """Refuse what no stock export holds, smaller or same-size."""
    import transformers

    from headprune.models.prune import ADDED_BIAS_KEY

    cls, name = type(model), type(model).__name__
    if not cls.__module__.startswith("transformers.") or getattr(transformers, name, None) is not cls:
        raise refused(model, f"{name} is not transformers' own class (export it with remote code: save_pruned)")
    if getattr(model.config, ADDED_BIAS_KEY, None):  # {attn_type: [layers]}
        raise refused(model, f"bias compensation gave output projections a bias {name} does not have "
                             f"({getattr(model.config, ADDED_BIAS_KEY)}); export it with remote code (save_pruned)")
    _check_towers(model)


def _filled(model, stock, state: dict):
    """``stock`` (built on the meta device) given the tensors ``state`` and the model's buffers, checked."""
    stock.load_state_dict(state, assign=True)
    stock.tie_weights()  # assign made two parameters of one tied tensor (GPT-2's lm_head and wte)
    for key, buffer in model.named_buffers():  # not saved (rotary frequencies): the model's own, as computed
        owner, _, leaf = key.rpartition(".")
        module = stock.get_submodule(owner)
        if getattr(module, leaf, None) is not None and getattr(module, leaf).is_meta:
            setattr(module, leaf, buffer)
    left = [key for key, t in [*stock.named_parameters(), *stock.named_buffers()] if t.is_meta]
    if left:
        raise refused(model, f"{type(model).__name__} has {left[0]}, which the model lacks")
    if getattr(model, "generation_config", None) is not None:  # a classifier has none
        stock.generation_config = copy.deepcopy(model.generation_config)
    _check_logits(model, stock)
    return stock


def _inflate(model, state: dict, wanted: dict) -> None:
    """Put each pruned attention projection of ``state`` back at its original shape (``wanted``'s), the kept heads'
    rows and columns where pruning took them from (the layout's own indices), zeros at the removed heads'."""
    names = {id(module): name for name, module in model.named_modules()}
    for site in _sites(model):
        layout = site.layout
        if len(site.kept_heads) == site.original_num_heads:
            continue
        if layout is not None:
            full = copy.copy(layout)  # the same widths, every head: qkv_rows then indexes the original projections
            full.kept = list(range(layout.original_heads))
            q, k, v = full.qkv_rows(layout.kept, "cpu")
            heads = layout.kept
            extras = getattr(layout, "extra_features", 0)
            holders = [(layout.query, q, True), (layout.key, k, True), (layout.value, v, True)]
            holders += [(getattr(layout.attention, n), q, True) for n in getattr(layout, "with_queries", ())]
            per_head = [f"{names[id(layout.attention)]}.{n}" for n in layout.per_head_parameters()]
            head_dim, original = layout.head_dim, layout.original_heads
        else:  # separate head-major projections (FSMT)
            heads, head_dim, original, extras = site.kept_heads, site.head_dim, site.original_num_heads, 0
            q = torch.tensor([h * head_dim + i for h in heads for i in range(head_dim)], dtype=torch.long)
            holders = [(site.query, q, True), (site.key, q, True), (site.value, q, True)]
            per_head = []
        # the output projection's columns of the kept heads, then those of no head (ConvBERT's convolution)
        columns = torch.tensor([h * head_dim + i for h in heads for i in range(head_dim)] +
                               [original * head_dim + i for i in range(extras)], dtype=torch.long)
        done: set[int] = set()
        for linear, rows, outputs in [*holders, (site.output, columns, False)]:
            if id(linear) in done:  # a fused projection serves two or three roles: inflated once
                continue
            done.add(id(linear))
            name = names[id(linear)]
            transposed = type(linear).__name__ == "Conv1D"  # weight (in, out)
            weight_dim = (1 if transposed else 0) if outputs else (0 if transposed else 1)
            _put_back(state, wanted, f"{name}.weight", weight_dim, rows)
            if outputs:
                _put_back(state, wanted, f"{name}.bias", 0, rows)
        for key in per_head:  # GPT-OSS's sinks: a removed head's entry only scales its own (zeroed) output
            _put_back(state, wanted, key, 0, torch.tensor(heads, dtype=torch.long))


def _put_back(state: dict, wanted: dict, key: str, dim: int, index: torch.Tensor) -> None:
    small = state.get(key)
    if small is None or key not in wanted or small.shape == wanted[key].shape:
        return
    if small.shape[dim] != len(index):  # a layout this reading does not know: refused, not guessed
        raise ValueError(f"{key} has {small.shape[dim]} features along dimension {dim}, its kept heads "
                         f"{len(index)}")
    big = torch.zeros(wanted[key].shape, dtype=small.dtype, device=small.device)
    state[key] = big.index_copy_(dim, index.to(small.device), small)


def _sites(model):
    from headprune.models.heads import adapter_for

    return adapter_for(model).sites(model)


def _check_towers(model) -> None:
    from headprune.models.prune import pruned_heads

    towers = [t for t, layers in pruned_heads(model).items() if t in TOWER_TYPES.values() and any(layers.values())]
    if towers:
        raise refused(model, f"heads of its {', '.join(towers)} were removed, and a tower's config is not rewritten "
                             "here (export it with remote code: save_pruned)")


def why_not_smaller(model) -> str | None:
    """Why no smaller stock export of ``model`` exists (its refusal's reason), None where one does."""
    try:
        stock_model(model)
    except ValueError as error:
        return getattr(error, "why", None) or str(error).partition("stock checkpoint: ")[2] or str(error)
    return None


def refused(model, why: str, smaller: bool = False) -> ValueError:
    """The one-line error of a model a stock class cannot hold; ``smaller``: the smaller export only (the layout is
    uniform, the class or its config cannot hold the counts), a ``NoSmallerStock`` that says the same-size one can."""
    start = f"a pruned {type(model).__name__} (model type {model.config.model_type!r}) cannot be saved as a "
    if smaller:
        return NoSmallerStock(start + f"smaller stock checkpoint: {why} (a same-size one, the removed heads' weights "
                              "zeroed, holds it: save_stock(..., zeroed=True))", why)
    return ValueError(start + f"stock checkpoint: {why}")


def _first_line(error) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _plain_config(model):
    """A copy of ``model.config`` without headprune's entries, on its family's attention backend: the original
    geometry (the same-size export's config)."""
    config = copy.deepcopy(model.config)
    subs = [getattr(config, key, None) for key in getattr(config, "sub_configs", None) or {}]
    for sub in [config, *filter(None, subs)]:  # a wrapper's text config too
        for key in [k for k in vars(sub) if k.startswith(PREFIX) or k == "auto_map"]:
            delattr(sub, key)
        backend = getattr(sub, "_attn_implementation", None)
        if isinstance(backend, str) and backend.startswith(PREFIX):  # a stock folder runs its family's attention
            sub._attn_implementation = backend.removeprefix(PREFIX)
    return config


def stock_config(model):
    """A copy of ``model.config`` with each attention stack's kept head counts (``uniform_counts``), its head size
    kept where the config has ``head_dim``, and no headprune entries."""
    from headprune.models.prune import pruned_heads

    config = _plain_config(model)
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
                                     f"{type(target).__name__} has one {key} for both", smaller=True)
            written[key] = (count, attn_type)
            setattr(target, key, count)
        if getattr(target, "head_dim", None) is not None:
            target.head_dim = head_dim  # unchanged, written out: the class must not derive it from the new count
    return config


def uniform_counts(model) -> dict[str, tuple[int, int, int]]:
    """{attn_type: (query heads, key/value heads, head_dim)} each layer keeps, the same in every layer of a stack;
    a ValueError where they differ, where a layer's query heads read their key/value heads unevenly or not as the
    stock class maps them (kept query head i reads kept kv head i // (heads / kv heads)), or no head is left."""
    _check_towers(model)
    found: dict[str, dict[int, tuple[int, int, int]]] = {}
    for site in _sites(model):
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
                                 "one count for all (prune with a uniform layout, or export with remote code or "
                                 "same-size: save_stock(..., zeroed=True))")
        counts[attn_type] = next(iter(layers.values()))
        if counts[attn_type][0] == 0:
            raise refused(model, f"its {attn_type} layers have no heads left, which a stock class cannot build",
                          smaller=True)
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
    """The cause of a shape mismatch where it is the usual one ("" where not): the class derives a head's size from
    the hidden size over the heads, so a stock model with fewer heads has wider ones, not fewer."""
    from headprune.models.export import transformers_class
    from headprune.models.heads import adapter_for

    sites = adapter_for(model).sites(model)
    site = next((s for s in sites if s.num_heads != s.original_num_heads), sites[0])
    attention = transformers_class(type(site.attention)).__name__  # not headprune's pruned subclass
    hidden = getattr(config.get_text_config(decoder=True), "hidden_size", None) or getattr(config, "d_model", None)
    if site.num_heads and hidden and hidden // site.num_heads != site.head_dim:
        return (f"{attention} derives its head size from hidden_size / heads ({hidden} / {site.num_heads} = "
                f"{hidden // site.num_heads}, not {site.head_dim}), so a stock {type(model).__name__} cannot hold "
                "fewer heads of the same size: a smaller stock export needs a family whose config holds head_dim")
    return ""


def _check_logits(model, stock) -> None:
    """The stock model's logits on a few tokens equal the pruned model's (the same tensors, its own class; the
    same-size export: zeros added where the removed heads were)."""
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

def stock_card(model, name: str, zeroed=None, **card_kwargs) -> str:
    """README.md: ``export.model_card``'s card for a stock checkpoint (no remote code). ``zeroed``: the same-size
    export's stock model (None: the smaller export), whose card says it is as large as the original, how many heads'
    weights are zero and why no smaller stock export exists. Where ``card_kwargs`` name no ``layout_line`` (no pruning
    layout chose the heads), the card says the model's shape (``shape_line``)."""
    from headprune.models.export import auto_class, model_card

    auto = auto_class(type(model)) or type(model).__name__
    if card_kwargs.get("layout_line") is None:
        card_kwargs["layout_line"] = shape_line(model)
    if zeroed is None:
        return model_card(model, {auto: type(model).__name__}, name, [], stock=True, **card_kwargs)
    return model_card(model, {auto: type(model).__name__}, name, [], stock=True, same_size=why_not_smaller(model) or "",
                      parameters=_parameter_count(zeroed), **card_kwargs)


def shape_line(model) -> str:
    """The card's line of a pruned model's layout, read off its shape: every layer alike, or each its own."""
    try:
        uniform_counts(model)
    except NoSmallerStock:  # every layer alike, none of its heads left
        pass
    except ValueError:
        return "- layout: each layer keeps its own heads"
    return "- layout: every layer keeps as many heads and whole key/value groups"


def _parameter_count(model) -> int:
    """Parameters of ``model``, a tensor shared by two names (tied embeddings) counted once."""
    seen = {}
    for p in model.parameters():
        seen.setdefault((p.data_ptr(), tuple(p.shape)), p.numel())
    return sum(seen.values())
