"""Every decoder-only LM type of transformers' registries through the generic decoder adapter (issues #38, #44).

Two tables, each model type a tiny random model (tests/decoder_zoo.py: generic, with the quirks of real checkpoints;
vision and audio towers as deep and as wide as the text model): transformers' causal-LM registry, and the multimodal
and audio wrappers of a decoder-only LM (LLaVA, Qwen2.5-VL, Mistral 3, Gemma 3, Qwen2-Audio, ...). Both run on
text-only input (``input_ids``, ``attention_mask``).
The generic adapter (``headprune.models.families.decoder.DecoderAdapter``, forced even where an older per-family
adapter exists) must:

1. find every layer's heads, as many as the config says, and they must be the heads of the language model: its
   sites are exactly the attention modules of the layers of the model's language model, found here by the test's
   own rules (``reference_layers``: transformers' ``get_decoder()`` and the config's pipeline plan), not the
   adapter's;
2. gate: a gate of 0 equals zeroing the head's input features of the output projection this test found (by its own
   hook); and gating any one head changes the logits (a gate on a module a text-only forward never runs, a vision
   tower's, changes nothing);
3. run every masking mode: zero, mean (a constant per head), uniform and streaming (or refuse them, saying why);
4. prune: the pruned model equals the gated one under the model's default attention (sdpa where it has it) and
   under eager where that is another code path (``EAGER_SAMPLE``), with a layer left without heads, a whole
   key/value group removed and a layer whose kv groups become uneven;
5. generate() on the pruned model equals generate() under the gates (greedy);
6. save_pruned then load_pruned_weights gives the same logits;
7. the exported folder loads in plain transformers with headprune blocked from import (one subprocess for all
   passing causal-LM types and the wrappers of ``EXPORT_WRAPPERS``) through the task's Auto class (``task_auto``:
   AutoModelForCausalLM, a wrapper's AutoModelForImageTextToText or AutoModelForMultimodalLM), with the pruned
   model's logits and generate() on two input shapes.

The tables of outcomes are docs/models.md's "Decoder families" tables: this test fails when a type a table lists
as passing no longer passes, and rewrites the tables with HEADPRUNE_WRITE_MODELS_TABLE=1.
"""
from __future__ import annotations

import contextlib
import copy
import os
import re
import textwrap
import warnings
from pathlib import Path
from unittest import mock

import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from conftest import threads_for_tests
from decoder_zoo import (HEADS, LAYERS, NOT_BUILT, VOCAB, TooLarge, class_name, meta_model, model_types, same_class,
                         tiny_model, wrapper_types)
import registry_checks
from headprune.models import families
from headprune.models.export import save_pruned
from headprune.models.families.decoder import DecoderAdapter, layout_problem
from headprune.models.head_constants import HeadConstants
from headprune.models.heads import full_gates, gated
from headprune.models.masking import Mean, Streaming, Uniform
from headprune.models.prune import load_pruned_weights, prune_heads

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "models.md"
TABLES = {  # table: its markers in docs/models.md
    "causal": ("<!-- decoder-families: begin (tests/test_decoder_families.py) -->", "<!-- decoder-families: end -->"),
    "wrappers": ("<!-- decoder-wrappers: begin (tests/test_decoder_families.py) -->", "<!-- decoder-wrappers: end -->"),
}
OUTCOMES = ("passes", "gating only", "refused", "fails", "not decoder-only", "not built")
# Removed heads: layer 0 keeps heads 2, 4, 5 (kv head 0 read by one query head, kv head 1 by two: uneven),
# layer 1 keeps none, layer 2 loses kv group 0 (heads 0-2) whole.
REMOVE = {0: [0, 1, 3], 1: [0, 1, 2, 3, 4, 5], 2: [0, 1, 2]}
OUTPUT_NAMES = ("o_proj", "out_proj", "dense", "c_proj", "wo", "Wo", "o")  # what the output projection is called
GATED_CLOSE = 1e-5  # gated vs zeroed by hand
CHANGED = 1e-7  # a gated head below this changed nothing (a random tiny model's head moves logits by ~1e-3)
# Pruning is checked under the model's default backend (sdpa where the family has it: the one the reload and export
# checks load), and under eager too where that is another code path of the family's: where its attention has its
# own eager and sdpa code (Falcon, GPT-BigCode, ...), and on a sample of the families whose attention calls
# transformers' attention interface (there only the backend function differs, the same for every family).
EAGER_SAMPLE = ("llama", "qwen3", "gemma2", "gpt_oss", "gpt2", "phi3", "gemma3")
# The export check (a second process loading each folder as plain transformers) runs for every passing type of the
# causal table and for these wrappers (the rest load through the same remote file and the same code path)
EXPORT_WRAPPERS = ("gemma3", "llava", "mistral3", "qwen2_5_vl", "qwen3_vl", "llama4", "qwen2_audio")


