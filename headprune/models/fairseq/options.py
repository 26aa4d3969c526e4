"""A fairseq checkpoint's model options (its ``args`` or ``cfg``) read, checked and turned into the
transformers config of the converted model (FSMTConfig post-norm, M2M100Config pre-norm), and a config
turned back into the options a fairseq training run would have saved."""

import argparse
import numbers

from transformers import FSMTConfig, FSMTForConditionalGeneration

from headprune.models.fairseq.unpickling import UnsafeCheckpointError
from headprune.models.fairseq.vocabulary import BOS_ID, EOS_ID, PAD_ID

# fairseq activation_fn -> transformers ACT2FN name. fairseq's "gelu" is the exact erf form;
# its "gelu_accurate" is the tanh approximation that transformers calls "gelu_new".
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_accurate": "gelu_new", "tanh": "tanh", "linear": "linear"}

# fairseq 0.12's dataclass TransformerConfig nests options: {"encoder": {"embed_dim": ...}} is
# the flat argument encoder_embed_dim (its own _NAME_PARSER rule).
_NESTED_OPTION_GROUPS = ("encoder", "decoder", "quant_noise")


def _is_plain(value) -> bool:
    """A value a model option may hold: numbers, strings, None, and lists/dicts of those."""
    if value is None or isinstance(value, (str, bool, numbers.Number)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_plain(item) for key, item in value.items())
    return False


def fairseq_model_options(checkpoint: dict) -> dict:
    """A fairseq checkpoint's architecture options, flat, in fairseq's argument names.

    fairseq <= 0.10 saves them as the argparse.Namespace ``args``; 0.12 sets ``args`` to None and
    saves ``cfg`` (OmegaConf.to_container: plain dicts) whose ``cfg["model"]`` is an argparse
    Namespace for the legacy architectures (``--arch transformer`` and its kin) or the nested
    dict of the dataclass TransformerConfig. Every option must be a plain value: a training-state
    placeholder (or anything else the unpickler built) never reaches the model.
    """
    if checkpoint.get("args") is not None:
        where, options = "args", checkpoint["args"]
    elif isinstance(checkpoint.get("cfg"), dict) and checkpoint["cfg"].get("model") is not None:
        where, options = "cfg['model']", checkpoint["cfg"]["model"]
    else:
        raise ValueError("no model options: neither 'args' (fairseq <= 0.10) nor cfg['model'] (fairseq 0.12) is set")
    if isinstance(options, argparse.Namespace):
        options = dict(vars(options))
    elif isinstance(options, dict):
        flat = {}
        for name, value in options.items():
            if name in _NESTED_OPTION_GROUPS and isinstance(value, dict):
                flat.update({f"{name}_{inner}": inner_value for inner, inner_value in value.items()})
            else:
                flat[name] = value
        options = flat
        options.setdefault("arch", options.get("_name", "transformer"))
    else:
        raise ValueError(f"{where} is a {type(options).__name__}, not an argparse Namespace or a dict of options")
    for name, value in options.items():
        if not _is_plain(value):
            raise UnsafeCheckpointError(
                f"{where}: option '{name}' holds {value!r} ({type(value).__name__}), not a plain value; "
                "a model is never built from it")
    return options


def _options_dict(options) -> dict:
    return dict(vars(options)) if isinstance(options, argparse.Namespace) else dict(options)


# Options whose true value neither class can represent, with what the refusal names.
_UNSUPPORTED_OPTIONS = {
    "encoder_learned_pos": "learned encoder positional embeddings (only sinusoidal ones are supported)",
    "decoder_learned_pos": "learned decoder positional embeddings (only sinusoidal ones are supported)",
    "no_token_positional_embeddings": "no positional embeddings",
    "layernorm_embedding": "a layer norm on the embeddings",
    "cross_self_attention": "cross+self attention",
    "no_cross_attention": "a decoder without cross attention",
    "adaptive_softmax_cutoff": "an adaptive softmax",
    "adaptive_input": "adaptive input embeddings",
    "tie_adaptive_weights": "adaptive softmax weights tied to adaptive inputs",
    "char_inputs": "character inputs",
    "no_decoder_final_norm": "a pre-norm decoder without its final layer norm",
    "base_layers": "BASE (mixture of experts) layers",
    "encoder_layers_to_keep": "encoder layers pruned at load time",
    "decoder_layers_to_keep": "decoder layers pruned at load time",
}


