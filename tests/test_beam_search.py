"""headprune.experiments.beam_search: finished sentences leave the batch, and the translations are
generate()'s, token for token, for every translation family, gate variant, beam size and length penalty."""
import pytest
import torch
from transformers import GenerationConfig

from conftest import EOS, PAD, DigitTokenizer, tiny_fsmt, tiny_m2m100
from headprune.experiments import evaluate
from headprune.experiments.beam_search import beam_search, supports
from headprune.experiments.runs import gates_without
from headprune.models.heads import gated
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
        best = beam_search(model, batch, gates_list, beam=3, lenpen=1.0, max_new=6, masking=masking)
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
