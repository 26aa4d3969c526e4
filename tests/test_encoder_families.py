"""Every encoder type of transformers' sequence-classification registry through the generic encoder adapter (#45).

Each type is a tiny random classifier (tests/encoder_zoo.py: 2 layers of 4 heads), built once and reused by every
check. The generic adapter (``headprune.models.families.encoder.EncoderAdapter``, forced even where its ``match``
would refuse the type) must:

1. find every layer's heads, as many as the config says (``attention_heads``: ConvBERT's counts its convolution heads
   too), and they must be the attention modules this test finds by its own rules (``reference_layers``), not the
   adapter's;
2. gate: a gate of 0 equals zeroing the head's input features of the output projection this test found (by its own
   hook), and gating any one head changes the logits;
3. run masking modes zero, mean and uniform, or refuse them saying why; refuse streaming (a causal-LM idea);
4. prune: the pruned model equals the gated one, with one layer left without heads;
5. save_pruned then load_pruned_weights gives the same logits;
6. the exported folder loads in plain transformers, as AutoModelForSequenceClassification (the task's Auto class),
   with headprune blocked from import (one subprocess for all passing types), with the pruned model's logits on two
   input shapes.

The table of outcomes is docs/models.md's "Encoder families" table: this test fails when a type it lists as passing
no longer passes, and rewrites it with HEADPRUNE_WRITE_MODELS_TABLE=1. A second test holds the generic adapter to
what the hand-written families it replaced (bert, roberta, electra, distilbert, deberta_v2) computed before they were
deleted (tests/family_reference.py: gated, masked and pruned logits, importance scores).
"""
from __future__ import annotations

import contextlib
import inspect
import os
import textwrap
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch

from conftest import SWITCHED
from encoder_zoo import LAYERS, NOT_BUILT, VOCAB, class_name, encoder_types, tiny_model
import family_reference
import registry_checks
from headprune.models import families
from headprune.models.export import save_pruned
from headprune.models.families.encoder import EncoderAdapter
from headprune.models.head_constants import HeadConstants
from headprune.models.heads import adapter_for, full_gates, gated
from headprune.models.masking import Mean, Streaming, Uniform
from headprune.models.prune import load_pruned_weights, prune_heads

BEGIN, END = "<!-- encoder-families: begin (tests/test_encoder_families.py) -->", "<!-- encoder-families: end -->"
OUTCOMES = ("passes", "gating only", "refused", "fails", "not an encoder", "not built")
# ConvBERT's config counts its convolution heads too: head_ratio heads of it per attention head
HEAD_RATIOS = ("head_ratio",)
OUTPUT_NAMES = ("o_proj", "out_proj", "dense", "out_lin", "o", "Wo")  # what an output projection is called
GATED_CLOSE = 1e-5
# a gated head that moves the logits by less than this fraction of their size changed nothing (a random tiny model's
# head moves them by ~1e-2 of it; MobileBERT's logits are ~1e-4 in all)
CHANGED = 1e-5


@contextlib.contextmanager
def generic_adapter():
    with mock.patch.object(families, "adapter_for_model", lambda model: EncoderAdapter()):
        yield


