"""The attention geometry of the checkpoints users run, as data: one ``Checkpoint`` per published model (issue #44).

tests/decoder_zoo.py builds every family at one tiny geometry (6 query heads on 2 kv heads, head_dim 12). Real
checkpoints meet what it never does: heads == head_dim (gpt-oss: 64 and 64), heads * head_dim != hidden (Qwen3-32B,
Gemma 3), a per-layer head_dim (Gemma 4), a multimodal wrapper around the language model (Gemma 3 and 4 load as
``...ForConditionalGeneration``), per-head attention sinks, a q/k norm over the whole projection (OLMo 2).

Each entry keeps the attention geometry of its checkpoint's config.json exactly (hidden size, query and kv heads,
head_dim, sliding window, sinks, q/k norms, tied embeddings, layer types, attention scaling) and shrinks what is not
attention: two layers (one of each layer type where the model alternates: sliding/global, RoPE/NoPE), a vocabulary
of ``VOCAB``, a feed-forward and expert width of ``FFN`` (expert counts are kept), a small vision tower.

Where the numbers come from: from memory of each checkpoint's published config.json, unless a comment on the line says
"default": then the value is transformers' default config class's (which the checkpoint's config.json leaves out, or
which the entry stands for: Gemma 4). Each ``# default`` was read off the config class of transformers 5.23. The
Granite-3.1-8B, Phi-4 and SmolLM3 numbers were also compared with copies of their config.json quoted in public code.
What a config.json has and the entry does not set (norm epsilons, rope of Gemma 4, ...) is the class's default.

``numeric_hidden``: where a model at its real hidden size is too large for CPU tests (a q_proj of 8192 x 8192), the
layout is checked on the meta device at the real size, and the numbers on a variant with the same heads, kv heads and
head_dim but this hidden size.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import transformers
from torch import nn

VOCAB, FFN, LAYERS = 128, 16, 2
SLIDING_GLOBAL = ["sliding_attention", "full_attention"]  # one local and one global layer of an alternating model


@dataclass(frozen=True)
class Checkpoint:
    name: str  # the pytest id
    hub_id: str
    model_class: str  # the transformers class the checkpoint loads as (its config.json's "architectures")
    config_class: str  # that class's config (the multimodal wrapper's, for Gemma 3 and 4)
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int | tuple[int, ...]  # one per layer where the layers differ (Gemma 4's global layers)
    text: dict  # the (text) config's attention geometry, as config kwargs
    vision: dict | None = None  # a multimodal wrapper's vision config, shrunk (its geometry is not under test)
    wrapper: dict = field(default_factory=dict)  # other kwargs of the wrapper's config
    numeric_hidden: int | None = None  # see the module docstring
    per_head: tuple[str, ...] = ()  # attention parameters with one entry per query head (gpt-oss's sinks)
    uniform_refused: str | None = None  # a word uniform masking's refusal must name (None: uniform is accepted)
    pruning_refused: str | None = None  # a word pruning's refusal must name (None: pruning is exact)
    generate: bool = False  # also compare generate() on the pruned model with generate() under the gates
    uniform_by_hand: bool = False  # also compare uniform masking with a uniform attention computed by hand
    dtype: torch.dtype = torch.float32
    notes: str = ""

    def __repr__(self):  # pytest prints it with every failing assertion
        return f"Checkpoint({self.name})"

    def head_dims(self) -> list[int]:
        dims = self.head_dim if isinstance(self.head_dim, tuple) else (self.head_dim,) * LAYERS
        return list(dims)

    def geometry(self) -> list[tuple[int, int, int]]:
        """(query heads, kv heads, head_dim) of each layer."""
        return [(self.heads, self.kv_heads, d) for d in self.head_dims()]


CHECKPOINTS = [
    Checkpoint(
        "llama-3-8b", "meta-llama/Meta-Llama-3-8B", "LlamaForCausalLM", "LlamaConfig",
        hidden=4096, heads=32, kv_heads=8, head_dim=128,
        text=dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                  rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, rms_norm_eps=1e-5,
                  tie_word_embeddings=False, attention_bias=False)),
    Checkpoint(
        "llama-3-70b", "meta-llama/Meta-Llama-3-70B", "LlamaForCausalLM", "LlamaConfig",
        hidden=8192, heads=64, kv_heads=8, head_dim=128,
        text=dict(hidden_size=8192, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                  rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, rms_norm_eps=1e-5,
                  tie_word_embeddings=False, attention_bias=False),
        numeric_hidden=1024),
    Checkpoint(
        "qwen3-8b", "Qwen/Qwen3-8B", "Qwen3ForCausalLM", "Qwen3Config",
        hidden=4096, heads=32, kv_heads=8, head_dim=128,
        text=dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
                  use_sliding_window=False, attention_bias=False),
        uniform_by_hand=True, notes="q_norm/k_norm per head (RMSNorm over head_dim)"),
    Checkpoint(
        "qwen3-32b", "Qwen/Qwen3-32B", "Qwen3ForCausalLM", "Qwen3Config",
        hidden=5120, heads=64, kv_heads=8, head_dim=128,
        text=dict(hidden_size=5120, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
                  use_sliding_window=False, attention_bias=False),
        numeric_hidden=1024, notes="64 * 128 = 8192 != hidden 5120"),
    Checkpoint(
        "qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "Qwen3MoeForCausalLM", "Qwen3MoeConfig",
        hidden=2048, heads=32, kv_heads=4, head_dim=128,
        # Qwen3MoeConfig has no head_dim field: without the checkpoint's "head_dim": 128 the model would take
        # hidden / heads = 64
        text=dict(hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                  num_local_experts=128, num_experts_per_tok=8, moe_intermediate_size=FFN, norm_topk_prob=True,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, tie_word_embeddings=False,
                  use_sliding_window=False, attention_bias=False),
        notes="MoE: 128 experts, 8 per token (expert width 768 shrunk to FFN)"),
    Checkpoint(
        "gemma-3-4b", "google/gemma-3-4b-it", "Gemma3ForConditionalGeneration", "Gemma3Config",
        hidden=2560, heads=8, kv_heads=4, head_dim=256,
        text=dict(hidden_size=2560,
                  num_attention_heads=8,  # default (config.json leaves it out)
                  num_key_value_heads=4,  # default
                  head_dim=256,  # default
                  query_pre_attn_scalar=256,  # default
                  sliding_window=1024, layer_types=SLIDING_GLOBAL,  # 5 local : 1 global, one of each here
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                   "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}},
                  tie_word_embeddings=True),
        # SigLIP (hidden 1152, 16 heads, 27 layers) shrunk; as deep as the text model: a search for "the list of
        # num_hidden_layers layers with an attention" finds the vision tower's first
        vision=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
                    image_size=28, patch_size=14, vision_use_head=False),
        wrapper=dict(mm_tokens_per_image=4, tie_word_embeddings=True),
        generate=True, uniform_by_hand=True, notes="multimodal wrapper; vision tower as deep as the text model"),
    Checkpoint(
        "gemma-3-27b", "google/gemma-3-27b-it", "Gemma3ForConditionalGeneration", "Gemma3Config",
        hidden=5376, heads=32, kv_heads=16, head_dim=128,
        text=dict(hidden_size=5376, num_attention_heads=32, num_key_value_heads=16, head_dim=128,
                  query_pre_attn_scalar=168, sliding_window=1024, layer_types=SLIDING_GLOBAL,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                   "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}},
                  tie_word_embeddings=True),
        vision=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                    image_size=28, patch_size=14, vision_use_head=False),
        wrapper=dict(mm_tokens_per_image=4, tie_word_embeddings=True),
        numeric_hidden=1024, notes="multimodal wrapper; 32 * 128 = 4096 != hidden 5376"),
    # Gemma 4: every number is Gemma4TextConfig()'s default (the entry stands for the defaults, which transformers
    # documents with google/gemma-4-e2b-it); its checkpoints load as Gemma4ForConditionalGeneration.
    Checkpoint(
        "gemma-4", "google/gemma-4-e2b-it", "Gemma4ForConditionalGeneration", "Gemma4Config",
        hidden=2304, heads=8, kv_heads=4,
        head_dim=(256, 512),  # default: head_dim 256 on sliding layers, global_head_dim 512 on full ones
        text=dict(hidden_size=2304, num_attention_heads=8, num_key_value_heads=4, head_dim=256,  # default
                  sliding_window=512, layer_types=SLIDING_GLOBAL,  # default (5 local : 1 global)
                  hidden_size_per_layer_input=256, vocab_size_per_layer_input=VOCAB,  # default width; vocab shrunk
                  attention_k_eq_v=False, num_kv_shared_layers=0, tie_word_embeddings=True),  # default
        # Gemma4VisionConfig() shrunk; its attention projections are clippable wrappers of nn.Linear
        vision=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=2, head_dim=16, position_embedding_size=64),
        wrapper=dict(tie_word_embeddings=True),
        notes="multimodal wrapper; per-layer head_dim; q, k and v norms per head; per-layer input embeddings"),
    # gpt-oss: rope (yarn, factor 32, theta 150000) and rms_norm_eps 1e-5 are GptOssConfig()'s defaults, as in the
    # checkpoints' config.json
    Checkpoint(
        "gpt-oss-20b", "openai/gpt-oss-20b", "GptOssForCausalLM", "GptOssConfig",
        hidden=2880, heads=64, kv_heads=8, head_dim=64,
        text=dict(hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64, sliding_window=128,
                  layer_types=SLIDING_GLOBAL, num_local_experts=32, num_experts_per_tok=4, attention_bias=True,
                  tie_word_embeddings=False),
        per_head=("sinks",), uniform_refused="sinks", generate=True,
        notes="heads == head_dim (64); a learned sink logit per head"),
    Checkpoint(
        "gpt-oss-120b", "openai/gpt-oss-120b", "GptOssForCausalLM", "GptOssConfig",
        hidden=2880, heads=64, kv_heads=8, head_dim=64,
        text=dict(hidden_size=2880, num_attention_heads=64, num_key_value_heads=8, head_dim=64, sliding_window=128,
                  layer_types=SLIDING_GLOBAL, num_local_experts=128, num_experts_per_tok=4, attention_bias=True,
                  tie_word_embeddings=False),
        per_head=("sinks",), uniform_refused="sinks"),
    Checkpoint(
        "mistral-small-3", "mistralai/Mistral-Small-24B-Base-2501", "MistralForCausalLM", "MistralConfig",
        hidden=5120, heads=32, kv_heads=8, head_dim=128,
        text=dict(hidden_size=5120, num_attention_heads=32, num_key_value_heads=8, head_dim=128, sliding_window=None,
                  rope_parameters={"rope_type": "default", "rope_theta": 100000000.0}, rms_norm_eps=1e-5,
                  tie_word_embeddings=False),
        numeric_hidden=1024, notes="32 * 128 = 4096 != hidden 5120"),
    Checkpoint(
        "phi-4", "microsoft/phi-4", "Phi3ForCausalLM", "Phi3Config",
        hidden=5120, heads=40, kv_heads=10, head_dim=128,
        # Phi3Config has no head_dim: hidden / heads = 128 at the real size; the numeric variant passes it
        text=dict(hidden_size=5120, num_attention_heads=40, num_key_value_heads=10, sliding_window=None,
                  rms_norm_eps=1e-5,
                  rope_parameters={"rope_type": "default", "rope_theta": 250000.0, "partial_rotary_factor": 1.0},
                  tie_word_embeddings=False),
        numeric_hidden=1024, notes="fused qkv_proj"),
    Checkpoint(
        "olmo-2-7b", "allenai/OLMo-2-1124-7B", "Olmo2ForCausalLM", "Olmo2Config",
        hidden=4096, heads=32, kv_heads=32, head_dim=128,
        text=dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=32,
                  rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, rms_norm_eps=1e-6,
                  tie_word_embeddings=False),
        pruning_refused="q_norm", notes="q_norm/k_norm over the whole projection: pruning changes the other heads"),
    Checkpoint(
        "granite-3-8b", "ibm-granite/granite-3.1-8b-base", "GraniteForCausalLM", "GraniteConfig",
        hidden=4096, heads=32, kv_heads=8, head_dim=128,
        text=dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, attention_multiplier=0.0078125,
                  embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=16.0, rms_norm_eps=1e-5,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000000.0}, tie_word_embeddings=True),
        notes="muP multipliers: scores scaled by attention_multiplier = 1/128, not head_dim ** -0.5"),
    Checkpoint(
        "smollm3-3b", "HuggingFaceTB/SmolLM3-3B", "SmolLM3ForCausalLM", "SmolLM3Config",
        hidden=2048, heads=16, kv_heads=4, head_dim=128,
        text=dict(hidden_size=2048, num_attention_heads=16, num_key_value_heads=4,
                  no_rope_layers=[1, 0],  # NoPE on every 4th layer: one RoPE and one NoPE layer here
                  rope_parameters={"rope_type": "default", "rope_theta": 5000000.0}, tie_word_embeddings=True),
        notes="NoPE layers"),
]


def checkpoint(name: str) -> Checkpoint:
    return next(c for c in CHECKPOINTS if c.name == name)


# --- Building ------------------------------------------------------------------------------------------------

SHRUNK = dict(num_hidden_layers=LAYERS, vocab_size=VOCAB, intermediate_size=FFN, max_position_embeddings=4096,
              pad_token_id=0, bos_token_id=1, eos_token_id=2)


def config_of(entry: Checkpoint, hidden: int | None = None):
    """The entry's config: its attention geometry, the rest shrunk (``hidden``: another hidden size, same heads)."""
    text = {**SHRUNK, **entry.text}
    if hidden is not None:
        text["hidden_size"] = hidden
        text.setdefault("head_dim", entry.head_dims()[0])  # not hidden / heads once the hidden size changes
    cls = getattr(transformers, entry.config_class)
    if entry.config_class == "Gemma3Config":
        return cls(text_config=text, vision_config=entry.vision, **entry.wrapper)
    if entry.config_class == "Gemma4Config":
        vision = None if entry.vision is None else transformers.Gemma4VisionConfig(**entry.vision)
        return cls(text_config=text, vision_config=vision, **entry.wrapper)
    return cls(**text)


