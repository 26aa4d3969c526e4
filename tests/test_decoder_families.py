"""Every causal-LM model type of transformers' registry through the generic decoder adapter (issue #38).

For each model type a tiny random model is built (tests/decoder_zoo.py: generic, with the quirks of real
checkpoints), and the generic adapter (``headprune.models.families.decoder.DecoderAdapter``, forced even where an
older per-family adapter exists) must:

1. find every layer's heads, as many as the config says;
2. gate: a gate of 0 equals zeroing the head's features of the output projection's input by hand;
3. run every masking mode: zero, mean (a constant per head), uniform and streaming (or refuse them, saying why);
4. prune: the pruned model equals the gated one under eager and (where the family has it) sdpa attention, with a
   layer left without heads, a whole key/value group removed and a layer whose kv groups become uneven;
5. generate() on the pruned model equals generate() under the gates (greedy);
6. save_pruned then load_pruned_weights gives the same logits;
7. the exported folder loads in plain transformers with headprune blocked from import (one subprocess for all),
   with the same logits and the same generate().

The table of outcomes is docs/models.md's "Decoder families" table: this test fails when a family the table lists
as passing no longer passes, and rewrites the table with HEADPRUNE_WRITE_MODELS_TABLE=1.
"""
from __future__ import annotations

import contextlib
import copy
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from unittest import mock

import torch

from decoder_zoo import LAYERS, TooLarge, meta_model, model_types, tiny_model
from headprune.models import families
from headprune.models.families.decoder import DecoderAdapter, layout_problem
from headprune.models.head_constants import HeadConstants
from headprune.models.heads import full_gates, gated
from headprune.models.masking import Mean, Streaming, Uniform
from headprune.models.prune import load_pruned_weights, prune_heads

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "models.md"
BEGIN, END = "<!-- decoder-families: begin (tests/test_decoder_families.py) -->", "<!-- decoder-families: end -->"
# Removed heads: layer 0 keeps heads 2, 4, 5 (kv head 0 read by one query head, kv head 1 by two: uneven),
# layer 1 keeps none, layer 2 loses kv group 0 (heads 0-2) whole.
REMOVE = {0: [0, 1, 3], 1: [0, 1, 2, 3, 4, 5], 2: [0, 1, 2]}


@contextlib.contextmanager
def generic_adapter():
    """Every model through DecoderAdapter (also those an older per-family adapter serves)."""
    with mock.patch.object(families, "adapter_for_model", lambda model: DecoderAdapter()):
        yield