def config_from_fairseq_options(options, src_vocab_size: int, tgt_vocab_size: int, langs):
    """The transformers config of a fairseq translation transformer: FSMTConfig for the post-norm
    architecture, ``headprune.models.prenorm``'s M2M100Config for the pre-norm one.

    ``options`` are fairseq's (argparse Namespace or flat dict). An option neither class can
    represent is refused with an error naming it, so a checkpoint is never loaded into a model
    that computes something else.
    """
    a = _options_dict(options)
    arch = str(a.get("arch", "transformer"))
    if not arch.startswith("transformer") or arch.startswith("transformer_lm"):
        raise ValueError(f"unsupported fairseq arch '{arch}': only translation transformers are supported")
    embed_dim = _required(a, "encoder_embed_dim")
    _check_representable(a, embed_dim, src_vocab_size, tgt_vocab_size)
    common = _common_config(a, embed_dim)
    share_all = bool(a.get("share_all_embeddings", False))
    if a.get("encoder_normalize_before", False):
        from headprune.models.prenorm import prenorm_config

        share_output = bool(a.get("share_decoder_input_output_embed", False))
        return prenorm_config(source_vocab_size=src_vocab_size, target_vocab_size=tgt_vocab_size,
                              share_all_embeddings=share_all, share_decoder_input_output_embed=share_output,
                              **common)
    return FSMTConfig(
        langs=list(langs),
        src_vocab_size=int(src_vocab_size),
        tgt_vocab_size=int(tgt_vocab_size),
        # share_all_embeddings: one matrix for source embeddings, target embeddings and the
        # output projection; FSMT ties exactly those three when tie_word_embeddings is set.
        tie_word_embeddings=share_all,
        **common,
    )


def _required(a: dict, name: str):
    if a.get(name) is None:
        raise ValueError(f"fairseq options lack '{name}', which is needed to build the model")
    return a[name]


def _check_representable(a: dict, embed_dim, src_vocab_size: int, tgt_vocab_size: int) -> None:
    """Refuse the options that would make the converted model compute something else than fairseq's."""
    for name, what in _UNSUPPORTED_OPTIONS.items():
        if a.get(name):
            raise ValueError(f"fairseq option {name}={a[name]!r}: {what} cannot be represented by the converted model")
    for name in ("decoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        value = a.get(name, embed_dim)
        if value is not None and value != embed_dim:
            raise ValueError(f"fairseq option {name}={value} but encoder_embed_dim={embed_dim}: "
                             "the converted model needs one model dimension throughout")
    activation = a.get("activation_fn", "relu")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"fairseq option activation_fn='{activation}' has no transformers equivalent")
    pre_norm = bool(a.get("encoder_normalize_before", False)), bool(a.get("decoder_normalize_before", False))
    if pre_norm[0] != pre_norm[1]:
        raise ValueError(f"fairseq options encoder_normalize_before={pre_norm[0]} and decoder_normalize_before="
                         f"{pre_norm[1]}: a model that mixes pre-norm and post-norm stacks cannot be represented")
    if bool(a.get("share_all_embeddings", False)) and src_vocab_size != tgt_vocab_size:
        raise ValueError(f"fairseq option share_all_embeddings needs one joined dictionary, got vocab sizes "
                         f"{src_vocab_size} and {tgt_vocab_size}")


