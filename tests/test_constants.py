"""Mean and optimal ablation constants, and the importance criterion that goes with them (issue #32).

- ``mean_constants`` equals each head's output (the output projection's input, read here by a hook of the test's
  own) averaged over the real query-side tokens: an encoder's over source tokens, a decoder's self- and
  cross-attention over target tokens (FSMT time-major, left-padded LMs, GQA, pruned heads).
- ``optimal_constants``: the objective it differentiates (``replacement_loss``, each row with one head replaced)
  has the gradient of finite differences in every constant entry tried, and none for heads no row replaced;
  with the default steps and learning rate every head's training loss with its learned constant is at most its
  loss with the mean (the defaults' justification, on tiny models), and the stochastic default run (one head per
  row) lowers the heads' average loss; the same seed gives the same constants.
- ``head_importance(..., constants=)``: per example, |dL_x/dxi_h| under constant masking equals the finite
  difference of the loss in the gate, i.e. |(o_h - c_h) . dL/do_h| summed over tokens.
"""
import pytest
import torch

from test_adapter_contract import CAUSAL, FAMILIES, build, causal_batch, fsmt_runs_in_float64  # noqa: F401
from test_adapter_contract import llama_in_float64  # noqa: F401
from headprune.models.head_constants import HeadConstants
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.masking import Constant
from headprune.models.prune import prune_heads
from headprune.scoring.constants import (DEFAULT_LR, DEFAULT_STEPS, all_heads, head_replacement_losses,
                                         mean_constants, optimal_constants, replacement_loss)
from headprune.scoring.importance import head_importance


def random_constants(model, seed=0, scale=0.5) -> HeadConstants:
    g = torch.Generator().manual_seed(seed)
    return HeadConstants({(s.attn_type, s.layer): scale * torch.randn(s.original_num_heads, s.head_dim, generator=g)
                          for s in adapter_for(model).sites(model)}, "mean")


def query_side_mask(batch, attn_type, causal):
    if causal or attn_type == "enc_self":
        return batch["attention_mask"].bool()
    return batch["decoder_attention_mask"].bool()


@pytest.mark.parametrize("pruned", [False, True], ids=["full", "pruned"])
@pytest.mark.parametrize("family", ["bert", "fsmt", "bart", "llama_gqa", "gpt2", "distilbert"])
def test_mean_constants_are_the_mean_over_real_query_tokens(family, pruned):
    model, _ = build(family)
    make_batch = FAMILIES[family][1]
    batches = [make_batch(seed=s) for s in (1, 2)]
    if pruned:
        prune_heads(model, {t: {1: [0, 3]} for t in adapter_for(model).attention_types})
    constants = mean_constants(model, batches, data="two batches", progress=False)
    assert constants.kind == "mean" and constants.meta["data"] == "two batches"
    # by hand: the output projections' inputs, read by a hook of our own
    sums, counts = {}, {}
    for batch in batches:
        seen = {}
        handles = []
        for site in adapter_for(model).sites(model):
            def keep(module, args, site=site):
                x = args[0].transpose(0, 1) if site.time_major else args[0]
                seen[(site.attn_type, site.layer)] = x.unflatten(-1, (site.num_heads, site.head_dim)).double()
            handles.append(site.output.register_forward_pre_hook(keep))
        try:
            with torch.no_grad():
                adapter_for(model).loss_and_outputs(model, batch)
        finally:
            for handle in handles:
                handle.remove()
        for site in adapter_for(model).sites(model):
            key = (site.attn_type, site.layer)
            mask = query_side_mask(batch, site.attn_type, family in CAUSAL)
            sums[key] = sums.get(key, 0) + seen[key][mask].sum(0)
            counts[key] = counts.get(key, 0) + int(mask.sum())
    for site in adapter_for(model).sites(model):
        key = (site.attn_type, site.layer)
        expected = sums[key] / counts[key]
        assert torch.allclose(constants.values[key][site.kept_heads].double(), expected, atol=1e-6)
        if site.num_heads < site.original_num_heads:
            removed = [h for h in range(site.original_num_heads) if h not in site.kept_heads]
            assert (constants.values[key][removed] == 0).all()
    assert int(constants.meta[f"tokens_{site.attn_type}"]) == counts[key]


@pytest.mark.parametrize("family", ["bert", "llama_gqa", "fsmt"])
def test_replacement_loss_gradient_is_the_finite_difference(family, request):
    """What the optimiser differentiates: the gradient in c_h of the summed loss with, in each row, one head replaced."""
    if family == "llama_gqa":
        request.getfixturevalue("llama_in_float64")
    model, batch = build(family)
    model.double()
    if family in CAUSAL:
        model.set_attn_implementation("sdpa")
    for p in model.parameters():
        p.requires_grad_(False)
    constants = random_constants(model, seed=4)
    heads = all_heads(model)
    rows = len(batch["input_ids"])
    assignment = [heads[(7 * r + 3) % len(heads)] for r in range(rows)]  # one head per row
    leaves = {k: v.double().clone().requires_grad_(True) for k, v in constants.values.items()}  # float64 leaves
    replacement_loss(model, batch, _as_constants(leaves), assignment).backward()
    eps = 1e-6
    for attn_type, layer, head in assignment[:2]:
        key = (attn_type, layer)
        for entry in (0, 3):
            values = {k: v.detach().clone() for k, v in leaves.items()}

            def loss(shift):
                shifted = {k: v.clone() for k, v in values.items()}
                shifted[key][head, entry] += shift
                with torch.no_grad():
                    return float(replacement_loss(model, batch, _as_constants(shifted), assignment))

            numeric = (loss(eps) - loss(-eps)) / (2 * eps)
            assert float(leaves[key].grad[head, entry]) == pytest.approx(numeric, rel=1e-5, abs=1e-8)
            assert abs(numeric) > 1e-5
    replaced = {(t, layer, h) for t, layer, h in assignment}
    for t, layer, h in heads:
        if (t, layer, h) not in replaced:
            assert float(leaves[(t, layer)].grad[h].abs().max()) == 0.0  # no row replaced it: no gradient


