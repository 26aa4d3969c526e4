"""Head roles of decoder-only LMs (previous-token, induction, sink, Wu et al.'s retrieval): each score on
hand-built attention maps and decoding traces with answers worked by hand, the tables, and the model
path on tiny random Llamas with grouped-query attention against a manual softmax(QK^T / sqrt(d)) and
against generate()."""
import math

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import EOS, PAD, _spread_weights
from headprune.models.prune import prune_heads
from test_adapter_contract import BOS, VOCAB, tiny_gpt2, tiny_llama_gqa
from headprune.scoring.lm_roles import (
    RETRIEVAL_THRESHOLD, SCORE_COLUMNS, Trace, attention_maps_lm, copy_paste_scores, decoding_trace,
    induction_pairs, induction_scores, induction_sequences, lm_head_roles_table, lm_kv_head_table,
    model_lm_head_roles, model_retrieval_scores, previous_token_scores, retrieval_scores, sink_scores,
)

# --- hand-built maps --------------------------------------------------------------------------


def one_hot_map(targets, n):
    """(n, n): query i puts all its weight on key targets[i]."""
    a = np.zeros((n, n))
    a[np.arange(n), targets] = 1.0
    return a


def uniform_map(n):
    """Causal uniform attention: A[i, j] = 1 / (i + 1) for j <= i."""
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def test_previous_token_and_sink_on_hand_built_maps():
    n = 6
    previous = one_hot_map([0] + list(range(n - 1)), n)
    sink = one_hot_map([0] * n, n)
    uniform = uniform_map(n)
    diagonal = np.eye(n)  # each query on itself
    heads = np.stack([previous, sink, uniform, diagonal])
    maps = np.stack([heads[None], heads[None]])  # (windows 2, layers 1, heads 4, n, n)
    uniform_score = (1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 6) / 5  # mean over i = 1..5 of 1 / (i + 1)
    # the sink puts query 1's weight on key 0, which is also its previous token: 1 case in 5
    assert previous_token_scores(maps) == pytest.approx(np.array([[1.0, 1 / 5, uniform_score, 0.0]]))
    assert sink_scores(maps) == pytest.approx(np.array([[1 / 5, 1.0, uniform_score, 0.0]]))
    # the mean runs over windows too: a second window whose head 0 is diagonal halves it
    other = maps.copy()
    other[1, 0, 0] = diagonal
    assert previous_token_scores(other)[0, 0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="q == k"):
        previous_token_scores(np.zeros((1, 1, 1, 3, 4)))


def test_induction_index_arithmetic_by_hand():
    # [B, a, b, c, a, b, c]: the second a (4) -> the first b (2); the second b (5) -> the first c (3)
    queries, keys = induction_pairs(3, offset=1)
    assert queries.tolist() == [4, 5] and keys.tolist() == [2, 3]
    queries, keys = induction_pairs(3, offset=0)  # [a, b, c, a, b, c]
    assert queries.tolist() == [3, 4] and keys.tolist() == [1, 2]
    with pytest.raises(ValueError):
        induction_pairs(1)
    # on generated sequences: each key is the token after the first occurrence of the query's token
    n, offset = 7, 1
    for seq in induction_sequences(n, 5, low=3, high=40, seed=2, bos=BOS, exclude=[PAD, EOS]):
        assert len(seq) == offset + 2 * n and seq[0] == BOS
        for q, k in zip(*induction_pairs(n, offset)):
            assert seq[k - 1] == seq[q] and seq.index(seq[q]) == k - 1  # its first occurrence
            assert k < offset + n  # a first-copy position


def test_induction_sequences():
    a = induction_sequences(10, 4, low=3, high=40, seed=0, bos=BOS, exclude=[PAD, EOS])
    assert a == induction_sequences(10, 4, low=3, high=40, seed=0, bos=BOS, exclude=[PAD, EOS])  # seeded
    assert a != induction_sequences(10, 4, low=3, high=40, seed=1, bos=BOS, exclude=[PAD, EOS])
    for seq in a:
        r = seq[1:11]
        assert seq[11:] == r and len(set(r)) == 10 and all(3 <= t < 40 for t in r)
    assert len({tuple(s) for s in a}) == 4  # a fresh R per sequence
    no_bos = induction_sequences(4, 2, low=0, high=8, seed=0, exclude=[2, 3])
    assert all(len(s) == 8 and not {2, 3} & set(s) for s in no_bos)
    with pytest.raises(ValueError, match="only 3 ids"):
        induction_sequences(4, 1, low=0, high=5, exclude=[0, 1])


