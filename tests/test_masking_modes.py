"""The six masking modes side by side (issue #32): one class each (headprune.models.masking), ``gated`` dispatching.

- The config words and how ``gated`` takes a mode (strings "zero"/"uniform", objects), and what it refuses.
- Mean/optimal (``Constant``): at the first masked layer, the output projection's output with a head's gate g
  minus its output under zero masking with the same gate is (1 - g) W_o[:, h] c_h, at every token, for every family
  (Linear and GPT-2's transposed Conv1D, FSMT's time-major layout, grouped-query attention, heads already pruned);
  and a BERT layer computed by hand (q, k, v, softmax, the head's slice replaced by c_h, the output projection)
  equals the hooked one. Batched gate variants equal each alone, in forward passes and in beam search.
- Resample: the same algebra with the donor token's recorded output at each query's position (left-padded LMs
  count positions over real tokens; FSMT's decoder and cross-attention; an encoder); padding side, batching,
  gate variants and beam search change nothing; cached decoding equals recomputing each step; draws differ.
- The data files: safetensors (no pickle) that read back equal.
"""
import copy

import pytest
import torch
from transformers.pytorch_utils import Conv1D

from conftest import PAD, repeated, variants
from test_adapter_contract import FAMILIES, build
from tolerances import within_rounding
from headprune.models.families.causal_lm import positions
from headprune.models.head_constants import HeadConstants, ResamplePool
from headprune.models.heads import HeadCapture, Streaming, adapter_for, full_gates, gated, stack_gates
from headprune.models.masking import (MASKING_WORDS, MODES, Constant, Mean, Optimal, Resample, Uniform, Zero,
                                      as_masking, masking_for)
from headprune.models.prune import prune_heads
from headprune.scoring.constants import mean_constants, resample_pool
from headprune import stages


def random_constants(model, seed=0, scale=0.5, kind="mean") -> HeadConstants:
    g = torch.Generator().manual_seed(seed)
    return HeadConstants({(s.attn_type, s.layer): scale * torch.randn(s.original_num_heads, s.head_dim, generator=g)
                          for s in adapter_for(model).sites(model)}, kind)


def logits(model, batch, gates=None, masking="zero"):
    with torch.no_grad(), gated(model, gates, masking=masking):
        return adapter_for(model).loss_and_outputs(model, batch)[1].logits


# --- The modes and their words ---------------------------------------------------------------------------------

