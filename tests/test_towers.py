"""A multimodal wrapper's vision tower (issue #44 item 5): left out unless ``model.config.headprune_towers`` names it,
then its heads are sites labelled vision_self, gated, masked and pruned where an image runs through it, and a
gated tower head that never ran raises. Checked on a tiny Gemma 3 (SigLIP tower) and a tiny LLaVA (CLIP tower)
against references placed here: the modules the wrappers' own attributes hold, a hook that zeroes a head's
features at the tower's ``out_proj``, and one that gives a head the mean of its value vectors."""
import copy
from pathlib import Path

import pytest
import torch
import yaml
from transformers import (Gemma3Config, Gemma3ForConditionalGeneration, LlamaConfig, LlamaForCausalLM, LlavaConfig,
                          LlavaForConditionalGeneration, Qwen2AudioConfig, Qwen2AudioForConditionalGeneration)

from tolerances import assert_within_rounding
from headprune.config_schema import validate
from headprune.report import figures
from headprune.evaluation.kinds import kind_of
from headprune.models.families.decoder import study_towers
from headprune.models.head_constants import HeadConstants
from headprune.models.heads import adapter_for, full_gates, gated, head_shape
from headprune.models.masking import Streaming
from headprune.models.prune import load_pruned_weights, prune_heads
from headprune.io.config_error import ConfigError
from headprune.studies import Pipeline

ROOT = Path(__file__).resolve().parents[1]
TEXT = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=64)
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=28,
              patch_size=14)
