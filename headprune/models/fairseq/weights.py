"""Weights both ways: a fairseq state dict turned into the transformers model's (fairseq names to transformers
names, fused attention projections split, embeddings shared as the options say), and a model's state dict
turned back into the layout of a fairseq checkpoint."""

import torch
from transformers.models.fsmt.modeling_fsmt import SinusoidalPositionalEmbedding

from headprune.models.fairseq.options import _options_dict, model_class_for
from headprune.models.fairseq.unpickling import UnsafeCheckpointError

# FSMT and M2M100 name their layers as fairseq does (q/k/v/out_proj, self_attn_layer_norm,
# encoder_attn, fc1, fc2, final_layer_norm, and M2M100's final encoder/decoder.layer_norm),
# under "model."; only their embedding and output matrices are named differently.

# Old fairseq (2018) kept each layer's norms in a list; fairseq's own upgrade code renames them.
_ENCODER_OLD_LAYER_NORMS = {"0": "self_attn_layer_norm", "1": "final_layer_norm"}
_DECODER_OLD_LAYER_NORMS = {"0": "self_attn_layer_norm", "1": "encoder_attn_layer_norm", "2": "final_layer_norm"}
_DROPPED_SUFFIXES = ("version", "embed_positions._float_tensor")  # bookkeeping, not weights
_FAIRSEQ_EMBEDDINGS = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                       "decoder.embed_out", "decoder.output_projection.weight")
# Per family: the transformers names of the source embeddings, target embeddings, output projection.
_EMBEDDING_NAMES = {
    "fsmt": (["model.encoder.embed_tokens.weight"], ["model.decoder.embed_tokens.weight"],
             ["model.decoder.output_projection.weight"]),
    "m2m_100": (["model.shared.weight", "model.encoder.embed_tokens.weight"], ["model.decoder.embed_tokens.weight"],
                ["lm_head.weight"]),
}


def _expected_shapes(config) -> dict[str, torch.Size]:
    """Names and shapes of the converted model's state dict, without allocating it."""
    with torch.device("meta"):
        model = model_class_for(config)(config)
    return {name: tensor.shape for name, tensor in model.state_dict().items()}


def _fairseq_name_to_hf(name: str) -> str | None:
    """transformers name (without "model.") for a fairseq parameter name that maps one to one.

    Fused attention projections and embeddings are handled by the caller.
    """
    parts = name.split(".")
    if len(parts) >= 5 and parts[0] in ("encoder", "decoder") and parts[1] == "layers" and parts[3] == "layer_norms":
        renames = _ENCODER_OLD_LAYER_NORMS if parts[0] == "encoder" else _DECODER_OLD_LAYER_NORMS
        if parts[4] not in renames:
            return None
        return ".".join(parts[:3] + [renames[parts[4]]] + parts[5:])
    return name


def checked_weights(state) -> dict:
    """The checkpoint's state dict, refused unless it maps names to tensors only."""
    if not isinstance(state, dict):
        raise UnsafeCheckpointError(f"'model' is a {type(state).__name__}, not a state dict")
    for name, tensor in state.items():
        if not isinstance(name, str) or type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            raise UnsafeCheckpointError(f"'model' entry {name!r} holds {type(tensor).__name__}, not a tensor; "
                                        "a model is never built from it")
    return state


def fairseq_to_hf_state_dict(fairseq_state: dict, config, options=None) -> dict:
    """Convert a fairseq transformer state dict into the state dict of ``model_class_for(config)``.

    Splits fused attention projections (in_proj_weight / in_proj_bias, rows q, k, v) into
    q_proj / k_proj / v_proj, renames old-style layer_norms.N, drops the "version" and
    "_float_tensor" bookkeeping entries, adds the sinusoidal position tables FSMT stores as
    weights, and fills shared embeddings / the output projection. Raises ValueError naming
    any unexpected or missing key and any shape mismatch, and any embedding the options say
    is shared that the checkpoint stores with other values.

    ``options`` (the fairseq options, optional) say which embeddings are shared.
    """
    expected = _expected_shapes(config)
    converted, embeddings = _converted_layers(checked_weights(fairseq_state), expected, config)
    converted.update(_converted_embeddings(embeddings, expected, config, options))
    # FSMT keeps its (deterministic) sinusoidal tables as weights; fairseq does not save them.
    for side in ("encoder", "decoder"):
        name = f"model.{side}.embed_positions.weight"
        if name in expected:
            num_positions, dim = expected[name]
            converted[name] = SinusoidalPositionalEmbedding.get_embedding(num_positions, dim, config.pad_token_id)

    missing = sorted(set(expected) - set(converted))
    if missing:
        raise ValueError(f"missing keys ({config.model_type} names) after converting the fairseq state dict: {missing}")
    for name, tensor in converted.items():
        if tuple(tensor.shape) != tuple(expected[name]):
            raise ValueError(f"shape mismatch for '{name}': checkpoint has {tuple(tensor.shape)}, "
                             f"the architecture in the options needs {tuple(expected[name])}")
    return converted


