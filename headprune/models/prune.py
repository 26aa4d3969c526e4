"""Physically remove attention heads: slice q/k/v rows and output-projection columns.

Works for any set of heads, including every head of a layer (the layer then adds
only the output projection's bias), keeps dtype and device, and records the
removed heads in ``config.headprune_pruned_heads`` so that a saved model reloads
with the same shapes (``load_pruned_weights``). Saved with ``headprune.models.export.save_pruned``, a
pruned model also loads with plain transformers (``trust_remote_code=True``), without headprune.

Each family's adapter (``headprune.models.families``) slices a site in its ``prune_site``: those with
separate q/k/v/output projections through ``slice_projections``, then switching the attention
module to a subclass that runs with the heads it has (FSMT reshapes with its full embedding size
otherwise; every family must run with no heads left); GPT-2's fused projection and grouped-query
attention slice their own way. ``cache_without_heads`` keeps the decoding cache of a layer with
no heads as long as the others'.

Bias compensation (FLAP, An et al. 2024; issue #32): ``prune_heads(model, heads, constants=...)`` keeps what a
removed head h would have put out under mean or optimal ablation, its constant c_h (a ``HeadConstants``): its
output projection columns applied to it, W_o[:, h] c_h, are added to the projection's bias before the columns
go, so the pruned model computes what the full model computes with those heads' gates 0 under
``Constant(constants)`` masking (``headprune.models.masking``). A projection without a bias (Llama, Mistral,
Qwen2's ``o_proj``) gets one, recorded in ``config.headprune_added_output_bias`` ({attn_type: [layers]}) so
that ``load_pruned_weights`` and the exported modeling files (``headprune.models.portable``) build it before the
weights load; ``config.headprune_bias_compensation`` says which heads were compensated, with constants of
which kind (the model card reports it).
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from headprune.models.heads import AttentionSite, adapter_for
# Below the families (which import them from there); still importable from here.
from headprune.models.slicing import _keep_input_columns, _keep_rows, cache_without_heads, slice_projections  # noqa: F401

PRUNED_HEADS_KEY = "headprune_pruned_heads"
ADDED_BIAS_KEY = "headprune_added_output_bias"  # {attn_type: [layers whose output projection got a bias]}
COMPENSATION_KEY = "headprune_bias_compensation"  # {"kind": ..., "heads": {attn_type: {"layer": [heads]}}}


def prune_heads(model, heads: dict[str, dict[int, list[int]]], constants=None):
    """Remove ``heads[attn_type][layer]`` (original head indices) from ``model`` in place.

    Heads already removed are ignored, so pruning can be applied step by step. With ``constants`` (a
    ``headprune.models.head_constants.HeadConstants``), each removed head's constant goes into its output
    projection's bias (bias compensation, see the module docstring): the pruned model then equals the full
    one masked with ``Constant(constants)`` (gates 0 for the removed heads). Returns the model.
    """
    adapter = adapter_for(model)
    recorded = pruned_heads(model)
    sites = adapter.sites(model)
    if constants is not None:
        constants.check(sites)
    for site in sites:
        remove = set(int(h) for h in heads.get(site.attn_type, {}).get(site.layer, []))
        for h in remove:
            if not 0 <= h < site.original_num_heads:
                raise ValueError(f"{site.attn_type} layer {site.layer} has no head {h} "
                                 f"(it has {site.original_num_heads})")
        if not remove & set(site.kept_heads):
            continue
        keep = [h for h in site.kept_heads if h not in remove]
        if constants is not None:
            compensate_bias(model, site, [h for h in site.kept_heads if h in remove], constants)
        adapter.prune_site(site, keep)
        already = set(recorded.setdefault(site.attn_type, {}).get(site.layer, []))
        recorded[site.attn_type][site.layer] = sorted(already | remove)
    adapter.finish_pruning(model)
    # JSON keys are strings: store layers that way so a saved config reads back the same.
    setattr(model.config, PRUNED_HEADS_KEY,
            {t: {str(layer): hs for layer, hs in sorted(layers.items())} for t, layers in recorded.items()})
    return model


def compensate_bias(model, site: AttentionSite, heads: list[int], constants):
    """Add W_o[:, h] c_h of ``heads`` (original indices, still in the site) to the site's output projection's bias,
    giving it one if it has none (recorded in the config); computed in float64, stored in the bias's dtype."""
    output = site.output
    positions = [site.kept_heads.index(h) for h in heads]
    device = output.weight.device
    columns = torch.tensor([p * site.head_dim + i for p in positions for i in range(site.head_dim)],
                           dtype=torch.long, device=device)
    vector = constants.values[(site.attn_type, site.layer)][heads].to(device=device, dtype=torch.float64).flatten()
    if isinstance(output, Conv1D):  # GPT-2: weight (in, out), x @ weight + bias
        shift = vector @ output.weight.detach().index_select(0, columns).double()
    else:  # nn.Linear: weight (out, in)
        shift = output.weight.detach().index_select(1, columns).double() @ vector
    if output.bias is None:
        output.bias = nn.Parameter(torch.zeros(shift.shape[0], dtype=output.weight.dtype, device=device),
                                   requires_grad=output.weight.requires_grad)
        added = {t: list(layers) for t, layers in (getattr(model.config, ADDED_BIAS_KEY, None) or {}).items()}
        added[site.attn_type] = sorted(set(added.get(site.attn_type, [])) | {site.layer})
        setattr(model.config, ADDED_BIAS_KEY, added)
    with torch.no_grad():
        output.bias.copy_((output.bias.double() + shift).to(output.bias.dtype))
    record = getattr(model.config, COMPENSATION_KEY, None) or {}
    kinds = {k for k in (record.get("kind"), constants.kind) if k}
    compensated = {t: dict(layers) for t, layers in record.get("heads", {}).items()}
    layer_heads = set(compensated.setdefault(site.attn_type, {}).get(str(site.layer), [])) | set(heads)
    compensated[site.attn_type][str(site.layer)] = sorted(layer_heads)
    setattr(model.config, COMPENSATION_KEY, {"kind": "+".join(sorted(kinds)), "heads": compensated})


