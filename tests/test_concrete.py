"""Hard Concrete head gates (headprune.scoring.concrete) against independent computations: samples against
closed forms derived here, E[g] against a brute-force integral, the L0 term against Monte Carlo,
test-time gates by hand; training on tiny models; closed heads pruned against gated heads."""
import copy
import math

import pytest
import torch

from conftest import FAMILIES, bert_batch, tiny_bert
from tolerances import within_rounding
from headprune.scoring.concrete import (
    loss_terms,
    HardConcreteGates, closed_heads, expected_gate, kept_heads_table, prob_nonzero, prob_one, prob_zero,
    train_gates,
)
from headprune.models.heads import adapter_for, gated, head_shape
from headprune.models.prune import count_heads, prune_heads

T, LOW, HIGH = 0.33, -0.1, 1.1
LOG_A = [-4.0, -2.0, -0.5, 0.0, 0.7, 2.0, 4.0]


def logit(x):
    return math.log(x / (1 - x))


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def concrete_cdf(x, log_a):
    """P(s <= x) for s = sigmoid((logit(u) + log_a) / T): s <= x iff logit(u) <= T logit(x) - log_a,
    and logit(u) is standard logistic, whose CDF is the sigmoid."""
    return sigmoid(T * logit(x) - log_a)


def gate_cdf(y, log_a):
    """P(g <= y) for y in [0, 1): g = clip(s (r - l) + l) <= y iff s <= (y - l) / (r - l)."""
    return concrete_cdf((y - LOW) / (HIGH - LOW), log_a)


def many_samples(log_a_values, rows=100_000, seed=0):
    """``rows`` independent gate samples per log_a: one sample() of a (rows, len(values)) gate tensor."""
    gates = HardConcreteGates({"enc_self": (rows, len(log_a_values))})
    with torch.no_grad():
        gates.log_a["enc_self"].copy_(torch.tensor(log_a_values).expand(rows, -1))
        return gates.sample(torch.Generator().manual_seed(seed))["enc_self"].double()


def tolerance(p, n):
    return 5 * math.sqrt(p * (1 - p) / n) + 1e-4


def test_sample_probabilities_match_closed_forms():
    samples = many_samples(LOG_A)
    n = samples.shape[0]
    assert samples.min() >= 0 and samples.max() <= 1
    for column, log_a in enumerate(LOG_A):
        g = samples[:, column]
        # the derivation: g == 0 iff s <= -l / (r - l); g == 1 iff s >= (1 - l) / (r - l)
        p0 = concrete_cdf(-LOW / (HIGH - LOW), log_a)
        p1 = 1 - concrete_cdf((1 - LOW) / (HIGH - LOW), log_a)
        assert float(prob_zero(torch.tensor(log_a))) == pytest.approx(p0, abs=1e-6)
        assert float(prob_one(torch.tensor(log_a))) == pytest.approx(p1, abs=1e-6)
        # Voita's P(open) = sigmoid(log_a - T log(-l / r)) is 1 - P(zero)
        assert float(prob_nonzero(torch.tensor(log_a))) == pytest.approx(sigmoid(log_a - T * math.log(-LOW / HIGH)),
                                                                         abs=1e-6)
        assert float(prob_nonzero(torch.tensor(log_a))) == pytest.approx(1 - p0, abs=1e-6)
        # the samples
        assert float((g == 0).double().mean()) == pytest.approx(p0, abs=tolerance(p0, n))
        assert float((g == 1).double().mean()) == pytest.approx(p1, abs=tolerance(p1, n))
        for y in (0.1, 0.5, 0.9):  # the CDF in between, which the derivation rests on
            p = gate_cdf(y, log_a)
            assert float((g <= y).double().mean()) == pytest.approx(p, abs=tolerance(p, n))


def test_expected_gate_against_a_direct_integral_and_samples():
    log_a = torch.tensor(LOG_A, dtype=torch.float64)
    expected = expected_gate(log_a)
    # midpoint rule over u on [0, 1], g written out here
    n = 400_000
    u = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    s = torch.sigmoid((torch.log(u) - torch.log(1 - u))[:, None] / T + log_a / T)
    direct = (s * (HIGH - LOW) + LOW).clamp(0, 1).mean(0)
    assert torch.allclose(expected, direct, atol=1e-6)
    # the stretch is symmetric about 1/2, so log_a = 0 gives E[g] = 1/2 and E[g](-a) = 1 - E[g](a)
    assert float(expected_gate(torch.tensor(0.0))) == pytest.approx(0.5, abs=1e-12)
    assert torch.allclose(expected_gate(-log_a), 1 - expected, atol=1e-12)
    samples = many_samples(LOG_A, seed=1)
    sd = samples.std(0) / math.sqrt(samples.shape[0])
    assert ((samples.mean(0) - expected).abs() <= 5 * sd + 1e-4).all()