def test_induction_scores_on_hand_built_maps():
    n, offset = 5, 1
    length = offset + 2 * n
    second = range(offset + n, length)
    induction = [0] * length  # queries without a case look at the BOS
    same_token = [0] * length
    previous = [max(i - 1, 0) for i in range(length)]
    for t in second:
        induction[t] = t - n + 1  # the first copy's next token
        same_token[t] = t - n  # the first occurrence of the same token
    half = 0.5 * one_hot_map(induction, length) + 0.5 * one_hot_map([0] * length, length)
    heads = np.stack([one_hot_map(induction, length), one_hot_map(same_token, length),
                      one_hot_map(previous, length), half, uniform_map(length)])
    maps = np.stack([heads[None]] * 3)
    # uniform: query o + n + k has o + n + k + 1 keys; mean over k = 0..n-2 of 1 / (o + n + k + 1)
    uniform = np.mean([1 / (offset + n + k + 1) for k in range(n - 1)])
    assert induction_scores(maps, n, offset) == pytest.approx(np.array([[1.0, 0.0, 0.0, 0.5, uniform]]))
    # without a BOS: uniform attention gives query n + k 1 / (n + k + 1)
    assert induction_scores(uniform_map(2 * n)[None, None], n, 0) == pytest.approx(
        np.mean([1 / (n + k + 1) for k in range(n - 1)]))
    with pytest.raises(ValueError, match="has 10"):
        induction_scores(maps, n, 0)


# --- copy-paste events on a hand-made trace ----------------------------------------------------

# positions:  0   1   2   3   4   5   6   7        the needle is [2, 6): tokens 12 13 14 15
PROMPT = [10, 12, 12, 13, 14, 15, 16, 13]
SPAN = (2, 6)
TOKENS = [12, 13, 13, 99, 15]  # emitted at steps 0..4
HEAD_ARGMAX = [
    [2, 3, 3, 0, 5],  # events at steps 0 (12), 1 (13), 2 (13 again, same position 3) and 4 (15); 3 is outside
    [3, 2, 4, 5, 4],  # always inside the needle, never on the emitted token: no event
    [1, 7, 0, 9, 6],  # the emitted token outside the needle (12 at 1, 13 at 7), a generated position (9): none
    [2, 2, 2, 2, 2],  # one event (step 0)
]


def hand_trace():
    per_head = np.array(HEAD_ARGMAX).T  # (steps, heads)
    argmax = np.stack([per_head, per_head[:, ::-1]], axis=1)  # layer 1 has the heads in reverse
    return Trace(TOKENS, argmax)


def test_copy_paste_scores_counted_by_hand():
    trace = hand_trace()
    code = copy_paste_scores(trace, PROMPT, SPAN, "code")
    distinct = copy_paste_scores(trace, PROMPT, SPAN, "distinct")
    assert code.tolist() == [[4 / 4, 0, 0, 1 / 4], [1 / 4, 0, 0, 4 / 4]]
    assert distinct.tolist() == [[3 / 4, 0, 0, 1 / 4], [1 / 4, 0, 0, 3 / 4]]  # positions 2, 3, 5
    assert (copy_paste_scores(trace, PROMPT, SPAN) == code).all()  # "code" is the default
    # a head copying the whole needle twice: code 2, distinct 1
    twice = Trace([12, 13, 14, 15] * 2, np.array([2, 3, 4, 5] * 2)[:, None, None])
    assert copy_paste_scores(twice, PROMPT, SPAN, "code").item() == 2.0
    assert copy_paste_scores(twice, PROMPT, SPAN, "distinct").item() == 1.0
    # a pruned head (-1) never copies, even though prompt[-1] is 13
    assert copy_paste_scores(Trace([13], np.array([[[-1]]])), PROMPT, SPAN).item() == 0.0
    with pytest.raises(ValueError, match="definition"):
        copy_paste_scores(trace, PROMPT, SPAN, "paper")
    with pytest.raises(ValueError, match="span"):
        copy_paste_scores(trace, PROMPT, (6, 6))


def test_retrieval_scores_average_the_correct_items_only():
    a, b, c = np.array([[0.2, 0.0]]), np.array([[1.0, 1.0]]), np.array([[0.4, 0.1]])
    assert retrieval_scores([a, b, c], [True, False, True]) == pytest.approx(np.array([[0.3, 0.05]]))
    none = retrieval_scores([a, b], [False, False])
    assert none.shape == (1, 2) and np.isnan(none).all()
    with pytest.raises(ValueError, match="flags"):
        retrieval_scores([a, b], [True])


