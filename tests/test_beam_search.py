"""headprune.evaluation.beam_search: finished sentences leave the batch, and the translations are
generate()'s, token for token, for every translation family, gate variant, beam size and length penalty."""
import pytest
import torch
from transformers import GenerationConfig

from conftest import EOS, PAD, DigitTokenizer, tiny_fsmt, tiny_m2m100
from headprune.evaluation import evaluate
from headprune.evaluation.beam_search import beam_search, supports
from headprune.evaluation.runs import gates_without
from headprune.models.heads import gated
from headprune.models.masking import masked_as
from test_adapter_contract import tiny_bart, tiny_marian, tiny_mbart, tiny_nllb

MODELS = {"fsmt": tiny_fsmt, "prenorm": tiny_m2m100, "bart": tiny_bart, "mbart": tiny_mbart, "marian": tiny_marian,
          "nllb": tiny_nllb}
# A </s> logit bias per family that makes its tiny random model end sentences at different steps
# (some at once, some at the length cap): found by trying, checked by the tests below.
EOS_BIAS = {"fsmt": 0.0, "prenorm": 0.0, "bart": 1.8, "mbart": 0.5, "marian": 0.0, "nllb": 3.2}


def with_eos_bias(model, bias):
    """Shift </s>'s logit so that sentences end at different steps: some early, some at the length cap."""
    head = model.get_output_embeddings()
    with torch.no_grad():
        if getattr(head, "bias", None) is None:
            head.bias = torch.nn.Parameter(torch.zeros(head.weight.shape[0]))
        head.bias[EOS] += bias
    if hasattr(model, "final_logits_bias"):
        with torch.no_grad():
            model.final_logits_bias[..., EOS] += bias
    return model


def source_batch(sentences=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 8, (sentences,), generator=g).tolist()
    ids = torch.full((sentences, max(lengths) + 1), PAD)
    mask = torch.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(4, 40, (n,), generator=g)
        ids[i, n] = EOS
        mask[i, :n + 1] = 1
    return {"input_ids": ids, "attention_mask": mask}


def generated(model, batch, gates, **options):
    """generate()'s best hypothesis per sentence, pads stripped."""
    with torch.no_grad(), gated(model, gates):
        out = model.generate(**batch, num_beams=options["beam"], length_penalty=options["lenpen"], early_stopping=True,
                             max_new_tokens=options["max_new"], max_length=None, do_sample=False)
    return [[t for t in row.tolist() if t != PAD] for row in out]


def stripped(rows):
    return [[t for t in row.tolist() if t != PAD] for row in rows]


@pytest.mark.parametrize("family", list(MODELS))
def test_beam_search_is_generate_token_for_token(family):
    model = with_eos_bias(MODELS[family](), EOS_BIAS[family])
    assert supports(model) is None, supports(model)
    batch = source_batch()
    gates_list = [None, gates_without(model, [("enc_self", 0, 1)]), gates_without(model, [("enc_dec", 1, 2)]),
                  gates_without(model, [("dec_self", 0, 3), ("enc_self", 1, 0)]), gates_without(model, [("dec_self", 1, 1)])]
    rows_per_step = []  # the decoder's batch at each step
    hook = model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: rows_per_step.append((args[0] if args else kwargs["input_ids"]).shape[0]),
        with_kwargs=True)
    shrank = []
    for beam, lenpen in [(1, 1.0), (3, 0.6), (5, 1.0), (4, 2.0)]:
        options = dict(beam=beam, lenpen=lenpen, max_new=9)
        rows_per_step.clear()
        best = beam_search(model, batch, gates_list, **options)
        assert rows_per_step[0] == len(gates_list) * len(batch["input_ids"]) * beam
        assert sorted(rows_per_step, reverse=True) == rows_per_step  # rows only ever leave
        shrank.append(rows_per_step[-1] < rows_per_step[0])
        for gates, variant in zip(gates_list, best):
            assert stripped(variant) == generated(model, batch, gates, **options), (beam, lenpen, gates)
    assert any(shrank)  # finished sentences left the batch, and generate() agreed on every translation


