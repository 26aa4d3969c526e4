"""One contract for every head adapter, on tiny random models of each family.

Families: BERT, FSMT and M2M100 (tests/conftest.py), GPT-2 (fused, transposed query/key/value
projection), Llama without and with grouped-query attention (4 query heads reading 2 key/value
heads), and the Llama layout's Mistral and Qwen2 for the pruning checks; the classification encoders
RoBERTa, XLM-R, ELECTRA, DistilBERT and DeBERTa-v2/v3 (relative-position projections shared with the
content ones, as v3 has them, or of their own, as v2); the translation models BART, mBART, Marian and
NLLB's dense layout (M2M100ForConditionalGeneration). The contract:

1. a gate of 0 equals the head physically removed (single heads, a whole kv group, a whole layer);
2. I_h is |dL/dxi_h| (finite differences of the loss in a gate), and the attention-gradient criterion
   is dL/dA (autograd through a perturbed softmax);
3. gates inside generate() (greedy, beam search) equal generate() on the pruned model;
4. a saved pruned model reloads (headprune.models.prune.load_pruned_weights) with the same logits;
5. several gate settings batched together equal them one by one (forward and generate());
6. (the encoder and encoder-decoder families added with issue #13) uniform masking gives a masked head
   uniform attention over its allowed keys, or is refused where the scores have position terms.

The causal-LM builders live here for now (to move to conftest.py).
"""
import copy
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import pytest
import torch
from transformers import (BartConfig, BartForConditionalGeneration, BertForSequenceClassification, DebertaConfig,
                          DebertaForSequenceClassification, DebertaV2Config, DebertaV2ForSequenceClassification,
                          DistilBertConfig, DistilBertForSequenceClassification, ElectraConfig,
                          ElectraForSequenceClassification, FSMTForConditionalGeneration, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM, M2M100Config, M2M100ForConditionalGeneration, MarianConfig,
                          MarianMTModel, MBartConfig, MBartForConditionalGeneration, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, RobertaConfig, RobertaForSequenceClassification,
                          XLMRobertaConfig, XLMRobertaForSequenceClassification)

from conftest import (EOS, PAD, _spread_weights, bert_batch, fsmt_batch, repeated, tiny_bert, tiny_fsmt, tiny_m2m100,
                      variants)
from tolerances import assert_within_rounding, within_rounding
from headprune.models.portable.headprune_attention import query_kv_index
from headprune.evaluation.evaluate import stack_gates
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.scoring.importance import head_importance, head_scores
from headprune.models.prenorm import PreNormTransformer
from headprune.models.prune import count_heads, load_pruned_weights, prune_heads, pruned_heads

BOS, VOCAB = 0, 40
ROOT = Path(__file__).resolve().parents[1]


# --- Tiny causal LMs and their batches ----------------------------------------------------------

def _random_biases(model, std=0.2):
    """Attention biases start at 0; random ones make slicing them matter."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and name.endswith("bias"):
                p.normal_(0, std)
    return model


def _causal_config(config_class, **kwargs):
    return config_class(vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                        attn_implementation="eager", **kwargs)


def tiny_gpt2(seed=0, layers=2, heads=4, hidden=16):
    torch.manual_seed(seed)
    config = _causal_config(GPT2Config, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=64,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return _random_biases(_spread_weights(GPT2LMHeadModel(config).eval()))


def _llama_like(model_class, config_class, seed, **kwargs):
    torch.manual_seed(seed)
    config = _causal_config(config_class, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                            num_attention_heads=4, max_position_embeddings=64, **kwargs)
    return _random_biases(_spread_weights(model_class(config).eval()))


def tiny_llama(seed=0, kv_heads=4, bias=True):
    """Llama with (kv_heads < 4) or without grouped-query attention; with attention biases or without."""
    return _llama_like(LlamaForCausalLM, LlamaConfig, seed, num_key_value_heads=kv_heads, attention_bias=bias)


def tiny_llama_gqa(seed=0):
    return tiny_llama(seed, kv_heads=2, bias=False)  # no o_proj bias: a layer without heads adds zeros


def tiny_mistral(seed=0):
    return _llama_like(MistralForCausalLM, MistralConfig, seed, num_key_value_heads=2, sliding_window=None)


def tiny_qwen2(seed=0):
    return _llama_like(Qwen2ForCausalLM, Qwen2Config, seed, num_key_value_heads=2, use_sliding_window=False)


def causal_batch(seed=1, batch=3, length=8, padding_side="left"):
    """Rows of BOS + random tokens, padded (PAD, attention 0, label -100) on one side; an EOS inside one row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((batch, length), PAD)
    mask = torch.zeros_like(ids)
    for i, n in enumerate([length, length - 3, 5, length - 1][:batch]):
        row = torch.cat([torch.tensor([BOS]), torch.randint(3, VOCAB, (n - 1,), generator=g)])
        if i == 1:
            row[2] = EOS
        where = slice(length - n, length) if padding_side == "left" else slice(0, n)
        ids[i, where] = row
        mask[i, where] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


# --- Tiny classification encoders and translation models (issue #13) ------------------------------

SEP = 3  # bert_batch's [SEP]; RoBERTa's separator is </s> (EOS)


