"""Tiny random models of every decoder-only LM type in transformers' registries, with the quirks real checkpoints
have: query heads per key/value head that are not a power of two (6 query heads on 2 kv heads), a ``head_dim``
that is not hidden_size / heads where the config has one (12, not 48 / 6), alternating sliding/global layers
where the config has layer types, a short sliding window, tied embeddings as the family's default.

Two lists of model types: ``model_types()`` (transformers' causal-LM registry, each built as AutoModelForCausalLM
builds it) and ``wrapper_types()`` (the image-text-to-text and multimodal-LM registries and the decoder-only audio
LMs of the speech seq2seq one: LLaVA, Qwen2.5-VL, Mistral 3, Gemma 3, Qwen2-Audio, ..., each built as its wrapper
class). ``tiny_model(model_type, wrapper)`` builds either; ``NOT_BUILT`` lists the types that are not built, each
with why, and a model that stays large is refused (``TooLarge``) before anything large is allocated.

``tiny_config(model_type)`` is generic. It starts from the config class's defaults (a real-size model) and shrinks,
recursively, the config and every sub-config in ``sub_configs``: the text config (the one
``get_text_config(decoder=True)`` returns) to ``SIZES``; every other sub-config, a vision or audio tower, to
``TOWER_SIZES``: as deep and as wide as the text model, with as many heads (what a layer search by count mistakes
for the language model). Per-layer tables shrink with the depth: the tiny model's layer ``i`` is one layer of the
default model, chosen so that the few tiny layers show every kind of layer the tables describe (sliding or full
attention, a ``per_layer_config`` entry, membership of an index list such as ``cross_attention_layers``), and
every table (``layer_types``, lists of ``num_hidden_layers`` entries, ``per_layer_config``, index lists) is read
through that choice. ``OVERRIDES`` holds what a type needs beyond that, each with why.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import re

import torch
import transformers
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import PreTrainedConfig
from transformers.models.auto import modeling_auto
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

LAYERS, HEADS, KV_HEADS, HIDDEN, VOCAB = 3, 6, 2, 48, 64
TOWER = HIDDEN  # a vision or audio tower's width
PER_LAYER_HEAD_DIM = 24  # a per_layer_config entry that sets its own head_dim (Gemma 4's global layers) keeps one
SIZES = dict(  # the text model's, and a wrapper's own
    vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, moe_intermediate_size=32,
    num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
    max_position_embeddings=256, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, d_model=HIDDEN, ffn_dim=64,
    n_positions=256, num_layers=LAYERS, num_heads=HEADS, n_inner=64, num_experts=4, num_local_experts=4,
    n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=0,
    shared_expert_intermediate_size=32, num_kv_heads=KV_HEADS, n_kv_heads=KV_HEADS,
    pad_token_id=0, bos_token_id=1, eos_token_id=2, ffn_hidden_size=64, decoder_layers=LAYERS,
    decoder_attention_heads=HEADS, decoder_ffn_dim=64, encoder_layers=1, encoder_attention_heads=HEADS,
    encoder_ffn_dim=64, embedding_dim=HIDDEN, n_group=1, topk_group=1,
    # latent attention (DeepSeek's MLA) and its indexer: real ranks would make a 40M-parameter "tiny" model
    q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8, qk_head_dim=12,
    index_head_dim=8, index_n_heads=2, index_topk=4,
    # state-space layers of hybrids: 128 heads of a 256-state scan run for a minute on a CPU
    mamba_n_heads=4, mamba_d_head=24, mamba_d_ssm=96, mamba_d_state=8, mamba_chunk_size=8, mamba_expand=2,
    mamba_num_heads=4, mamba_head_dim=24, mamba_headdim=24, mamba_dt_rank=8, ssm_state_size=8, state_size=8,
    chunk_size=8, time_step_rank=8, n_groups=1, mamba_n_groups=1, mamba_ngroups=1, expand=2, n_mamba_heads=4,
    # linear-attention and recurrent layers of hybrids (Qwen3-Next, Kimi Linear, OLMo hybrid, RecurrentGemma)
    linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
    linear_head_dim=8, linear_num_heads=HEADS, lru_width=HIDDEN, attention_hidden_size=HIDDEN,
    context_length=256, attention_window_size=4, swa_head_dim=12, sliding_window_size=4,
    # feed-forward widths under other names (LongCat, Llama 4's dense layers, MiniMax, Dots)
    expert_ffn_hidden_size=32, zero_expert_num=2, intermediate_size_mlp=64, moe_hidden_size=32,
    moe_shared_expert_intermediate_size=32, shared_experts_intermediate_size=32, dense_intermediate_size=64,
    shared_intermediate_size=32,
    # families that name their sizes their own way (XLM, CTRL, CPM-Ant, RoCBert, BLT, Marian, DBRX, Kosmos-2)
    emb_dim=HIDDEN, n_layers=LAYERS, dff=64, dim_model=HIDDEN, dim_ff=64, dim_head=8, shape_vocab_size=VOCAB,
    shape_embed_dim=8, pronunciation_vocab_size=VOCAB, pronunciation_embed_dim=8,
    encoder_hash_byte_group_vocab=VOCAB, hidden_size_global=HIDDEN, decoder_vocab_size=VOCAB,
    unpadded_vocab_size=VOCAB, n_heads=HEADS, kv_n_heads=KV_HEADS, embed_dim=HIDDEN, layers=LAYERS,
    attention_heads=HEADS,
    hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB,  # Gemma 3n / 4's per-layer embeddings
    # a wrapper's own widths: its projector from the tower into the text model
    alignment_intermediate_size=64, projector_hidden_size=64, out_hidden_size=HIDDEN, vision_hidden_size=TOWER,
    latent_query_num=4,
)
# A vision or audio tower: small, and as deep and as wide as the text model, with as many heads (see the module
# docstring: a layer search by count or by head widths alone takes it for the language model).
TOWER_SIZES = dict(
    hidden_size=TOWER, intermediate_size=64, num_hidden_layers=LAYERS, depth=LAYERS, num_layers=LAYERS,
    n_layers=LAYERS, encoder_layers=LAYERS, num_blocks=LAYERS, num_attention_heads=HEADS, num_heads=HEADS,
    num_key_value_heads=HEADS, encoder_attention_heads=HEADS, d_model=TOWER, encoder_ffn_dim=64, embed_dim=TOWER,
    mlp_dim=64, hidden_dim=TOWER, dim_head=8, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
    vocab_size=VOCAB, max_position_embeddings=256,
    # images: 4 x 4 patches
    image_size=32, patch_size=8, num_position_embeddings=16, window_size=16, crop_size=32, max_image_size=64,
    min_image_size=32, max_vit_seq_len=64, max_img_size=64, max_num_patches=16, patch_embed_hidden_size=TOWER,
    # audio: 16 mel bins, 64 positions; the convolutions of Phi-4-multimodal's and VibeVoice's encoders
    num_mel_bins=16, max_source_positions=64, ext_pw_out_channel=32, depthwise_separable_out_channel=32,
    nemo_conv_channels=32, num_filters=2, downsample_hidden_size=16,
    # what the tower hands the text model (Llama 4's vision adapter, Dots' adapters, Granite Speech, NeMo)
    out_hidden_size=HIDDEN, projection_dim=HIDDEN, text_hidden_size=HIDDEN, output_dim=HIDDEN,
    vision_output_dim=TOWER, projector_input_dim=TOWER, projector_output_dim=HIDDEN, adapter_in_dim=TOWER,
    adapter_input_size=TOWER, adapter_out_dim=HIDDEN, encoder_hidden_size=TOWER, audio_hidden_size=TOWER,
    # image tokenizers (VQ-VAEs of Chameleon, Emu3, Janus) and a SAM encoder's neck (DeepSeek-OCR 2)
    num_embeddings=VOCAB, codebook_size=VOCAB, latent_channels=16, base_channels=32, resolution=32,
    channel_multiplier=[1, 2], num_res_blocks=1, output_channels=32, downsample_channels=[16, 32],
)
OVERRIDES = {
    "gptj": dict(rotary_dim=4),
    "mamba2": dict(head_dim=16),  # hidden_size * expand must be num_heads * head_dim
    "zamba2": dict(attention_hidden_size=2 * HIDDEN, attention_head_dim=2 * HIDDEN // HEADS, kv_channels=8,
                   adapter_rank=8),  # its attention reads the hidden state concatenated with the embeddings
    "reformer": dict(is_decoder=True, axial_pos_embds_dim=[16, 32], axial_pos_shape=[16, 16]),
    "xlnet": dict(d_head=HIDDEN // HEADS),
    "zaya": dict(num_experts_per_tok=1),  # the only routing it supports
    # latent attention: as many kv heads as query heads; its sliding layers want head_dim = nope + rope widths
    "dots3_note_text": dict(num_key_value_heads=HEADS, head_dim=12),
    "lfm2_moe": dict(layer_types=["conv", "full_attention", "full_attention"]),  # its default has none
    # Qwen4-Exp's indexed-attention layers need the index settings its default leaves unset
    "qwen4_exp_text": dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=12, indexer_budget=8,
                           indexer_compress_ratio=2),
    # DBRX's attention reads rope_theta from its attention sub-config, which has none (nor does its default build)
    # (and it clamps by clip_qkv, None by default)
    "dbrx.attn_config": dict(rope_theta=10_000.0, clip_qkv=8.0),
    # Cohere Compass's default has no rope parameters for its layer type, which its rotary embedding reads
    "cohere_compass_text": dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e4}}),
    # an Omni thinker's config has no vision start token of its own, which its rotary position index reads
    "qwen2_5_omni_thinker": dict(vision_start_token_id=VOCAB - 3),
    "qwen3_omni_moe_thinker": dict(vision_start_token_id=VOCAB - 3),
    # which tiny layers feed which: the defaults name layers of the real-size model
    "molmo2.adapter_config": dict(vision_feature_layer=[2, 1]),
    "granite4_vision": dict(deepstack_layer_map=[[1, 0]], spatial_target_layers=[0, 1, 2, 2],
                            downsample_rate="1/2"),  # and a downsample rate, which its default leaves unset
    "deepseek_ocr2_text": dict(mlp_layer_types=["dense", "sparse", "sparse"]),  # its default has none
    "fun_asr_nano.adaptor_config": dict(hidden_size=HIDDEN, intermediate_size=HIDDEN // 4),  # into the text model
    "nemo_speechlm.word_timestamp_config": dict(blank_token_id=VOCAB - 1),  # the last class of its vocabulary
    "granite4_vision.vision_config": dict(hidden_size=96),  # its Q-Former has hidden_size // 64 heads
    # latent attention: as many kv heads as query heads; its sparse (DSA) layers take no rotary part
    "glm5_next_text": dict(num_key_value_heads=HEADS, index_kpool=2, qk_rope_head_dim=0),
    # text and vision experts' widths; rotary sections with as many height as width features, as it stacks them
    "ernie4_5_vl_moe_text": dict(moe_intermediate_size=[32, 32], rope_parameters={
        "rope_type": "default", "rope_theta": 5e5, "mrope_section": [1, 1, 2]}),
    "muse_spark.audio_config": dict(hidden_sizes=[8, 16, 32]),  # per stage
    # Kyutai's audio codebooks: two, each a vocabulary after the text one (its padding id is the last)
    "kyutai_speech_to_text": dict(num_codebooks=2, codebook_vocab_size=VOCAB + 1, audio_bos_token_id=VOCAB,
                                  audio_pad_token_id=2 * (VOCAB + 1) + VOCAB),
    "kyutai_speech_to_text.codec_config": dict(upsample_groups=TOWER),
    # the image vocabulary of Chameleon and Emu3, which their default lacks (a text-only forward embeds these ids as
    # any other token; only image tokens' logits are suppressed)
    "chameleon": dict(vocabulary_map={"<image>": VOCAB - 2, "IMGIMGA": VOCAB - 1}),
    "emu3": dict(vocabulary_map={"<image>": VOCAB - 2, "IMGIMGA": VOCAB - 1}),
    # two hybrid layers (their shared transformer's weights are tied from the first to the others), whose attention
    # reads the hidden state concatenated with the embeddings
    "zamba": dict(layers_block_type=["linear_attention", "hybrid", "hybrid"], attention_hidden_size=2 * HIDDEN),
    # an attention layer among the state-space ones (the defaults put the first at layer 4, or none)
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1),
    "bamba": dict(attn_layer_indices=[1]),
    "granitemoehybrid": dict(layer_types=["linear_attention", "full_attention", "linear_attention"]),
    "helium": dict(head_dim=HIDDEN // HEADS),  # its output projection reads hidden_size, not heads x head_dim
    "mimo_v2_flash": dict(num_key_value_heads=1),  # its sliding layers have twice as many: 2 for 6 query heads
    "step3p5": dict(sliding_window=4),  # Step 3.7's text model has sliding layers but no window by default
    # HRM runs each layer of its two stacks in cycles: one layer per stack, one high-level cycle of two low-level
    # ones make 3 layers' worth of cache
    "hrm_text": dict(num_hidden_layers=1, num_layers_per_stack=None, H_cycles=1, L_cycles=2, L_bp_cycles=[1]),
}
DRAFTER = ("a drafter (assistant model): every layer reads its target model's key/value cache "
           "(num_kv_shared_layers = num_hidden_layers), so it does not run alone")
TIMM = "its vision tower is a timm model (TimmWrapperModel), and timm is not installed"
NOT_BUILT = {
    "codegen": "its fused qkv projection is split into 4 blocks (mp_num, fixed in its code): its head count must be a "
               "multiple of 4, which the 6 heads of this zoo are not",
    "qwen2_5_omni": "Qwen2_5OmniForConditionalGeneration has no forward (it only generates, through its thinker: "
                    "the qwen2_5_omni_thinker row)",
    "qwen3_omni_moe": "Qwen3OmniMoeForConditionalGeneration has no forward (it only generates, through its thinker: "
                      "the qwen3_omni_moe_thinker row)",
    "gemma4_assistant": DRAFTER,
    "gemma4_unified_assistant": DRAFTER,
    **({} if transformers.utils.is_timm_available() else {t: TIMM for t in ("gemma3n", "fast_vlm", "perception_lm")}),
}
# Names of per-layer index lists (``cross_attention_layers``, ``fullatt_block_indexes``): shrunk with the depth
INDEX_LIST = re.compile(r"layer|index|indices|block", re.IGNORECASE)
# Where a config keeps its depth (a tower's may be "depth", "encoder_layers", "num_blocks", ...), or else the table
# of its layers' kinds it counts them from (Nemotron-H's layers_block_type)
DEPTHS = ("num_hidden_layers", "depth", "num_layers", "n_layer", "n_layers", "layers", "encoder_layers",
          "decoder_layers", "num_blocks")
BLOCK_TYPES = ("layers_block_type", "layer_types")
MAX_PARAMETERS = 2_000_000  # a config the builder did not shrink would build a real-size model


def model_types() -> list[str]:
    return list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def wrapper_types() -> list[str]:
    return list(_wrappers())


@functools.cache
def _wrappers() -> dict[str, str]:
    """Multimodal wrappers of a decoder-only LM (multimodal-LM and image-text-to-text registries) and the audio LMs
    of the speech seq2seq registry that are decoder-only (an audio tower before a causal LM: ``is_encoder_decoder``
    false), each with its class name."""
    found = {**modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
             **modeling_auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES}
    for model_type, name in modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.items():
        if model_type not in found and not CONFIG_MAPPING[model_type]().is_encoder_decoder:
            found[model_type] = name
    return found


def same_class(model_type: str) -> bool:
    """Whether the wrapper's class is the one the causal-LM table builds (Gemma 3's): one model, one row for both."""
    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type) == _wrappers()[model_type]


def class_name(model_type: str, wrapper: bool = False) -> str:
    return _wrappers()[model_type] if wrapper else MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]


def tiny_model(model_type: str, wrapper: bool = False):
    """A tiny random model of the type's causal LM (``wrapper``: of its multimodal or audio wrapper), in eval mode;
    ``TooLarge`` for a config that stays large. Nothing large is ever allocated: the build runs under an allocation
    budget (``_Budget``), and what stays large is shown on the meta device."""
    if model_type in NOT_BUILT:
        raise ValueError(NOT_BUILT[model_type])
    try:
        with _Budget(2 * MAX_PARAMETERS):  # parameters, buffers and whatever else the constructors make
            model = _build(model_type, wrapper)
    except TooLarge:
        model = meta_model(model_type, wrapper)
        raise TooLarge(_too_large(model)) from None
    if sum(p.numel() for p in model.parameters()) > MAX_PARAMETERS:
        raise TooLarge(_too_large(model))
    return model.eval()


def meta_model(model_type: str, wrapper: bool = False):
    """The type's model built on the meta device (shapes only, no memory)."""
    with torch.device("meta"):
        return _build(model_type, wrapper)