def meta_model(entry: Checkpoint):
    """The checkpoint's class at its real attention geometry on the meta device (shapes only)."""
    with torch.device("meta"):
        return getattr(transformers, entry.model_class)(config_of(entry))


def numeric_model(entry: Checkpoint, seed: int = 0, attention: str = "eager"):
    """The model the numeric checks run on: real geometry (or ``numeric_hidden``), random weights of unit-scale
    activations (every head matters), eval mode, in the entry's dtype.

    Built on the meta device and filled here: nn.Linear's own init and transformers' would each draw every weight
    once more (seconds at a hidden size of 4096).
    """
    config = config_of(entry, entry.numeric_hidden)
    config._attn_implementation = attention
    cls = getattr(transformers, entry.model_class)
    with torch.device("meta"):
        model = cls(config)
    model.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if type(module) is nn.Linear:  # a subclass may hold buffers transformers' init sets
                module.weight.normal_(0.0, module.weight.shape[1] ** -0.5, generator=generator)
                if module.bias is not None:
                    module.bias.normal_(0.0, 0.1, generator=generator)
                module._is_hf_initialized = True  # transformers' init below leaves it as it is
    model.init_weights()  # the rest as the class makes it: norms, rotary and embedding-scale buffers, experts, sinks
    tied = model.get_output_embeddings().weight
    with torch.no_grad():
        for name, p in model.named_parameters():
            if isinstance(model.get_submodule(name.rpartition(".")[0]), nn.Embedding):
                # Tied: the output projection too, whose logits should stay of order 1 (tolerances are absolute)
                p.normal_(0.0, p.shape[1] ** -0.5 if p is tied else 1.0, generator=generator)
            elif name.endswith(".sinks"):  # learned per-head sink logits: not all equal
                p.normal_(0.0, 1.0, generator=generator)
    return model.to(entry.dtype).eval()


def bfloat16(entry: Checkpoint, hidden: int | None = 1024) -> Checkpoint:
    """The entry in bfloat16 (its numbers at ``hidden``: CPU matrix products in bfloat16 are slow)."""
    return replace(entry, name=f"{entry.name}-bf16", dtype=torch.bfloat16, numeric_hidden=hidden, generate=False,
                   uniform_by_hand=False)