def _classifier(model_class, config_class, seed, **kwargs):
    torch.manual_seed(seed)
    config = config_class(vocab_size=50, num_labels=3, attn_implementation="eager", **kwargs)
    return _random_biases(_spread_weights(model_class(config).eval()))


def _bert_sizes(**kwargs):
    return dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
                max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kwargs)


def tiny_roberta(seed=0, model_class=RobertaForSequenceClassification, config_class=RobertaConfig):
    """One token type, <s> 0, <pad> 1, </s> 2 (the separator), positions offset by the pad id."""
    return _classifier(model_class, config_class, seed, **_bert_sizes(
        type_vocab_size=1, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, sep_token_id=EOS))


def tiny_xlm_roberta(seed=0):
    return tiny_roberta(seed, XLMRobertaForSequenceClassification, XLMRobertaConfig)


def tiny_electra(seed=0):
    """Embeddings narrower than the encoder (projected up), as ELECTRA's discriminators have them."""
    return _classifier(ElectraForSequenceClassification, ElectraConfig, seed,
                       **_bert_sizes(embedding_size=8, pad_token_id=0, sep_token_id=SEP))


def tiny_distilbert(seed=0):
    return _classifier(DistilBertForSequenceClassification, DistilBertConfig, seed, dim=16, n_layers=2, n_heads=4,
                       hidden_dim=32, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
                       seq_classif_dropout=0.0, pad_token_id=0, sep_token_id=SEP)


def tiny_deberta_v2(seed=0, share_att_key=True, relative_attention=True):
    """share_att_key (DeBERTa-v3): the position projections are the query and key ones, with log buckets
    shorter than the batch; else (v2) pos_key_proj / pos_query_proj of their own and a convolution."""
    layout = (dict(share_att_key=True, position_buckets=4, norm_rel_ebd="layer_norm") if share_att_key else
              dict(share_att_key=False, max_relative_positions=6, conv_kernel_size=3, conv_act="gelu"))
    return _classifier(DebertaV2ForSequenceClassification, DebertaV2Config, seed, **_bert_sizes(
        relative_attention=relative_attention, pos_att_type=["p2c", "c2p"], position_biased_input=False,
        type_vocab_size=0, pooler_dropout=0.0, pad_token_id=0, sep_token_id=SEP, **layout))


def tiny_deberta_v2_separate(seed=0):
    return tiny_deberta_v2(seed, share_att_key=False)


def roberta_batch(seed=1, batch=4, length=9):
    """bert_batch's rows as RoBERTa's tokenizer makes them: <s> ... </s>, padded with <pad>."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 50, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    for i, n in enumerate([length, length - 3, length - 1, 4][:batch]):
        ids[i, 0], ids[i, n - 1], ids[i, n:] = BOS, EOS, PAD
        mask[i, n:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, 3, (batch,), generator=g)}


def _seq2seq(model_class, config_class, seed, **kwargs):
    torch.manual_seed(seed)
    config = config_class(vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                          decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=PAD, eos_token_id=EOS,
                          dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, attn_implementation="eager",
                          **kwargs)
    model = _random_biases(_spread_weights(model_class(config).eval()))
    with torch.no_grad():  # make </s> unlikely, so that generate() runs several cached steps (as tiny_m2m100)
        model.get_output_embeddings().weight[EOS] *= -1
    return model


def tiny_bart(seed=0):
    return _seq2seq(BartForConditionalGeneration, BartConfig, seed, bos_token_id=BOS, decoder_start_token_id=EOS)


def tiny_mbart(seed=0):
    """Decoding starts from </s>, then a forced language code (token 3), as mBART-50's."""
    return _seq2seq(MBartForConditionalGeneration, MBartConfig, seed, bos_token_id=BOS, decoder_start_token_id=EOS,
                    forced_bos_token_id=3, scale_embedding=True)


def tiny_marian(seed=0):
    """Decoding starts from the pad token; sinusoidal positions (kept sinusoidal here), scaled embeddings."""
    model = _seq2seq(MarianMTModel, MarianConfig, seed, decoder_vocab_size=VOCAB, decoder_start_token_id=PAD,
                     forced_eos_token_id=EOS, scale_embedding=True)
    with torch.no_grad():
        for stack in (model.model.encoder, model.model.decoder):
            stack.embed_positions.weight.copy_(stack.embed_positions.create_weight())
    return model


def tiny_nllb(seed=0):
    """NLLB-200's dense layout: plain M2M100ForConditionalGeneration, one shared vocabulary."""
    return _seq2seq(M2M100ForConditionalGeneration, M2M100Config, seed, bos_token_id=BOS, decoder_start_token_id=EOS,
                    scale_embedding=True)


def marian_batch(seed=1):
    """fsmt_batch, teacher-forced from the pad token as Marian decodes."""
    batch = fsmt_batch(seed)
    batch["decoder_input_ids"][:, 0] = PAD
    return batch