def _build(model_type: str, wrapper: bool):
    """The tiny model, built as transformers' Auto classes build it: the causal-LM table through
    AutoModelForCausalLM (for a composite config whose causal LM is a text model, Llama 4's, that is the text model
    of its text config), a wrapper as its own class."""
    config = tiny_config(model_type)
    if wrapper:
        return getattr(transformers, _wrappers()[model_type])._from_config(config)
    declared = getattr(getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]), "config_class", None)
    text = config.get_text_config(decoder=True)
    if declared is not None and not isinstance(config, declared) and isinstance(text, declared):
        # a causal LM of its text sub-config, as Auto builds it; also where that is not named "text_config"
        # (MusicGen's decoder), which Auto does not swap in
        return getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])._from_config(text)
    model = transformers.AutoModelForCausalLM.from_config(config)
    if hasattr(model, "set_default_language"):  # X-MOD's adapters run for one language, which it asks to be set
        model.set_default_language(config.languages[0])
    return model


class TooLarge(ValueError):
    """The type's config stays large (``meta_model`` still shows its layout: what an adapter would refuse)."""


class _Budget(TorchDispatchMode):
    """Counts the elements of every tensor made from nothing (a factory call: no tensor among its arguments) while
    it is open; raises ``TooLarge`` before making the one that would pass ``budget`` (sized on the meta device
    first)."""

    def __init__(self, budget: int):
        super().__init__()
        self.left = budget

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "device" in kwargs and not any(isinstance(a, torch.Tensor) for a in pytree.tree_leaves((args, kwargs))):
            self.left -= func(*args, **{**kwargs, "device": torch.device("meta")}).numel()
            if self.left < 0:
                raise TooLarge("the model allocates more than its budget")
        return func(*args, **kwargs)


