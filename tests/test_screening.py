"""A screened Table 1 (headprune.analyses.screening, issue #40): the screens against finite differences and the
exhaustive sweep, the seeded sample, the Clopper-Pearson bound against scipy's beta and binomial distributions and
against its coverage in simulation, the screened table against the exhaustive one."""
import math

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from headprune.analyses import screening as sc
from headprune.evaluation.perplexity import window_batches
from headprune.evaluation.runs import EvalSet, EvalSettings, all_heads, gates_without
from headprune.analyses.sweeps import single_head_sweep
from headprune.models.heads import gated
from headprune.models.masking import Mean
from headprune.scoring.constants import mean_constants


@pytest.fixture(scope="module")
def llama():
    """3 layers x 4 query heads on 2 key/value heads: 12 heads."""
    config = LlamaConfig(vocab_size=40, hidden_size=24, intermediate_size=32, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=6, max_position_embeddings=64, initializer_range=0.3,
                         attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def windows(seed, n=8, length=12):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 40, (n, length), generator=g).tolist()


def evalset(chunks):
    return EvalSet("language_modeling", chunks, chunks, "perplexity")


SETTINGS = EvalSettings(batch_size=3, variant_batch_size=7, progress=False)  # batches that split variants


def mean_token_loss(model, batches, gates, masking="zero"):
    total = tokens = 0.0
    with torch.no_grad(), gated(model, gates, masking=masking):
        for batch in batches:
            logits = model(input_ids=batch["input_ids"]).logits[:, :-1].double()
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch["input_ids"][:, 1:],
                                                    reduction="sum")
            total, tokens = total + float(nll), tokens + batch["input_ids"][:, 1:].numel()
    return total / tokens


def gates_at(model, head, value):
    gates = gates_without(model, [])
    gates[head[0]][head[1], head[2]] = value
    return gates


@pytest.mark.parametrize("masking", ["zero", "mean"])
def test_first_order_is_minus_the_gate_gradient_of_the_mean_token_loss_by_hand(llama, masking):
    """The screen's first-order term against autograd through a loss written here: the mean next-token NLL over the
    screen windows, differentiated at gates 1 (gates of dtype float64, the model in float64)."""
    import copy

    llama = copy.deepcopy(llama).double()
    batches = window_batches(windows(1), 4)
    constants = mean_constants(llama, window_batches(windows(2), 4), progress=False) if masking == "mean" else None
    mode = "zero" if constants is None else Mean(constants)
    screens = sc.gradient_screens(llama, batches, constants=constants)
    gates = {t: g.double().requires_grad_(True) for t, g in gates_without(llama, []).items()}
    total, tokens = 0.0, 0
    with gated(llama, gates, masking=mode):
        for batch in batches:
            logits = llama(input_ids=batch["input_ids"]).logits[:, :-1]
            total = total + torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch["input_ids"][:, 1:],
                                                              reduction="sum")
            tokens += batch["input_ids"][:, 1:].numel()
    (total / tokens).backward()
    # switching a head off moves its gate 1 -> 0: the first-order rise of the loss is minus the derivative at 1
    by_hand = -gates["dec_self"].grad.flatten().numpy()
    assert screens["first_order"].to_numpy() == pytest.approx(by_hand, rel=1e-5, abs=1e-7)
    assert (screens["fisher"] >= 0).all() and (screens["importance"] >= screens["first_order"].abs() - 1e-12).all()
    # and roughly the exact change for a head whose effect is small and smooth (a first-order estimate, not exact)
    head = int(np.argmin(screens["first_order"].abs().to_numpy()))
    exact = (mean_token_loss(llama, batches, gates_without(llama, [all_heads(llama)[head]]), mode)
             - mean_token_loss(llama, batches, None, mode))
    assert abs(exact - screens["first_order"].iloc[head]) < 0.05


def test_exact_screen_is_every_heads_change_on_the_screen_set(llama):
    screen_set = evalset(windows(3, n=4))
    table = sc.exact_screen(llama, None, screen_set, SETTINGS)
    sweep = single_head_sweep(llama, None, screen_set, SETTINGS, resamples=10)
    assert table["exact"].to_numpy() == pytest.approx(sweep["delta"].abs().to_numpy(), rel=1e-9)
    # and by hand, for one head: the perplexity with it off
    head = all_heads(llama)[5]
    batches = window_batches(screen_set.sources, 3)
    by_hand = math.exp(mean_token_loss(llama, batches, gates_without(llama, [head])))
    assert table["screen_score"].iloc[5] == pytest.approx(by_hand, rel=1e-5)