def _batch():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (2, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # right padding
    return ids, mask


def _second_batch():
    """Another input shape for the export check: 3 rows of 14 tokens, the last right-padded."""
    ids = torch.randint(3, VOCAB, (3, 14), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[2, 10:] = 0
    return ids, mask


def _logits(model, ids, mask):
    # Perceiver's text classifier takes its tokens as ``inputs``
    name = "input_ids" if "input_ids" in inspect.signature(model.forward).parameters else "inputs"
    with torch.no_grad():
        return model(**{name: ids}, attention_mask=mask).logits.float()


def _close(a, b) -> float:
    return float((a - b).abs().max())


# --- The test's own view of where the heads are -------------------------------------------------------------

def reference_layers(model) -> list[tuple[torch.nn.Module, torch.nn.Module, int]]:
    """(attention module, its output projection, head_dim) of every layer, by this test's rules: the base model's
    first ModuleList of the text config's layer count whose entries hold a module whose class is an attention (one
    whose attention reads the text config before a vision tower's); in a
    layer, the first such module with no attention module inside (BERT's ``BertSelfAttention``, not the
    ``BertAttention`` around it); its output projection is a linear map named as one (``OUTPUT_NAMES``) back to
    the hidden size, inside that module or else inside the attention module around it; head_dim is its input width
    over the config's heads."""
    config = model.config.get_text_config()
    count = next(getattr(config, k) for k in ("num_hidden_layers", "n_layers") if getattr(config, k, None))
    hidden = getattr(config, "hidden_size", None) or config.emb_dim
    heads = getattr(config, "num_attention_heads", None) or config.n_heads

    def attentions(module):
        return [m for m in module.modules() if type(m).__name__.endswith("Attention")]

    lists = [m for m in model.base_model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == count
             and all(attentions(layer) for layer in m)]
    # a vision-language encoder's text layers: their attention reads the text config, not a vision tower's
    lists.sort(key=lambda m: getattr(attentions(m[0])[-1], "config", config) is not config)
    groups = getattr(config, "num_hidden_groups", None)
    if not lists and groups:  # ALBERT: layer i runs the one layer of group i * groups // count
        shared = next(m for m in model.base_model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == groups)
        lists = [[next(iter(shared[i * groups // count].children()))[0] for i in range(count)]]
    if not lists:
        raise AssertionError(f"the test finds no layer list in {type(model.base_model).__name__}")
    found = []
    for i, layer in enumerate(lists[0]):
        inner = next(m for m in attentions(layer) if attentions(m) == [m])
        around = [m for m in attentions(layer) if m is not inner and any(c is inner for c in m.modules())]
        output = None
        for scope in [inner, *reversed(around)]:
            # a linear map: nn.Linear, or I-BERT's QuantLinear (a 2-D weight of output x input features)
            output = next((m for n, m in scope.named_modules() if getattr(getattr(m, "weight", None), "dim", int)() == 2
                           and n.rpartition(".")[2] in OUTPUT_NAMES and m.weight.shape[0] == hidden), None)
            if output is not None:
                break
        if output is None:
            raise AssertionError(f"the test finds no output projection of layer {i}'s {type(inner).__name__}")
        found.append((inner, output, output.weight.shape[1] // heads))
    return found


def attention_heads(model) -> int:
    """The attention heads per layer the text config says (``HEAD_RATIOS``: the share of them that are attention)."""
    config = model.config.get_text_config()
    heads = getattr(config, "num_attention_heads", None) or config.n_heads
    return heads // next((getattr(config, r) for r in HEAD_RATIOS if getattr(config, r, None)), 1)


def _zeroed_by_hand(model, reference, remove, ids, mask):
    """Logits with the heads ``remove`` names zeroed at the input of the test's own output projections; a projection
    that several layers run (ALBERT's) zeroes on its k-th call what layer k's heads are."""
    def zero(layers):
        calls = [0]

        def hook(module, args):
            layer, calls[0] = layers[calls[0] % len(layers)], calls[0] + 1
            x = args[0].clone()
            for h in remove.get(layer, []):
                x[..., h * reference[layer][2]:(h + 1) * reference[layer][2]] = 0
            return (x, *args[1:])
        return hook

    runs: dict[int, list[int]] = {}
    for layer, (_, output, _) in enumerate(reference):
        runs.setdefault(id(output), []).append(layer)
    handles = [reference[layers[0]][1].register_forward_pre_hook(zero(layers)) for layers in runs.values()]
    try:
        return _logits(model, ids, mask)
    finally:
        for handle in handles:
            handle.remove()


def _gates(model, remove):
    gates = full_gates(model)
    for layer, heads in remove.items():
        gates["enc_self"][layer, heads] = 0
    return gates


def _gated_logits(model, remove, ids, mask, masking="zero"):
    with gated(model, _gates(model, remove), masking=masking):
        return _logits(model, ids, mask)


def _declares_causal(model) -> bool:
    return any(getattr(m, "is_causal", None) is True for m in model.modules())


# --- One model type --------------------------------------------------------------------------------------------

def check_family(model_type: str, folder: Path) -> tuple[str, str]:
    """(outcome, detail): one of ``OUTCOMES``."""
    torch.manual_seed(0)
    if model_type in NOT_BUILT:
        return "not built", NOT_BUILT[model_type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = tiny_model(model_type)
        except Exception as error:
            return "not built", registry_checks.one_line(error)
    if _declares_causal(model):  # its config says bidirectional, its attention modules say causal (GPT-NeoX)
        return "not an encoder", "its attention modules declare is_causal"
    ids, mask = _batch()
    try:
        plain = _logits(model, ids, mask)
    except Exception as error:
        return "not built", f"its tiny model does not run: {registry_checks.one_line(error)}"
    adapter = EncoderAdapter(model_type)
    try:
        sites = adapter.sites(model)
    except (ValueError, AttributeError, TypeError) as error:
        return "refused", registry_checks.one_line(error)
    step = "heads"
    try:
        reference = reference_layers(model)
        heads = attention_heads(model)
        # layer 1 keeps no head; under 2 key/value heads, layer 0 reads them unevenly
        remove = {0: [1], 1: list(range(heads))}
        assert len(sites) == LAYERS and all(s.original_num_heads == heads for s in sites), (
            f"head count: {len(sites)} sites of {[s.original_num_heads for s in sites]} heads")
        for site, (attention, _, _) in zip(sites, reference):
            assert site.attention is attention, (f"layer {site.layer}: the adapter's heads are "
                                                 f"{type(site.attention).__name__}'s, not {type(attention).__name__}'s")
        step = "gating"
        for layer, gone in remove.items():
            change = _close(_gated_logits(model, {layer: gone[:1]}, ids, mask), plain) / float(plain.abs().max())
            assert change > CHANGED, f"a gate of 0 on layer {layer}'s head {gone[0]} changes nothing ({change:.1e})"
        masked = _gated_logits(model, remove, ids, mask)
        by_hand = _zeroed_by_hand(model, reference, remove, ids, mask)
        assert _close(masked, by_hand) < GATED_CLOSE, f"gated != zeroed by hand ({_close(masked, by_hand):.1e})"
        step = "masking modes"
        constants = HeadConstants({("enc_self", s.layer): torch.randn(heads, s.head_dim) for s in sites}, kind="mean")
        assert torch.isfinite(_gated_logits(model, remove, ids, mask, masking=Mean(constants))).all()
        notes = []
        problem = adapter.query_problem(model, sites)
        if problem is None:
            assert torch.isfinite(_gated_logits(model, remove, ids, mask, masking=Uniform())).all()
        else:
            notes.append(f"uniform masking: {problem}")
        try:  # streaming heads are a causal-LM idea: refused, with the adapter's reason
            _gated_logits(model, remove, ids, mask, masking=Streaming(1, 3))
        except ValueError as error:
            assert "causal-LM idea" in str(error), f"streaming masking refused for another reason: {error}"
        else:
            raise AssertionError("streaming masking ran on an encoder")
        step = "pruning"
        problem = adapter.pruning_problem(model)
        if problem is not None:
            return "gating only", "; ".join([f"pruning refused: {problem}", *notes])
        pruned = prune_heads(model, {"enc_self": remove})
        gap = _close(_logits(pruned, ids, mask), masked)
        assert gap < GATED_CLOSE, f"pruned != gated ({gap:.1e})"
        step = "save and reload"
        save_pruned(pruned, None, folder)
        reloaded = load_pruned_weights(type(pruned), folder)
        if hasattr(reloaded, "set_default_language"):
            reloaded.set_default_language(reloaded.config.languages[0])
        gap = _close(_logits(reloaded, ids, mask), masked)
        assert gap < GATED_CLOSE, f"reloaded != pruned ({gap:.1e})"
        second = _second_batch()  # and the pruned model's logits on another input shape
        torch.save({"batches": [(ids, mask), second], "logits": [masked, _logits(pruned, *second)]},
                   folder / "expected.pt")
    except Exception as error:
        return "fails", f"{step}: {registry_checks.one_line(error)}"
    return "passes", "; ".join(notes)



EXPORT_CHECK = textwrap.dedent("""
    import inspect, sys, torch, warnings
    warnings.simplefilter("ignore")
    sys.modules["headprune"] = None  # headprune blocked from import: only the folder's own files run
    import transformers
    for folder in sys.argv[1:]:
        try:
            expected = torch.load(folder + "/expected.pt")
            model = transformers.AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
            model = model.eval()
            if hasattr(model, "set_default_language"):
                model.set_default_language(model.config.languages[0])
            name = "input_ids" if "input_ids" in inspect.signature(model.forward).parameters else "inputs"
            verdict = "ok"
            for (ids, mask), want in zip(expected["batches"], expected["logits"]):
                with torch.no_grad():
                    logits = model(**{name: ids}, attention_mask=mask).logits.float()
                gap = float((logits - want).abs().max())
                # float32's rounding (tests/tolerances.py's bound written out: headprune and the tests are blocked)
                bound = 2 * 512 * 2.0 ** -24 * max(1.0, float(want.abs().max()))
                if gap > bound and verdict == "ok":
                    verdict = f"logits differ by {gap:.1e} on {tuple(ids.shape)}"
            if verdict == "ok" and not type(model).__name__.startswith("Pruned"):
                verdict = f"loaded as {type(model).__name__}, not through the folder's modeling file"
            print("EXPORT", folder, verdict, flush=True)
        except Exception as error:
            print("EXPORT", folder, f"{type(error).__name__}: {error}".splitlines()[0][:150], flush=True)
""")


def family_table(tmp_path) -> dict[str, tuple[str, str]]:
    return registry_checks.family_table(encoder_types(), check_family, generic_adapter, EXPORT_CHECK, tmp_path)


def render(results: dict[str, tuple[str, str]]) -> str:
    counts = {o: sum(1 for v, _ in results.values() if v == o) for o in OUTCOMES}
    summary = f"{len(results)} model types; " + ", ".join(f"{n} {o}" for o, n in counts.items()) + "."
    lines = [BEGIN, "", summary, "", "| model type | outcome | class | why / what is refused |", "|---|---|---|---|"]
    rows = [f"| {t} | {o} | {class_name(t)} | {d.replace('|', '/')} |" for t, (o, d) in sorted(results.items())]
    return "\n".join(lines + rows + ["", END])


def documented() -> dict[str, str]:
    return registry_checks.documented(BEGIN, END)


def write_table(results) -> None:
    registry_checks.write_block(BEGIN, END, render(results))


def test_every_encoder_family_of_the_registry(tmp_path):
    results = family_table(tmp_path)
    if os.environ.get("HEADPRUNE_WRITE_MODELS_TABLE"):
        write_table(results)
    lost = {t: results.get(t, ("gone", "")) for t, outcome in documented().items()
            if outcome == "passes" and results.get(t, ("",))[0] != "passes"}
    assert not lost, f"types that passed no longer pass: {lost}"
    passing = sorted(t for t, (o, _) in results.items() if o == "passes")
    assert len(passing) >= 40, f"only {len(passing)} encoder types pass: {passing}"
    for must in ("bert", "roberta", "electra", "distilbert", "deberta-v2", "modernbert", "camembert", "xlm-roberta-xl"):
        assert results[must][0] == "passes", (must, results[must])


# --- The generic adapter against the hand-written families it replaced ----------------------------------------

@pytest.mark.skipif(SWITCHED, reason="the reference was written on the CPU in float32")
@pytest.mark.parametrize("family", family_reference.ENCODERS)
def test_generic_encoder_adapter_keeps_the_hand_written_families_outputs(family):
    """bert, roberta, xlm-roberta, electra, distilbert, deberta-v3 and deberta-v2 (its own position projections): the
    generic adapter's gated, masked and pruned logits and scores are the deleted hand-written adapters'."""
    family_reference.assert_keeps_reference(family, "EncoderAdapter")


def test_a_refusal_names_the_type_its_class_and_what_it_was_read_as():
    """FNet mixes tokens by Fourier transforms: no attention heads, and the refusal says it was read as an encoder."""
    with pytest.raises(ValueError, match=r"no head adapter for model type 'fnet' \(FNetForSequenceClassification\), "
                                         r"read as an encoder: no list of 2 encoder layers"):
        adapter_for(tiny_model("fnet"))


def test_a_pruned_big_bird_runs_after_switching_to_full_attention(tmp_path):
    """BigBird's default attention is block-sparse; its model's forward rebuilds every layer's attention as full
    attention on input too short for it (``set_attention_type``), from the config, with every head. Loaded by
    load_model (eager), heads removed in each layer, on 2 x 12 tokens: the pruned model gives the logits of the whole
    one with those heads' input features of the output projections this test finds (``reference_layers``) zeroed,
    its rebuilt attentions keep the pruned heads, and the export loads back with them (in headprune, and as
    AutoModelForSequenceClassification with headprune blocked)."""
    from transformers import BigBirdConfig, BigBirdForSequenceClassification

    import headprune as hp

    config = BigBirdConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=37, max_position_embeddings=64, num_labels=2, pad_token_id=0,
                           bos_token_id=1, eos_token_id=2, sep_token_id=3)
    assert config.attention_type == "block_sparse"
    torch.manual_seed(0)
    BigBirdForSequenceClassification(config).eval().save_pretrained(tmp_path / "big_bird")
    model, _ = hp.load_model(tmp_path / "big_bird", kind="classification")
    ids = torch.randint(4, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    remove = {0: [1], 1: [0, 3]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BigBird says it switches to full attention
        want = _zeroed_by_hand(model, reference_layers(model), remove, ids, mask)
        pruned = hp.remove_heads(model, [("enc_self", layer, h) for layer, heads in remove.items() for h in heads])
        got = _logits(pruned, ids, mask)
        rebuilt = [layer.attention.self for layer in pruned.bert.encoder.layer]
        assert [type(a).__name__ for a in rebuilt] == ["BigBirdSelfAttention"] * 2  # the switch happened
        assert [(a.num_attention_heads, a.all_head_size) for a in rebuilt] == [(3, 24), (2, 16)]
        assert _close(got, want) < GATED_CLOSE, f"pruned != gated ({_close(got, want):.1e})"
        folder = hp.save_pruned(pruned, None, tmp_path / "pruned")
        back, _ = hp.load_model(folder, kind="classification")
        assert _close(_logits(back, ids, mask), want) < GATED_CLOSE
    # and as plain transformers loads it, headprune blocked: the exported headprune_encoder.py keeps them too
    torch.save({"batches": [(ids, mask)], "logits": [want]}, folder / "expected.pt")
    assert registry_checks.export_verdicts(EXPORT_CHECK, [folder], tmp_path) == {folder: "ok"}