# --- tables ----------------------------------------------------------------------------------


def random_scores(layers=2, heads=6, seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(size=(layers, heads)) for name in SCORE_COLUMNS}


def test_roles_by_threshold_and_priority():
    #                 retrieval   induction   previous    sink
    rows = [(0.11, 0.9, 0.9, 0.9),  # all: retrieval first
            (0.10, 0.30, 0.9, 0.9),  # retrieval is strictly > 0.1; induction >= 0.3
            (0.0, 0.29, 0.5, 0.9),  # previous-token before sink
            (0.0, 0.0, 0.1, 0.5),
            (0.0, 0.0, 0.1, 0.49),
            (math.nan, math.nan, math.nan, math.nan)]  # nothing measured
    retrieval, induction, previous, sink = (np.array([[r[i] for r in rows]]) for i in range(4))
    table = lm_head_roles_table({"retrieval": retrieval, "induction": induction, "previous_token": previous,
                                 "sink": sink})
    assert table["role"].tolist() == ["retrieval", "induction", "previous-token", "sink", "other", "other"]
    assert table["functions"].tolist()[:3] == ["retrieval+induction+previous-token+sink",
                                               "induction+previous-token+sink", "previous-token+sink"]
    assert table["retrieval_distinct"].isna().all()  # not given: NaN
    assert (table["attn_type"] == "dec_self").all() and table["kv_head"].tolist() == list(range(6))
    assert RETRIEVAL_THRESHOLD == 0.1
    strict = lm_head_roles_table({"retrieval": retrieval, "induction": induction, "previous_token": previous,
                                  "sink": sink}, induction_threshold=0.95)
    assert strict["role"].tolist()[1] == "previous-token"


