"""Every true encoder-decoder of text in transformers' seq2seq registry through the generic adapter (issue #45).

Each model type is a tiny random model (tests/seq2seq_zoo.py: 2 layers per stack, 4 heads), built once. The generic
adapter (``headprune.models.families.seq2seq.Seq2SeqAdapter``, forced even where FSMT's family file serves the type)
must:

1. find the heads of each stack and layer, as many as the config says, and they are the attention modules this
   test finds by its own rules (``reference_attention``: get_encoder()/get_decoder(), the stack's list of as many
   layers as the config says, in each layer the modules of an ``...Attention`` class that own the linear maps, in
   the order the layer registers them: self-attention, then cross-attention);
2. gate: a gate of 0 equals zeroing the head's input features of the output projection this test found (by its own
   hook), in every stack at once; and gating one head of each stack alone changes the logits;
3. run the masking modes zero and mean, uniform or refuse it saying why; refuse streaming (a causal-LM idea);
4. prune: the pruned model equals the gated one, with a layer of each stack left without heads, under the model's
   default attention backend and under eager too for ``EAGER_SAMPLE``; generate() on it equals generate() under
   the gates (greedy);
5. save_pruned then load_pruned_weights gives the same logits;
6. the exported folder loads in plain transformers (AutoModelForSeq2SeqLM) with headprune blocked from import (one
   subprocess for every passing type), with the pruned model's logits and generate() on two input shapes.

tests/test_speech_seq2seq_families.py runs the same checks (``check_family`` with its ``Zoo``) on the speech
registry's encoder-decoders (Whisper, Moonshine, Speech2Text, ...), loaded with AutoModelForSpeechSeq2Seq.

And on m2m_100 (headprune's PreNormTransformer and NLLB's dense layout), bart, mbart and marian the generic adapter
computes what their hand-written family files did before they were deleted (tests/family_reference.py: gated, masked
and pruned logits, importance scores, beam search and generate() on the pruned model).

docs/models.md's "Encoder-decoder families" table holds the outcomes: this test fails when a type it lists as
passing no longer passes, and rewrites the table with HEADPRUNE_WRITE_MODELS_TABLE=1.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import textwrap
import warnings
from pathlib import Path
from typing import Callable
from unittest import mock

import pytest
import torch

from conftest import SWITCHED
from seq2seq_zoo import HEADS, LAYERS, NOT_TEXT, VOCAB, model_types, tiny_config, tiny_model
import family_reference
import registry_checks
from headprune.models import families
from headprune.models.export import save_pruned
from headprune.models.families.seq2seq import Seq2SeqAdapter
from headprune.models.head_constants import HeadConstants
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.masking import Mean, Streaming, Uniform
from headprune.models.prune import load_pruned_weights, prune_heads

BEGIN, END = "<!-- seq2seq-families: begin (tests/test_seq2seq_families.py) -->", "<!-- seq2seq-families: end -->"
OUTCOMES = ("passes", "gating only", "refused", "fails", "not built")
STACKS = ("enc_self", "enc_dec", "dec_self")
# Layer 0 of each stack keeps no head (T5's still computes the position bias every layer reads), layer 1 heads 0 and 3
REMOVE = {stack: {0: list(range(HEADS)), 1: [1, 2]} for stack in STACKS}
OUTPUT_NAMES = ("o", "out_proj", "o_proj")  # what an output projection is called, where one of them is
GATED_CLOSE = 1e-5
CHANGED = 1e-7
# Pruning is checked under eager too where the family's eager and sdpa paths differ in what headprune changes
# (T5's position bias reaches each backend its own way) and on a sample of the BART-style ones
EAGER_SAMPLE = ("t5", "mt5", "umt5", "longt5", "switch_transformers", "bart", "pegasus")


def generic_adapter():
    return mock.patch.object(families, "adapter_for_model", lambda model: Seq2SeqAdapter(model.config.model_type))


def _batches(model) -> list:
    """Two batches of different shapes: (the encoder's inputs, the decoder's ids)."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for rows, length, decoder_length in ((2, 7, 5), (3, 11, 6)):
        ids = torch.randint(3, VOCAB, (rows, length), generator=generator)
        mask = torch.ones_like(ids)
        mask[1, length - 2:] = 0  # right padding of the source
        batches.append(({"input_ids": ids, "attention_mask": mask}, _decoder_ids(rows, decoder_length, generator)))
    return batches


