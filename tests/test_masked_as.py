"""How a job's masking reaches its model (issue #47 item 4): ``runs.run_variants`` opens
``masked_as(model, settings.masking)`` around the kind's evaluation, and the functions below it gate the model
naming no masking of their own. Checked against hooks placed here by hand on the model's own projections, and
for the rules that keep a block from masking a call it was not meant for."""
import ast
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from headprune.evaluation.evalset import EvalSet
from headprune.evaluation.runs import EvalSettings, gates_without, run_variants
from headprune.models.masking import Uniform, Zero, gated, masked_as, masking_of

ROOT = Path(__file__).resolve().parents[1]
HEAD_DIM = 4
LAYER, HEAD = 1, 2  # the head switched off


def llama():
    """6 query heads on 2 key/value heads, 3 layers: a head's query slice is its own, its keys shared."""
    config = LlamaConfig(vocab_size=40, hidden_size=24, intermediate_size=32, num_hidden_layers=3,
                         num_attention_heads=6, num_key_value_heads=2, head_dim=HEAD_DIM, max_position_embeddings=64,
                         tie_word_embeddings=True, initializer_range=0.3, attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def windows(n=5, length=12):
    g = torch.Generator().manual_seed(4)
    return torch.randint(3, 40, (n, length), generator=g).tolist()


def hand_nll(model, chunks, where: str | None) -> list[float]:
    """Summed next-token NLL per window, head HEAD of layer LAYER switched off by a hook placed here: "o_proj", its
    slice of the output projection's input zeroed (the paper's masking); "q_proj", its query zeroed (uniform
    masking: a zero query, rotated or not, scores every key alike); None, the full model."""
    attention = model.model.layers[LAYER].self_attn
    part = slice(HEAD * HEAD_DIM, (HEAD + 1) * HEAD_DIM)

    def zeroed(tensor):
        tensor = tensor.clone()
        tensor[..., part] = 0.0
        return tensor

    handle = None
    if where == "o_proj":
        handle = attention.o_proj.register_forward_pre_hook(lambda module, args: (zeroed(args[0]),))
    elif where == "q_proj":
        handle = attention.q_proj.register_forward_hook(lambda module, args, out: zeroed(out))
    try:
        with torch.no_grad():
            ids = torch.tensor(chunks)
            logits = model(input_ids=ids).logits[:, :-1]
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    finally:
        if handle is not None:
            handle.remove()
    return [float(row.sum()) for row in nll]


def test_a_jobs_masking_reaches_the_hook_through_run_variants():
    """EvalSettings' word, and nothing else, decides how the kind's evaluation masks: perplexity windows under
    "zero" and "uniform" equal the hand-hooked model's, and the two modes differ (so a mode that did not reach
    the model would fail here)."""
    model, chunks = llama(), windows()
    evalset = EvalSet("language_modeling", chunks, chunks, "perplexity")
    gates_list = [None, gates_without(model, [("dec_self", LAYER, HEAD)])]
    full = hand_nll(model, chunks, None)
    got = {}
    for word, where in (("zero", "o_proj"), ("uniform", "q_proj")):
        settings = EvalSettings(masking=word, batch_size=2, variant_batch_size=4, progress=False)
        whole, masked = run_variants(model, None, evalset, gates_list, settings)
        assert [nll for nll, _ in whole] == pytest.approx(full, rel=1e-5, abs=1e-5)
        assert [nll for nll, _ in masked] == pytest.approx(hand_nll(model, chunks, where), rel=1e-5, abs=1e-5)
        got[word] = [nll for nll, _ in masked]
        assert masking_of(model) == Zero()  # the block closed with the evaluation
    assert max(abs(a - b) for a, b in zip(got["zero"], got["uniform"])) > 1e-3
    assert max(abs(a - b) for a, b in zip(got["zero"], full)) > 1e-3


def test_a_block_sets_the_mode_of_its_model_alone_and_closes():
    model, other = llama(), llama()
    gates = gates_without(model, [("dec_self", LAYER, HEAD)])
    ids = torch.tensor(windows(2))
    assert masking_of(model) == Zero()  # the paper's outside a block
    with masked_as(model, "uniform") as mode:
        assert mode == Uniform() and masking_of(model) is mode
        with torch.no_grad(), gated(model, gates):  # names no masking: the block's
            inside = model(input_ids=ids).logits
        with masked_as(model, Uniform()):  # the same mode again: allowed
            assert masking_of(model) == Uniform()
        assert masking_of(model) == Uniform()
    with torch.no_grad(), gated(model, gates, masking="uniform"):
        assert torch.equal(inside, model(input_ids=ids).logits)
    assert masking_of(model) == Zero()
    with pytest.raises(RuntimeError, match="boom"), masked_as(model, "uniform"):
        raise RuntimeError("boom")
    assert masking_of(model) == Zero()  # restored on an error too
    with masked_as(model, "uniform"):
        with pytest.raises(ValueError, match="open on another model"), gated(other, gates):
            pass


def test_a_call_told_another_mode_inside_a_block_is_refused():
    """One mode per model at a time: a nested block, a gated call or a run whose settings say another mode than
    the open block is refused instead of one of them silently winning."""
    model, chunks = llama(), windows(2)
    evalset = EvalSet("language_modeling", chunks, chunks, "perplexity")
    gates = gates_without(model, [("dec_self", LAYER, HEAD)])
    with masked_as(model, "uniform"):
        with pytest.raises(ValueError, match=r"masked_as\(\.\.\., masking=zero\) inside masked_as\(model, uniform\)"):
            with masked_as(model, "zero"):
                pass
        with pytest.raises(ValueError, match="one masking mode per model"), gated(model, gates, masking="zero"):
            pass
        with pytest.raises(ValueError, match="EvalSettings"):
            run_variants(model, None, evalset, [gates], EvalSettings(progress=False))  # the paper's, by default
        assert masking_of(model) == Uniform()  # the refusals left the block as it was


# The evaluation below run_variants: the functions that run gate settings, and each kind's run_variants.
BACKENDS = ["perplexity", "shared_layers", "evaluate", "beam_search", "lm_tasks", "loglikelihoods", "retrieval"]


def test_nothing_below_run_variants_names_a_masking():
    """A job's masking crosses the schema, the constants stage, the kind's params, the script, EvalSettings and
    masked_as (runs.py), masking.py and its hooks (docs/layout.md): the evaluation functions take no masking
    argument and pass none on, and no kind's run_variants reads one, so that path cannot grow back."""
    found = []
    for name in BACKENDS:
        path = ROOT / "headprune" / "evaluation" / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                found += [f"{name}.py:{node.lineno} {node.name}({arg.arg})" for arg in
                          args.posonlyargs + args.args + args.kwonlyargs if arg.arg == "masking"]
            if isinstance(node, ast.Call):
                found += [f"{name}.py:{node.lineno} masking=" for kw in node.keywords if kw.arg == "masking"]
    for path in sorted((ROOT / "headprune" / "evaluation" / "kinds").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "run_variants":
                found += [f"kinds/{path.name}:{inner.lineno}" for inner in ast.walk(node)
                          if (isinstance(inner, ast.Name) and inner.id == "masking")
                          or (isinstance(inner, ast.Attribute) and inner.attr == "masking")
                          or (isinstance(inner, ast.keyword) and inner.arg == "masking")]
    assert not found, f"masking named below run_variants: {found}"
