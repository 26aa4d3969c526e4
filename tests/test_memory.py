"""Memory as a goal (issue #57): the LM head's logits reduced in chunks of positions equal the whole-tensor
reductions (float64), whatever the family does after its output layer."""
import numpy as np
import pytest
import torch
from transformers import (CohereConfig, CohereForCausalLM, Gemma2Config, Gemma2ForCausalLM, LlamaConfig,
                          LlamaForCausalLM)

from headprune.evaluation.loglikelihoods import loglikelihood_variants
from headprune.evaluation.perplexity import window_batches, window_nll_variants
from headprune.evaluation.runs import all_heads, gates_without
from headprune.analyses.screening import gradient_screens
from headprune.models import lm_head
from headprune.models.families.causal_lm import CausalLMAdapter

VOCAB = 97
SMALL = 3 * VOCAB  # three positions of logits at a time


def small(family):
    """A tiny float64 decoder of ``family`` (llama; gemma2: soft-capped logits; cohere: scaled logits)."""
    shape = dict(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=4, max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(0)
    if family == "gemma2":
        model = Gemma2ForCausalLM(Gemma2Config(**shape, final_logit_softcapping=0.5, query_pre_attn_scalar=4))
    elif family == "cohere":
        model = CohereForCausalLM(CohereConfig(**shape, logit_scale=3.0))
    else:
        model = LlamaForCausalLM(LlamaConfig(**shape, initializer_range=0.3))
    return model.double().eval()


def windows(n=5, length=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n, length), generator=g).tolist()


@pytest.fixture(params=["llama", "gemma2", "cohere"])
def model(request):
    return small(request.param)


def chunked(monkeypatch, budget=SMALL):
    monkeypatch.setattr(lm_head, "LOGITS_AT_ONCE", budget)


def test_final_logits_are_the_models_own(model):
    ids = torch.tensor(windows(2))
    hidden, _ = lm_head.hidden_and_outputs(model, input_ids=ids)
    torch.testing.assert_close(lm_head.logits_of(model, hidden), model(input_ids=ids).logits, rtol=0, atol=1e-12)


def test_perplexity_chunked_equals_whole(model, monkeypatch):
    batches = window_batches(windows(), 5)
    heads = all_heads(model)
    gates = [None, gates_without(model, heads[:1]), gates_without(model, heads[3:6])]
    whole = window_nll_variants(model, batches, gates, variant_batch_size=8)
    calls = []
    monkeypatch.setattr(lm_head, "logits_of", lambda m, h, own=lm_head.logits_of: calls.append(len(h)) or own(m, h))
    chunked(monkeypatch)
    parts = window_nll_variants(model, batches, gates, variant_batch_size=8)
    assert calls and max(calls) <= 3  # the chunked path ran, three positions at a time
    np.testing.assert_allclose(np.asarray(parts), np.asarray(whole), rtol=0, atol=1e-6)
    assert np.ptp(np.asarray(whole)[:, :, 0], axis=0).max() > 1e-3  # the gates change the NLLs


def test_loglikelihoods_chunked_equal_whole(model, monkeypatch):
    chunks = windows(6, 7, seed=1)
    pairs = [(c[:4], c[4:]) for c in chunks] + [(chunks[0][:4], chunks[1][4:]), (chunks[0][:5], chunks[0][5:6])]
    gates = [None, gates_without(model, all_heads(model)[2:5])]
    kwargs = dict(max_length=16, batch_size=4, variant_batch_size=8)
    whole = loglikelihood_variants(model, pairs, gates, **kwargs)
    chunked(monkeypatch, budget=VOCAB)
    parts = loglikelihood_variants(model, pairs, gates, **kwargs)
    np.testing.assert_allclose([[s for s, _ in v] for v in parts], [[s for s, _ in v] for v in whole], atol=1e-6, rtol=0)
    assert [[g for _, g in v] for v in parts] == [[g for _, g in v] for v in whole]


def test_loss_and_its_gradient_chunked_equal_whole(model, monkeypatch):
    ids = torch.tensor(windows(3, 8))
    mask = torch.ones_like(ids)
    mask[0, -2:] = 0  # padding: positions that predict nothing
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(ids % 5 == 0, -100)}

    def loss_and_grad():
        model.zero_grad()
        loss, _ = CausalLMAdapter().loss_and_outputs(model, batch)
        loss.backward()
        return loss.detach(), model.model.norm.weight.grad.clone()

    whole = loss_and_grad()
    chunked(monkeypatch)
    parts = loss_and_grad()
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-6)