def _converted_layers(fairseq_state: dict, expected: dict, config) -> tuple[dict, dict]:
    """(every weight but the embeddings and the output projection, under its transformers name, fused
    projections split; those fairseq embedding and output weights, under their fairseq names)."""
    converted = {}
    unexpected = []
    embeddings = {}  # fairseq embedding/output names -> tensor, resolved by _converted_embeddings
    for name, tensor in fairseq_state.items():
        if name.endswith(_DROPPED_SUFFIXES):
            continue
        if name in _FAIRSEQ_EMBEDDINGS:
            embeddings[name] = tensor
            continue
        if name.endswith(".in_proj_weight") or name.endswith(".in_proj_bias"):
            prefix, kind = name.rsplit(".", 1)
            suffix = "weight" if kind == "in_proj_weight" else "bias"
            if f"model.{prefix}.q_proj.{suffix}" not in expected:
                unexpected.append(name)
                continue
            if tensor.shape[0] % 3 != 0:
                raise ValueError(f"fused projection '{name}' has {tensor.shape[0]} rows, not a multiple of 3")
            # fairseq's MultiheadAttention: rows [0, d) project queries, [d, 2d) keys, [2d, 3d) values.
            for projection, chunk in zip(("q_proj", "k_proj", "v_proj"), tensor.chunk(3, dim=0)):
                converted[f"model.{prefix}.{projection}.{suffix}"] = chunk.clone()
            continue
        hf_name = _fairseq_name_to_hf(name)
        if hf_name is None or f"model.{hf_name}" not in expected:
            unexpected.append(name)
            continue
        converted[f"model.{hf_name}"] = tensor
    if unexpected:
        raise ValueError(f"unexpected keys in the fairseq state dict (the {config.model_type} model has no place "
                         f"for them): {unexpected}")
    return converted, embeddings


def _converted_embeddings(embeddings: dict, expected: dict, config, options) -> dict:
    """The source and target embeddings and the output projection under their transformers names, shared as
    the options (or, without them, the config) say.

    With share_all_embeddings fairseq stores the one matrix under both encoder.embed_tokens and
    decoder.embed_tokens; the output projection reuses the decoder embeddings unless a separate
    decoder.embed_out (old) / decoder.output_projection (new) exists."""
    a = _options_dict(options) if options is not None else {}
    share_all = bool(a.get("share_all_embeddings", getattr(config, "tie_word_embeddings", False)))
    share_output = share_all or bool(a.get("share_decoder_input_output_embed", False))
    encoder_embed = embeddings.get("encoder.embed_tokens.weight")
    decoder_embed = embeddings.get("decoder.embed_tokens.weight")
    output_projection = embeddings.get("decoder.output_projection.weight", embeddings.get("decoder.embed_out"))
    if share_all:
        encoder_embed = encoder_embed if encoder_embed is not None else decoder_embed
        decoder_embed = decoder_embed if decoder_embed is not None else encoder_embed
        if encoder_embed is not None and not torch.equal(encoder_embed, decoder_embed):
            raise ValueError("share_all_embeddings is set but encoder and decoder embeddings differ")
    if output_projection is None:
        if options is not None and not share_output:
            raise ValueError("missing key 'decoder.embed_out': the options do not share decoder input/output embeddings")
        output_projection = decoder_embed
    elif share_output and decoder_embed is not None and not torch.equal(output_projection, decoder_embed):
        raise ValueError("the options share the decoder's input and output embeddings, but the checkpoint's "
                         "output projection differs from decoder.embed_tokens")
    converted = {}
    source_names, target_names, output_names = _EMBEDDING_NAMES[config.model_type]
    for names, tensor, fairseq_name in [(source_names, encoder_embed, "encoder.embed_tokens.weight"),
                                        (target_names, decoder_embed, "decoder.embed_tokens.weight"),
                                        (output_names, output_projection, "decoder.embed_out")]:
        for hf_name in names:
            if tensor is not None:
                converted[hf_name] = tensor
            elif hf_name in expected:
                raise ValueError(f"missing key '{fairseq_name}' in the fairseq state dict")
    return converted