FAMILIES = {
    "bert": (tiny_bert, bert_batch, BertForSequenceClassification),
    "fsmt": (tiny_fsmt, fsmt_batch, FSMTForConditionalGeneration),
    "m2m100": (tiny_m2m100, fsmt_batch, PreNormTransformer),
    "gpt2": (tiny_gpt2, causal_batch, GPT2LMHeadModel),
    "llama": (tiny_llama, causal_batch, LlamaForCausalLM),
    "llama_gqa": (tiny_llama_gqa, causal_batch, LlamaForCausalLM),
    "mistral": (tiny_mistral, causal_batch, MistralForCausalLM),
    "qwen2": (tiny_qwen2, causal_batch, Qwen2ForCausalLM),
    "roberta": (tiny_roberta, roberta_batch, RobertaForSequenceClassification),
    "xlm_roberta": (tiny_xlm_roberta, roberta_batch, XLMRobertaForSequenceClassification),
    "electra": (tiny_electra, bert_batch, ElectraForSequenceClassification),
    "distilbert": (tiny_distilbert, bert_batch, DistilBertForSequenceClassification),  # token_type_ids left out
    "deberta_v3": (tiny_deberta_v2, bert_batch, DebertaV2ForSequenceClassification),
    "deberta_v2": (tiny_deberta_v2_separate, bert_batch, DebertaV2ForSequenceClassification),
    "bart": (tiny_bart, fsmt_batch, BartForConditionalGeneration),
    "mbart": (tiny_mbart, fsmt_batch, MBartForConditionalGeneration),
    "marian": (tiny_marian, marian_batch, MarianMTModel),
    "nllb": (tiny_nllb, fsmt_batch, M2M100ForConditionalGeneration),
}
CAUSAL = ["gpt2", "llama", "llama_gqa", "mistral", "qwen2"]
ENCODERS = ["roberta", "xlm_roberta", "electra", "distilbert", "deberta_v3", "deberta_v2"]  # issue #13's
SEQ2SEQ = ["bart", "mbart", "marian", "nllb"]  # issue #13's
# One per adapter (and GQA, and per attention class a pruned module must stay): the full contract.
CORE = ["bert", "fsmt", "m2m100", "gpt2", "llama", "llama_gqa", "roberta", "xlm_roberta", "electra", "distilbert",
        "deberta_v3", "bart", "mbart", "marian"]
GENERATIVE = ["fsmt", "m2m100", *CAUSAL, *SEQ2SEQ]
SDPA = [*CAUSAL, *[f for f in ENCODERS + SEQ2SEQ if not f.startswith("deberta")]]  # DeBERTa has eager only


def build(family):
    make_model, make_batch, _ = FAMILIES[family]
    return make_model(), make_batch()


def with_backends(families):
    """(family, attention backend): the causal LMs and issue #13's families in eager and sdpa (where they have
    it), the others as built."""
    return [pytest.param(f, b, id=f"{f}-{b}") for f in families
            for b in (("eager", "sdpa") if f in SDPA else (None,))]


def set_backend(model, backend):
    if backend is not None:
        model.set_attn_implementation(backend)
    return model


@pytest.fixture(autouse=True)
def fsmt_runs_in_float64(monkeypatch):
    """FSMT's causal mask overflows in float64 (it fills with float64's min): use -inf (as test_importance)."""
    from transformers.models.fsmt import modeling_fsmt
    monkeypatch.setattr(modeling_fsmt, "fill_with_neg_inf", lambda t: t.fill_(float("-inf")))


@pytest.fixture
def llama_in_float64(monkeypatch):
    """Llama computes RMSNorm and the eager softmax in float32 whatever its dtype: in float64 in the tests.

    Test-only, for exact finite differences and comparisons. (Left padding in float64 makes the eager
    softmax NaN otherwise: a padding query's masked scores, float64's min, become -inf in float32.)
    Both Llama attention classes, transformers' and headprune's, read these from the module.
    """
    from transformers.models.llama import modeling_llama

    def rms_norm(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)

    def eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        key = modeling_llama.repeat_kv(key, module.num_key_value_groups)
        value = modeling_llama.repeat_kv(value, module.num_key_value_groups)
        scores = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask
        weights = torch.nn.functional.softmax(scores, dim=-1)
        return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms_norm)
    monkeypatch.setattr(modeling_llama, "eager_attention_forward", eager_attention)


# Head sets to remove, per layer, from every attention type of a family. With 4 query heads on 2 kv
# heads, kv head 0 serves query heads 0-1 and kv head 1 query heads 2-3.
REMOVALS = {
    "single": {0: [1]},  # GQA: kv head 0 is left with one query head, kv head 1 with two
    "kv_group": {0: [0, 1]},  # GQA: kv head 0 goes
    "uneven": {0: [1], 1: [0, 3]},
    "layer": {1: [0, 1, 2, 3]},
    "group_and_layer": {0: [2, 3], 1: [0, 1, 2, 3]},
}


def removal_for(model, layers):
    return {t: {layer: list(heads) for layer, heads in layers.items()} for t in adapter_for(model).attention_types}


def gates_for(model, removal):
    gates = full_gates(model)
    for attn_type, layers in removal.items():
        for layer, heads in layers.items():
            gates[attn_type][layer, heads] = 0.0
    return gates


def logits(model, batch, gates=None):
    with torch.no_grad(), gated(model, gates):
        return adapter_for(model).loss_and_outputs(model, batch)[1].logits


# --- 1. Gate 0 is physical removal --------------------------------------------------------------