def test_the_screened_sweeps_ablated_rows_are_the_exhaustive_sweeps_rows(llama):
    test = evalset(windows(4, n=9))
    exhaustive = single_head_sweep(llama, None, test, SETTINGS, resamples=200, study="s", testset="t")
    screen = sc.screen_scores(sc.gradient_screens(llama, window_batches(windows(5), 4)), "first_order")
    table = sc.screened_sweep(llama, None, test, screen, top_k=3, sample="25%", seed=7, method="first_order",
                              settings=SETTINGS, resamples=200, study="s", testset="t")
    assert len(table) == 12 and table["verification"].value_counts().to_dict() == {"screened": 7, "verified": 3,
                                                                                   "sampled": 2}
    ablated = sc.ablated_rows(table).set_index(sc.KEY)
    truth = exhaustive.set_index(sc.KEY).loc[ablated.index]
    for column in ("score_full", "score", "delta", "p_bootstrap", "significant", "study", "testset", "metric"):
        assert ablated[column].tolist() == truth[column].tolist(), column  # exactly, not approximately
    verified = table[table["verification"] == "verified"]
    assert sorted(verified["screen"]) == sorted(screen["screen"].nlargest(3))
    screened = table[table["verification"] == "screened"]
    assert screened[["score", "delta", "p_bootstrap"]].isna().all().all()
    assert screened["score_full"].notna().all()  # the full model's score is known for every head
    assert sc.table_basis(table) == "screened" and sc.table_basis(exhaustive) == "exhaustive"


def test_the_sample_is_seeded_uniform_and_outside_the_top_k():
    screen = pd.DataFrame({"attn_type": "dec_self", "layer": np.repeat(range(5), 4), "head": np.tile(range(4), 5),
                           "screen": np.random.default_rng(0).random(20)})
    a, b = sc.select_heads(screen, 5, 3, seed=11), sc.select_heads(screen, 5, 3, seed=11)
    assert a.equals(b)  # reproducible
    top = set(screen["screen"].nlargest(5).index)
    assert set(a.index[a.verification == "verified"]) == top
    counts = np.zeros(20)
    seeds = 3000
    for seed in range(seeds):
        chosen = sc.select_heads(screen, 5, 3, seed=seed)
        sampled = chosen.index[chosen.verification == "sampled"]
        assert len(sampled) == 3 and not set(sampled) & top
        counts[sampled] += 1
    rest = [i for i in range(20) if i not in top]
    expected = seeds * 3 / 15
    assert counts[list(top)].sum() == 0
    # each of the 15 others is drawn 600 times in expectation (binomial sd ~22): uniform within 5 sd
    assert np.abs(counts[rest] - expected).max() < 5 * math.sqrt(expected * (1 - 3 / 15))
    assert not sc.select_heads(screen, 5, 3, seed=12).equals(a)


def test_clopper_pearson_upper_is_scipys_beta_quantile_and_the_binomial_tail():
    from scipy.stats import beta, binom

    for k, n, c in [(0, 20, 0.95), (3, 27, 0.95), (5, 11, 0.9), (1, 200, 0.99)]:
        upper = sc.clopper_pearson_upper(k, n, c)
        assert upper == pytest.approx(beta(k + 1, n - k).ppf(c), rel=1e-12)
        assert binom.cdf(k, n, upper) == pytest.approx(1 - c, rel=1e-8)  # its defining property
    assert sc.clopper_pearson_upper(0, 20, 0.95) == pytest.approx(1 - 0.05 ** (1 / 20), rel=1e-12)  # closed form
    assert sc.clopper_pearson_upper(4, 4, 0.95) == 1.0 and sc.clopper_pearson_upper(0, 0, 0.95) == 1.0
    with pytest.raises(ValueError, match="ablation.screen.confidence"):
        sc.clopper_pearson_upper(1, 10, 1.5)