@contextlib.contextmanager
def generic_adapter():
    """Every model through DecoderAdapter (also those an older per-family adapter serves)."""
    with mock.patch.object(families, "adapter_for_model", lambda model: DecoderAdapter()):
        yield


def _batch():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (2, 9), generator=generator)  # as tests/data/family_adapters_reference.pt's
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    return ids, mask


def _second_batch():
    """Another input shape for the export check: 3 rows of 13 tokens, the last left-padded."""
    ids = torch.randint(3, VOCAB, (3, 13), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[2, :4] = 0
    return ids, mask


# The Auto classes a wrapper's users load it with, by the table of transformers' that lists its class, first first
# (AudioFlamingo 3: only the seq2seq tables list it)
WRAPPER_AUTOS = (("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "AutoModelForImageTextToText"),
                 ("MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", "AutoModelForMultimodalLM"),
                 ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM"),
                 ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "AutoModelForSpeechSeq2Seq"))


def task_auto(model, wrapper: bool) -> str:
    """The Auto class the model's users call: AutoModelForCausalLM; a wrapper's, ``WRAPPER_AUTOS``'."""
    from transformers.models.auto import modeling_auto

    if not wrapper:
        return "AutoModelForCausalLM"
    return next(auto for table, auto in WRAPPER_AUTOS
                if getattr(modeling_auto, table).get(model.config.model_type) == type(model).__name__)


def _logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


def _close(a, b) -> float:
    return float((a - b).abs().max())


# --- The test's own view of where the language model's heads are ----------------------------------------------

def language_model(model):
    """The module running the text stack: ``get_decoder()``, asked until it returns the module itself (a wrapper's
    gives its text model, e.g. Gemma3TextModel)."""
    module = model
    while True:
        try:
            inner = module.get_decoder()
        except (AttributeError, NotImplementedError, ValueError):
            return module
        # a model of transformers (ModernBERT's decoder names its LM head ``decoder``)
        if not isinstance(inner, transformers.PreTrainedModel) or inner is module:
            return module
        module = inner


def reference_layers(model) -> list[tuple[torch.nn.Module, torch.nn.Module, int]]:
    """(attention module, its output projection, head_dim) of every layer of the language model, by this test's
    rules: the layer list the language model's pipeline plan names (else its ModuleList of num_hidden_layers
    entries); in a layer, its first child whose class is an attention (``...Attention``); in that, the linear map
    back to the hidden size named as an output (else the last registered: transformers registers the output
    projection after the query/key/value ones); head_dim is its input width over the heads."""
    lm = language_model(model)
    config = model.config.get_text_config(decoder=True)
    count = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
    plan = getattr(getattr(lm, "config", None), "base_model_pp_plan", None) or {}
    named = [getattr(lm, name, None) for name in plan]
    lists = [m for m in named if isinstance(m, torch.nn.ModuleList)] or [
        m for _, m in lm.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == count]
    if not lists:
        raise AssertionError(f"the test finds no layer list in {type(lm).__name__}")
    hidden, heads = config.hidden_size, getattr(config, "num_attention_heads", None) or config.n_head
    found = []
    for i, layer in enumerate(lists[0]):
        # its first module whose class is an attention (a child, or nested as DBRX's norm_attn_norm.attn)
        attention = next((m for m in layer.modules() if type(m).__name__.endswith("Attention")), None)
        if attention is None:
            raise AssertionError(f"the test finds no attention module in layer {i} ({type(layer).__name__})")
        outputs = [(name, m) for name, m in attention.named_modules() if _widths(m) and _widths(m)[1] == hidden]
        outputs = [(n, m) for n, m in outputs if n.rpartition(".")[2] in OUTPUT_NAMES] or outputs
        if not outputs:
            raise AssertionError(f"the test finds no output projection in {type(attention).__name__}")
        found.append((attention, outputs[-1][1], _widths(outputs[-1][1])[0] // heads))
    return found


def _widths(module) -> tuple[int, int] | None:
    """(input, output) features of a linear map: nn.Linear, or GPT-2's Conv1D (weight stored as input x output)."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if type(module).__name__ == "Conv1D":
        return module.weight.shape[0], module.weight.shape[1]
    return None


def _zeroed_by_hand(model, reference, remove: dict[int, list[int]], ids, mask):
    """Logits with the heads ``remove`` names zeroed at the input of the test's own output projections."""
    def zero(heads, head_dim):
        def hook(module, args):
            x = args[0].clone()
            for h in heads:
                x[..., h * head_dim:(h + 1) * head_dim] = 0
            return (x, *args[1:])
        return hook

    handles = [reference[layer][1].register_forward_pre_hook(zero(heads, reference[layer][2]))
               for layer, heads in remove.items()]
    try:
        return _logits(model, ids, mask)
    finally:
        for handle in handles:
            handle.remove()


def _gates(model, remove: dict[int, list[int]]):
    """Every head on but those ``remove`` names ({layer: heads})."""
    gates = full_gates(model)
    for layer, heads in remove.items():
        gates["dec_self"][layer, heads] = 0
    return gates


def _gated_logits(model, remove: dict[int, list[int]], ids, mask, masking="zero"):
    with gated(model, _gates(model, remove), masking=masking):
        return _logits(model, ids, mask)


# --- One model type --------------------------------------------------------------------------------------------

def check_family(model_type: str, folder: Path, wrapper: bool = False) -> tuple[str, str]:
    """(outcome, detail): "passes", "gating only" (pruning refused), "refused", "fails", "not decoder-only" or
    "not built"."""
    torch.manual_seed(0)
    if model_type in NOT_BUILT:
        return "not built", NOT_BUILT[model_type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            default = CONFIG_MAPPING[model_type]()
            if default.is_encoder_decoder or default.get_text_config(decoder=True).is_encoder_decoder:
                return "not decoder-only", "an encoder-decoder (its decoder is served as one, if at all)"
            model = tiny_model(model_type, wrapper)
        except TooLarge as error:  # what the adapter makes of its layout, on the meta device
            problem = layout_problem(meta_model(model_type, wrapper))
            return ("refused", problem) if problem else ("not built", registry_checks.one_line(error))
        except Exception as error:  # the builder could not make this type at tiny size
            return "not built", registry_checks.one_line(error)
    ids, mask = _batch()
    try:
        plain = _logits(model, ids, mask)
    except Exception as error:  # the builder's tiny config does not run for this type
        return "not built", f"its tiny model does not run: {registry_checks.one_line(error)}"
    adapter = DecoderAdapter()
    try:
        sites = adapter.sites(model)
    except (ValueError, AttributeError, TypeError) as error:
        return "refused", registry_checks.one_line(error)
    step = "heads"
    try:
        reference = reference_layers(model)
        assert len(sites) == LAYERS and all(s.original_num_heads == HEADS for s in sites), (
            f"head count: {len(sites)} sites of {[s.original_num_heads for s in sites]} heads")
        assert len(reference) == len(sites), f"{len(sites)} sites for {len(reference)} layers of the language model"
        for site, (attention, _, _) in zip(sites, reference):  # the same modules, not look-alikes (a tower's)
            assert site.attention is attention, (
                f"layer {site.layer}: the adapter's heads are {type(site.attention).__name__}'s, not those of the "
                f"language model's layer ({type(attention).__name__})")
        step = "gating"
        for layer, heads in REMOVE.items():  # each layer's gate matters: a text-only forward runs its heads
            change = _close(_gated_logits(model, {layer: heads[:1]}, ids, mask), plain)
            assert change > CHANGED, f"a gate of 0 on layer {layer}'s head {heads[0]} changes nothing ({change:.1e})"
        masked = _gated_logits(model, REMOVE, ids, mask)
        by_hand = _zeroed_by_hand(model, reference, REMOVE, ids, mask)
        assert _close(masked, by_hand) < GATED_CLOSE, f"gated != zeroed by hand ({_close(masked, by_hand):.1e})"
        step = "masking modes"
        constants = HeadConstants({("dec_self", s.layer): torch.randn(HEADS, s.head_dim) for s in sites}, kind="mean")
        assert torch.isfinite(_gated_logits(model, REMOVE, ids, mask, masking=Mean(constants))).all()
        refused = []
        # backends are switched on the language model only: a wrapper's tower may have no sdpa to switch back to
        lm = language_model(model)
        backend = lm.config._attn_implementation
        for mode, problem in ((Uniform(), adapter.query_problem(model, sites)),
                              (Streaming(1, 3), adapter.attention_problem(model, sites, causal_lm=True))):
            if problem is not None:
                refused.append(f"{mode.word} masking: {problem}")
                continue
            lm.set_attn_implementation("eager")
            try:
                assert torch.isfinite(_gated_logits(model, REMOVE, ids, mask, masking=mode)).all()
            finally:
                lm.set_attn_implementation(backend)
        step = "pruning"
        problem = adapter.pruning_problem(model)
        if problem is not None:
            return "gating only", "; ".join([f"pruning refused: {problem}", *refused])
        own_code = not all(site.through_attention_function for site in sites)
        backends = (["eager"] if own_code or model_type in EAGER_SAMPLE or not lm._supports_sdpa else []) + (
            ["sdpa"] if lm._supports_sdpa else [])
        step = "generate"
        lm.set_attn_implementation(backends[-1])
        with gated(model, _gates(model, REMOVE)), torch.no_grad():  # before the model is pruned (in place, below)
            expected = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
        step = "pruning"
        for backend in backends:
            lm.set_attn_implementation(backend)
            reference_logits = _gated_logits(model, REMOVE, ids, mask)
            # the last backend prunes the model itself: nothing after needs it whole
            pruned = prune_heads(model if backend == backends[-1] else copy.deepcopy(model), {"dec_self": REMOVE})
            gap = _close(_logits(pruned, ids, mask), reference_logits)
            assert gap < GATED_CLOSE, f"{backend}: pruned != gated ({gap:.1e})"
        step = "generate"
        with torch.no_grad():
            got = pruned.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert torch.equal(expected, got), "generate() differs"
        step = "save and reload"
        save_pruned(pruned, None, folder)
        # as transformers' own class (an Auto class reads the folder's auto_map: that is the export check's)
        reloaded = load_pruned_weights(type(pruned), folder)
        reloaded_lm = language_model(reloaded)
        if not reloaded_lm.config._attn_implementation.startswith("headprune_"):
            reloaded_lm.set_attn_implementation(backends[-1])
        gap = _close(_logits(reloaded, ids, mask), reference_logits)
        assert gap < GATED_CLOSE, f"reloaded != pruned ({gap:.1e})"
        # what the export must give on two input shapes: the pruned model's logits and generate()
        second = _second_batch()
        with torch.no_grad():
            second_tokens = pruned.generate(second[0], attention_mask=second[1], max_new_tokens=4, do_sample=False,
                                            pad_token_id=0)
        torch.save({"batches": [(ids, mask), second], "logits": [reference_logits, _logits(pruned, *second)],
                    "generated": [got, second_tokens], "auto": task_auto(model, wrapper)}, folder / "expected.pt")
    except Exception as error:
        return "fails", f"{step}: {registry_checks.one_line(error)}"
    return "passes", "; ".join(refused)



EXPORT_CHECK = textwrap.dedent("""
    import sys, torch, warnings
    warnings.simplefilter("ignore")
    sys.modules["headprune"] = None  # headprune blocked from import: only the folder's own files run
    import transformers
    for folder in sys.argv[1:]:
        try:
            expected = torch.load(folder + "/expected.pt")
            # the task's Auto class (AutoModelForCausalLM; a wrapper's: AutoModelForImageTextToText, ...)
            model = getattr(transformers, expected["auto"]).from_pretrained(folder, trust_remote_code=True).eval()
            verdict = "ok"
            for (ids, mask), want, generated in zip(expected["batches"], expected["logits"], expected["generated"]):
                with torch.no_grad():
                    logits = model(input_ids=ids, attention_mask=mask).logits.float()
                    tokens = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False,
                                            pad_token_id=0)
                gap = float((logits - want).abs().max())
                # float32's rounding (tests/tolerances.py's bound written out: headprune and the tests are blocked)
                bound = 2 * 512 * 2.0 ** -24 * max(1.0, float(want.abs().max()))
                if gap > bound:
                    verdict = f"logits differ by {gap:.1e} on {tuple(ids.shape)}"
                elif not torch.equal(tokens, generated):
                    verdict = f"generate() differs on {tuple(ids.shape)}"
                if verdict != "ok":
                    break
            if verdict == "ok" and not type(model).__name__.startswith("Pruned"):
                verdict = f"loaded as {type(model).__name__}, not through the folder's modeling file"
            print("EXPORT", folder, verdict, flush=True)
        except Exception as error:
            print("EXPORT", folder, f"{type(error).__name__}: {error}".splitlines()[0][:150], flush=True)
""")


def family_tables(tmp_path) -> dict[str, dict[str, tuple[str, str]]]:
    """{"causal": {model type: (outcome, detail)}, "wrappers": {...}}; a wrapper whose class is the causal-LM
    table's (Gemma 3's) is that row, built once."""
    tables = {"causal": {}, "wrappers": {}}
    threads = torch.get_num_threads()
    torch.set_num_threads(threads_for_tests(1))  # tiny matrices: a second thread only waits
    try:
        with generic_adapter():
            for model_type in model_types():
                tables["causal"][model_type] = check_family(model_type, tmp_path / "causal" / model_type)
            for model_type in wrapper_types():
                tables["wrappers"][model_type] = (tables["causal"][model_type] if same_class(model_type) else
                                                  check_family(model_type, tmp_path / "wrappers" / model_type, True))
    finally:
        torch.set_num_threads(threads)
    exported = [tmp_path / "causal" / t for t, (outcome, _) in tables["causal"].items() if outcome == "passes"]
    exported += [tmp_path / "wrappers" / t for t in EXPORT_WRAPPERS
                 if tables["wrappers"][t][0] == "passes" and not same_class(t)]
    for folder, verdict in registry_checks.export_verdicts(EXPORT_CHECK, exported, tmp_path).items():
        if verdict != "ok":
            tables[folder.parent.name][folder.name] = ("fails", f"export: {verdict}")
    for model_type in wrapper_types():  # a shared row after its export verdict
        if same_class(model_type):
            tables["wrappers"][model_type] = tables["causal"][model_type]
    return tables


def render(table: str, results: dict[str, tuple[str, str]]) -> str:
    begin, end = TABLES[table]
    counts = {o: sum(1 for v, _ in results.values() if v == o) for o in OUTCOMES}
    summary = f"{len(results)} model types; " + ", ".join(f"{n} {o}" for o, n in counts.items()) + "."
    if table == "causal":
        lines = [begin, "", summary, "", "| model type | outcome | why / what is refused |", "|---|---|---|"]
        rows = [f"| {t} | {o} | {d.replace('|', '/')} |" for t, (o, d) in sorted(results.items())]
    else:
        intro = ("Multimodal and audio wrappers of a decoder-only LM (the image-text-to-text and multimodal-LM "
                 "registries; the decoder-only audio LMs of the speech seq2seq registry), each built as its wrapper "
                 "class, with vision and audio towers as deep and as wide as the text model, and run on text-only "
                 "input (`input_ids`, `attention_mask`): its heads must be its language model's. A class the "
                 "causal-LM table builds too shares its row. " + summary)
        lines = [begin, "", *textwrap.wrap(intro, 115), "", "| model type | outcome | class | why / what is refused |",
                 "|---|---|---|---|"]
        rows = [f"| {t} | {o} | {class_name(t, True)} | {d.replace('|', '/')} |"
                for t, (o, d) in sorted(results.items())]
    return "\n".join(lines + rows + ["", end])


def documented(table: str) -> dict[str, str]:
    begin, end = TABLES[table]
    text = DOCS.read_text()
    if begin not in text:
        return {}
    block = text[text.index(begin):text.index(end)]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| (\S+) \| ([a-z -]+) \|", block, re.MULTILINE)}


def write_tables(tables) -> None:
    text = DOCS.read_text()
    for name, results in tables.items():
        begin, end = TABLES[name]
        block = render(name, results)
        if begin in text:
            text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
        else:  # the wrappers' table goes right after the causal-LM one
            after = text.index(TABLES["causal"][1]) + len(TABLES["causal"][1])
            text = text[:after] + "\n\n" + block + text[after:]
    DOCS.write_text(text)


def test_every_decoder_family_of_the_registry(tmp_path):
    tables = family_tables(tmp_path)
    if os.environ.get("HEADPRUNE_WRITE_MODELS_TABLE"):
        write_tables(tables)
    for name, results in tables.items():
        lost = {t: results.get(t, ("gone", "")) for t, outcome in documented(name).items()
                if outcome == "passes" and results.get(t, ("",))[0] != "passes"}
        assert not lost, f"{name}: types that passed no longer pass: {lost}"
    causal = tables["causal"]
    passing = sorted(t for t, (o, _) in causal.items() if o == "passes")
    assert len(passing) >= 40, f"only {len(passing)} families pass: {passing}"
    for must in ("qwen3", "qwen3_moe", "gemma2", "gemma3_text", "gpt_neox", "phi3", "granite", "smollm3",
                 "starcoder2", "stablelm", "cohere2", "opt", "mixtral", "llama", "mistral", "qwen2", "gpt2", "gpt_oss",
                 "falcon", "gptj"):
        assert causal[must][0] == "passes", (must, causal[must])
    for gating_only in ("olmo2", "olmo3"):
        assert causal[gating_only][0] == "gating only", (gating_only, causal[gating_only])
    for wrapper in ("gemma3", "gemma4", "llama4", "mistral3", "qwen2_5_vl", "qwen3_vl", "llava"):
        assert tables["wrappers"][wrapper][0] != "not built", (wrapper, tables["wrappers"][wrapper])