@pytest.mark.parametrize("removal", list(REMOVALS))
@pytest.mark.parametrize("family, backend", with_backends(FAMILIES))
def test_gate_zero_equals_physical_removal(family, backend, removal):
    model, batch = build(family)
    set_backend(model, backend)
    heads = removal_for(model, REMOVALS[removal])
    gates = gates_for(model, heads)
    expected = logits(model, batch, gates)
    pruned = prune_heads(copy.deepcopy(model), heads)
    assert within_rounding(logits(pruned, batch), expected)
    assert (expected - logits(model, batch)).abs().max() > 1e-3  # the removed heads mattered
    removed = sum(len(h) for layers in heads.values() for h in layers.values())
    assert count_heads(pruned) == count_heads(model) - removed
    # gates on the pruned model address heads by their original index
    more = gates_for(model, heads)
    more[adapter_for(model).attention_types[0]][0, 3] = 0.0
    fewer = full_gates(model)
    fewer[adapter_for(model).attention_types[0]][0, 3] = 0.0
    assert within_rounding(logits(pruned, batch, fewer), logits(model, batch, more))


def attention(model, layer):
    return model.base_model.layers[layer].self_attn


def test_gqa_kv_heads_go_with_their_last_query_head():
    model = tiny_llama_gqa()
    d = attention(model, 0).head_dim
    prune_heads(model, {"dec_self": {0: [1]}})  # kv head 0 keeps query head 0
    attn = attention(model, 0)
    assert type(attn).__name__ == "LlamaAttention"  # transformers' own class: its forward is not copied
    assert (attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features) == (3 * d, 2 * d, 2 * d)
    assert attn.o_proj.in_features == 3 * d
    assert query_kv_index(attn) == [0, 1, 1] and attn.num_key_value_groups == 1
    prune_heads(model, {"dec_self": {0: [0]}})  # its last query head: kv head 0 goes
    assert attn.k_proj.out_features == attn.v_proj.out_features == d
    assert query_kv_index(attn) == [0, 0]
    assert attn.headprune_kv_index is None and attn.num_key_value_groups == 2  # uniform again: no gather
    untouched = attention(model, 1)
    assert type(untouched).__name__ == "LlamaAttention" and query_kv_index(untouched) == [0, 0, 1, 1]
    prune_heads(model, {"dec_self": {0: [2, 3]}})
    assert attn.q_proj.out_features == attn.k_proj.out_features == 0
    assert pruned_heads(model) == {"dec_self": {0: [0, 1, 2, 3]}}


# --- 2. I_h is the gate gradient; the attention gradient is dL/dA ---------------------------------

def loss_at(model, batch, gates):
    with torch.no_grad(), gated(model, gates):
        return float(adapter_for(model).loss_and_outputs(model, batch)[0])


@pytest.mark.parametrize("pruned", [False, True], ids=["full", "pruned"])
@pytest.mark.parametrize("family", CORE)
def test_importance_is_the_finite_difference_gate_gradient(family, pruned, llama_in_float64):
    """I_h (one batch, estimator "batch", unnormalized) times the predicted tokens is |dL/dxi_h|."""
    model, batch = build(family)
    model.double()  # exact finite differences
    if family in CAUSAL:
        model.set_attn_implementation("sdpa")  # head_importance keeps the model's backend
    if pruned:
        prune_heads(model, removal_for(model, REMOVALS["uneven"]))
    table = head_importance(model, [batch], estimator="batch", normalize=False, progress=False)
    tokens = adapter_for(model).num_tokens(batch)
    eps = 1e-5
    for attn_type in adapter_for(model).attention_types:
        for layer, head in [(0, 0), (0, 3), (1, 1), (1, 2)]:  # all kept in the "uneven" removal
            plus = {t: g.double() for t, g in full_gates(model).items()}  # 1 + eps is not exact in float32
            minus = {t: g.double() for t, g in full_gates(model).items()}
            plus[attn_type][layer, head] += eps
            minus[attn_type][layer, head] -= eps
            numeric = (loss_at(model, batch, plus) - loss_at(model, batch, minus)) / (2 * eps)
            row = table[(table.attn_type == attn_type) & (table.layer == layer) & (table["head"] == head)].iloc[0]
            assert row.importance * tokens == pytest.approx(abs(numeric), rel=1e-5, abs=1e-7)
            assert abs(numeric) > 1e-4  # every head matters


def loss_with_perturbed_softmax(model, batch, shift=None):
    """The loss with a zero leaf added to every attention softmax's output (``shift``: one entry moved)."""
    original = torch.nn.functional.softmax
    deltas = []

    def softmax(x, *args, **kwargs):
        p = original(x, *args, **kwargs)
        delta = torch.zeros_like(p)
        if shift is not None and shift[0] == len(deltas):
            delta[shift[1]] = shift[2]
        deltas.append(delta.requires_grad_(True))
        return p + delta

    with mock.patch.object(torch.nn.functional, "softmax", softmax):
        loss, _ = adapter_for(model).loss_and_outputs(model, batch)
    return loss, deltas


