"""Regressions of issue #44: real checkpoints' classes and geometry that tiny single-class models never met.

Each reference is placed by the test itself, from the model's own API (``get_decoder()``, the language model's
layers and projections by their transformers names), never from the heads headprune found:

- Gemma 3 4B/12B/27B load as ``Gemma3ForConditionalGeneration``, a multimodal wrapper whose SigLIP tower may be
  as deep as the text model. Its heads are the language model's; uniform masking reaches them (it was a silent
  no-op: the wrapper's config was switched, not the text config its attention reads) and equals a uniform
  attention computed by hand; streaming masking equals the text-only class with the same weights; pruning that
  leaves uneven key/value groups runs and equals gating.
- gpt-oss-20b/120b: 64 query heads of head_dim 64 (heads == head_dim) and one attention sink per head: the sinks
  are per-head parameters (uniform masking refused, pruned with their heads).
- ConvBERT: half of what its config calls heads are convolution heads; only the attention heads are gated.
- A head that is never reached is an error, never a zero effect (``gated``'s reach check).
"""
from __future__ import annotations

import warnings

import pytest
import torch

from tolerances import assert_within_rounding
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.masking import Streaming, Uniform
from headprune.models.prune import prune_heads

warnings.filterwarnings("ignore")


def language_layers(model):
    """The language model's decoder layers, found from transformers' own API (not headprune's)."""
    lm = model
    while getattr(lm, "get_decoder", None) is not None and lm.get_decoder() is not lm:
        lm = lm.get_decoder()
    return lm.layers


def gemma3(tower_layers: int = 3, seed: int = 0):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = dict(vocab_size=300, hidden_size=32, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, layer_types=["full_attention"] * 3)
    vision = dict(hidden_size=32, intermediate_size=32, num_hidden_layers=tower_layers, num_attention_heads=4,
                  image_size=28, patch_size=14)
    torch.manual_seed(seed)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
    return Gemma3ForConditionalGeneration(config).eval()


IDS = torch.randint(5, 300, (2, 9), generator=torch.Generator().manual_seed(1))


def logits(model, ids=IDS):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def test_gemma3_wrapper_heads_are_its_language_models():
    model = gemma3(tower_layers=3)  # the tower as deep as the text model: the old search took the tower
    sites = adapter_for(model).sites(model)
    assert [site.attention for site in sites] == [layer.self_attn for layer in language_layers(model)]
    gates = full_gates(model)
    gates["dec_self"][1, 2] = 0
    # The reference: head 2's input features of layer 1's own o_proj, zeroed by a hook placed here
    o_proj = language_layers(model)[1].self_attn.o_proj

    def zero_head(module, args):
        x = args[0].clone()
        x[..., 16:24] = 0
        return (x,)

    handle = o_proj.register_forward_pre_hook(zero_head)
    try:
        by_hand = logits(model)
    finally:
        handle.remove()
    with gated(model, gates):
        masked = logits(model)
    assert (masked - logits(model)).abs().max() > 1e-4, "gating a head changed nothing"
    assert_within_rounding(masked, by_hand)


def test_gemma3_wrapper_uniform_masking_is_a_uniform_attention():
    model = gemma3()
    full = logits(model)
    layer = language_layers(model)[0].self_attn
    head, kv_head, dim = 3, 3 // 2, 8
    seen = {}
    hooks = [layer.v_proj.register_forward_hook(lambda m, a, out: seen.__setitem__("values", out.detach())),
             layer.o_proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("heads", a[0].detach()))]
    gates = full_gates(model)
    gates["dec_self"][0, head] = 0
    try:
        with gated(model, gates, masking=Uniform()):
            masked = logits(model)
    finally:
        for hook in hooks:
            hook.remove()
    assert (masked - full).abs().max() > 1e-4, "uniform masking changed nothing"
    values = seen["values"][..., kv_head * dim:(kv_head + 1) * dim]  # (rows, tokens, dim)
    positions = torch.arange(1, values.shape[1] + 1, dtype=values.dtype)[None, :, None]
    uniform = values.cumsum(1) / positions  # causal: each query averages the values of the keys up to it
    assert_within_rounding(seen["heads"][..., head * dim:(head + 1) * dim], uniform)
    # The model is as it was once the context closed
    torch.testing.assert_close(logits(model), full, atol=0, rtol=0)
    assert language_layers(model)[0].self_attn.config._attn_implementation == model.config._attn_implementation