IMAGE_TOKEN, PATCHES = 60, (28 // 14) ** 2
LAYER, HEAD = 1, 2  # the tower head switched off


def _spread(model):
    """Wider weights than the default init, so that every head moves the logits (Gemma 3's image projection
    starts at zero, which would hide the tower altogether)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
    return model.eval()


def tiny_gemma3():
    config = Gemma3Config(text_config=dict(model_type="gemma3_text", **TEXT),
                          vision_config=dict(model_type="siglip_vision_model", vision_use_head=False, **VISION),
                          mm_tokens_per_image=PATCHES, image_token_index=IMAGE_TOKEN, boi_token_index=61,
                          eoi_token_index=62)
    model = _spread(Gemma3ForConditionalGeneration(config))
    return model, model.model.vision_tower.encoder.layers


def tiny_llava():
    # vision_feature_layer -1: the tower's last layer feeds the projector (LLaVA's default -2 skips its output)
    config = LlavaConfig(text_config=dict(model_type="llama", **TEXT),
                         vision_config=dict(model_type="clip_vision_model", projection_dim=16, **VISION),
                         image_token_index=IMAGE_TOKEN, vision_feature_layer=-1)
    model = _spread(LlavaForConditionalGeneration(config))
    return model, model.model.vision_tower.encoder.layers


FAMILIES = {"gemma3": tiny_gemma3, "llava": tiny_llava}


@pytest.fixture(params=sorted(FAMILIES))
def wrapper(request):
    return FAMILIES[request.param]()


def image_inputs(model):
    """What the processor would give: the image tokens in the text (image_token_id, one per image feature) and the
    image's pixels."""
    ids = torch.tensor([[2, 5] + [model.config.image_token_id] * PATCHES + [7, 8, 9]])
    return {"input_ids": ids, "pixel_values": torch.randn(1, 3, 28, 28, generator=torch.Generator().manual_seed(1))}


def logits(model, inputs, **gating):
    with torch.no_grad():
        if not gating:
            return model(**inputs).logits
        with gated(model, **gating):
            return model(**inputs).logits


def tower_head_off(model):
    gates = full_gates(model)
    gates["vision_self"][LAYER, HEAD] = 0.0
    return gates


def test_by_default_only_the_language_models_heads(wrapper):
    model, _ = wrapper
    sites = adapter_for(model).sites(model)
    assert {site.attn_type for site in sites} == {"dec_self"}
    assert [site.attention for site in sites] == [layer.self_attn for layer in model.model.language_model.layers]
    assert head_shape(model) == {"dec_self": (2, 4)}


def test_asked_for_the_towers_sites_are_labelled_vision_self(wrapper):
    model, tower_layers = wrapper
    study_towers(model, ["vision"])
    sites = adapter_for(model).sites(model)
    tower = [site for site in sites if site.attn_type == "vision_self"]
    assert [site.attention for site in sites if site.attn_type == "dec_self"] == \
        [layer.self_attn for layer in model.model.language_model.layers]
    assert [site.attention for site in tower] == [layer.self_attn for layer in tower_layers]
    assert [(site.layer, site.num_heads, site.head_dim) for site in tower] == [(0, 4, 8), (1, 4, 8)]
    assert [site.output for site in tower] == [layer.self_attn.out_proj for layer in tower_layers]
    assert head_shape(model) == {"dec_self": (2, 4), "vision_self": (2, 4)}


def test_gating_a_tower_head_with_an_image_zeroes_its_features_at_out_proj(wrapper):
    model, tower_layers = wrapper
    inputs = image_inputs(model)
    full = logits(model, inputs)

    def zero_head(module, args):
        x = args[0].clone()
        x[..., HEAD * 8:(HEAD + 1) * 8] = 0
        return (x,)

    handle = tower_layers[LAYER].self_attn.out_proj.register_forward_pre_hook(zero_head)
    try:
        reference = logits(model, inputs)
    finally:
        handle.remove()
    study_towers(model, ["vision"])
    masked = logits(model, inputs, gates=tower_head_off(model))
    assert_within_rounding(masked, reference)
    assert (masked - full).abs().max() > 1e-3


@pytest.mark.parametrize("masking", ["zero", "uniform"])
def test_a_gated_tower_head_without_an_image_raises_naming_the_layer(wrapper, masking):
    model, tower_layers = wrapper
    study_towers(model, ["vision"])
    attention = type(tower_layers[LAYER].self_attn).__name__
    text_only = {"input_ids": torch.tensor([[2, 5, 7, 8]])}
    with pytest.raises(RuntimeError, match=rf"vision_self layer {LAYER} \({attention}\) never ran"):
        logits(model, text_only, gates=tower_head_off(model), masking=masking)
    logits(model, text_only)  # the hooks came off


def test_uniform_masking_gives_a_tower_head_the_mean_of_its_values(wrapper):
    model, tower_layers = wrapper
    inputs = image_inputs(model)
    attention, values = tower_layers[LAYER].self_attn, {}
    # every patch may attend to every patch: uniform attention outputs the mean value vector
    handles = [attention.v_proj.register_forward_hook(lambda module, args, out: values.update(v=out)),
               attention.out_proj.register_forward_pre_hook(
                   lambda module, args: (torch.cat([args[0][..., :HEAD * 8],
                                                    values["v"][..., HEAD * 8:(HEAD + 1) * 8].mean(1, keepdim=True)
                                                    .expand(-1, args[0].shape[1], -1),
                                                    args[0][..., (HEAD + 1) * 8:]], -1),))]
    try:
        reference = logits(model, inputs)
    finally:
        for handle in handles:
            handle.remove()
    study_towers(model, ["vision"])
    uniform = logits(model, inputs, gates=tower_head_off(model), masking="uniform")
    assert_within_rounding(uniform, reference)
    assert (uniform - logits(model, inputs)).abs().max() > 1e-3


def test_streaming_masking_is_refused_when_a_tower_is_studied(wrapper):
    model, _ = wrapper
    study_towers(model, ["vision"])
    with pytest.raises(ValueError, match="vision_self layer 0 .* causal-LM idea"):
        logits(model, image_inputs(model), gates=full_gates(model), masking=Streaming(1, 2))


def test_tower_heads_are_not_scored_over_text_batches(wrapper):
    model, _ = wrapper
    batch = {"input_ids": torch.tensor([[2, 5]]), "attention_mask": torch.ones(1, 2)}
    with pytest.raises(ValueError, match="vision_self heads attend over a tower's patches"):
        adapter_for(model).query_mask(batch, "vision_self")


def test_a_pruned_tower_head_equals_it_gated_and_reloads(tmp_path):
    from headprune.models.export import save_pruned

    model, _ = tiny_gemma3()
    study_towers(model, ["vision"])
    inputs = image_inputs(model)
    masked = logits(model, inputs, gates=tower_head_off(model))
    pruned = prune_heads(copy.deepcopy(model), {"vision_self": {LAYER: [HEAD]}})
    assert pruned.model.vision_tower.encoder.layers[LAYER].self_attn.q_proj.out_features == 3 * 8
    assert_within_rounding(logits(pruned, inputs), masked)
    # the config keeps headprune_towers and the heads removed; weights in the names the model has, as save_pruned
    pruned.save_pretrained(tmp_path / "saved", save_original_format=False)
    reloaded = load_pruned_weights(Gemma3ForConditionalGeneration, tmp_path / "saved")
    assert_within_rounding(logits(reloaded, inputs), masked)
    with pytest.raises(ValueError, match="heads of vision_self were removed"):
        save_pruned(pruned, None, tmp_path / "exported")


def test_an_audio_tower_is_labelled_audio_self():
    config = Qwen2AudioConfig(text_config=dict(model_type="qwen2", **TEXT),
                              audio_config=dict(model_type="qwen2_audio_encoder", d_model=32, encoder_layers=2,
                                                encoder_attention_heads=4, encoder_ffn_dim=64, num_mel_bins=8,
                                                max_source_positions=16))
    model = Qwen2AudioForConditionalGeneration(config)
    study_towers(model, ["audio"])
    tower = [site for site in adapter_for(model).sites(model) if site.attn_type != "dec_self"]
    assert [(site.attn_type, site.attention) for site in tower] == \
        [("audio_self", layer.self_attn) for layer in model.model.audio_tower.layers]
    assert head_shape(model)["audio_self"] == (2, 4)


def test_a_tower_the_model_lacks_is_refused():
    model, _ = tiny_gemma3()
    with pytest.raises(ValueError, match="has no audio tower"):
        study_towers(model, ["audio"])
    with pytest.raises(ValueError, match="no tower"):
        study_towers(model, ["sound"])
    assert not getattr(model.config, "headprune_towers", None)
    llama = LlamaForCausalLM(LlamaConfig(**TEXT))
    with pytest.raises(ValueError, match="has no vision tower"):
        study_towers(llama, ["vision"])


def test_tower_types_have_labels_and_an_order():
    assert figures.type_labels(["dec_self", "vision_self"]) == {"dec_self": figures.CAUSAL_LABEL,
                                                               "vision_self": "Vision tower"}
    constants = HeadConstants({("vision_self", 0): torch.zeros(4, 8), ("dec_self", 1): torch.zeros(4, 8)})
    assert list(constants.values) == [("dec_self", 1), ("vision_self", 0)]


def _llama_config_with_towers():
    config = yaml.safe_load((ROOT / "configs" / "llama.yaml").read_text())
    config["models"]["llama3_8b"]["towers"] = {"vision": {"layers": 2, "heads": 4}}
    validate(config)
    return config


def test_a_studys_towers_key_is_refused_while_its_kind_scores_text():
    with pytest.raises(ConfigError, match="models.llama3_8b.towers has vision"):
        Pipeline(_llama_config_with_towers())
    broken = yaml.safe_load((ROOT / "configs" / "llama.yaml").read_text())
    broken["models"]["llama3_8b"]["towers"] = {"vision": {"layers": 2}}
    with pytest.raises(Exception, match="heads"):
        validate(broken)


def test_a_kind_that_feeds_images_studies_the_towers_heads(monkeypatch):
    monkeypatch.setattr(type(kind_of("language_modeling")), "towers", ("vision",))
    study = Pipeline(_llama_config_with_towers()).study("llama3_8b")
    assert study.attention_types == ["dec_self", "vision_self"]
    assert len(study.heads) == 32 * 32 + 2 * 4 and study.heads[-1] == "vision_self-1-3"
    assert study.layers[-2:] == ["vision_self-0", "vision_self-1"]
    assert study.params["towers"] == {"vision": {"layers": 2, "heads": 4}}