def test_l0_penalty_matches_monte_carlo():
    shape = {"enc_self": (3, 4), "enc_dec": (2, 4), "dec_self": (2, 4)}
    gates = HardConcreteGates(shape)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for log_a in gates.log_a.values():
            log_a.copy_(torch.rand(log_a.shape, generator=g) * 8 - 4)
    draws = 4000
    nonzero = {t: torch.zeros(s, dtype=torch.float64) for t, s in shape.items()}
    with torch.no_grad():
        for _ in range(draws):
            for t, sample in gates.sample(g).items():
                nonzero[t] += sample != 0
    # Voita's averaging: each gated layer's sum over heads, averaged over the 7 layers of all types
    per_layer = torch.cat([count.sum(1) / draws for count in nonzero.values()])
    monte_carlo = float(per_layer.mean())
    penalty = gates.l0_penalty()
    p = torch.cat([prob_nonzero(log_a.detach()).flatten() for log_a in gates.log_a.values()])
    spread = math.sqrt(float((p * (1 - p)).sum()) / draws) / 7
    assert float(penalty.detach()) == pytest.approx(monte_carlo, abs=5 * spread)
    assert float(penalty.detach()) == pytest.approx(float(p.sum()) / 7, abs=1e-6)
    # its gradient: dP(open)/dlog_a = P (1 - P), over the number of layers
    penalty.backward()
    for t, log_a in gates.log_a.items():
        p = prob_nonzero(log_a.detach())
        assert torch.allclose(log_a.grad, p * (1 - p) / 7, atol=1e-7)