@pytest.mark.parametrize("positives", [0, 6, 30])
def test_the_count_bound_holds_at_its_confidence_in_simulation(positives):
    """A population of 150 heads outside the top K, ``positives`` of them significant; 25 sampled without
    replacement; the bound on the unsampled ones fails in at most ~5% of 4000 draws."""
    population, sample, confidence = 150, 25, 0.95
    rng = np.random.default_rng(3)
    labels = np.zeros(population, dtype=bool)
    labels[:positives] = True
    fails = 0
    for _ in range(4000):
        picked = np.zeros(population, dtype=bool)
        picked[rng.choice(population, sample, replace=False)] = True
        bound = sc.count_bound(int((labels & picked).sum()), sample, population, confidence)
        fails += bound < int((labels & ~picked).sum())
    assert fails / 4000 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000)
    # the exact (hypergeometric) failure probability the benchmark reports is what the simulation sees
    exact = sc.bound_failure_probability(positives, population, sample, confidence)
    assert exact <= 0.05 and abs(fails / 4000 - exact) <= 4 * math.sqrt(max(exact, 1e-3) / 4000)
    assert sc.count_bound(0, 0, 40, 0.95) == 40  # nothing sampled: every unseen head may be significant
    assert sc.count_bound(2, 10, 10, 0.95) == 0  # everything sampled: nothing unseen


def test_unverified_bound_of_a_table_by_hand():
    rows = []
    for i in range(20):
        verification = "verified" if i < 4 else "sampled" if i < 10 else "screened"
        delta = {0: 5.0, 1: 4.0, 2: 3.0, 3: 2.0, 4: 2.5, 5: -0.1}.get(i, 0.01) if i < 10 else float("nan")
        significant = {0: True, 1: True, 2: True, 3: False, 4: True}.get(i, False) if i < 10 else float("nan")
        rows.append({"attn_type": "dec_self", "layer": i // 4, "head": i % 4, "delta": delta,
                     "significant": significant, "verification": verification, "screen_method": "exact"})
    bound = sc.unverified_bound(pd.DataFrame(rows), 0.95)
    # 16 heads outside the top 4, 6 sampled, 1 significant among them; threshold = min |delta| of the top 4 = 2.0,
    # 1 sampled head above it
    share = sc.clopper_pearson_upper(1, 6, 0.95)
    assert bound["significant_verified"] == 3 and bound["significant_sampled"] == 1
    assert bound["bound_significant_unverified"] == min(10, math.floor(share * 16) - 1)
    assert bound["effect_threshold"] == 2.0 and bound["larger_sampled"] == 1
    assert bound["bound_larger_unverified"] == min(10, math.floor(share * 16) - 1)
    assert (bound["verified"], bound["sampled"], bound["screened_only"]) == (4, 6, 10)
    assert "screened Table 1 (exact screen)" in sc.bound_sentence(bound)
    exhaustive = pd.DataFrame(rows).drop(columns=["verification"]).assign(significant=True)
    assert sc.unverified_bound(exhaustive, 0.95)["bound_significant_unverified"] == 0
    assert sc.bound_sentence(sc.unverified_bound(exhaustive, 0.95)) == "exhaustive Table 1: all 20 heads ablated"


def test_mark_table_refuses_a_verified_head_without_its_row_and_head_count_checks_its_key():
    screen = pd.DataFrame({"attn_type": "x", "layer": 0, "head": range(4), "screen": [4.0, 3.0, 2.0, 1.0]})
    selection = sc.select_heads(screen, 2, 1, seed=0)
    ablation = pd.DataFrame({"attn_type": ["x"], "layer": [0], "head": [0], "delta": [1.0]})
    with pytest.raises(ValueError, match="no ablation result"):
        sc.mark_table(ablation, selection, "exact")
    with pytest.raises(ValueError, match="ablation.screen.top_k"):
        sc.head_count("ten", 8)
    with pytest.raises(ValueError, match="ablation.screen.sample"):
        sc.head_count(-1, 8, "ablation.screen.sample")
    with pytest.raises(ValueError, match="ablation.screen.method"):
        sc.screen_scores(screen.rename(columns={"screen": "exact"}), "taylor")
    with pytest.raises(ValueError, match="do not fit"):
        sc.select_heads(screen, 3, 2, seed=0)


def test_the_bound_is_conservative_for_every_count_of_a_finite_population():
    """Clopper-Pearson from a sample drawn without replacement: the exact failure probability stays below 1 -
    confidence for every number of significant heads among the unverified, at several sizes and confidences."""
    for population, sample, confidence in [(60, 6, 0.95), (216, 11, 0.95), (100, 30, 0.9), (40, 40, 0.95)]:
        worst = max(sc.bound_failure_probability(count, population, sample, confidence)
                    for count in range(population + 1))
        assert worst <= 1 - confidence + 1e-12, (population, sample, confidence, worst)
    assert sc.bound_failure_probability(5, 60, 0, 0.95) == 0.0  # no sample: the bound is every unseen head