def _decoder_ids(rows, length, generator):
    decoder_ids = torch.randint(3, VOCAB, (rows, length), generator=generator)
    decoder_ids[:, 0] = 0  # the decoder start token
    return decoder_ids


def _logits(model, batch):
    inputs, decoder_ids = batch
    with torch.no_grad():
        return model(**inputs, decoder_input_ids=decoder_ids).logits.float()


def _generate(model, batch):
    with torch.no_grad():
        return model.generate(**batch[0], max_new_tokens=4, do_sample=False, num_beams=1)


@dataclasses.dataclass(frozen=True)
class Zoo:
    """A registry's tiny models, their inputs, the Auto class their users load them with."""
    tiny_model: Callable
    tiny_config: Callable
    batches: Callable
    auto: str


TEXT = Zoo(tiny_model, tiny_config, _batches, "AutoModelForSeq2SeqLM")


def _close(a, b) -> float:
    return float((a - b).abs().max())


def _gates(model, remove):
    gates = full_gates(model)
    for stack, layers in remove.items():
        for layer, heads in layers.items():
            gates[stack][layer, heads] = 0
    return gates


def _gated_logits(model, remove, batch, masking="zero"):
    with gated(model, _gates(model, remove), masking=masking):
        return _logits(model, batch)


# --- The test's own view of where the heads are -------------------------------------------------------------

def _linear_children(module) -> list:
    return [m for m in module.children() if isinstance(m, torch.nn.Linear)]


def reference_attention(model) -> dict[str, list[tuple[torch.nn.Module, torch.nn.Module]]]:
    """{stack: [(attention module, its output projection) per layer]}: the encoder get_encoder() gives, the decoder
    get_decoder() gives; in each, its first ModuleList of ``LAYERS`` layers that hold an ``...Attention``; in a layer,
    the modules of an ``...Attention`` class that own three or more linear maps, in registration order
    (self-attention, then the decoder's cross-attention); in one, the linear map named as an output projection, else
    the last registered."""
    found = {}
    for stacks, module in ((("enc_self",), model.get_encoder()), (("dec_self", "enc_dec"), model.get_decoder())):
        # Speech2Text's convolutions before its layers are a list of as many too: a layer holds an attention
        lists = [m for m in module.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == LAYERS and
                 all(any(type(c).__name__.endswith("Attention") for c in layer.modules()) for layer in m)]
        assert lists, f"the test finds no list of {LAYERS} layers in {type(module).__name__}"
        for stack in stacks:
            found[stack] = []
        for i, layer in enumerate(lists[0]):
            attentions = [m for m in layer.modules() if type(m).__name__.endswith("Attention") and
                          len(_linear_children(m)) >= 3]
            assert len(attentions) == len(stacks), (
                f"{type(module).__name__} layer {i}: {len(attentions)} attention modules, not {len(stacks)}")
            for stack, attention in zip(stacks, attentions):
                named = [getattr(attention, n) for n in OUTPUT_NAMES if isinstance(getattr(attention, n, None),
                                                                                   torch.nn.Linear)]
                found[stack].append((attention, (named or _linear_children(attention))[-1]))
    return found


def _zeroed_by_hand(model, reference, remove, batch):
    def zero(heads):
        def hook(module, args):
            x = args[0].clone()
            head_dim = x.shape[-1] // HEADS
            for h in heads:
                x[..., h * head_dim:(h + 1) * head_dim] = 0
            return (x, *args[1:])
        return hook

    handles = [reference[stack][layer][1].register_forward_pre_hook(zero(heads))
               for stack, layers in remove.items() for layer, heads in layers.items()]
    try:
        return _logits(model, batch)
    finally:
        for handle in handles:
            handle.remove()


# --- One model type -----------------------------------------------------------------------------------------