def test_a_sentence_at_the_length_cap_and_uniform_masking():
    """No </s> in sight: every sentence runs to max_new tokens and ends with the forced </s>."""
    model, batch = tiny_fsmt(), source_batch(seed=2)
    gates_list = [None, gates_without(model, [("dec_self", 1, 2)]), gates_without(model, [("enc_self", 0, 0)])]
    for masking in ("zero", "uniform"):
        with masked_as(model, masking):
            best = beam_search(model, batch, gates_list, beam=3, lenpen=1.0, max_new=6)
        for gates, variant in zip(gates_list, best):
            with torch.no_grad(), gated(model, gates, masking=masking):
                out = model.generate(**batch, num_beams=3, early_stopping=True, max_new_tokens=6, max_length=None,
                                     do_sample=False)
            assert stripped(variant) == stripped(out)
            assert all(len(tokens) == 1 + 6 and tokens[-1] == EOS for tokens in stripped(variant))


def test_translate_variants_uses_it_and_falls_back_to_generate(monkeypatch):
    model, tokenizer = tiny_fsmt(), DigitTokenizer()
    g = torch.Generator().manual_seed(0)
    sources = [" ".join(map(str, torch.randint(4, 40, (n,), generator=g).tolist())) for n in (5, 3, 6, 2, 4, 6, 3)]
    gates_list = [None, gates_without(model, [("enc_dec", 0, 1)]), gates_without(model, [("enc_self", 1, 3)])]
    options = dict(beam=3, batch_size=3, max_len_a=1.0, max_len_b=3, variant_batch_size=9)
    calls = []
    monkeypatch.setattr(evaluate, "beam_search", lambda *a, **k: calls.append(1) or beam_search(*a, **k))
    fast = evaluate.translate_variants(model, tokenizer, sources, gates_list, **options)
    assert calls  # the model is supported: the shrinking search ran
    monkeypatch.setattr(evaluate, "beam_search_supports", lambda model: "forced off")
    calls.clear()
    assert evaluate.translate_variants(model, tokenizer, sources, gates_list, **options) == fast and not calls


@pytest.mark.parametrize("setting, value", [("no_repeat_ngram_size", 2), ("bad_words_ids", [[5]]),
                                            ("repetition_penalty", 1.3), ("min_new_tokens", 2)])
def test_a_generation_config_it_does_not_reproduce_is_named(setting, value):
    model = tiny_fsmt()
    model.generation_config = GenerationConfig(**{**model.generation_config.to_dict(), setting: value})
    assert "logits processors" in supports(model)
    with pytest.raises(ValueError, match="logits processors"):
        beam_search(model, source_batch(), [None], beam=2, lenpen=1.0, max_new=4)


# --- FSMT's own beam step (FSMTAdapter.beam_decoding) and the BeamLayer cache ------------------------------------

def fsmt_masking_modes(model):
    """Every mode that runs on FSMT, with the data the ones that need data take."""
    from conftest import fsmt_batch
    from headprune.models.masking import Mean, Resample
    from headprune.scoring.constants import resample_pool
    from test_masking_modes import random_constants

    pool = resample_pool(model, [fsmt_batch(seed=s) for s in (11, 12, 13)], progress=False)
    return {"zero": "zero", "uniform": "uniform", "mean": Mean(random_constants(model)),
            "resample": Resample(pool, seed=1, draw=0)}