def _too_large(model) -> str:
    count = sum(p.numel() for p in model.parameters())
    return f"{_largest_part(model)} stays large at this size ({count:,} parameters in all)"


def _largest_part(model) -> str:
    """Where most of the parameters are, in words: the path down the largest child while it holds most of its
    parent, into a layer list's largest layer ("its model.layers.0.linear_attn (1,234,567 parameters)")."""
    path, module = [], model
    while True:
        total = sum(p.numel() for p in module.parameters())
        children = [(sum(p.numel() for p in child.parameters()), name, child)
                    for name, child in module.named_children()]
        if not children:
            break
        count, name, child = max(children, key=lambda c: c[0])
        if count * 2 < total and not isinstance(module, torch.nn.ModuleList):
            break
        path.append(name)
        module = child
    count = sum(p.numel() for p in module.parameters())
    return f"its {'.'.join(path)} ({count:,} parameters)" if path else "its config"


def tiny_config(model_type: str):
    default = CONFIG_MAPPING[model_type]()
    text = default.get_text_config(decoder=True)
    return _shrunk(default, "text" if text is default else "wrapper", text)


def _shrunk(default: PreTrainedConfig, role: str, text: PreTrainedConfig, overrides: dict | None = None):
    """A copy of ``default`` (a config with its class's defaults) at tiny size. ``role`` says which sizes: the text
    model's ("text"), those of a wrapper around it ("wrapper": the ids and sizes it has of its own), a tower's.
    ``OVERRIDES`` apply by model type, or by "<parent model type>.<sub-config>", then ``overrides``."""
    defaults = default.to_dict()
    values = dict(defaults)
    for key in type(default).sub_configs:
        sub = getattr(default, key, None)
        if isinstance(sub, PreTrainedConfig):
            # a sub-config of the text config that is no model type of its own is part of the text model's layers
            # (DBRX's attention and feed-forward); any other is a tower (Phi-4-multimodal's text config holds some)
            part = role in ("text", "part") and not sub.model_type
            inner = "text" if sub is text else "wrapper" if _holds(sub, text) else "part" if part else "tower"
            values[key] = _shrunk(sub, inner, text, OVERRIDES.get(f"{default.model_type}.{key}", {}))
    depth = next((defaults[k] for k in DEPTHS if isinstance(defaults.get(k), int)), None) or next(
        (len(defaults[k]) for k in BLOCK_TYPES if isinstance(defaults.get(k), list)), None)
    if depth:
        values.update(_per_layer_tables(defaults, depth, LAYERS))
    sizes = TOWER_SIZES if role == "tower" else SIZES
    if defaults.get("kv_lora_rank"):  # latent attention: a key/value head per query head
        sizes = {**sizes, "num_key_value_heads": HEADS}
    aliases = type(default).attribute_map  # Kimi's num_experts_per_tok is stored under another name
    for key, size in sizes.items():
        key = aliases.get(key, key)
        if key in values and (not isinstance(values[key], list) or isinstance(size, list)):
            values[key] = size
        elif key in values and depth and len(defaults[key]) == depth:
            values[key] = [size] * LAYERS  # a per-layer list of sizes (Gemma 3n's intermediate_size)
    if role == "tower" and isinstance(values.get("depths"), list):
        values["depths"] = [1] * len(values["depths"])  # a convolutional tower's blocks per stage
    if role != "tower":
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):  # wrappers without them still read them
            values.setdefault(key, SIZES[key])
    if role == "text":
        rope = values.get("rope_parameters") if isinstance(values.get("rope_parameters"), dict) else {}
        partial = rope.get("partial_rotary_factor") or values.get("partial_rotary_factor") or 1.0
        if "head_dim" in values and defaults.get("qk_rope_head_dim") and defaults["head_dim"] == int(
                defaults["qk_rope_head_dim"] / partial):
            # latent attention whose head_dim is its rotary part's width (over the partial rotary factor)
            values["head_dim"] = int(values["qk_rope_head_dim"] / partial)
        elif "head_dim" in values and defaults.get("qk_rope_head_dim") and defaults["head_dim"] == (
                defaults["qk_rope_head_dim"] + defaults.get("qk_nope_head_dim", 0)):
            values["head_dim"] = values["qk_rope_head_dim"] + values["qk_nope_head_dim"]  # latent attention's sum
        elif "head_dim" in values:
            values["head_dim"] = 12  # not hidden_size / heads
        if values.get("sliding_window") or "sliding_attention" in (values.get("layer_types") or ()):
            values["sliding_window"] = 4
        if rope and ("mrope_section" in rope or _reads_mrope(default)):
            # multimodal rotary sections (time, height, width) must fill half the head dimension; a family whose
            # modeling defaults them (Qwen2-VL's [16, 24, 24]) is given its own, fitting a tiny head
            width = values.get("head_dim") or values["hidden_size"] // values["num_attention_heads"]
            half = int(width * partial) // 2
            third = max(half // 3, 1)
            values["rope_parameters"] = {**rope, "mrope_section": [half - 2 * third, third, third]}
        if values.get("num_kv_shared_layers") and values["num_kv_shared_layers"] < depth:
            # The last layers reuse earlier layers' caches, of the same layer types; 3 layers do not have two of
            # each (an assistant whose every layer reads its target's cache stays so: it does not run alone)
            values["num_kv_shared_layers"] = 0
        elif values.get("num_kv_shared_layers"):
            values["num_kv_shared_layers"] = LAYERS
    return type(default)(**{**values, **OVERRIDES.get(default.model_type, {}), **(overrides or {})})


def _reads_mrope(config: PreTrainedConfig) -> bool:
    """Whether the config's modeling file reads ``rope_parameters["mrope_section"]`` (with a default for 128-wide
    heads where the config has none)."""
    try:
        module = importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_"))
    except ImportError:
        return False
    return '"mrope_section"' in inspect.getsource(module)


def _holds(config: PreTrainedConfig, text: PreTrainedConfig) -> bool:
    """Whether ``text`` is nested somewhere inside ``config`` (Qwen2.5-Omni's thinker holds its text config)."""
    for key in type(config).sub_configs:
        sub = getattr(config, key, None)
        if sub is text or (isinstance(sub, PreTrainedConfig) and _holds(sub, text)):
            return True
    return False


def _per_layer_tables(values: dict, depth: int, layers: int) -> dict:
    """Every per-layer table of a config of ``depth`` layers, cut to ``layers``.

    Tiny layer i is default layer ``source[i]``: the first layers show as much as they can of what the tables say
    of a layer (sliding or full attention, a ``per_layer_config`` entry, membership of an index list), the last is
    the default's last (Gemma 4 wants its last layer global). Every table is then read through ``source``.
    """
    lists = {k: v for k, v in values.items() if isinstance(v, list) and len(v) == depth}
    tables = {k: v for k, v in values.items()  # per_layer_config: {"05": {...}} (not id2label: {0: "LABEL_0"})
              if "layer" in k and isinstance(v, dict) and v
              and all(str(key).isdigit() and int(key) < depth for key in v)}
    indices = {k: v for k, v in values.items()
               if k not in lists and INDEX_LIST.search(k) and isinstance(v, list) and v
               and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < depth for i in v)}
    if not (lists or tables or indices):
        return {}
    by_int = {k: {int(key): value for key, value in v.items()} for k, v in tables.items()}

    def kind(layer) -> set:  # what the tables say of a layer, one (table, value) pair each
        return ({(k, repr(v[layer])) for k, v in lists.items()} | {(k, repr(v.get(layer))) for k, v in by_int.items()}
                | {(k, layer in v) for k, v in indices.items()})

    def softmax_attention(pairs) -> bool:  # the layers this zoo is for: a hybrid's first pick is one of them
        return any("attention" in value and "linear" not in value for _, value in pairs if isinstance(value, str))

    # Greedy: each next layer the first that shows most of what the layers so far have not (sliding and full
    # attention before dense and sparse feed-forwards only where one layer cannot show both)
    source, seen = [], set()
    for _ in range(layers - 1):
        best = max(range(depth), key=lambda layer: (len(kind(layer) - seen), softmax_attention(kind(layer) - seen),
                                                     -layer))
        source.append(best)
        seen |= kind(best)
    source.append(depth - 1)
    cut = {k: [v[s] for s in source] for k, v in lists.items()}
    for k, v in lists.items():  # a layer's reference to another layer (Mistral Large 4's kv_source_layers)
        if INDEX_LIST.search(k) and not set(v) <= {0, 1} and all(
                isinstance(x, int) and not isinstance(x, bool) and 0 <= x < depth for x in v):
            cut[k] = [source.index(v[s]) if v[s] in source else i for i, s in enumerate(source)]
    for k, v in tables.items():
        width = len(str(next(iter(v))))  # Gemma 4 writes "05"
        cut[k] = {str(i).zfill(width): _per_layer_entry(by_int[k][s])
                  for i, s in enumerate(source) if s in by_int[k]}
    cut.update({k: [i for i, s in enumerate(source) if s in v] for k, v in indices.items()})
    return cut


def _per_layer_entry(entry):
    """One layer's own settings (a ``per_layer_config`` entry) at tiny size: its own head_dim stays its own, and
    as many key/value heads as query heads where it had as many (latent attention)."""
    if not isinstance(entry, dict):
        return entry
    shrunk = {k: SIZES.get(k, v) for k, v in entry.items()}
    if "head_dim" in entry:
        shrunk["head_dim"] = PER_LAYER_HEAD_DIM
    if entry.get("num_key_value_heads") is not None and entry.get("num_key_value_heads") == entry.get(
            "num_attention_heads"):
        shrunk["num_key_value_heads"] = shrunk["num_attention_heads"]
    return shrunk
