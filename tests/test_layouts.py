"""Pruning layouts (headprune.analyses.layouts): the uniform layout removes the same removal units from every
layer, whole key/value groups with grouped-query attention, and its pruning curve scores what a hook placed here
by hand computes."""
import math

import pandas as pd
import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification, LlamaConfig, LlamaForCausalLM

from headprune.report.figures.pruning import figure3_rows
from headprune.analyses.layouts import (free_layout, layout_steps, removal_units, uniform_removal,
                                           uniform_steps)
from headprune.evaluation.runs import EvalSet, EvalSettings
from headprune.analyses.sweeps import pruning_tables
from headprune.models.heads import adapter_for
from headprune.models.prune import prune_heads

HEADS, KV_HEADS, HEAD_DIM, LAYERS = 8, 2, 8, 3


def tiny_llama(kv_heads=KV_HEADS):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=48, intermediate_size=64, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=kv_heads, head_dim=HEAD_DIM,
                         max_position_embeddings=64, attn_implementation="eager")
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.3)
    return model


def shuffled_order(model, seed):
    heads = [(site.attn_type, site.layer, h) for site in adapter_for(model).sites(model) for h in site.kept_heads]
    permutation = torch.randperm(len(heads), generator=torch.Generator().manual_seed(seed)).tolist()
    return [heads[i] for i in permutation]


def test_units_are_the_key_value_groups_and_single_heads_without_them():
    units = removal_units(tiny_llama())
    assert sorted(units) == [("dec_self", layer) for layer in range(LAYERS)]
    assert units["dec_self", 1] == [tuple(("dec_self", 1, h) for h in range(0, 4)),
                                    tuple(("dec_self", 1, h) for h in range(4, 8))]
    bert = BertForSequenceClassification(BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
                                                    num_attention_heads=4, intermediate_size=32))
    assert removal_units(bert)["enc_self", 0] == [(("enc_self", 0, h),) for h in range(4)]


def test_uniform_steps_remove_each_layers_first_units_by_their_mean_rank_worked_by_hand():
    # two layers of two groups of two heads; ranks: layer 0's group 1 first (ranks 0, 2 against 1, 5)
    order = [("d", 0, 2), ("d", 0, 0), ("d", 0, 3), ("d", 1, 0), ("d", 1, 3), ("d", 0, 1), ("d", 1, 1), ("d", 1, 2)]
    units = {("d", layer): [(("d", layer, 0), ("d", layer, 1)), (("d", layer, 2), ("d", layer, 3))]
             for layer in (0, 1)}
    # layer 0: group {2,3} mean rank (0+2)/2 = 1, group {0,1} (1+5)/2 = 3; layer 1: {0,1} (3+6)/2 = 4.5, {2,3} 5.5
    steps = uniform_steps(order, units)
    assert [percent for percent, _ in steps] == [0.0, 50.0, 100.0]
    assert steps[1][1] == [("d", 0, 2), ("d", 0, 3), ("d", 1, 0), ("d", 1, 1)]  # in the order's order
    assert sorted(steps[2][1]) == sorted(order)
    with pytest.raises(ValueError, match="as many removal units in every layer"):
        uniform_steps(order, {("d", 0): units["d", 0], ("d", 1): [(("d", 1, 0), ("d", 1, 1)), (("d", 1, 2),), (("d", 1, 3),)]})
    with pytest.raises(ValueError, match="order and the model's heads differ"):
        uniform_steps(order[:-1], units)


def test_uniform_removal_prunes_to_equal_heads_and_whole_kv_groups_in_every_layer():
    model = tiny_llama()
    removed = uniform_removal(shuffled_order(model, 3), model, 50)
    prune_heads(model, {"dec_self": {layer: [h for _, l, h in removed if l == layer] for layer in range(LAYERS)}})
    sites = adapter_for(model).sites(model)
    assert [site.num_heads for site in sites] == [HEADS // 2] * LAYERS
    for site in sites:  # the kept query heads are one whole key/value group
        assert site.kept_heads in ([0, 1, 2, 3], [4, 5, 6, 7])
    assert layout_steps(shuffled_order(model, 3), "free", step_percent=50)[1][0] == 50.0
    with pytest.raises(ValueError, match="unknown pruning layout 'ragged'"):
        layout_steps([], "ragged")


def _perplexity_with_heads_off(model, chunks, off):
    """Perplexity with ``off`` heads' outputs zeroed by a hook placed here, on each o_proj's input."""
    hooks = []
    for layer, block in enumerate(model.model.layers):
        heads = [h for _, l, h in off if l == layer]

        def zero(module, args, heads=heads):
            x = args[0].clone()
            for h in heads:
                x[..., h * HEAD_DIM:(h + 1) * HEAD_DIM] = 0
            return (x,)
        hooks.append(block.self_attn.o_proj.register_forward_pre_hook(zero))
    try:
        with torch.no_grad():
            ids = torch.tensor(chunks)
            logits = model(input_ids=ids).logits[:, :-1].float()
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                                    reduction="sum")
    finally:
        for hook in hooks:
            hook.remove()
    return math.exp(nll.item() / ids[:, 1:].numel())