def test_screens_chunked_equal_whole(monkeypatch):
    model = small("llama")
    batches = window_batches(windows(4, 10), 2)
    whole = gradient_screens(model, batches)
    chunked(monkeypatch)
    parts = gradient_screens(model, batches)
    np.testing.assert_allclose(parts[["first_order", "fisher", "importance"]].to_numpy(),
                               whole[["first_order", "fisher", "importance"]].to_numpy(), rtol=0, atol=1e-6)
    assert whole.first_order.abs().max() > 1e-4


def test_an_unknown_final_processing_is_refused(monkeypatch):
    model = small("llama")
    forward = model.forward

    def doubled(*args, **kwargs):  # a family that processes its logits in a way not declared
        out = forward(*args, **kwargs)
        out.logits = out.logits * 2
        return out

    model.forward = doubled
    with pytest.raises(ValueError, match="processes its output layer's logits"):
        lm_head.hidden_and_outputs(model, input_ids=torch.tensor(windows(1)))


# --- out of memory is one line; batches sized from the memory there is -------------------------------------------

BIG_VOCAB = 50_000


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    """A model folder: 2 layers of 16 heads (eager attention weights: 16 x window^2 a row), a 50k-token vocabulary;
    and a text of 4,000 of its tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("models") / "wide-llama"
    words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(BIG_VOCAB)}, "w0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0").save_pretrained(folder)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=BIG_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=16, num_key_value_heads=16)).save_pretrained(folder)
    rng = np.random.default_rng(0)
    text = folder.parent / "text.txt"
    text.write_text(" ".join(f"w{i}" for i in rng.integers(1, BIG_VOCAB, 4000)))
    return folder, text


# The command in a child that reports its own peak resident memory as it exits
MEASURED = ("import resource, sys\nfrom headprune.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
            "except SystemExit as exit:\n    code = exit.code\n"
            "print('peak', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(code)")


def cli(*args):
    """The headprune command in a subprocess: (exit status, stderr, its peak resident memory in bytes)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", MEASURED, *map(str, args)], capture_output=True, text=True)
    *err, peak = done.stderr.strip().splitlines()
    return done.returncode, "\n".join(err), int(peak.split()[1]) * 1024


def test_the_cli_within_a_small_max_memory(wide, tmp_path):
    from headprune.models.memory import parse_size

    folder, text = wide
    # 16 settings of a layer x 3 windows share a pass: 48 rows of 384 tokens, 0.9 GB of attention weights alone
    code, err, peak = cli("sweep", folder, "--data", text, "--window", 384, "--max-items", 3, "--resamples", 10,
                          "--max-memory", "1.5GB", "--out", tmp_path / "ablation.csv")
    assert code == 0, err
    assert peak <= parse_size("1.5GB"), f"peak {peak / 2**30:.2f} GB"
    assert (tmp_path / "ablation.csv").exists() and "variant rows a pass" in err


def test_a_hand_set_size_that_cannot_fit_is_refused(wide, tmp_path):
    folder, text = wide
    code, err, _ = cli("sweep", folder, "--data", text, "--window", 256, "--max-items", 8, "--max-memory", "1.5GB",
                       "--variant-batch-size", 100000, "--out", tmp_path / "ablation.csv")
    assert code == 2 and err.strip().splitlines()[-1].startswith("headprune: error: --variant-batch-size 100000: ")
    assert "at most" in err and not (tmp_path / "ablation.csv").exists()


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.40 GiB"),
                                   MemoryError(),
                                   RuntimeError("[enforce fail at alloc_cpu.cpp:117] . DefaultCPUAllocator: not "
                                                "enough memory: you tried to allocate 6400000000 bytes.")])
def test_out_of_memory_is_one_line(error, monkeypatch, tmp_path, capsys):
    from headprune import cli as command
    from headprune.workflow import failure_line

    def runs_out(*args, **kwargs):  # deep inside an evaluation, and wrapped on its way out
        try:
            raise error
        except Exception as inner:
            raise ValueError("while scoring") from inner

    text = tmp_path / "text.txt"
    text.write_text("a b c")
    monkeypatch.setattr(command, "load", lambda args: (small("llama"), None, None, "t"))
    monkeypatch.setattr(command, "scores", runs_out)
    with pytest.raises(SystemExit) as exit:
        command.main(["score", str(tmp_path / "model"), "--data", str(text), "--out", str(tmp_path / "imp.csv")])
    err = capsys.readouterr().err
    assert exit.value.code == 1 and len(err.strip().splitlines()) == 1 and "out of" in err
    assert "lower --variant-batch-size" in err and not (tmp_path / "imp.csv").exists()
    with pytest.raises(ValueError) as raised:
        runs_out()
    assert "lower ablation.variant_batch_size" in failure_line(raised.value)  # a pipeline job's line
    assert failure_line(ValueError("a bug")) is None  # a bug keeps its traceback