def _common_config(a: dict, embed_dim) -> dict:
    """The settings both config classes take, from the options that passed ``_check_representable``."""
    # fairseq's own rule: the 2018 name relu_dropout applies when activation_dropout is 0 or absent.
    activation_dropout = a.get("activation_dropout") or a.get("relu_dropout") or 0.0
    return dict(
        activation_function=_ACTIVATIONS[a.get("activation_fn", "relu")],  # fairseq before 0.7 had no choice: ReLU
        d_model=int(embed_dim),
        # Both classes grow their sinusoidal tables on demand; this only sizes the first one.
        max_position_embeddings=int(max(a.get("max_source_positions", 1024), a.get("max_target_positions", 1024))),
        encoder_ffn_dim=int(_required(a, "encoder_ffn_embed_dim")),
        encoder_layers=int(_required(a, "encoder_layers")),
        encoder_attention_heads=int(_required(a, "encoder_attention_heads")),
        encoder_layerdrop=float(a.get("encoder_layerdrop", 0.0) or 0.0),
        decoder_ffn_dim=int(_required(a, "decoder_ffn_embed_dim")),
        decoder_layers=int(_required(a, "decoder_layers")),
        decoder_attention_heads=int(_required(a, "decoder_attention_heads")),
        decoder_layerdrop=float(a.get("decoder_layerdrop", 0.0) or 0.0),
        dropout=float(a.get("dropout", 0.1)),
        attention_dropout=float(a.get("attention_dropout", 0.0)),
        activation_dropout=float(activation_dropout),
        scale_embedding=not a.get("no_scale_embedding", False),
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        decoder_start_token_id=EOS_ID,  # fairseq starts decoding from </s>
        forced_eos_token_id=EOS_ID,  # and ends every hypothesis with it at the length limit
    )


def is_pre_norm(config) -> bool:
    return config.model_type == "m2m_100"


def model_class_for(config):
    """The transformers class a converted fairseq model runs in."""
    if is_pre_norm(config):
        from headprune.models.prenorm import PreNormTransformer

        return PreNormTransformer
    return FSMTForConditionalGeneration


def vocab_sizes(config) -> tuple[int, int]:
    """(source, target) vocabulary sizes of a converted model's config."""
    if is_pre_norm(config):
        return getattr(config, "source_vocab_size", None) or config.vocab_size, config.vocab_size
    return config.src_vocab_size, config.tgt_vocab_size


def fairseq_args_from_config(config, src_lang="en", tgt_lang="fr", share_all_embeddings=True,
                             share_decoder_input_output_embed=True):
    """The argparse.Namespace a fairseq training run of this architecture would have saved."""
    activation = {v: k for k, v in _ACTIVATIONS.items()}.get(config.activation_function)
    if activation is None:
        raise ValueError(f"activation '{config.activation_function}' has no fairseq activation_fn")
    big = (config.d_model, config.encoder_ffn_dim, config.encoder_attention_heads,
           config.encoder_layers, config.decoder_layers) == (1024, 4096, 16, 6, 6)
    pre_norm = is_pre_norm(config)
    return argparse.Namespace(
        arch="transformer_vaswani_wmt_en_fr_big" if big else "transformer",
        task="translation",
        source_lang=src_lang,
        target_lang=tgt_lang,
        criterion="label_smoothed_cross_entropy",
        label_smoothing=0.1,
        optimizer="adam",
        encoder_embed_path=None,
        encoder_embed_dim=config.d_model,
        encoder_ffn_embed_dim=config.encoder_ffn_dim,
        encoder_layers=config.encoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        encoder_normalize_before=pre_norm,
        encoder_learned_pos=False,
        encoder_layerdrop=config.encoder_layerdrop,
        decoder_embed_path=None,
        decoder_embed_dim=config.d_model,
        decoder_ffn_embed_dim=config.decoder_ffn_dim,
        decoder_layers=config.decoder_layers,
        decoder_attention_heads=config.decoder_attention_heads,
        decoder_normalize_before=pre_norm,
        decoder_learned_pos=False,
        decoder_layerdrop=config.decoder_layerdrop,
        decoder_output_dim=config.d_model,
        decoder_input_dim=config.d_model,
        attention_dropout=config.attention_dropout,
        relu_dropout=config.activation_dropout,  # the 2018 name ...
        activation_dropout=config.activation_dropout,  # ... and the later one
        activation_fn=activation,
        dropout=config.dropout,
        adaptive_softmax_cutoff=None,
        adaptive_softmax_dropout=0,
        share_all_embeddings=share_all_embeddings,
        share_decoder_input_output_embed=share_decoder_input_output_embed,
        no_token_positional_embeddings=False,
        no_scale_embedding=not config.scale_embedding,
        layernorm_embedding=False,
        max_source_positions=config.max_position_embeddings,
        max_target_positions=config.max_position_embeddings,
        left_pad_source="True",  # fairseq's defaults, stored as strings
        left_pad_target="False",
    )