def test_the_registry_and_the_planning_import_without_torch():
    """MODES and every mode class, the config schema and the stages import without torch (Snakemake imports them
    to plan a run); a mode object is built without it too, its data read and its hooks imported when it masks."""
    import subprocess
    import sys

    code = ("import sys; from headprune.models.masking import MODES, masking_for; import headprune.config_schema, "
            "headprune.stages, headprune.studies; "
            "mode = masking_for('mean', constants='never/read.safetensors'); "
            "heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy; print(sorted(MODES))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == str(sorted(MODES))


def test_a_new_mode_is_one_class(monkeypatch):
    """Adding a mode is its class: registered by its word, it is a config word (the schema takes it and its
    settings, defaults filled in), a study's jobs carry it with its settings, EvalSettings builds it, and gated
    runs it; here a mode whose masked head puts out ``factor`` times its output, checked against zero masking with
    the gate ``factor`` (the same algebra: g o_h + (1 - g) factor o_h at gate 0 is factor o_h)."""
    from dataclasses import dataclass
    from typing import ClassVar

    import yaml

    from headprune import config_schema
    from headprune.evaluation.runs import EvalSettings
    from headprune.models.masking import _OutputMasking
    from headprune.studies import Pipeline
    from test_masking_in_experiments import demo_config

    @dataclass(frozen=True)
    class Scaled(_OutputMasking):
        factor: float
        word: ClassVar[str] = "scaled"
        config_key: ClassVar[tuple] = ("scaled",)
        config_schema: ClassVar[dict] = {"properties": {"factor": {"type": "number", "minimum": 0, "default": 0.5}}}

        @classmethod
        def settings_from_config(cls, section):
            return {"factor": section["factor"]}

        def replacement(self, site, per_head, state):
            return per_head * self.factor

    monkeypatch.setitem(MODES, "scaled", Scaled)
    monkeypatch.setattr(config_schema, "_schema", config_schema._schema.__wrapped__)  # not the cached schema
    schema = config_schema.schema()
    assert "scaled" in schema["definitions"]["masking"]["enum"]
    config = demo_config()
    config["models"]["tiny_llama"]["masking"] = "scaled"
    config_schema.validate(config)
    assert config["scaled"] == {"factor": 0.5}  # its default, from its class
    config["scaled"] = {"factor": -1}
    with pytest.raises(Exception, match="-1 is less than the minimum of 0"):
        config_schema.validate(yaml.safe_load(yaml.safe_dump(config)))
    config["scaled"] = {"factor": 0.25}
    lm = Pipeline(config).study("tiny_llama")
    settings = stages.ablation.job_params(lm, stages.ablation.jobs(lm)[0])["settings"]
    assert settings["masking"] == {"word": "scaled", "factor": 0.25}
    assert EvalSettings(**settings).masking == Scaled(0.25)
    model, batch = build("llama")
    gates = full_gates(model)
    gates["dec_self"][1, 2] = 0.0
    quarter = full_gates(model)
    quarter["dec_self"][1, 2] = 0.25
    assert torch.allclose(logits(model, batch, gates, Scaled(0.25)), logits(model, batch, quarter), atol=1e-6)
    assert not torch.allclose(logits(model, batch, gates, Scaled(0.25)), logits(model, batch, gates), atol=1e-4)



def test_six_modes_by_word():
    assert MASKING_WORDS == ("zero", "uniform", "streaming", "mean", "optimal", "resample")
    assert [MODES[w] for w in MASKING_WORDS] == [Zero, Uniform, Streaming, Mean, Optimal, Resample]
    assert {w for w in MASKING_WORDS if MODES[w].acts_on_outputs} == {"zero", "mean", "optimal", "resample"}
    assert as_masking("zero") == Zero() and as_masking("uniform") == Uniform()
    assert as_masking(Streaming(2, 3)) == Streaming(2, 3)
    model, _ = build("bert")
    constants = random_constants(model)
    assert isinstance(masking_for("mean", constants=constants), Mean)
    assert masking_for("streaming", sink=1, recent=2) == Streaming(1, 2)
    assert isinstance(Constant.of(random_constants(model, kind="optimal")), Optimal)
    assert type(Constant.of(random_constants(model, kind="hand-made"))) is Constant


@pytest.mark.parametrize("word, needs", [("mean", "Mean\\(constants\\)"), ("optimal", "Optimal\\(constants\\)"),
                                         ("resample", "Resample\\(pool, seed, draw\\)")])
def test_words_that_need_data_are_refused_as_strings(word, needs):
    model, batch = build("bert")
    with pytest.raises(ValueError, match=f"masking must be one of.*{needs}"):
        logits(model, batch, full_gates(model), masking=word)
    with pytest.raises(ValueError, match="needs its"):
        masking_for(word)


def test_mode_objects_check_their_data():
    model, batch = build("bert")
    with pytest.raises(ValueError, match="takes mean constants; these are 'optimal'"):
        Mean(random_constants(model, kind="optimal"))
    with pytest.raises(TypeError, match="takes a HeadConstants"):
        Mean({("enc_self", 0): torch.zeros(4, 4)})
    llama, _ = build("llama")
    with pytest.raises(ValueError, match="no constants for enc_self layer 0"):
        logits(model, batch, full_gates(model), masking=Mean(random_constants(llama)))
    with pytest.raises(ValueError, match="Resample.draw must be an int >= 0"):
        Resample(resample_pool(model, [batch], progress=False), 0, -1)
    with pytest.raises(ValueError, match="masking must be one of"):
        masking_for("sliding")


# --- Constant masking: the output projection's algebra, every family --------------------------------------------

def projection_outputs(model, batch, site, gates, masking):
    """What the site's output projection puts out (its own layout) under ``gated``."""
    seen = {}

    def keep(module, args, output):
        seen["out"] = output.detach()

    handle = site.output.register_forward_hook(keep)
    try:
        logits(model, batch, gates, masking)
    finally:
        handle.remove()
    return seen["out"]


def columns_times(site, heads, vectors):
    """sum over ``heads`` (original indices) of W_o[:, head columns] @ vectors[i] (..., head_dim): by hand, from the
    weight, for a Linear (out, in) or a Conv1D (in, out)."""
    weight = site.output.weight.detach().double()
    total = 0
    for head, vector in zip(heads, vectors):
        p = site.kept_heads.index(head)
        block = slice(p * site.head_dim, (p + 1) * site.head_dim)
        part = weight[block, :] if isinstance(site.output, Conv1D) else weight[:, block].T  # (head_dim, out)
        total = total + vector.double() @ part
    return total


@pytest.mark.parametrize("pruned", [False, True], ids=["full", "pruned"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_constant_replaces_the_head_output_at_the_first_masked_layer(family, pruned):
    model, batch = build(family)
    constants = random_constants(model)
    if pruned:  # head 3 of every layer gone: head 2 sits at position 2 of 3, constants keep original indices
        prune_heads(model, {t: {0: [3], 1: [3]} for t in adapter_for(model).attention_types})
    for site in [s for s in adapter_for(model).sites(model) if s.layer == 0]:
        masked = [0, 2]
        for g in (0.0, 0.3):
            gates = full_gates(model)
            gates[site.attn_type][0, masked] = g
            zero = projection_outputs(model, batch, site, gates, Zero())
            mean = projection_outputs(model, batch, site, gates, Mean(constants))
            shift = (1 - g) * columns_times(site, masked, [constants.head(site.attn_type, 0, h) for h in masked])
            assert within_rounding((mean - zero), shift), (site.attn_type, g)
            assert shift.abs().max() > 1e-2


def test_a_bert_layer_by_hand():
    """Layer 0 of a BERT computed by hand from its weights, heads 1 and 3 replaced by their constants."""
    model, batch = build("bert")
    constants = random_constants(model, seed=2)
    site = adapter_for(model).sites(model)[0]
    attention = site.attention
    gates = full_gates(model)
    gates["enc_self"][0, [1, 3]] = 0.0
    seen = {}

    def keep(module, args, kwargs):
        seen["x"] = args[0] if args else kwargs["hidden_states"]

    hook = attention.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        hooked = projection_outputs(model, batch, site, gates, Mean(constants))
    finally:
        hook.remove()
    x = seen["x"].double()
    heads, d = site.num_heads, site.head_dim

    def project(linear):
        return (x @ linear.weight.double().T + linear.bias.double()).unflatten(-1, (heads, d)).transpose(1, 2)

    q, k, v = project(site.query), project(site.key), project(site.value)  # (B, H, T, d)
    scores = q @ k.transpose(-1, -2) / d ** 0.5
    scores = scores.masked_fill(~batch["attention_mask"].bool()[:, None, None, :], float("-inf"))
    context = (scores.softmax(-1) @ v).transpose(1, 2)  # (B, T, H, d)
    for h in (1, 3):
        context[:, :, h] = constants.head("enc_self", 0, h).double()
    by_hand = context.flatten(-2) @ site.output.weight.double().T + site.output.bias.double()
    assert within_rounding(hooked, by_hand)


def test_real_gates_interpolate_and_capture_works():
    model, batch = build("llama_gqa")
    constants = random_constants(model)
    gates = full_gates(model)
    gates["dec_self"][1, 2] = 0.0
    capture = HeadCapture()
    leaves = {t: g.clone().requires_grad_(True) for t, g in gates.items()}
    with gated(model, leaves, capture, masking=Mean(constants)):
        loss, _ = adapter_for(model).loss_and_outputs(model, batch)
        loss.backward()
    assert capture.head_outputs[("dec_self", 1)].shape[-2:] == (4, 4)
    assert capture.gradients[("dec_self", 1)].shape == capture.head_outputs[("dec_self", 1)].shape
    assert leaves["dec_self"].grad is not None and leaves["dec_self"].grad.abs().sum() > 0


def mask_batch_generate(model, batch, gates, masking, **options):
    with torch.no_grad(), gated(model, gates, masking=masking):
        return model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=6,
                              max_length=None, do_sample=False, num_beams=3, min_new_tokens=4, **options)


def assert_variants_equal_alone(model, batch, gates_list, masking, beam=True):
    stacked = stack_gates(model, gates_list)
    together = logits(model, repeated(batch, len(gates_list)), stacked, masking)
    alone = [logits(model, batch, gates, masking) for gates in gates_list]
    if adapter_for(model).attention_types == ("dec_self",):  # padding positions mean nothing
        real = batch["attention_mask"].bool().repeat(len(gates_list), 1)
        assert within_rounding(together[real], torch.cat(alone)[real])
    else:
        assert within_rounding(together, torch.cat(alone))
    if not beam:
        return
    rows = len(batch["input_ids"])
    together_ids = mask_batch_generate(model, repeated(batch, len(gates_list)), stacked, masking)
    for k, gates in enumerate(gates_list):
        ids = mask_batch_generate(model, batch, gates, masking)
        mine = together_ids[k * rows:(k + 1) * rows]
        assert torch.equal(mine[:, :ids.shape[1]], ids) and (mine[:, ids.shape[1]:] == PAD).all()


@pytest.mark.parametrize("family, attn_type, pruned", [("gpt2", "dec_self", False), ("llama_gqa", "dec_self", True),
                                                       ("bart", "enc_dec", False), ("fsmt", "dec_self", True),
                                                       ("roberta", "enc_self", False)])
def test_constant_variants_batched_equal_each_alone(family, attn_type, pruned):
    model, batch = build(family)
    constants = random_constants(model)
    if pruned:
        prune_heads(model, {t: {0: [3]} for t in adapter_for(model).attention_types})
    gates_list = variants(model, attn_type)
    assert_variants_equal_alone(model, batch, gates_list, Mean(constants), beam=family not in ("roberta",))


# --- Resample -----------------------------------------------------------------------------------------------------

def pool_for(family, model):
    make_batch = FAMILIES[family][1]
    return resample_pool(model, [make_batch(seed=s) for s in (11, 12, 13)], progress=False)


def query_positions(model, batch, site):
    """(rows, queries) each query's position as the definition says: a decoder-only LM's over real tokens, else its
    index."""
    if adapter_for(model).attention_types == ("dec_self",):
        return positions(batch["attention_mask"])
    key = "attention_mask" if site.attn_type == "enc_self" else "decoder_attention_mask"
    rows, queries = batch[key].shape
    return torch.arange(queries)[None].expand(rows, -1)


@pytest.mark.parametrize("family", ["llama_gqa", "gpt2", "fsmt", "bart", "bert"])
def test_resample_gives_the_donor_tokens_output_at_each_position(family):
    model, batch = build(family)
    pool = pool_for(family, model)
    masking = Resample(pool, seed=3, draw=1)
    for site in [s for s in adapter_for(model).sites(model) if s.layer == 0]:
        gates = full_gates(model)
        gates[site.attn_type][0, [1, 2]] = 0.0
        zero = projection_outputs(model, batch, site, gates, Zero())
        got = projection_outputs(model, batch, site, gates, masking)
        if site.time_major:
            zero, got = zero.transpose(0, 1), got.transpose(0, 1)
        stream = pool.stream_of(site.attn_type)
        donors = pool.donors(stream, 3, 1)
        recorded = pool.outputs[(site.attn_type, 0)]
        where = query_positions(model, batch, site).clamp(max=pool.longest(stream))
        assert pool.positions[stream][donors].tolist() == list(range(len(donors)))  # a donor at each position
        expected = columns_times(site, [1, 2], [recorded[donors[where]][..., h, :] for h in (1, 2)])
        real = (batch["attention_mask"] if stream == "source" or family in ("llama_gqa", "gpt2")
                else batch["decoder_attention_mask"]).bool()
        assert ((got - zero).double() - expected)[real].abs().max() <= 1e-5, site.attn_type


def test_resample_pool_records_real_tokens_with_their_positions():
    model, batch = build("llama_gqa")
    pool = resample_pool(model, [batch], progress=False)
    mask = batch["attention_mask"].bool()
    assert len(pool.positions["target"]) == int(mask.sum())
    assert pool.positions["target"].tolist() == positions(batch["attention_mask"])[mask].tolist()
    capture = HeadCapture()
    with torch.no_grad(), gated(model, None, capture):
        adapter_for(model).loss_and_outputs(model, batch)
    assert torch.equal(pool.outputs[("dec_self", 1)], capture.head_outputs[("dec_self", 1)][mask])
    limited = resample_pool(model, [batch, batch], max_items=2, progress=False)
    assert len(limited.positions["target"]) == int(mask[:2].sum())


def test_resample_ignores_padding_side_and_batching():
    from test_adapter_contract import causal_batch

    model, _ = build("llama_gqa")
    pool = pool_for("llama_gqa", model)
    masking = Resample(pool, seed=0, draw=0)
    gates = full_gates(model)
    gates["dec_self"][0, [0, 3]] = gates["dec_self"][1, 1] = 0.0
    left, right = causal_batch(padding_side="left"), causal_batch(padding_side="right")
    a, b = logits(model, left, gates, masking), logits(model, right, gates, masking)
    real_left, real_right = left["attention_mask"].bool(), right["attention_mask"].bool()
    assert within_rounding(a[real_left], b[real_right])
    for row in range(len(left["input_ids"])):  # each row alone, unpadded
        alone = {k: v[row:row + 1][:, real_left[row]] for k, v in left.items()}
        assert within_rounding(logits(model, alone, gates, masking)[0], a[row][real_left[row]])
    assert (a[real_left] - logits(model, left, gates, Zero())[real_left]).abs().max() > 1e-3


@pytest.mark.parametrize("family, attn_type", [("llama_gqa", "dec_self"), ("gpt2", "dec_self"), ("bart", "enc_dec"),
                                               ("fsmt", "dec_self"), ("fsmt", "enc_self")])
def test_resample_variants_batched_equal_each_alone(family, attn_type):
    model, batch = build(family)
    assert_variants_equal_alone(model, batch, variants(model, attn_type), Resample(pool_for(family, model), 5, 0))


@pytest.mark.parametrize("family", ["llama_gqa", "bart"])
def test_resample_cached_decoding_equals_recomputing_every_step(family):
    """Greedy generate() (a cache: each step's query at the cache's length) equals a loop that recomputes the whole
    prefix every step: the donors follow the positions, not the calls."""
    model, batch = build(family)
    model.generation_config.forced_eos_token_id = None  # (BART forces </s> at the last step; the loop below does not)
    masking = Resample(pool_for(family, model), 1, 2)
    gates = full_gates(model)
    for t in gates:
        gates[t][:, [0, 2]] = 0.0
    steps = 5
    with torch.no_grad(), gated(model, gates, masking=masking):
        cached = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=steps,
                                min_new_tokens=steps, max_length=None, do_sample=False, num_beams=1)
        if family == "llama_gqa":
            ids, mask = batch["input_ids"], batch["attention_mask"]
            for _ in range(steps):
                out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=False)
                ids = torch.cat([ids, out.logits[:, -1].argmax(-1, keepdim=True)], 1)
                mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            recomputed = ids
        else:
            start = model.generation_config.decoder_start_token_id
            ids = torch.full((len(batch["input_ids"]), 1), start)
            for _ in range(steps):
                out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=ids,
                            use_cache=False)
                ids = torch.cat([ids, out.logits[:, -1].argmax(-1, keepdim=True)], 1)
            recomputed = ids
    assert torch.equal(cached, recomputed)


