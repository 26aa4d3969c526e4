"""Write a Llama-architecture model, pruned in any layout, as a GGUF file that llama.cpp serves (#58 item 3).

The paper's free layout (each layer keeping its own heads) has no stock transformers config, and llama.cpp's
``llama`` graph builds every layer with layer 0's head counts. Its ``deci`` architecture (DeciLM / Nemotron-NAS:
the Llama graph with per-layer choices) reads ``deci.attention.head_count`` and ``head_count_kv`` as per-layer
arrays and builds each layer with its own, ``n_head == 0`` meaning a layer without attention. So every model is
written as ``deci``, unpruned and uniform ones too: one path, and llama.cpp computes the same graph.

What llama.cpp asks of the heads, met here (and why):

- ggml maps query head i to key/value head ``i // (n_head / n_head_kv)``: contiguous groups of one size. A layer
  whose kept query heads read their key/value heads unevenly (2 on one, 1 on another) gets its query heads sorted
  by the key/value head they read (query rows and output-projection columns moved together) and each key/value
  head repeated ``count / g`` times, g the greatest common divisor of the counts (``head_plan``).
- The head size is read from layer 0's count (no key length is read where it is 0), so a layer 0 without heads
  gets one all-zero head; so does a layer without heads whose output projection kept a bias (bias compensation),
  which llama.cpp adds only after attention. A zero query and key attend uniformly to zero values: the head adds
  exactly nothing.
- q and k rows take llama.cpp's rope layout: within each head, the two halves transformers rotates as pairs are
  interleaved (row j of the first half, then row j of the second).

Which models: Llama-architecture decoders (``llama``, ``mistral``: Llama 2/3, SmolLM/SmolLM2, TinyLlama, Mistral),
what the deci graph computes: RMSNorm, rotary positions on the whole head (default or Llama 3 frequencies), a
SiLU-gated MLP, no projection biases (an output-projection bias added by bias compensation is written). Refused in
one line: another family (GPT-2, Qwen3's q/k norms, Gemma, ...: their llama.cpp graphs take one head count for all
layers), other rope scalings, a tokenizer llama.cpp has no vocabulary type for (word-level: pass None to write the
model alone, which llama.cpp then runs on token ids).

The tokenizer (a fast one, its tokenizer.json model BPE): byte-level BPE as llama.cpp's ``gpt2`` vocabulary (tokens,
types, merges; the pre-tokenizer named where recognised, else ``default``), SentencePiece-style BPE (byte fallback:
Llama 2, TinyLlama, Mistral) as its ``llama`` vocabulary (tokens, types, scores: minus the token's id, the order
SentencePiece merges by). Added special tokens are control tokens, ids the embedding has beyond the tokenizer are
unused padding tokens; bos/eos/unk/pad ids, whether a bos is added, and the chat template are written.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from headprune.io.atomic import atomic_path

ARCH = "deci"
# The model types whose transformers class computes what llama.cpp's deci graph does (checked further per config)
DECI_MODEL_TYPES = ("llama", "mistral")
ROPE_TYPES = ("default", "llama3")  # rope_type values written (llama3: its frequency factors as rope_freqs)
OUTTYPES = ("f32", "f16")
# llama.cpp's token types (gguf.TokenType), as integers so that this module imports without gguf
NORMAL, UNKNOWN, CONTROL, UNUSED, BYTE = 1, 2, 3, 5, 6


def save_gguf(model, tokenizer, path, outtype: str = "f16") -> Path:
    """Write ``model`` (a Llama-architecture causal LM, pruned in any layout or not) and ``tokenizer`` (a fast BPE
    tokenizer, or None for the model alone) to ``path`` as a ``deci`` GGUF file llama.cpp runs (see the module
    docstring): weights in ``outtype`` ("f16" or "f32"; norms and rope factors f32). Written to a temporary name
    and renamed. Returns the path; a one-line ValueError, with nothing written, for what llama.cpp cannot run.

    >>> import gguf
    >>> _ = remove_heads(model, [("dec_self", 0, 0), ("dec_self", 0, 1), ("dec_self", 1, 3)])
    >>> path = save_gguf(model, None, "tiny.gguf", outtype="f32")  # its tokenizer is word-level: the model alone
    >>> fields = gguf.GGUFReader(path).fields
    >>> [int(v) for v in fields["deci.attention.head_count"].contents()]  # 2 and 3 of 4 heads per layer
    [2, 3]
    >>> save_gguf(model, tokenizer, "tiny.gguf")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ... tokenizer model is WordLevel, for which llama.cpp has no vocabulary type ...
    """
    import gguf

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype {outtype!r}: one of {', '.join(OUTTYPES)}")
    config = deci_config(model)
    tensors, heads, kv_heads = model_tensors(model, config)
    vocab = vocabulary(tokenizer, tensors["token_embd.weight"].shape[0]) if tokenizer is not None else None
    path = Path(path)
    quiet = logging.getLogger("gguf")  # its writer logs each file at INFO, into a job's log
    level = quiet.level
    quiet.setLevel(max(level, logging.WARNING))
    try:
        _write(gguf, path, model, config, tensors, heads, kv_heads, vocab, outtype)
    finally:
        quiet.setLevel(level)
    return path


def _write(gguf, path: Path, model, config, tensors: dict, heads, kv_heads, vocab, outtype: str) -> None:
    with atomic_path(path) as staging:
        writer = gguf.GGUFWriter(staging, ARCH)
        _write_metadata(writer, model, config, heads, kv_heads, outtype, len(tensors["token_embd.weight"]))
        if vocab is None:
            writer.add_tokenizer_model("none")
        else:
            vocab.write(writer)
        for name, tensor in tensors.items():
            array = tensor.detach().to("cpu", torch.float32).numpy()
            writer.add_tensor(name, array.astype(np.float16) if outtype == "f16" and array.ndim == 2 else array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()


def refused(model, why: str) -> ValueError:
    return ValueError(f"a {type(model).__name__} (model type {model.config.model_type!r}) cannot be written as a "
                      f"GGUF llama.cpp runs: {why}")


def deci_config(model):
    """The text config of ``model`` once checked to be what llama.cpp's deci graph computes (a ValueError if not)."""
    from headprune.models.prune import ADDED_BIAS_KEY, pruned_heads

    config = model.config.get_text_config(decoder=True)
    model_type = getattr(config, "model_type", None)
    if model_type not in DECI_MODEL_TYPES:
        return _refuse_family(model, pruned_heads(model))
    problems = [f"{key} is {getattr(config, key)}" for key in ("attention_bias", "mlp_bias")
                if getattr(config, key, False)]
    if getattr(config, "hidden_act", "silu") != "silu":
        problems.append(f"hidden_act is {config.hidden_act!r}, not silu")
    rope = dict(getattr(config, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") not in ROPE_TYPES:
        problems.append(f"rope_type {rope.get('rope_type')!r} (written: {', '.join(ROPE_TYPES)})")
    if getattr(config, "partial_rotary_factor", 1.0) not in (None, 1.0):
        problems.append("rotary positions on part of each head")
    if not all(hasattr(model, "model") and hasattr(model.model, n) for n in ("embed_tokens", "layers", "norm")):
        problems.append(f"{type(model).__name__} is not a causal LM with model.embed_tokens/layers/norm")
    if problems:
        raise refused(model, "; ".join(problems))
    added = getattr(config, ADDED_BIAS_KEY, None) or getattr(model.config, ADDED_BIAS_KEY, None) or {}
    if set(added) - {"dec_self"}:
        raise refused(model, f"output biases of {sorted(added)}")
    return config


def _refuse_family(model, removed: dict):
    """A model type the deci graph does not compute: its own llama.cpp graph takes one head count for all layers."""
    layouts = {t: sorted({len(v) for v in layers.values()}) for t, layers in removed.items() if layers}
    where = "pruned" if any(layouts.values()) else "unpruned"
    raise refused(model, f"llama.cpp's per-layer head counts are read by its deci graph only, which computes "
                         f"Llama-architecture models ({', '.join(DECI_MODEL_TYPES)}); a {where} model of this "
                         "family goes to GGUF through llama.cpp's own convert_hf_to_gguf.py from a stock export "
                         "(headprune prune --layout uniform)")


# --- The heads, as llama.cpp groups them --------------------------------------------------------------------

@dataclass
class HeadPlan:
    """One layer's heads in llama.cpp's order: ``queries``, the kept query heads' positions (in the pruned
    projection) sorted by the key/value head they read; ``kv``, the kept key/value heads' positions, repeated so
    that query i reads ``kv[i // (len(queries) // len(kv))]``; ``zero``: one all-zero head stands in for none."""

    queries: list[int]
    kv: list[int]
    zero: bool = False

    @property
    def heads(self) -> int:
        return 1 if self.zero else len(self.queries)

    @property
    def kv_heads(self) -> int:
        return 1 if self.zero else len(self.kv)


def head_plan(kv_index: list[int], zero_head: bool = False) -> HeadPlan:
    """The plan of a layer whose kept query head i reads kept key/value head ``kv_index[i]`` (each kept key/value
    head read by at least one): queries stably sorted by key/value head; key/value head k, read by c_k queries,
    repeated c_k / g times, g = gcd of the c_k, so every group has g queries. No heads: none, or with
    ``zero_head`` one zero head (layer 0; a layer whose output projection has a bias).

    >>> head_plan([0, 1, 0])  # query heads 0 and 2 read kv head 0, query 1 reads kv head 1: groups of 1
    HeadPlan(queries=[0, 2, 1], kv=[0, 0, 1], zero=False)
    >>> head_plan([0, 0, 1, 1, 1, 1])  # 2 and 4 queries: gcd 2, kv head 1 twice
    HeadPlan(queries=[0, 1, 2, 3, 4, 5], kv=[0, 1, 1], zero=False)
    """
    if not kv_index:
        return HeadPlan([], [], zero=zero_head)
    counts = [kv_index.count(k) for k in range(max(kv_index) + 1)]
    if 0 in counts:
        raise ValueError(f"key/value heads {[k for k, c in enumerate(counts) if not c]} are read by no query head")
    group = math.gcd(*counts)
    queries = sorted(range(len(kv_index)), key=lambda i: (kv_index[i], i))
    return HeadPlan(queries, [k for k, c in enumerate(counts) for _ in range(c // group)])


def rope_rows(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """q or k rows (heads * head_dim, ...) in llama.cpp's rope layout: transformers rotates row j of a head with
    row j + head_dim / 2, llama.cpp rows 2j and 2j + 1, so each head's halves are interleaved."""
    rest = weight.shape[1:]
    return weight.reshape(-1, 2, head_dim // 2, *rest).transpose(1, 2).reshape(weight.shape)


def layer_attention(site, plan: HeadPlan, hidden: int) -> dict[str, torch.Tensor]:
    """The GGUF attention tensors of one layer (``attn_q`` ... ``attn_output``, ``attn_output.bias`` where the
    output projection has one), heads as ``plan`` orders them; {} for a layer without attention."""
    layout, d = site.layout, site.head_dim  # the layout's projections (the site's value may be a view)
    bias = getattr(layout.output, "bias", None)
    if plan.zero:
        zero = layout.output.weight.new_zeros((d, hidden))
        tensors = {"attn_q": zero, "attn_k": zero, "attn_v": zero, "attn_output": zero.T.contiguous()}
    elif not plan.queries:
        return {}
    else:
        query = layout.query.weight.reshape(-1, d, hidden)[plan.queries].reshape(-1, hidden)
        kv = torch.tensor(plan.kv, dtype=torch.long, device=query.device)
        key = layout.key.weight.reshape(-1, d, hidden)[kv].reshape(-1, hidden)
        value = layout.value.weight.reshape(-1, d, hidden)[kv].reshape(-1, hidden)
        output = layout.output.weight.reshape(hidden, -1, d)[:, plan.queries].reshape(hidden, -1)
        tensors = {"attn_q": rope_rows(query, d), "attn_k": rope_rows(key, d), "attn_v": value,
                   "attn_output": output}
    if bias is not None:
        tensors["attn_output.bias"] = bias
    return {f"{name}.weight" if not name.endswith("bias") else name: t for name, t in tensors.items()}


def model_tensors(model, config) -> tuple[dict[str, torch.Tensor], list[int], list[int]]:
    """Every tensor the GGUF holds, by its GGUF name, and the per-layer query and key/value head counts."""
    from headprune.models.heads import adapter_for

    sites = {site.layer: site for site in adapter_for(model).sites(model)}
    inner, hidden = model.model, config.hidden_size
    tensors = {"token_embd.weight": inner.embed_tokens.weight}
    heads, kv_heads = [], []
    for number, layer in enumerate(inner.layers):
        site = sites[number]
        if site.layout is None or site.layout.fused is not None:
            raise refused(model, f"layer {number}'s attention is not separate q/k/v projections")
        has_bias = getattr(site.layout.output, "bias", None) is not None
        plan = head_plan(site.layout.kv_index(), zero_head=number == 0 or has_bias)
        heads.append(plan.heads), kv_heads.append(plan.kv_heads)
        prefix = f"blk.{number}."
        attention = layer_attention(site, plan, hidden)
        if attention:
            tensors[prefix + "attn_norm.weight"] = layer.input_layernorm.weight
        tensors.update({prefix + name: t for name, t in attention.items()})
        tensors[prefix + "ffn_norm.weight"] = layer.post_attention_layernorm.weight
        for ours, theirs in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
            tensors[f"{prefix}{ours}.weight"] = getattr(layer.mlp, theirs).weight
    tensors["output_norm.weight"] = inner.norm.weight
    head = model.get_output_embeddings()
    if head is not None and head.weight.data_ptr() != inner.embed_tokens.weight.data_ptr():
        tensors["output.weight"] = head.weight  # tied: llama.cpp reads token_embd again
    factors = _rope_factors(config, sites[0].head_dim)
    if factors is not None:
        tensors["rope_freqs.weight"] = factors
    return tensors, heads, kv_heads


def _rope_factors(config, head_dim: int) -> torch.Tensor | None:
    """Llama 3's rope scaling as llama.cpp takes it: one divisor per frequency (None for plain rope). Written from
    the Llama 3.1 rule: wavelengths under original context / high_freq_factor kept, over original context /
    low_freq_factor divided by factor, between them interpolated smoothly."""
    rope = dict(getattr(config, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") == "default":
        return None
    base = rope.get("rope_theta", 10000.0)
    factor, low, high = rope.get("factor", 8.0), rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    context = rope.get("original_max_position_embeddings", 8192)
    frequencies = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    wavelengths = 2 * math.pi / frequencies
    smooth = (context / wavelengths - low) / (high - low)
    between = 1 / ((1 - smooth) / factor + smooth)
    divisors = torch.where(wavelengths < context / high, torch.ones_like(between),
                           torch.where(wavelengths > context / low, torch.full_like(between, factor), between))
    return divisors.float()


def _write_metadata(writer, model, config, heads, kv_heads, outtype: str, n_vocab: int) -> None:
    import gguf

    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    writer.add_name(Path(str(getattr(config, "name_or_path", "") or "model")).name or "model")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16" else gguf.LlamaFileType.ALL_F32)
    writer.add_block_count(len(heads))
    writer.add_context_length(int(getattr(config, "max_position_embeddings", 2048)))
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length([int(layer.mlp.gate_proj.out_features) for layer in model.model.layers])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    rope = dict(getattr(config, "rope_parameters", None) or {})
    writer.add_rope_freq_base(float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(n_vocab)


# --- The tokenizer ------------------------------------------------------------------------------------------

@dataclass
class Vocabulary:
    """A tokenizer as llama.cpp reads it: its vocabulary type ("gpt2": byte-level BPE; "llama": SentencePiece),
    pre-tokenizer name, tokens with their types, merges or scores, special ids and chat template."""

    model: str
    pre: str
    tokens: list[str]
    types: list[int]
    merges: list[str]
    scores: list[float] | None
    special: dict[str, int]
    add_bos: bool
    add_eos: bool
    chat_template: str | None

    def write(self, writer) -> None:
        writer.add_tokenizer_model(self.model)
        writer.add_tokenizer_pre(self.pre)
        writer.add_token_list(self.tokens)
        writer.add_token_types(self.types)
        if self.scores is not None:
            writer.add_token_scores(self.scores)
        if self.merges:
            writer.add_token_merges(self.merges)
        for role, token_id in self.special.items():
            getattr(writer, f"add_{role}_token_id")(token_id)
        writer.add_add_bos_token(self.add_bos)
        writer.add_add_eos_token(self.add_eos)
        if self.chat_template:
            writer.add_chat_template(self.chat_template)


def vocabulary(tokenizer, n_vocab: int) -> Vocabulary:
    """``tokenizer`` (a fast tokenizer) for an embedding of ``n_vocab`` rows; a ValueError for what llama.cpp has
    no vocabulary type for."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"the tokenizer {type(tokenizer).__name__} is not a fast one (no tokenizer.json): "
                         "llama.cpp's vocabulary is written from tokenizer.json")
    spec = json.loads(backend.to_str())
    kind = spec["model"].get("type") or type(backend.model).__name__
    if kind != "BPE":
        raise ValueError(f"the tokenizer model is {kind}, for which llama.cpp has no vocabulary type (it reads BPE: "
                         "byte-level or SentencePiece-style); save_gguf(model, None, path) writes the model alone")
    byte_fallback = bool(spec["model"].get("byte_fallback"))
    vocab = tokenizer.get_vocab()
    if max(vocab.values()) >= n_vocab:
        raise ValueError(f"the tokenizer has token id {max(vocab.values())}, the embedding {n_vocab} rows")
    added = {t.content: t for t in tokenizer.added_tokens_decoder.values()}
    by_id = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(n_vocab):
        token = by_id.get(i)
        tokens.append(token if token is not None else f"[PAD{i}]")
        types.append(UNUSED if token is None else _token_type(token, added, tokenizer, byte_fallback))
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    scores = [0.0 if t != NORMAL else -float(i) for i, t in enumerate(types)] if byte_fallback else None
    special = {role: getattr(tokenizer, f"{attr}_token_id") for role, attr in
               (("bos", "bos"), ("eos", "eos"), ("unk", "unk"), ("pad", "pad"))}
    special = {role: int(i) for role, i in special.items() if i is not None}
    probe = tokenizer("a")["input_ids"]
    return Vocabulary(model="llama" if byte_fallback else "gpt2",
                      pre="default" if byte_fallback else _pre_tokenizer(spec.get("pre_tokenizer")),
                      tokens=tokens, types=types, merges=[] if byte_fallback else merges, scores=scores,
                      special=special, add_bos=bool(probe) and probe[0] == special.get("bos", -1),
                      add_eos=bool(probe) and len(probe) > 1 and probe[-1] == special.get("eos", -1),
                      chat_template=getattr(tokenizer, "chat_template", None) or None)


def _token_type(token: str, added: dict, tokenizer, byte_fallback: bool) -> int:
    if token == getattr(tokenizer, "unk_token", None):
        return UNKNOWN
    if token in added:
        return CONTROL if added[token].special else NORMAL
    if byte_fallback and len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        return BYTE
    return NORMAL


def _pre_tokenizer(spec: dict | None) -> str:
    """llama.cpp's name for a byte-level pre-tokenizer it knows, read from the tokenizer.json's pre_tokenizer:
    SmolLM's (single digits, then GPT-2's split), Llama 3's (its split pattern), GPT-2's (a byte-level
    pre-tokenizer splitting by its own pattern); else "default" (punctuation split apart: another tokenization)."""
    text = json.dumps(spec or {})
    gpt2_split = '"ByteLevel"' in text and '"use_regex": true' in text
    if '"individual_digits": true' in text and gpt2_split:
        return "smollm"
    if "\\\\p{N}{1,3}" in text and "(?i:'s|'t|'re|'ve|'m|'ll|'d)" in text:
        return "llama-bpe"
    return "gpt-2" if gpt2_split and (spec or {}).get("type") == "ByteLevel" else "default"