@pytest.mark.parametrize("kv_heads", [2, 3])
def test_kv_head_table_takes_the_max_over_its_query_heads(kv_heads):
    scores = random_scores(layers=2, heads=6)
    scores["induction"][1, 0] = np.nan  # skipped in the max
    table = lm_head_roles_table(scores, kv_heads)
    group = 6 // kv_heads
    assert table["kv_head"].tolist() == [h // group for h in range(6)] * 2
    kv = lm_kv_head_table(table)
    assert len(kv) == 2 * kv_heads
    for _, row in kv.iterrows():
        members = list(range(row["kv_head"] * group, (row["kv_head"] + 1) * group))
        assert row["query_heads"] == ",".join(map(str, members))
        for name in SCORE_COLUMNS:
            assert row[name] == np.nanmax(scores[name][row["layer"], members])
        roles = table[(table["layer"] == row["layer"]) & (table["kv_head"] == row["kv_head"])]["role"]
        assert row["role"] == min(roles, key=lambda r: ["retrieval", "induction", "previous-token", "sink",
                                                        "other"].index(r))
    # the KV role is the rule applied to the maxed scores
    again = lm_head_roles_table({name: kv[name].to_numpy().reshape(2, kv_heads) for name in SCORE_COLUMNS})
    assert again["role"].tolist() == kv["role"].tolist()
    with pytest.raises(ValueError, match="evenly"):
        lm_head_roles_table(scores, 4)


def test_kv_head_all_nan_stays_nan():
    scores = {"sink": np.array([[np.nan, np.nan, 0.7, 0.2]])}
    kv = lm_kv_head_table(lm_head_roles_table(scores, kv_heads=2))
    assert np.isnan(kv["sink"][0]) and kv["sink"][1] == 0.7
    assert kv["role"].tolist() == ["other", "sink"] and kv["query_heads"].tolist() == ["0,1", "2,3"]


# --- tiny Llamas with grouped-query attention ---------------------------------------------------


def tiny_llama_6_on_2(seed=0):
    """6 query heads on 2 kv heads (3 per group), head_dim 4."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                         attn_implementation="eager", hidden_size=24, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64)
    return _spread_weights(LlamaForCausalLM(config).eval())


def manual_attention(model, layer, hidden):
    """softmax(QK^T / sqrt(d) + causal mask) of one layer from its weights and input hidden states,
    rotary positions written out (rotate_half, theta from the config), kv head h // groups."""
    config = model.config
    attn = model.model.layers[layer].self_attn
    x = model.model.layers[layer].input_layernorm(hidden)
    batch, length, _ = x.shape
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    d = config.hidden_size // heads
    q = attn.q_proj(x).view(batch, length, heads, d).transpose(1, 2)
    k = attn.k_proj(x).view(batch, length, kv_heads, d).transpose(1, 2)
    theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta") or config.rope_theta
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None]
    cos, sin = torch.cat([angles, angles], -1).cos().float(), torch.cat([angles, angles], -1).sin().float()

    def rotate(t):
        half = torch.cat([-t[..., d // 2:], t[..., :d // 2]], -1)
        return t * cos + half * sin

    q, k = rotate(q), rotate(k)
    k = k[:, torch.arange(heads) // (heads // kv_heads)]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    scores = scores.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), -math.inf)
    return scores.softmax(-1)


@pytest.mark.parametrize("make_model", [tiny_llama_gqa, tiny_llama_6_on_2])
def test_attention_maps_match_a_manual_softmax(make_model):
    model = make_model()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, VOCAB, (3, 10), generator=g)
    ids[:, 0] = BOS
    maps = attention_maps_lm(model, ids.tolist(), batch_size=2)
    heads = model.config.num_attention_heads
    assert maps.shape == (3, 2, heads, 10, 10) and maps.dtype == np.float32
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, output_attentions=True, use_cache=False)
        assert [tuple(a.shape) for a in out.attentions] == [(3, heads, 10, 10)] * 2  # query heads under GQA
        manual = np.stack([manual_attention(model, 0, model.model.embed_tokens(ids)).numpy(),
                           manual_attention(model, 1, out.hidden_states[1]).numpy()], axis=1)
    np.testing.assert_allclose(maps, manual, atol=1e-5)
    assert previous_token_scores(maps) == pytest.approx(previous_token_scores(manual), abs=1e-6)
    by_hand = np.mean([manual[w, :, :, i, i - 1] for w in range(3) for i in range(1, 10)], axis=0)
    assert previous_token_scores(maps) == pytest.approx(by_hand, abs=1e-6)
    # picking pairs on the device gives the same entries; batching does not matter
    picked = attention_maps_lm(model, ids.tolist(), batch_size=1, pairs=([4, 9, 9], [3, 0, 9]))
    np.testing.assert_allclose(picked, maps[..., [4, 9, 9], [3, 0, 9]], atol=1e-6)


def test_attention_maps_restore_the_backend_and_read_gpt2():
    model = tiny_llama_gqa()
    model.set_attn_implementation("sdpa")
    maps = attention_maps_lm(model, [[BOS, 5, 6, 7], [BOS, 8, 9, 10]])
    assert model.config._attn_implementation == "sdpa"
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
    assert np.triu(maps, 1).max() == 0.0  # causal
    gpt2 = attention_maps_lm(tiny_gpt2(), [[BOS, 5, 6, 7, 8]])
    assert gpt2.shape == (1, 2, 4, 5, 5)
    np.testing.assert_allclose(gpt2.sum(-1), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="one length"):
        attention_maps_lm(model, [[1, 2], [1, 2, 3]])


def test_pruned_heads_get_nan_maps_and_no_argmax():
    model = tiny_llama_6_on_2(seed=2)
    window = [BOS, 5, 6, 7, 8]
    full = attention_maps_lm(model, [window])
    prune_heads(model, {"dec_self": {0: [1, 3, 4, 5], 1: list(range(6))}})  # kv head 1 of layer 0, all of layer 1
    maps = attention_maps_lm(model, [window])
    gone = np.isnan(maps).all((-1, -2))[0]
    assert gone.tolist() == [[False, True, False, True, True, True], [True] * 6]
    np.testing.assert_allclose(maps[0, 0, [0, 2]], full[0, 0, [0, 2]], atol=1e-6)  # layer 0 comes first
    assert np.isnan(sink_scores(maps)[gone]).all() and not np.isnan(sink_scores(maps)[~gone]).any()
    trace = decoding_trace(model, window, 3)
    assert (trace.argmax[:, gone] == -1).all() and (trace.argmax[:, ~gone] >= 0).all()


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
@pytest.mark.parametrize("make_model", [tiny_llama_gqa, tiny_llama_6_on_2])
def test_decoding_trace_emits_what_generate_does(make_model, backend):
    model = make_model(seed=2)  # a seed whose model does not emit EOS within 12 tokens of this prompt
    model.set_attn_implementation(backend)
    prompt = [BOS] + torch.randint(3, VOCAB, (8,), generator=torch.Generator().manual_seed(4)).tolist()
    generated = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                               do_sample=False, max_new_tokens=12, eos_token_id=EOS, pad_token_id=PAD)
    expected = generated[0, len(prompt):].tolist()
    trace = decoding_trace(model, prompt, 12, eos_token_id=EOS)
    assert model.config._attn_implementation == backend
    assert trace.tokens == expected and len(expected) == 12
    assert decoding_trace(model, prompt, 12).tokens == expected  # no stop token
    assert trace.argmax.shape == (len(expected), 2, model.config.num_attention_heads)
    # each step's argmax is that of its row of the full sequence's maps (no cache)
    maps = attention_maps_lm(model, [prompt + trace.tokens[:-1]])[0]
    for step in range(len(trace.tokens)):
        assert (trace.argmax[step] == maps[:, :, len(prompt) - 1 + step].argmax(-1)).all()
    # a stop token ends decoding, emitted and counted as a step
    stop = expected[3]
    stopped = decoding_trace(model, prompt, 12, eos_token_id=[stop, 999])
    first = expected.index(stop)
    assert stopped.tokens == expected[:first + 1] and len(stopped.argmax) == first + 1
    assert (stopped.argmax == trace.argmax[:first + 1]).all()


class IdTokenizer:
    """Token ids as text, what the role pipeline needs of a tokenizer."""

    bos_token_id = BOS
    all_special_ids = [BOS, PAD, EOS]

    def __len__(self):
        return VOCAB

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids if not (skip_special_tokens and i in self.all_special_ids))