@pytest.mark.parametrize("pruned", [False, True], ids=["full", "pruned"])
@pytest.mark.parametrize("family", ["gpt2", "llama", "llama_gqa"])
def test_attention_gradient_is_dl_da(family, pruned, llama_in_float64):
    """head_scores' attention_gradient (from the values each query head reads, GQA included) against
    autograd through the attention probabilities, checked once by finite differences."""
    model, batch = build(family)
    model.double()
    if pruned:
        prune_heads(model, {"dec_self": {0: [1]}})  # GQA: query heads 0 | 2, 3 read kv heads 0 | 1
    adapter = adapter_for(model)
    table = head_scores(model, [batch], normalize=False, progress=False)  # switches to eager
    loss, deltas = loss_with_perturbed_softmax(model, batch)
    assert len(deltas) == 2  # one softmax per layer
    grads = torch.autograd.grad(loss, deltas)
    allowed = (adapter.query_mask(batch, "dec_self")[:, :, None] & adapter.key_mask(batch, "dec_self"))[:, None]
    entry = (0, 1, 6, 4)  # (row, kept head, query, key), an allowed one
    plus = loss_with_perturbed_softmax(model, batch, (1, entry, 1e-6))[0].item()
    minus = loss_with_perturbed_softmax(model, batch, (1, entry, -1e-6))[0].item()
    assert grads[1][entry].item() == pytest.approx((plus - minus) / 2e-6, rel=1e-4)
    for layer, grad in enumerate(grads):
        expected = (grad.double().abs() * allowed).sum((0, 2, 3)) / adapter.num_tokens(batch)
        rows = table[table.layer == layer].sort_values("head")
        kept = rows[rows.attention_gradient > 0]
        assert len(kept) == grad.shape[1]
        assert kept.attention_gradient.to_numpy() == pytest.approx(expected.numpy(), rel=1e-5)


@pytest.mark.parametrize("family", CORE)
def test_pruned_heads_score_as_switched_off(family, llama_in_float64):
    """Every criterion of a pruned model's kept heads (a whole layer and an uneven GQA layer pruned) is
    the full model's with the others gated off; removed heads score 0."""
    model, batch = build(family)
    model.double()
    heads = removal_for(model, {0: [1], 1: [0, 1, 2, 3]})
    gates = gates_for(model, heads)
    switched_off = head_scores(model, [batch], normalize=False, gates=gates, progress=False)
    table = head_scores(prune_heads(copy.deepcopy(model), heads), [batch], normalize=False, progress=False)
    removed = [bool(gates[r.attn_type][r.layer, r.head] == 0) for r in table.itertuples()]
    kept = [not r for r in removed]
    columns = ["importance_token", "importance_example", "fisher", "attention_gradient", "entropy",
               "entropy_normalized", "confidence"]
    assert table.loc[kept, columns].to_numpy() == pytest.approx(switched_off.loc[kept, columns].to_numpy(), rel=1e-6)
    assert (table.loc[kept, ["importance_token", "attention_gradient", "entropy"]] > 0).all().all()
    assert (table.loc[removed, columns] == 0).all().all()


# --- The causal-LM adapter's batch, loss and masks --------------------------------------------------

@pytest.mark.parametrize("family", CAUSAL)
def test_causal_loss_is_summed_next_token_cross_entropy(family):
    model = FAMILIES[family][0]()
    adapter = adapter_for(model)
    right = causal_batch(padding_side="right")
    loss, _ = adapter.loss_and_outputs(model, right)
    tokens = adapter.num_tokens(right)
    assert tokens == int(right["attention_mask"].sum()) - len(right["input_ids"])  # every real token but the first
    with torch.no_grad():
        mean = model(input_ids=right["input_ids"], attention_mask=right["attention_mask"], labels=right["labels"]).loss
    assert loss.item() == pytest.approx(mean.item() * tokens, rel=1e-5)
    left = causal_batch(padding_side="left")  # the same rows, padded on the other side
    assert adapter.loss_and_outputs(model, left)[0].item() == pytest.approx(loss.item(), rel=1e-5)
    masked = {**left, "labels": left["labels"].clone()}
    masked["labels"][:, -1] = -100  # not predicted: one token less per row
    assert adapter.num_tokens(masked) == tokens - len(left["input_ids"])
    assert adapter.loss_and_outputs(model, masked)[0].item() < loss.item()


@pytest.mark.parametrize("family", CAUSAL)
def test_causal_masks_and_special_keys(family):
    model = FAMILIES[family][0]()
    adapter = adapter_for(model)
    batch = causal_batch()
    mask = batch["attention_mask"].bool()
    assert adapter.attention_types == ("dec_self",) and adapter.family == model.config.model_type
    assert torch.equal(adapter.query_mask(batch, "dec_self"), mask)
    keys = adapter.key_mask(batch, "dec_self")
    q, k = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    assert torch.equal(keys, mask[:, None, :] & (k <= q)[None])
    eos = adapter.eos_keys(model, batch, "dec_self")
    assert torch.equal(eos, (batch["input_ids"] == BOS) | (batch["input_ids"] == EOS))
    assert eos.sum() == len(mask) + 1  # each row's BOS, one EOS
    with torch.no_grad():
        _, outputs = adapter.loss_and_outputs(model, batch, output_attentions=True)
    maps = adapter.attention_weights(outputs, "dec_self")
    assert len(maps) == 2 and maps[0].shape == (3, 4, 8, 8)
    assert torch.allclose(maps[1].sum(-1)[mask[:, None, :].expand(-1, 4, -1)], torch.tensor(1.0))