def test_resample_draws_differ_and_repeat():
    model, batch = build("bert")
    pool = pool_for("bert", model)
    gates = full_gates(model)
    gates["enc_self"][0, :] = 0.0
    first = logits(model, batch, gates, Resample(pool, 0, 0))
    assert torch.equal(first, logits(model, batch, gates, Resample(pool, 0, 0)))
    others = [logits(model, batch, gates, Resample(pool, seed, draw)) for seed, draw in ((0, 1), (1, 0))]
    assert all((first - other).abs().max() > 1e-4 for other in others)
    assert pool.donors("source", 0, 0).tolist() == pool.donors("source", 0, 0).tolist()
    # a position past the pool's longest item takes the last position's donor
    site = adapter_for(model).sites(model)[0]
    last = pool.longest("source")
    far = pool.donor_outputs(site, torch.tensor([[last, last + 5]]), 0, 0, like=torch.zeros(1))
    assert torch.equal(far[0, 0], far[0, 1])


# --- The data files ---------------------------------------------------------------------------------------------

def test_constants_and_pool_files_are_safetensors_and_read_back(tmp_path):
    model, batch = build("fsmt")
    constants = mean_constants(model, [batch], data="tiny", progress=False)
    path = constants.save(tmp_path / "constants.safetensors")
    assert int.from_bytes(path.read_bytes()[:8], "little") > 0 and path.read_bytes()[8:9] == b"{"  # a JSON header
    back = HeadConstants.load(path)
    assert back.kind == "mean" and back.meta == constants.meta and back.meta["data"] == "tiny"
    assert back.values.keys() == constants.values.keys()
    assert all(torch.equal(back.values[k], constants.values[k]) for k in constants.values)
    summary = constants.summary()
    assert list(summary.columns) == ["attn_type", "layer", "head", "kind", "norm", "mean", "max_abs"]
    assert len(summary) == 3 * 2 * 4
    pool = resample_pool(model, [batch], progress=False)
    pool_path = pool.save(tmp_path / "pool.safetensors")
    pool_back = ResamplePool.load(pool_path)
    assert all(torch.equal(pool_back.outputs[k], pool.outputs[k]) for k in pool.outputs)
    assert all(torch.equal(pool_back.positions[s], pool.positions[s]) for s in pool.positions)
    assert isinstance(masking_for("mean", constants=path), Mean)
    assert isinstance(masking_for("resample", pool=pool_path), Resample)
    with pytest.raises(ValueError, match="not a head-constants file"):
        HeadConstants.load(pool_path)
    with pytest.raises(ValueError, match="not a resample pool"):
        ResamplePool.load(path)