def test_deterministic_gates_by_hand():
    values = [-3.0, -math.log(11) - 0.01, -math.log(11) + 0.01, -1.0, 0.0, 1.0, math.log(11) + 0.01, 3.0]
    gates = HardConcreteGates({"enc_self": (1, len(values))})
    with torch.no_grad():
        gates.log_a["enc_self"].copy_(torch.tensor([values]))
    by_hand = [min(1.0, max(0.0, sigmoid(a) * 1.2 - 0.1)) for a in values]
    assert by_hand[0] == 0 and by_hand[1] == 0 and 0 < by_hand[2] < 0.01 and by_hand[4] == pytest.approx(0.5)
    assert by_hand[-2] == 1 and by_hand[-1] == 1
    gate = gates.deterministic()["enc_self"][0]
    assert torch.allclose(gate, torch.tensor(by_hand), atol=1e-6)
    # kept: non-zero test-time gate (Voita); 0.5 rounds as the differentiable-subset-pruning port
    assert gates.kept()["enc_self"][0].tolist() == [0, 0, 1, 1, 1, 1, 1, 1]
    assert gates.kept(0.5)["enc_self"][0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    table = kept_heads_table(gates)
    assert list(table.columns) == ["attn_type", "layer", "head", "log_a", "p_open", "gate", "kept"]
    assert table["kept"].tolist() == [False, False, True, True, True, True, True, True]
    assert table["gate"].tolist() == pytest.approx(by_hand, abs=1e-6)
    assert table["p_open"].tolist() == pytest.approx([sigmoid(a - T * math.log(1 / 11)) for a in values], abs=1e-6)
    assert closed_heads(gates) == {"enc_self": {0: [0, 1]}}


def test_initial_gates():
    model = tiny_bert()
    gates = HardConcreteGates.for_model(model)
    assert {t: tuple(v.shape) for t, v in gates.log_a.items()} == head_shape(model)
    # nearly open: every test-time gate exactly 1, P(open) about 0.98
    assert (gates.deterministic()["enc_self"] == 1).all()
    assert float(gates.p_open()["enc_self"].detach().min()) > 0.97
    # Voita's init: glorot_uniform on her [1, heads, 1, 1] variable, U(-sqrt(3 / heads), sqrt(3 / heads))
    voita = HardConcreteGates.for_model(model, init_log_a=None, seed=1).log_a["enc_self"]
    assert voita.abs().max() <= math.sqrt(3 / 4) and voita.std() > 0.1


def self_labelled_bert():
    """A tiny BERT and batches labelled with its own predictions: every head helps it fit them."""
    model = tiny_bert()
    batches = [bert_batch(seed=s) for s in (1, 2, 3)]
    with torch.no_grad():
        for batch in batches:
            batch["labels"] = adapter_for(model).loss_and_outputs(model, batch)[1].logits.argmax(-1)
    return model, batches


def record_modes(model):
    """model.training at every forward pass."""
    modes = []
    model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    return modes


def test_penalty_closes_gates_and_only_the_gates_train():
    model, batches = self_labelled_bert()
    before = copy.deepcopy(model.state_dict())
    modes = record_modes(model)
    kept = {}
    for penalty in (0.0, 1.0):
        gates, log = train_gates(model, batches, penalty=penalty, steps=30, lr=0.3, progress=False)
        kept[penalty] = int(sum(k.sum() for k in gates.kept().values()))
        assert list(log.columns) == ["step", "loss", "task_loss", "l0", "expected_open", "kept"]
        assert log["step"].tolist() == list(range(1, 31))
        assert log["loss"].tolist() == pytest.approx((log["task_loss"] + penalty * log["l0"]).tolist())
        if penalty:
            assert log["expected_open"].iloc[-1] < 0.5 * log["expected_open"].iloc[0]
    assert kept[0.0] == 8  # no penalty: the heads the model uses stay open
    assert kept[1.0] < 4
    # gates only: the weights did not move, and the model is left as it was (eval, trainable)
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert not model.training and all(p.requires_grad for p in model.parameters())
    assert modes == [False] * 60  # eval mode while training the gates alone: no dropout


def test_train_model_changes_weights():
    model, batches = self_labelled_bert()
    before = copy.deepcopy(model.state_dict())
    modes = record_modes(model)
    with pytest.raises(ValueError, match="model_lr"):
        train_gates(model, batches, penalty=0.1, steps=1, lr=0.1, train_model=True, progress=False)
    gates, _ = train_gates(model, batches, penalty=0.1, steps=3, lr=0.1, train_model=True, model_lr=1e-2,
                           progress=False)
    changed = [name for name, value in model.state_dict().items() if not torch.equal(value, before[name])]
    assert any("attention" in name for name in changed) and any("classifier" in name for name in changed)
    assert not (gates.log_a["enc_self"] == 3.0).all()
    assert modes == [True] * 3 and not model.training  # train mode (dropout) while it trains, restored after


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_attention_type_gets_gradients(family):
    make_model, make_batch = FAMILIES[family]
    model = make_model()
    batches = [make_batch(seed=1), make_batch(seed=2)]
    # half-open gates, no penalty: log_a moves only through the task loss
    gates, log = train_gates(model, batches, penalty=0.0, steps=2, lr=0.1, init_log_a=0.0, progress=False)
    assert set(gates.log_a) == set(adapter_for(model).attention_types)
    for attn_type, log_a in gates.log_a.items():
        assert (log_a != 0).any(), attn_type
    assert len(log) == 2 and log["task_loss"].gt(0).all()


def test_same_seed_same_gates():
    model, batches = self_labelled_bert()
    runs = [train_gates(model, batches, penalty=0.3, steps=5, lr=0.2, seed=seed, progress=False) for seed in (4, 4, 5)]
    (a, log_a), (b, log_b), (c, _) = runs
    assert torch.equal(a.log_a["enc_self"], b.log_a["enc_self"]) and log_a.equals(log_b)
    assert not torch.equal(a.log_a["enc_self"], c.log_a["enc_self"])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pruning_closed_heads_equals_gating_them(family):
    make_model, make_batch = FAMILIES[family]
    model, batch = make_model(), make_batch()
    gates = HardConcreteGates.for_model(model)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for log_a in gates.log_a.values():
            log_a.copy_(torch.rand(log_a.shape, generator=g) * 10 - 5)
        first = next(iter(gates.log_a.values()))
        first[1] = -6.0  # a whole layer closed
    closed = closed_heads(gates)
    table = kept_heads_table(gates)
    assert sorted((t, layer, h) for t, layers in closed.items() for layer, hs in layers.items() for h in hs) == \
        sorted(table.loc[~table["kept"], ["attn_type", "layer", "head"]].itertuples(index=False, name=None))
    with torch.no_grad(), gated(model, gates.kept()):
        expected = adapter_for(model).loss_and_outputs(model, batch)[1].logits
    pruned = prune_heads(copy.deepcopy(model), closed)
    assert count_heads(pruned) == int(table["kept"].sum())
    with torch.no_grad():
        got = adapter_for(pruned).loss_and_outputs(pruned, batch)[1].logits
    assert within_rounding(got, expected)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_task_loss_is_a_mean_per_example_or_per_target_token(family):
    """A classifier's summed loss has one term per example, a translation model's one per target token."""
    model, batch = FAMILIES[family][0](), FAMILIES[family][1]()
    adapter = adapter_for(model)
    if family == "bert":
        assert loss_terms(adapter, batch) == len(batch["input_ids"])
    else:
        real = int((batch["labels"] != model.config.pad_token_id).sum())
        assert loss_terms(adapter, batch) == real == adapter.num_tokens(batch)


# --- the gates under a masking mode that keeps a constant (issue #32) ------------------------------------------


def hand_interpolated_loss(model, batch, gates, constants):
    """The task loss per example with each BERT head's output o_h replaced by g o_h + (1 - g) c_h, put in by a hook
    on each layer's output projection written here (not headprune's): the reference for mean-masked gates."""
    handles = []
    for layer, block in enumerate(model.bert.encoder.layer):
        gate = gates["enc_self"][layer].detach()
        c = torch.stack([constants.head("enc_self", layer, h) for h in range(len(gate))])  # (heads, head_dim)

        def hook(module, args, gate=gate, c=c):
            o = args[0].unflatten(-1, c.shape)
            return ((gate[:, None] * o + (1 - gate[:, None]) * c).flatten(-2),)
        handles.append(block.attention.output.dense.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           token_type_ids=batch["token_type_ids"]).logits
    finally:
        for handle in handles:
            handle.remove()
    return float(torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum")) / len(batch["labels"])


def test_gates_under_mean_masking_interpolate_to_the_heads_mean_and_learn():
    from headprune.models.masking import Mean, Streaming, Uniform
    from headprune.scoring.constants import mean_constants

    model, batches = self_labelled_bert()
    constants = mean_constants(model, [bert_batch(seed=s) for s in (7, 8)], progress=False)
    mean = Mean(constants)
    # every gate sampled exactly 0 (log_a = -30): the first step's loss is the model with every head at its mean
    _, log = train_gates(model, batches, penalty=0.0, steps=1, lr=0.1, init_log_a=-30.0, masking=mean, progress=False)
    zero_gates = {"enc_self": torch.zeros(2, 4)}
    assert log["task_loss"].iloc[0] == pytest.approx(hand_interpolated_loss(model, batches[0], zero_gates, constants),
                                                     rel=1e-5)
    with torch.no_grad(), gated(model, zero_gates, masking=mean):  # = headprune's Mean-masked model
        logits = adapter_for(model).loss_and_outputs(model, batches[0])[1].logits
    assert log["task_loss"].iloc[0] == pytest.approx(
        float(torch.nn.functional.cross_entropy(logits, batches[0]["labels"])), rel=1e-5)
    # zeroed instead, the loss differs: the mode reached the training
    _, zeroed = train_gates(model, batches, penalty=0.0, steps=1, lr=0.1, init_log_a=-30.0, progress=False)
    assert zeroed["task_loss"].iloc[0] != pytest.approx(log["task_loss"].iloc[0], rel=1e-3)
    # half-open gates at a high temperature: the first sample (the same generator and seed as train_gates) has most
    # gates strictly inside (0, 1), and the first step's loss is the interpolation by hand
    sample = HardConcreteGates.for_model(model, temperature=2.0, init_log_a=0.0, seed=3).sample(
        torch.Generator().manual_seed(3))
    inside = sample["enc_self"][(sample["enc_self"] > 0) & (sample["enc_self"] < 1)]
    assert inside.numel() >= 4
    gates, log = train_gates(model, batches, penalty=0.0, steps=40, lr=0.2, init_log_a=0.0, seed=3, masking=mean,
                             temperature=2.0, progress=False)
    assert log["task_loss"].iloc[0] == pytest.approx(hand_interpolated_loss(model, batches[0], sample, constants),
                                                     rel=1e-5)
    # and the gates learn: the task loss falls as they open
    assert log["task_loss"].tail(6).mean() < 0.9 * log["task_loss"].head(6).mean()
    assert float(gates.p_open()["enc_self"].detach().mean()) > 0.6
    for binary in (Uniform(), Streaming(4, 16)):
        with pytest.raises(ValueError, match=f"{binary.word} masking takes gates 0 or 1 only"):
            train_gates(model, batches, penalty=0.0, steps=1, lr=0.1, masking=binary, progress=False)