def test_uniform_masking_exact_for_gpt2_and_llama_gqa():
    """GPT-2's fused c_attn: the query is changed inside the attention function, keys and values untouched."""
    gpt2, batch = build("gpt2")
    gates = full_gates(gpt2)
    gates["dec_self"][1, 2] = 0.0
    adapter = adapter_for(gpt2)
    gpt2.set_attn_implementation("eager")
    with torch.no_grad(), gated(gpt2, gates, masking="uniform"):
        _, outputs = adapter.loss_and_outputs(gpt2, batch, output_attentions=True)
    allowed = adapter.key_mask(batch, "dec_self").double()
    real = adapter.query_mask(batch, "dec_self")
    uniform = (allowed / allowed.sum(-1, keepdim=True).clamp(min=1))[real]
    assert torch.allclose(outputs.attentions[1][:, 2][real].double(), uniform, atol=1e-6)
    assert not torch.allclose(outputs.attentions[1][:, 1][real].double(), uniform, atol=1e-2)
    model, batch = build("llama_gqa")
    prune_heads(model, {"dec_self": {1: [1]}})  # uneven: query heads 0 | 2, 3 read kv heads 0 | 1
    gates = full_gates(model)
    gates["dec_self"][1, 2] = 0.0
    adapter = adapter_for(model)
    with torch.no_grad(), gated(model, gates, masking="uniform"):
        _, outputs = adapter.loss_and_outputs(model, batch, output_attentions=True)
    allowed = adapter.key_mask(batch, "dec_self").double()
    real = adapter.query_mask(batch, "dec_self")
    uniform = (allowed / allowed.sum(-1, keepdim=True).clamp(min=1))[real]
    weights = outputs.attentions[1]  # kept heads 0, 2, 3
    assert torch.allclose(weights[:, 1][real].double(), uniform, atol=1e-6)
    assert not torch.allclose(weights[:, 2][real].double(), uniform, atol=1e-2)


# --- 3. Gates inside generate() -------------------------------------------------------------------

def generate(model, batch, gates=None, **options):
    with torch.no_grad(), gated(model, gates):
        return model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=8,
                              max_length=None, do_sample=False, **options)


@pytest.mark.parametrize("beams", [1, 3], ids=["greedy", "beam3"])
@pytest.mark.parametrize("family, backend", with_backends(GENERATIVE))
def test_gates_in_generate_equal_the_pruned_model(family, backend, beams):
    model, batch = build(family)
    set_backend(model, backend)
    changed = False
    for removal in ("uneven", "group_and_layer"):
        heads = removal_for(model, REMOVALS[removal])
        options = dict(num_beams=beams, min_new_tokens=4)  # several cached decoding steps
        gated_ids = generate(model, batch, gates_for(model, heads), **options)
        pruned_ids = generate(prune_heads(copy.deepcopy(model), heads), batch, **options)
        assert torch.equal(gated_ids, pruned_ids)
        changed |= not torch.equal(gated_ids, generate(model, batch, **options))
        prompt = batch["input_ids"].shape[1] if family in CAUSAL else 1
        assert gated_ids.shape[1] > prompt + 3  # several cached decoding steps
    assert changed


@pytest.mark.parametrize("family", ["gpt2", "llama_gqa", "qwen2"])
def test_generate_without_padding_equals_the_pruned_model(family):
    """No padding: sdpa gets no mask, and transformers' own grouped-query paths run on whole kv groups."""
    model = set_backend(FAMILIES[family][0](), "sdpa")
    batch = {k: v[:1] for k, v in causal_batch().items()}
    assert batch["attention_mask"].all()
    for removal in ("kv_group", "uneven", "group_and_layer"):
        heads = removal_for(model, REMOVALS[removal])
        pruned = prune_heads(copy.deepcopy(model), heads)
        assert within_rounding(logits(pruned, batch), logits(model, batch, gates_for(model, heads)))
        for beams in (1, 3):
            options = dict(num_beams=beams, min_new_tokens=4)
            assert torch.equal(generate(pruned, batch, **options),
                               generate(model, batch, gates_for(model, heads), **options))


# --- 4. Save and reload ---------------------------------------------------------------------------

SAVED_FAMILIES = list(FAMILIES)  # Marian included: its sinusoidal positions are recomputed on load


@pytest.mark.parametrize("family", SAVED_FAMILIES)
def test_pruned_model_saves_and_reloads(tmp_path, family):
    model, batch = build(family)
    model_class = FAMILIES[family][2]
    prune_heads(model, removal_for(model, {0: [1], 1: [0, 1, 2, 3]}))  # GQA: uneven, and a layer without heads
    model.save_pretrained(tmp_path)
    reloaded = load_pruned_weights(model_class, tmp_path)
    expected = logits(model, batch)
    if family in CAUSAL:  # reloaded in sdpa, built in eager: they differ on padding positions, which mean nothing
        real = batch["attention_mask"].bool()
        assert within_rounding(logits(reloaded, batch)[real], expected[real])
    else:
        assert within_rounding(logits(reloaded, batch), expected)
    assert pruned_heads(reloaded) == pruned_heads(model)
    assert count_heads(reloaded) == count_heads(model)
    if family in CAUSAL:
        assert torch.equal(generate(reloaded, batch, num_beams=3), generate(model, batch, num_beams=3))
        if family == "llama_gqa":
            assert query_kv_index(attention(reloaded, 0)) == [0, 1, 1]