def text_only_twin(model):
    """Gemma3ForCausalLM with the wrapper's language model and head: the text-only class of the same weights."""
    from transformers import Gemma3ForCausalLM

    twin = Gemma3ForCausalLM(model.config.text_config).eval()
    twin.model.load_state_dict(model.model.language_model.state_dict())
    twin.lm_head.load_state_dict(model.lm_head.state_dict())
    return twin


def test_gemma3_wrapper_streaming_masking_equals_the_text_class():
    model = gemma3()
    model.set_attn_implementation("eager")
    twin = text_only_twin(model)
    twin.set_attn_implementation("eager")
    assert_within_rounding(logits(twin), logits(model))
    gates = full_gates(model)
    gates["dec_self"][:, 1] = 0
    with gated(model, gates, masking=Streaming(sink=1, recent=2)):
        wrapped = logits(model)
    with gated(twin, gates, masking=Streaming(sink=1, recent=2)):
        text = logits(twin)
    assert (wrapped - logits(model)).abs().max() > 1e-4, "streaming masking changed nothing"
    assert_within_rounding(wrapped, text)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_gemma3_wrapper_prunes_uneven_kv_groups(backend):
    model = gemma3()
    model.set_attn_implementation(backend)
    gates = full_gates(model)
    gates["dec_self"][0, 0] = 0  # kv head 0 then read by one query head, kv head 1 by two
    gates["dec_self"][2, [0, 1]] = 0  # a whole kv group
    with gated(model, gates):
        expected = logits(model)
        generated = model.generate(IDS, max_new_tokens=3, do_sample=False)
    prune_heads(model, {"dec_self": {0: [0], 2: [0, 1]}})
    assert language_layers(model)[0].self_attn.q_proj.out_features == 3 * 8
    assert_within_rounding(logits(model), expected)
    assert torch.equal(model.generate(IDS, max_new_tokens=3, do_sample=False), generated)


def test_a_gate_that_never_reaches_its_heads_is_an_error(monkeypatch):
    model = gemma3()
    gates = full_gates(model)
    gates["dec_self"][1, 0] = 0
    # The old bug: the text config left on its backend, so headprune's attention function never ran
    with pytest.raises(RuntimeError, match=r"uniform masking never reached the attention of dec_self layer 1"):
        with gated(model, gates, masking=Uniform()):
            for config in {id(l.self_attn.config): l.self_attn.config for l in language_layers(model)}.values():
                config._attn_implementation_internal = "sdpa"
            logits(model)
    # Heads found in a stack that never runs on text (the vision tower): every gate would change nothing
    from headprune.models.families.decoder import DecoderAdapter

    tower = model.model.vision_tower.encoder.layers
    real_sites = DecoderAdapter.sites

    def tower_sites(self, model):
        sites = real_sites(self, model)
        for site, layer in zip(sites, tower):
            site.attention, site.output = layer.self_attn, layer.self_attn.out_proj
        return sites

    monkeypatch.setattr(DecoderAdapter, "sites", tower_sites)
    with pytest.raises(RuntimeError, match=r"zero masking: dec_self layer 1 \(SiglipAttention\) never ran"):
        with gated(model, gates):
            logits(model)


def gpt_oss(heads: int = 64, head_dim: int = 64):
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(vocab_size=64, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                          num_attention_heads=heads, num_key_value_heads=8, head_dim=head_dim, num_local_experts=2,
                          num_experts_per_tok=1, layer_types=["sliding_attention", "full_attention"], sliding_window=4)
    torch.manual_seed(0)
    model = GptOssForCausalLM(config).eval()
    with torch.no_grad():  # sinks of real size: zero-initialised ones would hide a misplaced sink
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0, 1)
    return model


