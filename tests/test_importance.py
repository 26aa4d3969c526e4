"""Head importance against finite differences and a slow per-head reference; entropy, confidence,
the Fisher information and the attention gradient against slow independent computations; the
fast importance-only path against the full one; physically pruned heads."""
import copy
import math
from unittest import mock

import pytest
import torch

from conftest import FAMILIES, bert_batch, fsmt_batch
from headprune.models.heads import adapter_for, full_gates, gated, head_shape
from headprune.scoring.importance import head_importance, head_scores, normalize_per_layer
from headprune.models.prune import prune_heads

GATE_COLUMNS = ["importance", "importance_token", "importance_example", "importance_batch", "fisher"]
ATTENTION_COLUMNS = ["attention_gradient", "entropy", "entropy_normalized", "confidence"]


@pytest.fixture(autouse=True)
def fsmt_runs_in_float64(monkeypatch):
    """FSMT's causal mask overflows in float64 (it fills a float32 with float64's min): use -inf.

    Test-only: the pipeline runs FSMT in float32. float64 makes the finite
    differences and the reference comparisons tight.
    """
    from transformers.models.fsmt import modeling_fsmt
    monkeypatch.setattr(modeling_fsmt, "fill_with_neg_inf", lambda t: t.fill_(float("-inf")))


def batches_for(family):
    make_model, _ = FAMILIES[family]
    if family == "bert":
        return make_model(), [bert_batch(seed=1), bert_batch(seed=2, batch=3)]
    return make_model(), [fsmt_batch(seed=1), fsmt_batch(seed=2, batch=2)]


def loss_at(model, batch, gates):
    with torch.no_grad(), gated(model, gates):
        loss, _ = adapter_for(model).loss_and_outputs(model, batch)
    return float(loss)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_gate_gradient_matches_finite_differences(family):
    model, batches = batches_for(family)
    model.double()
    batch = batches[0]
    gates = {t: g.double().requires_grad_(True) for t, g in full_gates(model).items()}
    with gated(model, gates):
        loss, _ = adapter_for(model).loss_and_outputs(model, batch)
        loss.backward()
    eps = 1e-5
    for attn_type, grad in gates.items():
        for layer, head in [(0, 0), (1, 3), (1, 1)]:
            plus = {t: g.detach().clone() for t, g in gates.items()}
            minus = {t: g.detach().clone() for t, g in gates.items()}
            plus[attn_type][layer, head] += eps
            minus[attn_type][layer, head] -= eps
            numeric = (loss_at(model, batch, plus) - loss_at(model, batch, minus)) / (2 * eps)
            assert grad.grad[layer, head].item() == pytest.approx(numeric, rel=1e-5, abs=1e-7)


def slow_reference(model, batches):
    """Per-token dL/dxi_{h,t} from a gate on ONE head at ONE token at a time, head by head."""
    adapter = adapter_for(model)
    sums = {"token": {}, "example": {}, "batch": {}}
    tokens = sum(adapter.num_tokens(b) for b in batches)
    for site in adapter.sites(model):
        for head in range(site.num_heads):
            totals = {name: 0.0 for name in sums}
            for batch in batches:
                query_mask = adapter.query_mask(batch, site.attn_type)
                token_gate = torch.ones(query_mask.shape, dtype=torch.float64, requires_grad=True)

                def hook(module, args, site=site, head=head, token_gate=token_gate):
                    x = args[0]
                    per_head = x.unflatten(-1, (site.num_heads, site.head_dim))
                    g = token_gate.t() if site.time_major else token_gate
                    factor = torch.stack([g.to(x.dtype) if h == head else torch.ones_like(g, dtype=x.dtype)
                                          for h in range(site.num_heads)], dim=-1)
                    return ((per_head * factor[..., None]).flatten(-2),)

                handle = site.output.register_forward_pre_hook(hook)
                loss, _ = adapter.loss_and_outputs(model, batch)
                loss.backward()
                handle.remove()
                per_token = token_gate.grad * query_mask  # (B, T)
                totals["token"] += per_token.abs().sum().item()
                totals["example"] += per_token.sum(1).abs().sum().item()
                totals["batch"] += abs(per_token.sum().item())
            for name in sums:
                sums[name][(site.attn_type, site.layer, head)] = totals[name] / tokens
    return sums