# --- 5. Batched gate variants ---------------------------------------------------------------------

@pytest.mark.parametrize("family", ["gpt2", "llama", "llama_gqa"])
@pytest.mark.parametrize("pruned", [False, True], ids=["full", "pruned"])
def test_batched_variants_equal_one_by_one(family, pruned):
    model, batch = build(family)
    if pruned:
        prune_heads(model, {"dec_self": {0: [3]}})
    assert_batched_equal_alone(model, batch, variants(model, "dec_self"), distinct_outputs=3)


def assert_batched_equal_alone(model, batch, gates_list, distinct_outputs=None):
    """Gate settings stacked in one forward (and, with ``distinct_outputs``, one beam search) equal each alone."""
    stacked = stack_gates(model, gates_list)
    batched = logits(model, repeated(batch, len(gates_list)), stacked)
    alone = [logits(model, batch, gates) for gates in gates_list]
    assert within_rounding(batched, torch.cat(alone))
    assert all((a - alone[-1]).abs().max() > 1e-3 for a in alone[:-1])
    if distinct_outputs is None:
        return
    rows = len(batch["input_ids"])
    batched_ids = generate(model, repeated(batch, len(gates_list)), stacked, num_beams=3)
    alone_ids = [generate(model, batch, gates, num_beams=3) for gates in gates_list]
    for k, ids in enumerate(alone_ids):
        mine = batched_ids[k * rows:(k + 1) * rows]
        assert torch.equal(mine[:, :ids.shape[1]], ids) and (mine[:, ids.shape[1]:] == PAD).all()
    assert len({str(ids.tolist()) for ids in alone_ids}) >= distinct_outputs


@pytest.mark.parametrize("family, attn_type", [(f, "enc_self") for f in ENCODERS] +
                         [(f, t) for f in SEQ2SEQ for t in ("enc_self", "enc_dec", "dec_self")])
def test_batched_variants_equal_one_by_one_encoders_and_seq2seq(family, attn_type):
    """Issue #13's families: four gate settings of one attention type in one forward (and one beam search)."""
    model, batch = build(family)
    assert_batched_equal_alone(model, batch, variants(model, attn_type), 2 if family in SEQ2SEQ else None)


# --- 6. Uniform masking (issue #13's families) ------------------------------------------------------

@pytest.mark.parametrize("pruned", [False, True], ids=["full", "pruned"])
@pytest.mark.parametrize("family, backend", with_backends([f for f in ENCODERS + SEQ2SEQ
                                                           if not f.startswith("deberta")]))
def test_uniform_masking_is_uniform_attention(family, backend, pruned):
    """A head masked uniformly outputs the mean of its value vectors over its allowed keys (every backend),
    and its attention map (eager) is uniform over them; the other heads' maps are untouched."""
    model, batch = build(family)
    adapter = adapter_for(model)
    if pruned:
        prune_heads(model, removal_for(model, {0: [1]}))
    set_backend(model, backend)
    for attn_type in adapter.attention_types:
        gates = full_gates(model)
        gates[attn_type][0, 2] = gates[attn_type][1, 0] = 0.0
        site = next(s for s in adapter.sites(model) if s.attn_type == attn_type and s.layer == 0)
        seen = {}
        hooks = [site.value.register_forward_hook(lambda m, a, out: seen.__setitem__("values", out)),
                 site.output.register_forward_pre_hook(lambda m, a: seen.__setitem__("heads", a[0]))]
        try:
            with torch.no_grad(), gated(model, gates, masking="uniform"):
                outputs = adapter.loss_and_outputs(model, batch, output_attentions=backend != "sdpa")[1]
        finally:
            for hook in hooks:
                hook.remove()
        allowed = adapter.key_mask(batch, attn_type).double()
        real = adapter.query_mask(batch, attn_type)
        d, column = site.head_dim, site.kept_heads.index(2)
        values = seen["values"][..., column * d:(column + 1) * d].double()
        mean = allowed @ values / allowed.sum(-1, keepdim=True)
        assert (seen["heads"][..., column * d:(column + 1) * d].double() - mean)[real].abs().max() <= 1e-5
        if backend == "sdpa":
            continue
        uniform = (allowed / allowed.sum(-1, keepdim=True))[real]
        maps = adapter.attention_weights(outputs, attn_type)
        assert within_rounding(maps[0][:, column][real], uniform)
        assert within_rounding(maps[1][:, 0][real], uniform)
        assert (maps[1][:, 1][real].double() - uniform).abs().max() > 1e-2  # a kept head is not uniform


def test_uniform_masking_refused_for_deberta_position_terms_and_exact_without_them():
    for family in ("deberta_v3", "deberta_v2"):
        model, batch = build(family)
        with pytest.raises(ValueError, match=r"relative-position terms \(p2c, c2p\)"):
            with gated(model, full_gates(model), masking="uniform"):
                pass
    model, batch = tiny_deberta_v2(relative_attention=False), bert_batch()
    adapter = adapter_for(model)
    gates = full_gates(model)
    gates["enc_self"][1, 3] = 0.0
    with torch.no_grad(), gated(model, gates, masking="uniform"):
        maps = adapter.attention_weights(adapter.loss_and_outputs(model, batch, output_attentions=True)[1], "enc_self")
    allowed = adapter.key_mask(batch, "enc_self").double()
    real = adapter.query_mask(batch, "enc_self")
    assert within_rounding(maps[1][:, 3][real], (allowed / allowed.sum(-1, keepdim=True))[real])