def _as_constants(values):
    constants = HeadConstants({k: v.float() for k, v in values.items()}, "mean")
    constants.values = values  # float64, as the model
    return constants


@pytest.mark.parametrize("family", ["bert", "llama_gqa"])
def test_default_optimal_constants_beat_the_mean_for_every_head(family):
    """The defaults' justification: with DEFAULT_STEPS Adam steps at DEFAULT_LR, every head replaced by its learned
    constant has a training loss no higher than with its mean (every row replacing every head each step)."""
    model, batch = build(family)
    heads = all_heads(model)
    mean = mean_constants(model, [batch], progress=False)
    history = []
    optimal = optimal_constants(model, [batch], repeats=len(heads), progress=False, history=history)
    assert optimal.kind == "optimal" and optimal.meta["steps"] == str(DEFAULT_STEPS)
    assert optimal.meta["lr"] == str(DEFAULT_LR) and len(history) == DEFAULT_STEPS
    with_mean = head_replacement_losses(model, [batch], mean, progress=False)
    with_optimal = head_replacement_losses(model, [batch], optimal, progress=False)
    assert (with_optimal.loss <= with_mean.loss + 1e-6).all()
    assert (with_optimal.loss < with_mean.loss - 1e-3).mean() > 0.5  # most heads gain clearly
    assert history[-1]["loss"] < history[0]["loss"]
    with gated(model, full_gates(model, 0.0), masking=Constant(optimal)):  # usable as a mode
        pass


def test_stochastic_default_run_lowers_the_average_loss_and_is_seeded():
    """One head per row (repeats=1, the default): the average over heads of the training loss goes down."""
    model, _ = build("bert")
    batches = [FAMILIES["bert"][1](seed=s) for s in (1, 2, 3, 4)]
    mean = mean_constants(model, batches, progress=False)
    optimal = optimal_constants(model, batches, progress=False)
    with_mean = head_replacement_losses(model, batches, mean, progress=False)
    with_optimal = head_replacement_losses(model, batches, optimal, progress=False)
    assert with_optimal.loss.mean() < with_mean.loss.mean() - 1e-2
    again = optimal_constants(model, batches, steps=3, seed=7, progress=False)
    assert all(torch.equal(again.values[k], optimal_constants(model, batches, steps=3, seed=7, progress=False)
                           .values[k]) for k in again.values)


# --- The criterion: |(o_h - c_h) . dL/do_h| ------------------------------------------------------------------------

def loss_at(model, batch, gates, constants):
    with torch.no_grad(), gated(model, gates, masking=Constant(constants)):
        return float(adapter_for(model).loss_and_outputs(model, batch)[0])


def rows_of(batch):
    rows = len(batch["input_ids"])
    return [{k: v[r:r + 1] if torch.is_tensor(v) else v for k, v in batch.items()} for r in range(rows)]


@pytest.mark.parametrize("family", ["bert", "llama_gqa", "fsmt"])
def test_importance_with_constants_is_the_finite_difference_per_example(family, request):
    if family == "llama_gqa":
        request.getfixturevalue("llama_in_float64")
    model, batch = build(family)
    model.double()
    if family in CAUSAL:
        model.set_attn_implementation("sdpa")
    constants = random_constants(model, seed=6)
    constants.values = {k: v.double() for k, v in constants.values.items()}
    adapter = adapter_for(model)
    t = 1e-6
    checked = 0
    for example in rows_of(batch):
        table = head_importance(model, [example], estimator="example", normalize=False, progress=False,
                                constants=constants)
        zero_table = head_importance(model, [example], estimator="example", normalize=False, progress=False)
        tokens = adapter.num_tokens(example)
        for attn_type, layer, head in [(a, 0, 1) for a in adapter.attention_types] + \
                                      [(a, 1, 2) for a in adapter.attention_types]:
            up = {k: g.double() for k, g in full_gates(model).items()}
            down = {k: g.double() for k, g in full_gates(model).items()}
            up[attn_type][layer, head] += t
            down[attn_type][layer, head] -= t
            numeric = (loss_at(model, example, up, constants) - loss_at(model, example, down, constants)) / (2 * t)
            # one-sided, as pruning moves the gate: L(1) - L(1 - t) ~ t (o - c) . dL/do
            one_sided = (loss_at(model, example, full_gates(model), constants)
                         - loss_at(model, example, down, constants)) / t
            row = table[(table.attn_type == attn_type) & (table.layer == layer) & (table["head"] == head)].iloc[0]
            zero_row = zero_table[(zero_table.attn_type == attn_type) & (zero_table.layer == layer)
                                  & (zero_table["head"] == head)].iloc[0]
            assert row.importance * tokens == pytest.approx(abs(numeric), rel=1e-5, abs=1e-8)
            assert abs(one_sided) == pytest.approx(abs(numeric), rel=1e-3, abs=1e-6)
            assert abs(row.importance - zero_row.importance) > 1e-6  # the constant changes the criterion
            checked += 1
    assert checked >= 2 * len(adapter.attention_types)