# --- the pipeline's side: what a job asks SLURM for, and the rows it then takes ------------------------------------


def demo_pipeline(tmp_path, edit=lambda config: None):
    import yaml

    from headprune.config_schema import validate
    from headprune.studies import Pipeline

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    config = yaml.safe_load((root / "demo" / "config.yaml").read_text())
    edit(config)
    validate(config)
    return Pipeline(config)


def test_the_weights_on_disk_are_counted_from_the_safetensors_headers(tmp_path):
    from headprune.models.memory import parameters_on_disk

    model = small("llama")  # tied or not, save_pretrained writes each tensor once, as parameters() counts it
    model.save_pretrained(tmp_path / "m")
    assert parameters_on_disk(tmp_path / "m") == sum(p.numel() for p in model.parameters())
    assert parameters_on_disk(tmp_path / "nothing yet") is None


def test_a_jobs_memory_worked_by_hand():
    from headprune.models.memory import job_mb

    # (MB of 2^20 bytes) 135M float32 weights (514.98 MB) + 1,024 of Python and torch + 1,536 of headroom
    # = 3,074.98 -> 3,100
    assert job_mb(135_000_000) == 3100
    # 8B bfloat16 (15,258.8 MB): the headroom is 1.5 x the weights (22,888.2); 1,024 + both = 39,171 -> 39,200
    assert job_mb(8_000_000_000, "bfloat16") == 39200
    # training it all: four copies of the weights (weights, gradients, Adam's moments)
    assert job_mb(135_000_000, copies=4) == 100 * -(-(1024 + 4 * 135_000_000 * 4 / 2**20 + 1536) // 100)


def test_a_model_rule_asks_for_what_its_job_uses_and_the_config_wins(tmp_path, monkeypatch):
    from headprune.models.memory import job_mb
    from headprune.studies import Study

    monkeypatch.setattr(Study, "model_path", property(lambda study: str(tmp_path / study.name)))
    pipeline = demo_pipeline(tmp_path, lambda config: config["resources"]["default"].update(mem_mb=1000))
    study = pipeline.study("tiny_llama")
    default = pipeline.config["resources"]["default"]["mem_mb"]
    assert study.resource("ablate", "mem_mb") == default  # a dry run: the model is not on disk yet
    model = small("llama")
    model.save_pretrained(study.model_path)
    parameters = sum(p.numel() for p in model.parameters())
    assert study.resource("ablate", "mem_mb") == job_mb(parameters) != default
    assert study.resource("recover", "mem_mb") == job_mb(parameters, copies=5)
    assert study.resource("collect", "mem_mb") == default  # loads no model
    told = demo_pipeline(tmp_path, lambda config: config["resources"].update(ablate={"mem_mb": 1234}))
    assert told.study("tiny_llama").resource("ablate", "mem_mb") == 1234
    own = demo_pipeline(tmp_path, lambda config: config["models"]["tiny_llama"].update(
        resources={"default": {"mem_mb": 4321}}))
    assert own.study("tiny_llama").resource("ablate", "mem_mb") == 4321


def test_unset_rows_are_what_fits_the_jobs_memory_and_the_scores_do_not_change(monkeypatch):
    from headprune.evaluation.runs import EvalSet, EvalSettings, rows_that_fit, run, score
    from headprune.models import memory

    model = small("llama")
    evalset = EvalSet("language_modeling", windows(6, 40), windows(6, 40), "perplexity")
    assert rows_that_fit(model, None, evalset, EvalSettings()).variant_batch_size == 256  # plenty of memory: the most
    assert rows_that_fit(model, None, evalset, EvalSettings(variant_batch_size=3)).variant_batch_size == 3  # as told
    # a job whose rule asked for little: its resident memory plus room for a few rows of 40 tokens
    row = memory.row_bytes(model, 40)
    monkeypatch.setattr(memory, "host_rss", lambda: 1 << 30)
    memory.limit_job_to(((1 << 30) + memory.fixed_bytes() + 5 * row) >> 20)
    try:
        rows = rows_that_fit(model, None, evalset, EvalSettings()).variant_batch_size
        assert 1 <= rows <= 5
        gates = gates_without(model, [all_heads(model)[0]])
        assert score(evalset, run(model, None, evalset, gates, EvalSettings(progress=False))) == pytest.approx(
            score(evalset, run(model, None, evalset, gates, EvalSettings(variant_batch_size=256, progress=False))),
            rel=1e-12)
        memory.limit_job_to(1 << 10 >> 20 or 1)  # 1 MB: below what the job holds
        with pytest.raises(ValueError, match="not even one row of 40 tokens fits"):
            rows_that_fit(model, None, evalset, EvalSettings())
    finally:
        memory.limit_job_to(None)