# --- Issue #13's families: which adapter, which special keys ----------------------------------------

ADAPTER_OF = {"roberta": ("EncoderAdapter", "roberta"), "xlm_roberta": ("EncoderAdapter", "xlm-roberta"),
              "electra": ("EncoderAdapter", "electra"), "distilbert": ("EncoderAdapter", "distilbert"),
              "deberta_v3": ("EncoderAdapter", "deberta-v2"), "deberta_v2": ("EncoderAdapter", "deberta-v2"),
              "bart": ("Seq2SeqAdapter", "bart"), "mbart": ("Seq2SeqAdapter", "mbart"),
              "marian": ("Seq2SeqAdapter", "marian"), "nllb": ("Seq2SeqAdapter", "m2m_100")}


@pytest.mark.parametrize("family", list(ADAPTER_OF))
def test_family_adapter_and_pruned_attention_class(family):
    """Each model type finds the generic adapter (its family: the model type); a pruned attention module stays of
    the model's own attention class (transformers records attention maps by class), and every layer's map is
    recorded."""
    model, batch = build(family)
    adapter = adapter_for(model)
    assert (type(adapter).__name__, adapter.family) == ADAPTER_OF[family]
    classes = {site.attn_type: type(site.attention) for site in adapter.sites(model)}
    prune_heads(model, removal_for(model, {0: [1]}))
    for site in adapter.sites(model):
        assert type(site.attention) is classes[site.attn_type]
    with torch.no_grad():
        outputs = adapter.loss_and_outputs(model, batch, output_attentions=True)[1]
    for attn_type in adapter.attention_types:
        maps = adapter.attention_weights(outputs, attn_type)
        assert [m.shape[1] for m in maps] == [3, 4]


@pytest.mark.parametrize("family", ENCODERS)
def test_encoder_separator_keys_and_token_types(family):
    """EOS keys are config.sep_token_id's (</s> for RoBERTa); DistilBERT, which has no token types, never gets the
    batch's (its forward has no such argument: they would travel in its **kwargs down to the attention function)."""
    model, batch = build(family)
    adapter = adapter_for(model)
    sep = EOS if "roberta" in family else SEP
    assert model.config.sep_token_id == sep
    eos = adapter.eos_keys(model, batch, "enc_self")
    assert torch.equal(eos, batch["input_ids"] == sep) and eos.sum() == len(batch["input_ids"])
    if family == "distilbert":
        assert "token_type_ids" not in inspect.signature(model.forward).parameters
        odd = {**batch, "token_type_ids": torch.ones_like(batch["input_ids"])}
        assert adapter.loss_and_outputs(model, odd)[0].item() == adapter.loss_and_outputs(model, batch)[0].item()


def test_a_job_imports_only_the_family_it_needs():
    """A cluster job (no warm server) looks up its adapter in the family file named after the model type (FSMT's),
    else in the generic adapter for what the model is, and imports no other family's code (FSMT's and the
    encoder-decoders' import their transformers model code): BERT finds the generic encoder adapter alone."""
    code = textwrap.dedent('''
        import sys
        from conftest import tiny_bert
        from headprune.models.heads import adapter_for
        assert adapter_for(tiny_bert()).family == "bert"
        print(sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("headprune.models.families.")))
    ''')
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    # causal_lm, classifier: the shared batches, no model code
    assert result.stdout.strip() == "['causal_lm', 'classifier', 'encoder']"
    model, _ = build("xlm_roberta")
    assert model.config.model_type == "xlm-roberta" and adapter_for(model).family == "xlm-roberta"
    model = tiny_m2m100()
    assert model.config.model_type == "m2m_100" and adapter_for(model).family == "m2m_100"


def test_a_bert_layout_without_a_family_file_goes_through_the_generic_encoder_adapter():
    """DeBERTa (v1) has BERT's module tree but a fused projection: no adapter, and the refusal says what the model was
    read as. A BERT layout that no family file names (a RoBERTa model relabelled) is served by the generic encoder
    adapter (issue #45): gated and pruned, the pruned model equal to the gated one."""
    torch.manual_seed(0)
    deberta = DebertaForSequenceClassification(DebertaConfig(vocab_size=50, **_bert_sizes()))
    with pytest.raises(ValueError, match=r"no head adapter for model type 'deberta' \(DebertaForSequenceClassification\), "
                                         "read as an encoder: "):
        adapter_for(deberta)
    model, batch = build("roberta")
    model.config.model_type = "camembert"
    assert adapter_for(model).family == "camembert" and type(adapter_for(model)).__name__ == "EncoderAdapter"
    gates = full_gates(model)
    gates["enc_self"][0, 1] = 0
    expected = logits(model, batch, gates)
    assert (expected - logits(model, batch)).abs().max() > 1e-6
    prune_heads(model, {"enc_self": {0: [1]}})
    assert_within_rounding(logits(model, batch), expected)