def add_recorded_biases(model):
    """Give the output projections the config records as given a bias (``ADDED_BIAS_KEY``) a zero one, to load into."""
    added = getattr(model.config, ADDED_BIAS_KEY, None) or {}
    for site in adapter_for(model).sites(model):
        output = site.output
        if site.layer in added.get(site.attn_type, []) and output.bias is None:
            out = output.weight.shape[1] if isinstance(output, Conv1D) else output.weight.shape[0]
            output.bias = nn.Parameter(torch.zeros(out, dtype=output.weight.dtype, device=output.weight.device),
                                       requires_grad=output.weight.requires_grad)
    return model


def pruned_heads(model) -> dict[str, dict[int, list[int]]]:
    """The heads removed so far, as {attn_type: {layer: [original head indices]}}."""
    stored = getattr(model.config, PRUNED_HEADS_KEY, None) or {}
    return {t: {int(layer): list(hs) for layer, hs in layers.items()} for t, layers in stored.items()}


def count_heads(model) -> int:
    return sum(site.num_heads for site in adapter_for(model).sites(model))


def apply_recorded_pruning(model):
    """Give a freshly built model the shapes recorded in its config (before loading weights)."""
    recorded = pruned_heads(model)
    setattr(model.config, PRUNED_HEADS_KEY, {})
    if recorded:
        prune_heads(model, recorded)
    return add_recorded_biases(model)


def load_pruned_weights(model_class, folder: str | Path, **kwargs):
    """Load a model folder saved by save_pretrained, pruned or not.

    A pruned model is built from its config, pruned to the recorded shapes, then given its
    weights; so is a class that says ``loads_without_from_pretrained``. Other classes go
    through from_pretrained. Matrices that save_pretrained stored once for several tied names
    are restored under all of them.
    """
    from safetensors.torch import load_file
    from transformers import AutoConfig
    from transformers.initialization import no_init_weights

    folder = Path(folder)
    config = AutoConfig.from_pretrained(folder)
    if not getattr(config, PRUNED_HEADS_KEY, None) and not getattr(model_class, "loads_without_from_pretrained", False):
        return model_class.from_pretrained(folder, **kwargs)
    kwargs.pop("use_safetensors", None)  # only safetensors are read below anyway
    device_map, dtype = kwargs.pop("device_map", None), kwargs.pop("dtype", None)
    build = getattr(model_class, "from_config", None) or model_class._from_config  # Auto* or concrete class
    with no_init_weights():  # every weight is loaded below: random init would only cost time
        model = build(config, **kwargs)
    apply_recorded_pruning(model)
    weights = folder / "model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"{weights}: a model folder loaded here must hold model.safetensors")
    state = load_file(str(weights))
    model.tie_weights()
    _, unexpected = model.load_state_dict(state, strict=False)
    # A name is missing only if no name sharing its tensor was loaded.
    names_of = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        names_of.setdefault(id(tensor), []).append(name)
    missing = [name for names in names_of.values() if not any(n in state for n in names) for name in names]
    # Weights save_pretrained leaves out on purpose (Marian's sinusoidal positions) are computed, not learned:
    # compute them as from_pretrained does.
    recomputed = set(getattr(model, "_keys_to_ignore_on_save", None) or ()) & set(missing)
    for name in recomputed:
        model._init_weights(model.get_submodule(name.rpartition(".")[0]))
    missing = [name for name in missing if name not in recomputed]
    if missing or unexpected:
        raise ValueError(f"{weights}: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}")
    if dtype is not None:
        model.to(dtype)
    return place(model, device_map).eval()


def place(model, device_map):
    """Put a model built here where from_pretrained's ``device_map`` would: one device ({"": device}), or
    its layers spread over the visible GPUs ("balanced", accelerate's dispatch)."""
    if device_map is None:
        return model
    if isinstance(device_map, dict) and set(device_map) == {""}:
        return model.to(device_map[""])
    from accelerate import dispatch_model, infer_auto_device_map
    from accelerate.utils import get_balanced_memory

    no_split = getattr(model, "_no_split_modules", None)
    memory = get_balanced_memory(model, no_split_module_classes=no_split)
    return dispatch_model(model, infer_auto_device_map(model, max_memory=memory, no_split_module_classes=no_split))
