"""The generic decoder adapter (issue #38) checked against independent computations on families with quirks:
uniform masking through the attention function (Qwen3's per-head q/k norm, OLMo 2's norm over all heads, Phi-3's
fused qkv_proj, GPT-NeoX's per-head fused query_key_value), and the generic adapter against the outputs of the
per-family adapters it replaced (Llama with grouped key/values, Mistral, Qwen2, GPT-2)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from decoder_zoo import tiny_model
from test_decoder_families import REMOVE, _batch, _logits
from tolerances import assert_within_rounding, within_rounding
from headprune.models.families.decoder import DecoderAdapter
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.masking import Uniform
from headprune.models.prune import prune_heads
from headprune.scoring.importance import head_importance

MASKED = {0: [1, 4], 2: [0]}


def _gates(model, masked):
    gates = full_gates(model)
    for layer, heads in masked.items():
        gates["dec_self"][layer, heads] = 0
    return gates


@pytest.mark.parametrize("model_type", ["qwen3", "olmo2", "phi3", "gpt_neox"])
def test_uniform_masking_in_the_attention_function(model_type):
    """A masked head attends uniformly to its allowed keys (causal, left padding); every other head's attention is
    as it was, OLMo 2's included, whose q_norm spans all heads (zeroing a query before it would change them)."""
    torch.manual_seed(0)
    model = tiny_model(model_type)
    model.set_attn_implementation("eager")
    ids, mask = _batch()
    allowed = mask.bool()[:, None, :] & torch.ones(9, 9, dtype=torch.bool).tril()[None]  # (batch, queries, keys)
    real = mask.bool()
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        with gated(model, _gates(model, MASKED), masking=Uniform()):
            masked = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    uniform = allowed.double() / allowed.sum(-1, keepdim=True)
    assert isinstance(adapter_for(model), DecoderAdapter)
    for layer in range(3):
        for h in range(6):
            probs, before = masked[layer][:, h], plain[layer][:, h]  # float32: its rounding (tests/tolerances.py)
            if h in MASKED.get(layer, []):
                assert within_rounding(probs[real], uniform[real])
            elif layer == 0:  # layers above see other inputs; layer 0's other heads must not move
                assert within_rounding(probs[real], before[real])
    assert model.config._attn_implementation == "eager"  # restored when the context closed


REFERENCE = Path(__file__).parent / "data" / "family_adapters_reference.pt"
COLUMNS = ("importance_token", "importance_example", "importance_batch", "fisher")


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "gpt2"])
def test_generic_adapter_keeps_the_family_adapters_outputs(model_type):
    """Today's outputs kept: gated and pruned logits (uneven kv groups, a layer without heads, a kv group removed)
    and the importance scores equal what the per-family adapters (``families/llama.py``, ``families/gpt2.py``)
    computed on the same seeded models, in float64, before they were deleted (tests/data/family_adapters_reference.pt;
    tests/data/README.md says how, where and on which machine)."""
    reference = torch.load(REFERENCE)[model_type]
    torch.manual_seed(0)
    model = tiny_model(model_type)
    assert torch.equal(next(model.parameters()).detach().flatten()[:8], reference["first_weights"])  # same model
    assert isinstance(adapter_for(model), DecoderAdapter) and adapter_for(model).family == model_type
    model = model.double()  # both sides in float64: they differ by its rounding alone (tests/tolerances.py)
    ids, mask = _batch()
    with gated(model, _gates(model, REMOVE)):
        masked = _double_logits(model, ids, mask)
    pruned = _double_logits(prune_heads(copy.deepcopy(model), {"dec_self": REMOVE}), ids, mask)
    scores = head_importance(model, [{"input_ids": ids, "attention_mask": mask}], normalize=False, progress=False)
    assert masked.dtype == reference["masked"].dtype == torch.float64
    assert_within_rounding(masked, reference["masked"], f"{model_type} masked")
    assert_within_rounding(pruned, reference["pruned"], f"{model_type} pruned")
    for column in COLUMNS:
        assert_within_rounding(torch.tensor(scores[column].to_numpy()), reference["scores"][column],
                               f"{model_type} {column}", scores=True)


def _double_logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits


def test_refusals_name_why():
    """OLMo 2 normalises q and k over all heads: gating works, physical pruning is refused naming the module;
    GPT-OSS's attention sinks refuse uniform masking."""
    olmo = tiny_model("olmo2")
    with pytest.raises(ValueError, match="q_norm.*spans all heads"):
        prune_heads(olmo, {"dec_self": {0: [1]}})
    oss = tiny_model("gpt_oss")
    with pytest.raises(ValueError, match="sinks"):
        with gated(oss, _gates(oss, MASKED), masking=Uniform()):
            pass
    # the sinks are per-head parameters: pruning keeps the kept heads' sinks
    sinks = oss.model.layers[0].self_attn.sinks.detach().clone()
    prune_heads(oss, {"dec_self": {0: [0, 3]}})
    assert torch.equal(oss.model.layers[0].self_attn.sinks.detach(), sinks[[1, 2, 4, 5]])