def test_the_uniform_curve_scores_what_a_hand_placed_hook_computes_beside_the_free_one():
    model = tiny_llama()
    generator = torch.Generator().manual_seed(1)
    chunks = torch.randint(0, 50, (4, 12), generator=generator).tolist()
    evalset = EvalSet("language_modeling", chunks, chunks, "perplexity")
    order = shuffled_order(model, 5)
    table, outputs = pruning_tables(model, None, evalset, {"importance": order}, step_percent=50,
                                    settings=EvalSettings(batch_size=4, progress=False), layouts=("free", "uniform"))
    assert table["layout"].tolist() == ["free"] * 3 + ["uniform"] * 3
    uniform = table[table["layout"] == "uniform"]
    assert uniform["percent_pruned"].tolist() == [0.0, 50.0, 100.0]  # two kv groups a layer: one a step
    half = uniform_removal(order, model, 50)
    by_hand = _perplexity_with_heads_off(model, chunks, half)
    assert by_hand != pytest.approx(_perplexity_with_heads_off(model, chunks, []), rel=1e-3)  # the hook bites
    assert uniform["score"].iloc[1] == pytest.approx(by_hand, rel=1e-4)
    assert uniform["heads_pruned"].tolist() == [0, len(half), HEADS * LAYERS]
    assert list(outputs) == ["importance"] and len(outputs["importance"]) == 3  # the free layout's, as before
    assert len(free_layout(table)) == 3
    rows = figure3_rows(table.assign(study="s"))
    assert sorted(set(rows["line"])) == ["importance", "importance, uniform"]


def test_a_table_written_before_layouts_is_all_free():
    old = pd.DataFrame({"order": ["importance"], "scope": ["all"], "step": [0]})
    assert free_layout(old) is old


def _curves(uniform_points):
    rows = [("free", p, s) for p, s in ((0.0, 0.80), (50.0, 0.70), (100.0, 0.30))]
    rows += [("uniform", p, s) for p, s in uniform_points]
    return pd.DataFrame([{"study": "mnli", "order": "importance", "scope": "all", "layout": layout, "step": i,
                          "percent_pruned": p, "score": s, "metric": "accuracy"} for i, (layout, p, s) in enumerate(rows)])


def test_the_scorecard_says_what_uniformity_costs_at_equal_heads_removed():
    from headprune.report.claims import NOT_REPRODUCED, REPRODUCED
    from headprune.report.scorecard import judged

    (row,) = judged("U1", pruning=_curves([(0.0, 0.80), (50.0, 0.695), (100.0, 0.30)]))
    assert (row["verdict"], row["claim"]) == (REPRODUCED, "U1")
    assert "at 50.0% of the heads: free 70.00% accuracy, uniform 69.50% accuracy (0.50 points worse)" in row["this_run"]
    (row,) = judged("U1", pruning=_curves([(0.0, 0.80), (50.0, 0.68), (100.0, 0.30)]))
    assert row["verdict"] == NOT_REPRODUCED and "(2.00 points worse)" in row["this_run"]
    (row,) = judged("U1", pruning=_curves([(0.0, 0.80), (50.0, 0.72), (100.0, 0.30)]))
    assert row["verdict"] == REPRODUCED and "(2.00 points better)" in row["this_run"]
    # no common step inside: the free curve read at 25% by linear interpolation, (0.80 + 0.70) / 2 = 0.75
    (row,) = judged("U1", pruning=_curves([(0.0, 0.80), (25.0, 0.74), (100.0, 0.30)]))
    assert "at 25.0% of the heads (free interpolated): free 75.00% accuracy, uniform 74.00%" in row["this_run"]
    assert judged("U1", pruning=_curves([]).query("layout == 'free'")) == []