@pytest.mark.parametrize("family", list(FAMILIES))
def test_all_estimators_match_slow_reference(family):
    model, batches = batches_for(family)
    model.double()
    reference = slow_reference(model, batches)
    table = head_scores(model, batches, estimator="example", normalize=False, progress=False)
    for row in table.itertuples():
        key = (row.attn_type, row.layer, row.head)
        for name in ("token", "example", "batch"):
            assert getattr(row, f"importance_{name}") == pytest.approx(reference[name][key], rel=1e-8, abs=1e-12)
        assert row.importance == pytest.approx(reference["example"][key], rel=1e-8)
    # the three estimators really differ: |sum| <= sum |.| with strict inequality somewhere
    assert (table.importance_batch <= table.importance_example + 1e-12).all()
    assert (table.importance_example <= table.importance_token + 1e-12).all()
    assert (table.importance_batch < table.importance_token - 1e-9).any()


def test_batch_estimator_is_gate_gradient_magnitude():
    model, batches = batches_for("fsmt")
    table = head_scores(model, batches, estimator="batch", normalize=False, progress=False)
    expected = 0.0
    tokens = 0
    for batch in batches:
        gates = {t: g.requires_grad_(True) for t, g in full_gates(model).items()}
        with gated(model, gates):
            loss, _ = adapter_for(model).loss_and_outputs(model, batch)
            loss.backward()
        expected += gates["enc_dec"].grad[1, 2].abs().item()
        tokens += int(batch["decoder_attention_mask"].sum())
    row = table[(table.attn_type == "enc_dec") & (table.layer == 1) & (table["head"] == 2)].iloc[0]
    assert row.importance == pytest.approx(expected / tokens, rel=1e-4)


def test_per_layer_l2_normalization():
    model, batches = batches_for("bert")
    raw = head_scores(model, batches, normalize=False, progress=False)
    normed = head_scores(model, batches, normalize=True, progress=False)
    for layer in (0, 1):
        r = raw[raw.layer == layer].importance.to_numpy()
        n = normed[normed.layer == layer].importance.to_numpy()
        assert n == pytest.approx(r / math.sqrt((r ** 2).sum()), rel=1e-6)
        assert (n ** 2).sum() == pytest.approx(1.0)
    assert normalize_per_layer(torch.zeros(2, 3)).abs().sum() == 0  # an all-zero layer stays zero


@pytest.mark.parametrize("family", list(FAMILIES))
def test_entropy_and_confidence_by_loops(family):
    """Entropy and confidence recomputed query by query from the attention maps."""
    model, batches = batches_for(family)
    adapter = adapter_for(model)
    table = head_scores(model, batches, progress=False)
    eos_id = model.config.sep_token_id if family == "bert" else model.config.eos_token_id
    for attn_type in adapter.attention_types:
        ent = torch.zeros(2, 4, dtype=torch.float64); ent_n = torch.zeros_like(ent); conf = torch.zeros_like(ent)
        n_queries = n_norm = 0
        for batch in batches:
            with torch.no_grad():
                _, outputs = adapter.loss_and_outputs(model, batch, output_attentions=True)
            maps = adapter.attention_weights(outputs, attn_type)
            src_mask = batch["attention_mask"]
            if family == "bert" or attn_type == "enc_self":
                q_mask, k_mask, key_ids = src_mask, src_mask, batch["input_ids"]
            elif attn_type == "enc_dec":
                q_mask, k_mask, key_ids = batch["decoder_attention_mask"], src_mask, batch["input_ids"]
            else:
                q_mask, k_mask, key_ids = batch["decoder_attention_mask"], batch["decoder_attention_mask"], batch["decoder_input_ids"]
            for b in range(q_mask.shape[0]):
                for q in range(q_mask.shape[1]):
                    if not q_mask[b, q]:
                        continue
                    keys = [k for k in range(k_mask.shape[1]) if k_mask[b, k] and (attn_type != "dec_self" or k <= q)]
                    n_queries += 1
                    n_norm += len(keys) > 1
                    for layer in range(2):
                        for h in range(4):
                            p = maps[layer][b, h].double()
                            h_val = -sum(p[q, k].item() * math.log(p[q, k].item()) for k in keys if p[q, k] > 0)
                            ent[layer, h] += h_val
                            if len(keys) > 1:
                                ent_n[layer, h] += h_val / math.log(len(keys))
                            conf[layer, h] += max(p[q, k].item() for k in keys if key_ids[b, k] != eos_id) \
                                if any(key_ids[b, k] != eos_id for k in keys) else 0.0
        rows = table[table.attn_type == attn_type].sort_values(["layer", "head"])
        assert rows.entropy.to_numpy() == pytest.approx((ent / n_queries).flatten().numpy(), rel=1e-5)
        assert rows.entropy_normalized.to_numpy() == pytest.approx((ent_n / n_norm).flatten().numpy(), rel=1e-5)
        assert rows.confidence.to_numpy() == pytest.approx((conf / n_queries).flatten().numpy(), rel=1e-5)
        assert ((rows.entropy_normalized >= 0) & (rows.entropy_normalized <= 1 + 1e-9)).all()