def test_gpt_oss_at_its_real_geometry_keeps_sinks_per_head():
    model = gpt_oss()  # gpt-oss-20b/120b: 64 query heads on 8 kv heads, head_dim 64
    adapter = adapter_for(model)
    sites = adapter.sites(model)
    assert [site.layout.per_head_parameters() for site in sites] == [["sinks"], ["sinks"]]
    gates = full_gates(model)
    gates["dec_self"][0, 5] = 0
    with pytest.raises(ValueError, match="sinks"):
        with gated(model, gates, masking=Uniform()):
            pass
    ids = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(0))
    remove = {0: [0, 3, 9], 1: list(range(8))}  # uneven groups in layer 0, kv group 0 whole in layer 1
    gates = full_gates(model)
    for layer, hs in remove.items():
        gates["dec_self"][layer, hs] = 0
    with gated(model, gates):
        expected = logits(model, ids)
    kept_sinks = model.model.layers[0].self_attn.sinks.detach()[[h for h in range(64) if h not in remove[0]]]
    prune_heads(model, {"dec_self": remove})
    attention = model.model.layers[0].self_attn
    assert attention.sinks.shape == (61,) and torch.equal(attention.sinks.detach(), kept_sinks)
    assert model.model.layers[1].self_attn.sinks.shape == (56,)
    assert_within_rounding(logits(model, ids), expected)


def test_convbert_gates_its_attention_heads_only():
    from transformers import ConvBertConfig, ConvBertForSequenceClassification

    torch.manual_seed(0)
    config = ConvBertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=37, embedding_size=32, head_ratio=2)
    model = ConvBertForSequenceClassification(config).eval()
    gates = full_gates(model)
    assert gates["enc_self"].shape == (2, 2)  # 2 attention heads per layer; the other 2 "heads" are convolutions
    ids = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(0))
    dense = model.convbert.encoder.layer[1].attention.output.dense
    head_size = model.convbert.encoder.layer[1].attention.self.attention_head_size

    def zero_head(module, args):
        x = args[0].clone()
        x[..., head_size:2 * head_size] = 0  # attention head 1; the convolution heads follow the attention heads
        return (x,)

    handle = dense.register_forward_pre_hook(zero_head)
    try:
        by_hand = logits(model, ids)
    finally:
        handle.remove()
    gates["enc_self"][1, 1] = 0
    with gated(model, gates):
        masked = logits(model, ids)
    assert (masked - logits(model, ids)).abs().max() > 1e-6
    assert_within_rounding(masked, by_hand)