def test_model_lm_head_roles_end_to_end():
    model = tiny_llama_6_on_2(seed=2)
    tokenizer = IdTokenizer()
    g = torch.Generator().manual_seed(5)
    windows = [[BOS] + torch.randint(3, VOCAB, (11,), generator=g).tolist() for _ in range(5)]
    prompts = [[BOS] + torch.randint(3, VOCAB, (14,), generator=g).tolist() for _ in range(3)]
    items = [{"prompt_ids": p, "needle_span": (4, 10), "needle": "", "value": str(i)} for i, p in enumerate(prompts)]
    answered = {0: True, 1: False, 2: True}
    seen = []

    def is_correct(answer, item):
        seen.append(answer)
        return answered[int(item["value"])]

    table = model_lm_head_roles(model, tokenizer, windows, items, is_correct=is_correct, induction_length=6,
                                induction_count=4, induction_seed=7, max_new_tokens=6, batch_size=2, progress=False)
    assert len(table) == 2 * 6 and table["kv_head"].tolist() == [h // 3 for h in range(6)] * 2
    maps = attention_maps_lm(model, windows)
    assert table["previous_token"].to_numpy() == pytest.approx(previous_token_scores(maps).ravel(), abs=1e-6)
    assert table["sink"].to_numpy() == pytest.approx(sink_scores(maps).ravel(), abs=1e-6)
    sequences = induction_sequences(6, 4, 0, VOCAB, 7, bos=BOS, exclude=tokenizer.all_special_ids)
    induction = induction_scores(attention_maps_lm(model, sequences), 6, offset=1)
    assert table["induction"].to_numpy() == pytest.approx(induction.ravel(), abs=1e-6)
    traces = [decoding_trace(model, p, 6, eos_token_id=EOS) for p in prompts]
    assert seen == [tokenizer.decode(t.tokens).strip() for t in traces] == table.attrs["answers"]
    for name, definition in (("retrieval", "code"), ("retrieval_distinct", "distinct")):
        per_item = [copy_paste_scores(t, p, (4, 10), definition) for t, p in zip(traces, prompts)]
        expected = (per_item[0] + per_item[2]) / 2
        assert table[name].to_numpy() == pytest.approx(expected.ravel())
    assert table.attrs["correct"] == [True, False, True] and table["retrieval"].sum() > 0
    run = model_retrieval_scores(model, tokenizer, items, lambda answer, item: False, max_new_tokens=6, progress=False)
    assert np.isnan(run.code).all() and np.isnan(run.distinct).all()
    # nothing measured: every score NaN, every head "other"
    empty = model_lm_head_roles(model, tokenizer, induction_count=0, progress=False)
    assert empty[list(SCORE_COLUMNS)].isna().all().all() and (empty["role"] == "other").all()
    assert isinstance(lm_kv_head_table(table), pd.DataFrame) and len(lm_kv_head_table(table)) == 2 * 2