def hf_to_fairseq_state_dict(model, layer_norm_style: str = "old") -> dict:
    """Inverse of fairseq_to_hf_state_dict, in the layout of a fairseq checkpoint.

    layer_norm_style "old" writes the 2018 names (encoder layer_norms.0/1, decoder
    layer_norms.0/1/2), "new" the named ones (self_attn_layer_norm, ...). Attention projections
    are always fused into in_proj_weight / in_proj_bias, as in the 2018 checkpoints. Embeddings
    the model ties are written as the same tensor under each fairseq name, and no
    decoder.embed_out is written when the output projection equals the decoder embeddings.
    """
    if layer_norm_style not in ("old", "new"):
        raise ValueError(f"layer_norm_style must be 'old' or 'new', got {layer_norm_style!r}")
    weights = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    hf = {name.removeprefix("model."): tensor for name, tensor in weights.items()}
    state = {}
    config = model.config
    for side, num_layers, attentions, old_norms in [
        ("encoder", config.encoder_layers, ["self_attn"], _ENCODER_OLD_LAYER_NORMS),
        ("decoder", config.decoder_layers, ["self_attn", "encoder_attn"], _DECODER_OLD_LAYER_NORMS),
    ]:
        for layer in range(num_layers):
            prefix = f"{side}.layers.{layer}"
            for attention in attentions:
                for suffix in ("weight", "bias"):
                    state[f"{prefix}.{attention}.in_proj_{suffix}"] = torch.cat(
                        [hf[f"{prefix}.{attention}.{p}.{suffix}"] for p in ("q_proj", "k_proj", "v_proj")], dim=0
                    )
                    state[f"{prefix}.{attention}.out_proj.{suffix}"] = hf[f"{prefix}.{attention}.out_proj.{suffix}"]
            for index, norm in old_norms.items():
                for suffix in ("weight", "bias"):
                    name = f"{prefix}.layer_norms.{index}" if layer_norm_style == "old" else f"{prefix}.{norm}"
                    state[f"{name}.{suffix}"] = hf[f"{prefix}.{norm}.{suffix}"]
            for linear in ("fc1", "fc2"):
                for suffix in ("weight", "bias"):
                    state[f"{prefix}.{linear}.{suffix}"] = hf[f"{prefix}.{linear}.{suffix}"]
        for suffix in ("weight", "bias"):  # pre-norm: the final layer norm of each stack
            if f"{side}.layer_norm.{suffix}" in hf:
                state[f"{side}.layer_norm.{suffix}"] = hf[f"{side}.layer_norm.{suffix}"]

    source_names, target_names, output_names = _EMBEDDING_NAMES[config.model_type]
    encoder_embed, decoder_embed, output_projection = (weights[names[-1]] for names in
                                                       (source_names, target_names, output_names))
    state["encoder.embed_tokens.weight"] = encoder_embed
    # Shared embeddings are one tensor in fairseq: torch.save then stores them once.
    shared = encoder_embed.shape == decoder_embed.shape and torch.equal(encoder_embed, decoder_embed)
    state["decoder.embed_tokens.weight"] = encoder_embed if shared else decoder_embed
    if not torch.equal(output_projection, decoder_embed):
        state["decoder.embed_out"] = output_projection
    for side in ("encoder", "decoder"):
        state[f"{side}.embed_positions._float_tensor"] = torch.zeros(1, dtype=encoder_embed.dtype)
        state[f"{side}.version"] = torch.tensor([3.0])
    return state