@pytest.mark.parametrize("model_type", ["qwen3", "gemma2", "gpt_neox"])
def test_a_new_family_runs_the_language_model_study(model_type, tmp_path):
    """A model folder of a family no per-family code knows goes through what a `models:` entry runs: loading by
    kind, the single-head sweep with its paired test, a pruning curve, the pruned model saved and read back."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    import headprune as hp

    text = "the cat sat on the mat and the dog sat on the log . " * 20
    words = sorted(set(text.split()))
    vocab = Tokenizer(models.WordLevel({w: i + 3 for i, w in enumerate(words)} | {"<pad>": 0, "<s>": 1, "<unk>": 2},
                                       "<unk>"))
    vocab.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder = tmp_path / model_type
    PreTrainedTokenizerFast(tokenizer_object=vocab, unk_token="<unk>", pad_token="<pad>").save_pretrained(folder)
    torch.manual_seed(0)
    tiny_model(model_type).save_pretrained(folder)

    model, tokenizer = hp.load_model(folder)
    assert isinstance(adapter_for(model), DecoderAdapter) and len(hp.all_heads(model)) == 18
    evalset = hp.evalset_from_text(tokenizer, text, window=12)
    ablation = hp.single_head_sweep(model, tokenizer, evalset)
    assert len(ablation) == 18 and set(ablation["metric"]) == {"perplexity"}
    assert ablation["p_bootstrap"].between(0, 1).all() and (ablation["score"] != ablation["score_full"]).all()
    order = hp.criterion_order("importance", hp.head_scores(model, hp.evalset_batches(tokenizer, evalset)),
                               hp.all_heads(model))
    curve = hp.pruning_curve(model, tokenizer, evalset, order, step_percent=50)
    assert curve["heads_left"].tolist() == [18, 9, 0]
    pruned = hp.remove_heads(model, order[:5])
    hp.save_pruned(pruned, tokenizer, tmp_path / "pruned")
    reloaded, _ = hp.load_model(tmp_path / "pruned")
    batch = hp.evalset_batches(tokenizer, evalset, 4)[0]
    with torch.no_grad():
        assert within_rounding(reloaded(**batch).logits, pruned(**batch).logits)


@pytest.mark.parametrize("model_type", ["qwen3", "gemma3_text", "phi3"])
def test_bfloat16_weights_prune_as_they_gate(model_type):
    """Real checkpoints ship bfloat16: pruning keeps the dtype, and the pruned model computes what the gated one
    does (to bfloat16's precision: the kept heads' sums run over fewer terms in another order)."""
    torch.manual_seed(0)
    model = tiny_model(model_type).to(torch.bfloat16)
    ids, mask = _batch()
    with gated(model, _gates(model, REMOVE)):
        masked = _logits(model, ids, mask)
    pruned = prune_heads(copy.deepcopy(model), {"dec_self": REMOVE})
    assert {p.dtype for p in pruned.parameters()} == {torch.bfloat16}
    got = _logits(pruned, ids, mask)
    scale = masked.abs().max()
    assert (got - masked).abs().max() <= 0.02 * scale
    assert (got - masked).abs().max() < (masked - _logits(model, ids, mask)).abs().max()  # the gates mattered more


@pytest.mark.parametrize("model_type", ["qwen3", "gpt_neox", "gpt_oss"])
def test_streaming_masking_in_the_attention_function(model_type):
    """A masked head attends only to the first ``sink`` and last ``recent`` real tokens up to its query (its
    weights elsewhere 0), through headprune_attention; the other heads of the layer attend as before."""
    from headprune.models.masking import Streaming

    torch.manual_seed(0)
    model = tiny_model(model_type)
    model.set_attn_implementation("eager")
    ids, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        with gated(model, _gates(model, MASKED), masking=Streaming(1, 3)):
            assert model.config._attn_implementation == "headprune_eager"
            masked = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    rank = mask.cumsum(-1) - 1  # positions over real tokens
    window = (rank[:, None, :] < 1) | (rank[:, :, None] - rank[:, None, :] < 3)  # (batch, queries, keys)
    sinks = model_type == "gpt_oss"  # its attention sinks take part of each query's weight: the rest sums below 1
    for h in MASKED[0]:
        probs = masked[0][:, h]
        assert (probs[real][~window[real]] == 0).all()
        assert sinks or torch.allclose(probs[real].sum(-1), torch.ones(1))
    for h in set(range(6)) - set(MASKED[0]):
        assert torch.allclose(masked[0][:, h][real], plain[0][:, h][real], atol=1e-6)
    assert not hasattr(model.model.layers[0].self_attn if hasattr(model, "model") else model.gpt_neox.layers[0].attention,
                       "headprune_attention_mask")  # gone with the context


@pytest.mark.parametrize("model_type", ["qwen3", "gemma2"])
def test_a_new_family_is_timed_with_heads_removed(model_type):
    """Table 4's speed study on a family no per-family code knows: half its heads physically removed (uneven
    key/value groups), prefill and decode timed, the pruned logits checked against the gated model."""
    import pandas as pd

    from headprune.analyses import speed
    from headprune.evaluation.runs import EvalSet, all_heads

    torch.manual_seed(0)
    model = tiny_model(model_type)
    heads = all_heads(model)
    order = [heads[i] for i in torch.randperm(len(heads), generator=torch.Generator().manual_seed(1)).tolist()]
    importance = pd.DataFrame([{"attn_type": t, "layer": layer, "head": h, "importance": float(i)}
                               for i, (t, layer, h) in enumerate(order)])
    windows = torch.randint(3, 60, (4, 10), generator=torch.Generator().manual_seed(0)).tolist()
    evalset = EvalSet("language_modeling", windows, windows, "perplexity")
    settings = speed.SpeedSettings(batch_sizes=[2], repeats=1, warmup_batches=1, decode_tokens=3)
    runs, facts = speed.speed_study("lm", model, None, evalset, importance, settings, "cpu")
    assert set(runs["unit"]) == {"prefill tokens", "decode tokens"} and set(runs["family"]) == {model_type}
    assert facts["heads_pruned"] == 9 and facts["check_agreement"] == 1.0 and facts["check_max_abs_diff"] < 1e-4
