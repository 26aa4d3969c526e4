"""A tiny T5 through the package's translation study (issue #45): the paper's Table 1 (every head ablated alone) and
the pruning curve, scored by BLEU of beam-search translations, are the same whether a head is switched off by its
gate or removed from the model (``prune_heads``, through the generic encoder-decoder adapter). The references are
the full model's own translations, so the full model scores BLEU 100 and an ablation that changes a translation
lowers it: a gate that changed nothing would show as a row of 100s (checked)."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

from conftest import DigitTokenizer
from seq2seq_zoo import tiny_model
from headprune.evaluation.evaluate import translate_variants
from headprune.evaluation.kinds import kind_of
from headprune.evaluation.runs import EvalSet, EvalSettings, all_heads
from headprune.analyses.sweeps import heads_by_layer, pruning_curve, single_head_sweep
from headprune.models.families.seq2seq import Seq2SeqAdapter
from headprune.models.heads import adapter_for
from headprune.models.prune import prune_heads

SOURCES = ["5 9 12 40 7", "33 8 21", "17 60 4 4 19 30", "50 11 9 3", "23 41 6 28 10", "45 13"]
SETTINGS = EvalSettings(batch_size=3, beam=2, progress=False)


def _tiny_t5():
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tiny_model("t5")


def _translations(model, tokenizer, gates_list=(None,)):
    return translate_variants(model, tokenizer, SOURCES, list(gates_list), beam=SETTINGS.beam,
                              lenpen=SETTINGS.lenpen, batch_size=SETTINGS.batch_size)


def _bleu(evalset, outputs) -> float:
    return kind_of("translation").score(evalset, outputs)


@pytest.fixture
def one_thread():
    """Tiny matrices: a second thread only waits (on a busy machine, 30 times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_single_head_ablation_and_pruning_curve_equal_gated_and_pruned(one_thread):
    model, tokenizer = _tiny_t5(), DigitTokenizer()
    assert isinstance(adapter_for(model), Seq2SeqAdapter)
    references = _translations(model, tokenizer)[0]
    evalset = EvalSet("translation", references, SOURCES, "bleu", "de")
    heads = all_heads(model)
    assert len(heads) == 3 * 2 * 4

    table = single_head_sweep(model, tokenizer, evalset, SETTINGS, resamples=10).set_index(["attn_type", "layer",
                                                                                             "head"])
    assert (table.score_full.round(6) == 100).all()
    assert (table.score < 100).sum() >= 3, "ablating single heads changes no translation: the gates do nothing"
    for head in heads:
        pruned = prune_heads(copy.deepcopy(model), heads_by_layer([head]))
        assert _bleu(evalset, _translations(pruned, tokenizer)[0]) == table.score[head], head

    order = heads[::-1]  # decoder self-attention first: every layer is left without heads along the way
    curve = pruning_curve(model, tokenizer, evalset, order, step_percent=25, settings=SETTINGS)
    assert round(curve.score.iloc[0], 6) == 100 and curve.score.iloc[-1] < 100
    for _, step in curve.iterrows():
        removed = order[:int(step.heads_pruned)]
        pruned = prune_heads(copy.deepcopy(model), heads_by_layer(removed))
        assert _bleu(evalset, _translations(pruned, tokenizer)[0]) == step.score, step.percent_pruned