def test_pruned_heads_constants_are_never_read():
    model, batch = build("llama_gqa")
    constants = random_constants(model)
    pruned = prune_heads(copy.deepcopy(model), {"dec_self": {0: [1]}})
    bad = HeadConstants({k: v.clone() for k, v in constants.values.items()}, "mean")
    bad.values[("dec_self", 0)][1] = float("nan")  # the removed head's row
    gates = full_gates(model)
    gates["dec_self"][0, [0, 2]] = 0.0
    real = batch["attention_mask"].bool()
    assert torch.isfinite(logits(pruned, batch, gates, Mean(bad))[real]).all()
    assert (logits(pruned, batch, gates, Mean(bad)) - logits(pruned, batch, gates, Mean(constants)))[real].abs().max() \
        == 0


def test_one_default_masking():
    """masking=None means the paper's masking in every signature, resolved in headprune.models.masking alone: no
    function of headprune writes another default for a ``masking`` argument (a word there would be one more place
    to change), and the mode None resolves to is the one the schema's masking keys default to."""
    import ast
    from pathlib import Path

    from headprune import config_schema
    from headprune.evaluation.runs import EvalSettings
    from headprune.models.masking import DEFAULT, as_mode, default_word

    root = Path(__file__).resolve().parent.parent
    found = []
    for path in sorted((root / "headprune").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                pairs = list(zip(args.posonlyargs + args.args, [None] * (len(args.posonlyargs + args.args)
                                                                        - len(args.defaults)) + args.defaults))
                pairs += list(zip(args.kwonlyargs, args.kw_defaults))
                found += [f"{path.relative_to(root)}:{node.lineno} {node.name}" for arg, default in pairs
                          if arg.arg == "masking" and default is not None
                          and not (isinstance(default, ast.Constant) and default.value is None)]
            if isinstance(node, ast.ClassDef):  # dataclass fields: EvalSettings.masking
                found += [f"{path.relative_to(root)}:{item.lineno} {node.name}" for item in node.body
                          if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                          and item.target.id == "masking" and item.value is not None
                          and not (isinstance(item.value, ast.Constant) and item.value.value is None)]
    assert not found, f"masking defaults other than None: {found}"

    schema = config_schema.schema()  # the file and each stage's section beside it
    defaults, count = set(), [0]

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "masking" and isinstance(value, dict) and "default" in value:
                    defaults.add(value["default"])
                    count[0] += 1
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert defaults == {DEFAULT.word} and count[0] >= 4  # ablation, pruning, concrete, retrieval_heads
    assert as_masking(None) == as_mode(None) == EvalSettings().masking == MODES[DEFAULT.word]() == Zero()
    assert default_word(None) == "zero" and default_word("uniform") == "uniform"