def check_family(model_type: str, folder: Path, zoo: Zoo = TEXT) -> tuple[str, str]:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = zoo.tiny_model(model_type)
            batches = zoo.batches(model)
            batch = batches[0]
            plain = _logits(model, batch)
        except Exception as error:  # the tiny config does not build or run for this type
            return "not built", registry_checks.one_line(error)
    adapter = adapter_for(model)
    try:
        sites = adapter.sites(model)
    except (ValueError, AttributeError, TypeError) as error:
        return "refused", registry_checks.one_line(error)
    step = "heads"
    try:
        reference = reference_attention(model)
        config = zoo.tiny_config(model_type)
        for stack in STACKS:
            mine = [s for s in sites if s.attn_type == stack]
            assert len(mine) == LAYERS == len(reference[stack]), f"{stack}: {len(mine)} layers"
            for site, (attention, _) in zip(mine, reference[stack]):
                assert site.original_num_heads == HEADS, f"{stack} layer {site.layer}: {site.original_num_heads} heads"
                assert site.attention is attention, (
                    f"{stack} layer {site.layer}: the adapter's heads are {type(site.attention).__name__}'s, not "
                    f"those of the layer's attention ({type(attention).__name__})")
        assert {getattr(config, n, HEADS) for n in ("encoder_attention_heads", "num_heads")} == {HEADS}
        step = "gating"
        for stack in STACKS:  # one head of each stack alone changes the output
            change = _close(_gated_logits(model, {stack: {0: [1]}}, batch), plain)
            assert change > CHANGED, f"a gate of 0 on {stack} layer 0's head 1 changes nothing ({change:.1e})"
        masked = _gated_logits(model, REMOVE, batch)
        by_hand = _zeroed_by_hand(model, reference, REMOVE, batch)
        assert _close(masked, by_hand) < GATED_CLOSE, f"gated != zeroed by hand ({_close(masked, by_hand):.1e})"
        step = "masking modes"
        constants = HeadConstants({(s.attn_type, s.layer): torch.randn(HEADS, s.head_dim) for s in sites}, kind="mean")
        assert torch.isfinite(_gated_logits(model, REMOVE, batch, masking=Mean(constants))).all()
        notes = []
        problem = adapter.query_problem(model, sites)
        if problem is None:
            uniform = _gated_logits(model, REMOVE, batch, masking=Uniform())
            assert torch.isfinite(uniform).all() and _close(uniform, plain) > CHANGED, "uniform masking changes nothing"
        else:
            notes.append(f"uniform masking: {problem}")
        try:  # streaming heads are a causal-LM idea: refused, saying why
            _gated_logits(model, REMOVE, batch, masking=Streaming(1, 3))
            raise AssertionError("streaming masking is not refused")
        except ValueError as refusal:
            assert "encoder-decoder" in str(refusal), refusal
        step = "pruning"
        problem = adapter.pruning_problem(model)
        if problem is not None:
            return "gating only", "; ".join([f"pruning refused: {problem}", *notes])
        default = model.config._attn_implementation
        backends = (["eager"] if model_type in EAGER_SAMPLE and default != "eager" else []) + [default]
        step = "generate"
        with gated(model, _gates(model, REMOVE)):  # before the model is pruned (in place, below)
            expected = _generate(model, batch)
        step = "pruning"
        for backend in backends:
            model.set_attn_implementation(backend)
            gated_logits = _gated_logits(model, REMOVE, batch)
            # the last backend prunes the model itself: nothing after needs it whole
            pruned = prune_heads(model if backend == backends[-1] else copy.deepcopy(model), REMOVE)
            gap = _close(_logits(pruned, batch), gated_logits)
            assert gap < GATED_CLOSE, f"{backend}: pruned != gated ({gap:.1e})"
        step = "generate"
        got = _generate(pruned, batch)
        assert torch.equal(expected, got), "generate() differs"
        step = "save and reload"
        save_pruned(pruned, None, folder)
        reloaded = load_pruned_weights(type(pruned), folder)
        gap = _close(_logits(reloaded, batch), gated_logits)
        assert gap < GATED_CLOSE, f"reloaded != pruned ({gap:.1e})"
        # what the export must give on each input shape: the pruned model's logits and generate()
        logits = [gated_logits] + [_logits(pruned, b) for b in batches[1:]]
        generated = [got] + [_generate(pruned, b) for b in batches[1:]]
        torch.save({"batches": batches, "logits": logits, "generated": generated, "auto": zoo.auto},
                   folder / "expected.pt")
    except Exception as error:
        return "fails", f"{step}: {registry_checks.one_line(error)}"
    return "passes", "; ".join(notes)