@pytest.mark.parametrize("pruned", [None, "some heads", "a whole decoder layer"])
@pytest.mark.parametrize("mode", ["zero", "uniform", "mean", "resample"])
def test_fsmt_beam_step_is_generate_under_every_mode(pruned, mode, monkeypatch):
    """FSMT's beam step (a sentence's beams attend to one copy of its source; self-attention over BeamLayer's
    time-major keys) gives generate()'s translations, masked under each mode, on a pruned model too, one with
    a layer without heads included (its output is the projection's bias; its cache still counts the length)."""
    from headprune.models.families.fsmt import beam_step
    from headprune.models.prune import prune_heads

    model = tiny_fsmt(seed=3)
    masking = fsmt_masking_modes(model)[mode]  # the data come from the full model, as a study computes them
    if pruned == "some heads":
        prune_heads(model, {"dec_self": {0: [1]}, "enc_dec": {1: [0, 2]}, "enc_self": {0: [3]}})
    elif pruned == "a whole decoder layer":
        prune_heads(model, {"dec_self": {0: [0, 1, 2, 3]}, "enc_dec": {1: [0, 1, 2, 3]}})
    steps = []
    original = beam_step
    monkeypatch.setattr("headprune.models.families.fsmt.beam_step",
                        lambda *a, **k: steps.append(1) or original(*a, **k))
    batch = source_batch(sentences=5, seed=4)
    gates_list = [None, gates_without(model, [("dec_self", 0, 2)]), gates_without(model, [("enc_dec", 0, 3)]),
                  gates_without(model, [("enc_self", 1, 1), ("enc_dec", 1, 1)])]
    with masked_as(model, masking):
        best = beam_search(model, batch, gates_list, beam=4, lenpen=1.0, max_new=8)
    assert steps
    assert not any("forward" in vars(attention) for layer in model.model.decoder.layers
                   for attention in (layer.self_attn, layer.encoder_attn))  # the step is taken off again
    for gates, variant in zip(gates_list, best):
        with torch.no_grad(), gated(model, gates, masking=masking):
            out = model.generate(**batch, num_beams=4, early_stopping=True, max_new_tokens=8, max_length=None,
                                 do_sample=False)
        assert stripped(variant) == stripped(out), gates


def test_families_sharing_fsmts_layout_keep_their_own_forward():
    from headprune.models.heads import adapter_for

    for family in ("prenorm", "bart", "marian"):
        model = MODELS[family]()
        with adapter_for(model).beam_decoding(model) as own_step:
            assert own_step is False, family


def test_beam_step_takes_beam_steps_only():
    from headprune.models.beam_cache import SourceSharingCache
    from headprune.models.families.fsmt import beam_step

    model = tiny_fsmt()
    attention = model.model.decoder.layers[0].self_attn
    query = torch.randn(2, 3, 16)  # two queries per row: a whole target, not a step
    with pytest.raises(ValueError, match="beam search's steps only"):
        beam_step(attention, query, query, layer_state=SourceSharingCache.for_beam_search(model))


def test_beam_layer_keeps_what_transformers_layer_keeps():
    """Appending, reordering (beams swapped, rows leaving) and growing past its buffers: BeamLayer's keys and
    values are DynamicLayer's, number for number."""
    from transformers.cache_utils import DynamicLayer
    from headprune.models.beam_cache import BeamLayer

    g = torch.Generator().manual_seed(0)
    mine, reference = BeamLayer(), DynamicLayer()
    rows, heads, head_dim = 12, 3, 4
    for step in range(40):  # the buffers start at one step and double
        keys, values = (torch.randn(rows, heads, 1, head_dim, generator=g) for _ in range(2))
        got, want = mine.update(keys, values), reference.update(keys, values)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
        assert mine.get_seq_length() == reference.get_seq_length() == step + 1
        rows = max(1, rows - int(step % 7 == 6))  # now and then a row leaves
        order = torch.randint(0, mine.keys.shape[0], (rows,), generator=g)
        mine.reorder_cache(order)
        reference.keys, reference.values = reference.keys[order], reference.values[order]
        assert torch.equal(mine.keys, reference.keys) and torch.equal(mine.values, reference.values)
    with pytest.raises(AttributeError, match="update/append and reorder_cache only"):
        mine.keys = reference.keys


def test_the_decoding_benchmark_runs_its_three_paths(capsys):
    """benchmarks/beam_search.py: the three decoding paths, paired, on a random FSMT; the same translations."""
    import importlib.util
    from pathlib import Path

    from headprune.models.beam_cache import SourceSharingCache
    from headprune.models.families.fsmt import FSMTAdapter

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "beam_search.py"
    spec = importlib.util.spec_from_file_location("beam_search_benchmark", path)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    step, layer = FSMTAdapter.beam_decoding, SourceSharingCache.for_beam_search
    assert benchmark.main(["--d-model", "16", "--sentences", "6", "--variants", "2", "--rounds", "1"]) == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in benchmark.PATHS) and "same translations on every path: True" in printed
    assert (FSMTAdapter.beam_decoding, SourceSharingCache.for_beam_search) == (step, layer)  # put back