@pytest.mark.parametrize("q_lora_rank", [None, 16], ids=["q_proj", "q_b_proj"])
def test_latent_attention_heads_are_gated_masked_and_pruned(q_lora_rank):
    """DeepSeek V2/V3's multi-head latent attention (and Kimi K2, GLM-4.7-Flash: the same layout): head h is its
    rows of the query projection and of kv_b_proj (no-rope key, value) and its v_head_dim columns of o_proj."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    config = DeepseekV3Config(vocab_size=64, hidden_size=32, intermediate_size=32, moe_intermediate_size=16,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                              q_lora_rank=q_lora_rank, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
                              v_head_dim=6, n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1,
                              n_group=1, topk_group=1)
    torch.manual_seed(0)
    model = DeepseekV3ForCausalLM(config).eval()
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    full = logits(model, ids)
    attention = model.model.layers[0].self_attn
    head, v_dim = 2, 6
    seen = {}
    hooks = [attention.kv_b_proj.register_forward_hook(lambda m, a, out: seen.__setitem__("kv", out.detach())),
             attention.o_proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("heads", a[0].detach()))]
    try:
        gates = full_gates(model)
        gates["dec_self"][0, head] = 0
        with gated(model, gates):
            zeroed = logits(model, ids)
        assert float(seen["heads"][..., head * v_dim:(head + 1) * v_dim].abs().max()) > 0  # the hook sees o_h
        with gated(model, gates, masking=Uniform()):
            uniform = logits(model, ids)
    finally:
        for hook in hooks:
            hook.remove()
    by_hand = {}

    def zero_head(module, args):
        x = args[0].clone()
        x[..., head * v_dim:(head + 1) * v_dim] = 0
        return (x,)

    handle = attention.o_proj.register_forward_pre_hook(zero_head)
    try:
        by_hand = logits(model, ids)
    finally:
        handle.remove()
    assert (zeroed - full).abs().max() > 1e-4 and (uniform - full).abs().max() > 1e-5
    assert_within_rounding(zeroed, by_hand)
    values = seen["kv"][:, 0].unflatten(-1, (4, 8 + v_dim))[..., head, 8:]  # (rows, 1 latent head, tokens, .)
    positions = torch.arange(1, ids.shape[1] + 1, dtype=values.dtype)[None, :, None]
    assert_within_rounding(seen["heads"][..., head * v_dim:(head + 1) * v_dim], values.cumsum(1) / positions)
    gates = full_gates(model)
    gates["dec_self"][0, [1, 2]] = 0
    gates["dec_self"][1, :] = 0  # a layer left without heads
    with gated(model, gates):
        expected = logits(model, ids)
        generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                                   pad_token_id=0)
    prune_heads(model, {"dec_self": {0: [1, 2], 1: [0, 1, 2, 3]}})
    assert attention.kv_b_proj.out_features == 2 * (8 + v_dim) and attention.o_proj.in_features == 2 * v_dim
    assert_within_rounding(logits(model, ids), expected)
    assert torch.equal(model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
                                      pad_token_id=0), generated)


def test_a_llava_style_wrapper_loads_prunes_and_exports_through_its_language_model(tmp_path):
    """A wrapper outside transformers' causal-LM table (LLaVA, Qwen2.5-VL, Mistral 3, Qwen2-Audio, Voxtral) loads in
    its own class as a language model, is pruned on its language model's heads and exports for plain transformers."""
    import subprocess
    import sys

    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    from headprune.models.export import save_pruned
    from headprune.models.loading import guess_kind, language_model_class
    from headprune.models.prune import load_pruned_weights

    text = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                              image_size=28, patch_size=14)  # as deep as the language model
    torch.manual_seed(0)
    LlavaForConditionalGeneration(LlavaConfig(text_config=text, vision_config=vision, image_token_index=63)
                                  ).save_pretrained(tmp_path / "llava")
    assert guess_kind(tmp_path / "llava") == "language_modeling"
    model = load_pruned_weights(language_model_class(tmp_path / "llava"), tmp_path / "llava").eval()
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert [site.attention for site in adapter_for(model).sites(model)] == \
        [layer.self_attn for layer in language_layers(model)]
    ids = torch.randint(0, 60, (2, 6), generator=torch.Generator().manual_seed(0))
    gates = full_gates(model)
    gates["dec_self"][0, 0] = 0
    with gated(model, gates):
        expected = logits(model, ids)
    assert (expected - logits(model, ids)).abs().max() > 1e-5
    prune_heads(model, {"dec_self": {0: [0]}})
    assert_within_rounding(logits(model, ids), expected)
    save_pruned(model, None, tmp_path / "pruned")
    torch.save({"ids": ids, "logits": expected}, tmp_path / "expected.pt")
    check = (f"import sys, torch; sys.modules['headprune'] = None\n"
             f"from transformers import AutoModelForMultimodalLM\n"
             f"model = AutoModelForMultimodalLM.from_pretrained({str(tmp_path / 'pruned')!r}, trust_remote_code=True)\n"
             f"expected = torch.load({str(tmp_path / 'expected.pt')!r})\n"
             f"with torch.no_grad(): logits = model.eval()(input_ids=expected['ids']).logits\n"
             f"print('GAP', float((logits - expected['logits']).abs().max()))\n")
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert "GAP" in run.stdout, run.stderr[-800:]
    assert float(run.stdout.split("GAP")[-1]) < 1e-5