EXPORT_CHECK = textwrap.dedent("""
    import sys, torch, warnings
    warnings.simplefilter("ignore")
    sys.modules["headprune"] = None  # headprune blocked from import: only the folder's own files run
    import transformers
    for folder in sys.argv[1:]:
        try:
            expected = torch.load(folder + "/expected.pt")
            # the task's Auto class (AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq), as its users load it
            model = getattr(transformers, expected["auto"]).from_pretrained(folder, trust_remote_code=True).eval()
            verdict = "ok"
            for (inputs, decoder_ids), want, generated in zip(expected["batches"], expected["logits"],
                                                              expected["generated"]):
                shape = "x".join(map(str, next(iter(inputs.values())).shape))
                with torch.no_grad():
                    logits = model(**inputs, decoder_input_ids=decoder_ids).logits.float()
                    tokens = model.generate(**inputs, max_new_tokens=4, do_sample=False, num_beams=1)
                gap = float((logits - want).abs().max())
                # float32's rounding (tests/tolerances.py's bound written out: headprune and the tests are blocked)
                bound = 2 * 512 * 2.0 ** -24 * max(1.0, float(want.abs().max()))
                if gap > bound:
                    verdict = f"logits differ by {gap:.1e} on {shape}"
                elif not torch.equal(tokens, generated):
                    verdict = f"generate() differs on {shape}"
                if verdict != "ok":
                    break
            if verdict == "ok" and not type(model).__name__.startswith("Pruned"):
                verdict = f"loaded as {type(model).__name__}, not through the folder's modeling file"
            print("EXPORT", folder, verdict, flush=True)
        except Exception as error:
            print("EXPORT", folder, f"{type(error).__name__}: {error}".splitlines()[0][:150], flush=True)
""")


def family_table(tmp_path) -> dict[str, tuple[str, str]]:
    return registry_checks.family_table(model_types(), check_family, generic_adapter, EXPORT_CHECK, tmp_path)


def render(results: dict[str, tuple[str, str]]) -> str:
    counts = {o: sum(1 for v, _ in results.values() if v == o) for o in OUTCOMES}
    left_out = "; ".join(f"{t}: {why}" for t, why in NOT_TEXT.items())
    intro = (f"{len(results)} model types of transformers' seq2seq registry (MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_"
             "NAMES) whose default config is an encoder-decoder (the decoder-only audio LMs of that registry are "
             f"not), through the generic adapter (forced even where a family file serves the type); left out: "
             f"{left_out}. " + ", ".join(f"{n} {o}" for o, n in counts.items()) + ".")
    lines = [BEGIN, "", *textwrap.wrap(intro, 115), "", "| model type | outcome | why / what is refused |",
             "|---|---|---|"]
    rows = [f"| {t} | {o} | {d.replace('|', '/')} |" for t, (o, d) in sorted(results.items())]
    return "\n".join(lines + rows + ["", END])


def documented() -> dict[str, str]:
    return registry_checks.documented(BEGIN, END)


def write_table(results) -> None:
    registry_checks.write_block(BEGIN, END, render(results))


def test_every_encoder_decoder_of_the_registry(tmp_path):
    results = family_table(tmp_path)
    if os.environ.get("HEADPRUNE_WRITE_MODELS_TABLE"):
        write_table(results)
    lost = {t: results.get(t, ("gone", "")) for t, outcome in documented().items()
            if outcome == "passes" and results.get(t, ("",))[0] != "passes"}
    assert not lost, f"types that passed no longer pass: {lost}"
    passing = sorted(t for t, (o, _) in results.items() if o == "passes")
    assert len(passing) >= 18, f"only {len(passing)} of {len(results)} pass: {results}"
    for must in ("t5", "mt5", "umt5", "bart", "marian", "pegasus"):
        assert results[must][0] == "passes", (must, results[must])


# --- The generic adapter against the hand-written family files it replaced ------------------------------------

@pytest.mark.skipif(SWITCHED, reason="the reference was written on the CPU in float32")
@pytest.mark.parametrize("family", family_reference.SEQ2SEQ)
def test_generic_adapter_keeps_the_family_files_outputs(family):
    family_reference.assert_keeps_reference(family, "Seq2SeqAdapter")