def tokens_by_hand(batch):
    return int((batch["decoder_attention_mask"] if "decoder_attention_mask" in batch else batch["attention_mask"]).sum())


def allowed_by_hand(batch, attn_type):
    """(B, Q, K): real queries and the keys they may attend to (padding, causality)."""
    source = batch["attention_mask"].bool()
    target = batch.get("decoder_attention_mask", batch["attention_mask"]).bool()
    queries, keys = (source, source) if attn_type == "enc_self" else (target, source) if attn_type == "enc_dec" \
        else (target, target)
    allowed = queries[:, :, None] & keys[:, None, :]
    if attn_type == "dec_self":
        allowed &= torch.ones(allowed.shape[1:], dtype=torch.bool).tril()
    return allowed


def softmax_order(model):
    """(attn_type, layer) of each attention softmax in forward order: the encoder layers, then each
    decoder layer's self-attention and cross-attention."""
    shape = head_shape(model)
    order = [("enc_self", layer) for layer in range(shape["enc_self"][0])]
    if "dec_self" in shape:
        order += [(t, layer) for layer in range(shape["dec_self"][0]) for t in ("dec_self", "enc_dec")]
    return order


def loss_with_perturbed_softmax(model, batch, shift=None):
    """The loss with a leaf delta added to every attention softmax's output, and the deltas.

    Each delta is 0, but for ``shift`` = (call, (b, h, q, k), eps). Patching torch's softmax reaches
    the attention probabilities without output_attentions and without headprune's hooks.
    """
    original = torch.nn.functional.softmax
    deltas = []

    def softmax(x, *args, **kwargs):
        p = original(x, *args, **kwargs)
        delta = torch.zeros_like(p)
        if shift is not None and shift[0] == len(deltas):  # FSMT's probabilities are (B * H, Q, K)
            delta.view(len(batch["input_ids"]), -1, *p.shape[-2:])[shift[1]] = shift[2]
        deltas.append(delta.requires_grad_(True))
        return p + delta

    with mock.patch.object(torch.nn.functional, "softmax", softmax):
        loss, _ = adapter_for(model).loss_and_outputs(model, batch)
    return loss, deltas


@pytest.mark.parametrize("family", list(FAMILIES))
def test_attention_gradient_matches_perturbed_softmax(family):
    model, batches = batches_for(family)
    model.double()
    order = softmax_order(model)
    expected = {key: torch.zeros(4, dtype=torch.float64) for key in order}
    for i, batch in enumerate(batches):
        loss, deltas = loss_with_perturbed_softmax(model, batch)
        assert len(deltas) == len(order)  # one softmax per attention layer, nothing else
        grads = [g.view(len(batch["input_ids"]), -1, *g.shape[-2:]) for g in torch.autograd.grad(loss, deltas)]
        for key, grad in zip(order, grads):
            expected[key] += (grad.abs() * allowed_by_hand(batch, key[0])[:, None]).sum((0, 2, 3))
        if i == 0:  # the gradient itself, by finite differences on one entry per attention type
            eps = 1e-6
            for call, (attn_type, layer) in enumerate(order):
                if layer != 1:
                    continue
                entry = (1, 2, 2, 1)
                assert allowed_by_hand(batch, attn_type)[entry[0], entry[2], entry[3]]
                plus = loss_with_perturbed_softmax(model, batch, (call, entry, eps))[0].item()
                minus = loss_with_perturbed_softmax(model, batch, (call, entry, -eps))[0].item()
                assert grads[call][entry].item() == pytest.approx((plus - minus) / (2 * eps), rel=1e-6, abs=1e-9)
    tokens = sum(tokens_by_hand(b) for b in batches)
    table = head_scores(model, batches, progress=False)
    for (attn_type, layer), sums in expected.items():
        rows = table[(table.attn_type == attn_type) & (table.layer == layer)].sort_values("head")
        assert rows.attention_gradient.to_numpy() == pytest.approx((sums / tokens).numpy(), rel=1e-8)
        assert (rows.attention_gradient > 0).all()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fisher_from_examples_one_at_a_time(family):
    model, batches = batches_for(family)
    model.double()
    adapter = adapter_for(model)
    squares = {t: torch.zeros(layers, heads, dtype=torch.float64) for t, (layers, heads) in head_shape(model).items()}
    examples = 0
    for batch in batches:
        for b in range(len(batch["input_ids"])):
            alone = {k: v[b:b + 1] for k, v in batch.items()}
            gates = {t: g.double().requires_grad_(True) for t, g in full_gates(model).items()}
            with gated(model, gates):
                loss, _ = adapter.loss_and_outputs(model, alone)
                loss.backward()
            for t in squares:
                squares[t] += gates[t].grad ** 2
            examples += 1
    table = head_scores(model, batches, progress=False)
    for t, total in squares.items():
        rows = table[table.attn_type == t].sort_values(["layer", "head"])
        assert rows.fisher.to_numpy() == pytest.approx((total / examples).flatten().numpy(), rel=1e-8)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fast_path_matches_head_scores_in_the_model_backend(family):
    model, batches = batches_for(family)
    model.double()  # in float32, sdpa and eager round differently (1e-6 relative)
    if family != "fsmt":  # FSMT has only its own eager attention
        model.set_attn_implementation("sdpa")
    backend = model.config._attn_implementation
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", side_effect=sdpa) as calls:
        fast = head_importance(model, batches, estimator="example", progress=False)
    assert model.config._attn_implementation == backend
    assert calls.called == (backend == "sdpa")
    assert list(fast.columns) == ["attn_type", "layer", "head", *GATE_COLUMNS, "estimator", "normalized"]
    full = head_scores(model, batches, estimator="example", progress=False)
    assert model.config._attn_implementation == "eager"
    assert set(GATE_COLUMNS + ATTENTION_COLUMNS) <= set(full.columns)
    assert full[["attn_type", "layer", "head"]].equals(fast[["attn_type", "layer", "head"]])
    for column in GATE_COLUMNS:
        assert fast[column].to_numpy() == pytest.approx(full[column].to_numpy(), rel=1e-9, abs=1e-14)