def _batch():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 64, (2, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    return ids, mask


def _logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.float()


def _close(a, b) -> float:
    return float((a - b).abs().max())


def check_family(model_type: str, folder: Path) -> tuple[str, str]:
    """(outcome, detail): "passes", "gating only" (pruning refused), "refused" or "fails"/"not built"."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = tiny_model(model_type)
        except TooLarge as error:  # what the adapter makes of its layout, on the meta device
            problem = layout_problem(meta_model(model_type))
            return ("refused", problem) if problem else ("not built", _line(error))
        except Exception as error:  # the builder could not make this type at tiny size
            return "not built", _line(error)
    if getattr(model.config, "is_encoder_decoder", False):
        return "not decoder-only", "the decoder of an encoder-decoder family (served as one, if at all)"
    ids, mask = _batch()
    try:
        plain = _logits(model, ids, mask)
    except Exception as error:  # the builder's tiny config does not run for this type
        return "not built", f"its tiny model does not run: {_line(error)}"
    adapter = DecoderAdapter()
    try:
        sites = adapter.sites(model)
    except (ValueError, AttributeError, TypeError) as error:
        return "refused", _line(error)
    step = "heads"
    try:
        config = model.config
        heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head")
        assert len(sites) == LAYERS and all(s.original_num_heads == heads == 6 for s in sites), "head count"
        remove = {layer: hs for layer, hs in REMOVE.items()}
        gates = full_gates(model)
        for layer, hs in remove.items():
            gates["dec_self"][layer, hs] = 0
        step = "gating"
        with gated(model, gates):
            masked = _logits(model, ids, mask)
        handles = [site.output.register_forward_pre_hook(_zero_by_hand(site, remove[site.layer])) for site in sites]
        try:
            by_hand = _logits(model, ids, mask)
        finally:
            for handle in handles:
                handle.remove()
        assert _close(masked, by_hand) < 1e-5, f"gated != zeroed by hand ({_close(masked, by_hand):.1e})"
        assert _close(masked, plain) > 1e-6, "the gates changed nothing"
        step = "masking modes"
        constants = HeadConstants({("dec_self", s.layer): torch.randn(6, s.head_dim) for s in sites}, kind="mean")
        with gated(model, gates, masking=Mean(constants)):
            assert torch.isfinite(_logits(model, ids, mask)).all()
        refused = []
        for mode, problem in ((Uniform(), adapter.uniform_masking_problem(model, sites)),
                              (Streaming(1, 3), adapter.streaming_masking_problem(model, sites))):
            if problem is not None:
                refused.append(f"{mode.word} masking: {problem}")
                continue
            eager = copy.deepcopy(model)
            eager.set_attn_implementation("eager")
            with gated(eager, gates, masking=mode):
                assert torch.isfinite(_logits(eager, ids, mask)).all()
        step = "pruning"
        problem = adapter.pruning_problem(model)
        if problem is not None:
            return "gating only", "; ".join([f"pruning refused: {problem}", *refused])
        backends = ["eager"] + (["sdpa"] if model._supports_sdpa else [])
        for backend in backends:
            full = copy.deepcopy(model)
            full.set_attn_implementation(backend)
            with gated(full, gates):
                reference = _logits(full, ids, mask)
            pruned = prune_heads(copy.deepcopy(full), {"dec_self": remove})
            gap = _close(_logits(pruned, ids, mask), reference)
            assert gap < 1e-5, f"{backend}: pruned != gated ({gap:.1e})"
        step = "generate"
        with gated(full, gates), torch.no_grad():
            expected = full.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
        with torch.no_grad():
            got = pruned.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
        assert torch.equal(expected, got), "generate() differs"
        step = "save and reload"
        from headprune.models.export import save_pruned
        from transformers import AutoModelForCausalLM

        save_pruned(pruned, None, folder)
        reloaded = load_pruned_weights(AutoModelForCausalLM, folder)
        reloaded.set_attn_implementation(backends[-1]) if not reloaded.config._attn_implementation.startswith(
            "headprune_") else None
        gap = _close(_logits(reloaded, ids, mask), reference)
        assert gap < 1e-5, f"reloaded != pruned ({gap:.1e})"
        torch.save({"ids": ids, "mask": mask, "logits": reference, "generated": got}, folder / "expected.pt")
    except Exception as error:
        return "fails", f"{step}: {_line(error)}"
    return "passes", "; ".join(refused)


def _zero_by_hand(site, heads):
    def hook(module, args):
        x = args[0].clone()
        for h in heads:
            x[..., h * site.head_dim:(h + 1) * site.head_dim] = 0
        return (x, *args[1:])
    return hook


def _line(error) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"{type(error).__name__}: {text}"[:160]


EXPORT_CHECK = textwrap.dedent("""
    import sys, torch, warnings
    warnings.simplefilter("ignore")
    sys.modules["headprune"] = None  # headprune blocked from import: only the folder's own files run
    from transformers import AutoModelForCausalLM
    for folder in sys.argv[1:]:
        try:
            expected = torch.load(folder + "/expected.pt")
            model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()
            with torch.no_grad():
                logits = model(input_ids=expected["ids"], attention_mask=expected["mask"]).logits.float()
            gap = float((logits - expected["logits"]).abs().max())
            with torch.no_grad():
                tokens = model.generate(expected["ids"], attention_mask=expected["mask"], max_new_tokens=4,
                                        do_sample=False, pad_token_id=0)
            verdict = "ok" if gap < 1e-5 else f"logits differ by {gap:.1e}"
            if verdict == "ok" and not torch.equal(tokens, expected["generated"]):
                verdict = "generate() differs"
            print("EXPORT", folder, verdict, flush=True)
        except Exception as error:
            print("EXPORT", folder, f"{type(error).__name__}: {error}".splitlines()[0][:150], flush=True)
""")


def family_table(tmp_path) -> dict[str, tuple[str, str]]:
    results = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: a second thread only waits (and on a busy machine, spins)
    try:
        with generic_adapter():
            for model_type in model_types():
                results[model_type] = check_family(model_type, tmp_path / model_type)
    finally:
        torch.set_num_threads(threads)
    exported = [str(tmp_path / t) for t, (outcome, _) in results.items() if outcome == "passes"]
    run = subprocess.run([sys.executable, "-c", EXPORT_CHECK, *exported], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600, env={**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": "1"})
    for line in run.stdout.splitlines():
        if line.startswith("EXPORT "):
            _, folder, verdict = line.split(" ", 2)
            if verdict != "ok":
                results[Path(folder).name] = ("fails", f"export: {verdict}")
    missing = [t for t in exported if f"EXPORT {t} " not in run.stdout]
    for folder in missing:
        results[Path(folder).name] = ("fails", f"export: no answer ({run.stderr.strip()[-150:]})")
    return results


def render(results: dict[str, tuple[str, str]]) -> str:
    counts = {o: sum(1 for v, _ in results.values() if v == o) for o in ("passes", "gating only", "refused", "fails",
                                                                         "not decoder-only", "not built")}
    lines = [BEGIN, "", f"{len(results)} model types; " + ", ".join(f"{n} {o}" for o, n in counts.items()) + ".", "",
             "| model type | outcome | why / what is refused |", "|---|---|---|"]
    for model_type, (outcome, detail) in sorted(results.items()):
        lines.append(f"| {model_type} | {outcome} | {detail.replace('|', '/')} |")
    return "\n".join(lines + ["", END])


def documented() -> dict[str, str]:
    text = DOCS.read_text()
    if BEGIN not in text:
        return {}
    block = text[text.index(BEGIN):text.index(END)]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| (\S+) \| ([a-z ]+) \|", block, re.MULTILINE)}


def test_every_decoder_family_of_the_registry(tmp_path):
    results = family_table(tmp_path)
    if os.environ.get("HEADPRUNE_WRITE_MODELS_TABLE"):
        text = DOCS.read_text()
        table = render(results)
        text = (text[:text.index(BEGIN)] + table + text[text.index(END) + len(END):] if BEGIN in text
                else text.rstrip() + "\n\n" + table + "\n")
        DOCS.write_text(text)
    passing = sorted(t for t, (o, _) in results.items() if o == "passes")
    lost = {t: results.get(t, ("gone", ""))
            for t, outcome in documented().items() if outcome == "passes" and results.get(t, ("",))[0] != "passes"}
    assert not lost, f"families that passed no longer pass: {lost}"
    assert len(passing) >= 40, f"only {len(passing)} families pass: {passing}"
    for must in ("qwen3", "qwen3_moe", "gemma2", "gemma3_text", "gpt_neox", "phi3", "granite", "smollm3",
                 "starcoder2", "stablelm", "cohere2", "opt", "mixtral", "llama", "mistral", "qwen2", "gpt2", "gpt_oss",
                 "falcon", "gptj"):
        assert results[must][0] == "passes", (must, results[must])
    for gating_only in ("olmo2", "olmo3"):
        assert results[gating_only][0] == "gating only", (gating_only, results[gating_only])