def test_fast_path_at_given_gates_is_their_gradient():
    """I_h re-estimated with heads switched off (iterative pruning): |dL/dxi_h| at those gates."""
    model, batches = batches_for("m2m100")
    model.set_attn_implementation("sdpa")
    gates = full_gates(model)
    gates["enc_dec"][1, [0, 2]] = 0
    gates["dec_self"][0, 3] = 0
    given = {t: g.clone() for t, g in gates.items()}
    table = head_importance(model, batches, estimator="batch", normalize=False, gates=gates, progress=False)
    assert all(torch.equal(gates[t], given[t]) and not gates[t].requires_grad for t in gates)
    expected = {t: torch.zeros_like(g) for t, g in gates.items()}
    for batch in batches:
        leaves = {t: g.clone().requires_grad_(True) for t, g in gates.items()}
        with gated(model, leaves):
            loss, _ = adapter_for(model).loss_and_outputs(model, batch)
            loss.backward()
        for t in expected:
            expected[t] += leaves[t].grad.abs()
    tokens = sum(tokens_by_hand(b) for b in batches)
    for t, total in expected.items():
        rows = table[table.attn_type == t].sort_values(["layer", "head"])
        assert rows.importance.to_numpy() == pytest.approx((total / tokens).flatten().numpy(), rel=1e-4)
    with pytest.raises(ValueError, match="one setting"):
        head_importance(model, batches, gates={t: g[None] for t, g in gates.items()}, progress=False)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pruned_heads_score_as_switched_off(family):
    """A physically pruned model scores its kept heads as the full model with the others gated off,
    under their original indices; its removed heads (a whole layer among them) score 0."""
    model, batches = batches_for(family)
    model.double()
    removal = {t: {0: [0, 1, 2, 3], 1: [1, 3]} for t in adapter_for(model).attention_types}
    gates = full_gates(model)
    for t, layers in removal.items():
        for layer, heads in layers.items():
            gates[t][layer, heads] = 0
    switched_off = head_scores(model, batches, normalize=False, gates=gates, progress=False)
    pruned = prune_heads(copy.deepcopy(model), removal)
    table = head_scores(pruned, batches, normalize=False, progress=False)
    removed = [bool(gates[r.attn_type][r.layer, r.head] == 0) for r in table.itertuples()]
    kept = [not r for r in removed]
    columns = GATE_COLUMNS + ATTENTION_COLUMNS
    assert table.loc[kept, columns].to_numpy() == pytest.approx(switched_off.loc[kept, columns].to_numpy(),
                                                              rel=1e-7, abs=1e-12)
    assert (table.loc[kept, ["importance_token", "fisher", "attention_gradient", "entropy"]] > 0).all().all()
    assert (table.loc[removed, columns] == 0).all().all()
    assert (switched_off.loc[removed, "attention_gradient"] == 0).all()  # a head gated off cannot change L
    fast = head_importance(pruned, batches, normalize=False, progress=False)
    assert fast[GATE_COLUMNS].to_numpy() == pytest.approx(table[GATE_COLUMNS].to_numpy(), rel=1e-8, abs=1e-14)
