"""Tiny random models and batches shared by the core tests."""
import functools
import os
import re
from pathlib import Path

import pytest
import torch
from transformers import BatchEncoding, BertConfig, BertForSequenceClassification, FSMTConfig, FSMTForConditionalGeneration

PAD, EOS = 1, 2

# --- Where the device-aware tests run ------------------------------------------------------------------
# The gate, pruning, streaming and retrieval tests put their models and batches through on_test_device and
# compare outputs within tolerance(). By default that is the CPU in float32, each model in the attention its
# test builds it with (mostly eager), and exact float32 tolerances. benchmarks/gpu_check.py runs them again
# with HEADPRUNE_TEST_DEVICE=cuda, HEADPRUNE_TEST_DTYPE=float32|bfloat16, HEADPRUNE_TEST_ATTENTION=eager|sdpa.
TEST_DEVICE = torch.device(os.environ.get("HEADPRUNE_TEST_DEVICE") or "cpu")
TEST_DTYPE = getattr(torch, os.environ.get("HEADPRUNE_TEST_DTYPE") or "float32")
TEST_ATTENTION = os.environ.get("HEADPRUNE_TEST_ATTENTION") or None
SWITCHED = (TEST_DEVICE.type, TEST_DTYPE, TEST_ATTENTION) != ("cpu", torch.float32, None)
# Two computations of one result that differ only in how their kernels sum (batched or alone, cached or
# recomputed) agree to float32's last digits on the CPU; a GPU picks other kernels for other shapes, and
# bfloat16 keeps 8 bits of mantissa (0.4% a rounding), so there a difference is judged against the size of
# the values compared.
RELATIVE_TOLERANCE = {torch.float32: 0.0 if TEST_DEVICE.type == "cpu" else 1e-5, torch.bfloat16: 0.05}
# Equal token ids from two decodings need every step's argmax to agree: bfloat16's rounding turns near-ties
# either way, so those tests hold only in float32.
EXACT_DECODING = TEST_DTYPE == torch.float32
if TEST_DEVICE.type == "cuda":
    torch.set_float32_matmul_precision("highest")  # float32 products, not TF32's 10-bit mantissa
# The torch threads the tests run at: their default (the cores; the registry tables one, tiny matrices only wait on a
# second), or HEADPRUNE_TEST_THREADS for all. CI runs the reference and registry tests at 1 and at 2 threads too, so
# that no comparison holds at one thread count only (tests/tolerances.py).
TEST_THREADS = int(os.environ.get("HEADPRUNE_TEST_THREADS") or 0) or None
if TEST_THREADS:
    torch.set_num_threads(TEST_THREADS)


def threads_for_tests(default: int) -> int:
    """The threads a test that picks its own (``default``) runs at: HEADPRUNE_TEST_THREADS where it is set."""
    return TEST_THREADS or default


# --- How the suite splits over pytest-xdist's workers (README: python -m pytest -q -n 2) -------------------
# Each test file runs whole on one worker, so a module fixture (a trained model, a SLURM cluster) is built once.
# The files that use the session's finished demo (demo_run: about five minutes of both cores) or a SLURM test
# cluster (one at a time: CI gives them one HEADPRUNE_SLURM_ROOT) are one unit, sent first since it takes
# longest. Told apart by their text, a test or fixture taking one of those (the scheduler sees test ids, not
# fixtures; tests/test_suite_split.py checks the text against pytest's collection). xdist's own --dist loadgroup
# marks the ids in a way pytest 9 ignores.
DEMO_GROUP_FIXTURES = ("demo_run", "demo_results", "slurm_cluster")
DEMO_GROUP = re.compile(rf"[(,]\s*({'|'.join(DEMO_GROUP_FIXTURES)})\s*[,)]")


@functools.cache
def in_demo_group(test_file: str) -> bool:
    return bool(DEMO_GROUP.search((ROOT / test_file).read_text()))


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: each collects the same, the demo's group first
        items.sort(key=lambda item: not in_demo_group(item.nodeid.split("::", 1)[0]))


try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # pytest-xdist comes with the test extra; without it the suite runs in one process
    LoadFileScheduling = None

if LoadFileScheduling is not None:
    class DemoFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            test_file = super()._split_scope(nodeid)
            return "demo" if in_demo_group(test_file) else test_file

    @pytest.hookimpl(tryfirst=True)  # before xdist's own, which picks by --dist
    def pytest_xdist_make_scheduler(config, log):
        config.option.loadscopereorder = False  # the collection's order, not the files' test counts
        return DemoFilesTogether(config, log)


def on_test_device(thing):
    """A model moved to the test device and dtype (and attention, where set and the family has it: FSMT keeps
    eager), or a batch (a dict of tensors) or tensor moved to the device; by default the thing itself."""
    if not SWITCHED:
        return thing
    if isinstance(thing, torch.nn.Module):
        thing = thing.to(device=TEST_DEVICE, dtype=TEST_DTYPE)
        if TEST_ATTENTION:
            thing.set_attn_implementation(TEST_ATTENTION)
        return thing
    if isinstance(thing, torch.Tensor):
        return thing.to(TEST_DEVICE)
    return type(thing)({k: v.to(TEST_DEVICE) for k, v in thing.items()})


def tolerance(atol, reference=None):
    """The largest difference allowed where float32 on the CPU allows ``atol``: elsewhere also a share of the
    largest finite value of ``reference`` (the outputs compared; a padding row may hold NaN)."""
    scale = 1.0 if reference is None else float(reference.detach().float().abs().nan_to_num(0.0, 0.0, 0.0).max())
    return atol + RELATIVE_TOLERANCE[TEST_DTYPE] * max(scale, 1.0)


def needs_exact_decoding():
    if not EXACT_DECODING:
        pytest.skip(f"token-for-token equal decodings need float32 (running in {TEST_DTYPE})")


def tiny_bert(seed=0, layers=2, heads=4, hidden=16, num_labels=3):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=50, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=32, num_labels=num_labels, sep_token_id=3, pad_token_id=0,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="eager")
    return on_test_device(_spread_weights(BertForSequenceClassification(config).eval()))


def tiny_fsmt(seed=0, layers=2, heads=4, d_model=16):
    torch.manual_seed(seed)
    config = FSMTConfig(langs=["en", "fr"], src_vocab_size=40, tgt_vocab_size=40, d_model=d_model,
                        encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
                        decoder_attention_heads=heads, encoder_ffn_dim=32, decoder_ffn_dim=32,
                        max_position_embeddings=64, pad_token_id=PAD, bos_token_id=0, eos_token_id=EOS,
                        decoder_start_token_id=EOS, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                        tie_word_embeddings=False)
    return on_test_device(_spread_weights(FSMTForConditionalGeneration(config).eval()))


def tiny_m2m100(seed=0, layers=2, heads=4, d_model=16, share_decoder_input_output_embed=True):
    """fairseq's pre-norm transformer (headprune.models.prenorm): a source vocabulary larger than the
    target one, the output projection shared with the target embeddings."""
    from headprune.models.prenorm import PreNormTransformer, prenorm_config

    torch.manual_seed(seed)
    config = prenorm_config(source_vocab_size=44, target_vocab_size=40, share_all_embeddings=False,
                            share_decoder_input_output_embed=share_decoder_input_output_embed, d_model=d_model,
                            encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
                            decoder_attention_heads=heads, encoder_ffn_dim=32, decoder_ffn_dim=32,
                            max_position_embeddings=64, pad_token_id=PAD, bos_token_id=0, eos_token_id=EOS,
                            decoder_start_token_id=EOS, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                            attn_implementation="eager")
    model = _spread_weights(PreNormTransformer(config).eval())
    with torch.no_grad():  # random pre-norm models end at once; make </s> unlikely so generate() runs on
        model.lm_head.weight[EOS] *= -1
    return on_test_device(model)


def _spread_weights(model, std=0.3):
    """The default init (std 0.02) makes outputs nearly constant; wider weights make every head matter."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, std)
    return model


def bert_batch(seed=1, batch=4, length=9):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 50, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    lengths = [length, length - 3, length - 1, 4][:batch]
    for i, n in enumerate(lengths):
        ids[i, n - 1] = 3  # [SEP]
        ids[i, n:] = 0
        mask[i, n:] = 0
    return on_test_device({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
                           "labels": torch.randint(0, 3, (batch,), generator=g)})


def fsmt_batch(seed=1, batch=3, src_len=7, tgt_len=6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 40, (batch, src_len), generator=g)
    labels = torch.randint(4, 40, (batch, tgt_len), generator=g)
    src_mask = torch.ones_like(src)
    for i, (n_src, n_tgt) in enumerate([(src_len, tgt_len), (src_len - 2, tgt_len - 3), (4, tgt_len - 1)][:batch]):
        src[i, n_src - 1] = EOS
        src[i, n_src:] = PAD
        src_mask[i, n_src:] = 0
        labels[i, n_tgt - 1] = EOS
        labels[i, n_tgt:] = PAD
    decoder = torch.full_like(labels, PAD)
    decoder[:, 0] = EOS
    decoder[:, 1:] = labels[:, :-1]
    decoder[labels == PAD] = PAD
    return on_test_device({"input_ids": src, "attention_mask": src_mask, "decoder_input_ids": decoder,
                           "decoder_attention_mask": (labels != PAD).long(), "labels": labels})


# Every head adapter's family, with a tiny model of it and a batch it reads.
FAMILIES = {"bert": (tiny_bert, bert_batch), "fsmt": (tiny_fsmt, fsmt_batch), "m2m100": (tiny_m2m100, fsmt_batch)}
TRANSLATION_FAMILIES = ["fsmt", "m2m100"]


def tiny_model_and_batch(family):
    make_model, make_batch = FAMILIES[family]
    return make_model(), make_batch()


@pytest.fixture(params=list(FAMILIES))
def model_and_batch(request):
    return tiny_model_and_batch(request.param)


# --- The embedded demo, run once per session and shared by the workflow tests ----------------
# (test_demo_pipeline.py checks its numbers, test_daily_use.py dry-runs changes against it,
# test_slurm.py compares a SLURM run with it.)

import subprocess  # noqa: E402
import sys  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_demo_snakemake(workdir, *args, timeout=2400):
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
               "--configfile", str(ROOT / "demo" / "config.yaml"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """A finished demo run (the whole DAG and the report) in a temporary working directory.

    HEADPRUNE_DEMO_DIR=<a finished demo's working directory> starts from a copy of it (snakemake then
    reruns only what the code changed since), to iterate on the workflow tests without the full demo."""
    workdir = tmp_path_factory.mktemp("demo")
    if os.environ.get("HEADPRUNE_DEMO_DIR"):
        import shutil

        for name in ("data", "results", ".snakemake"):
            # not the warm-start server's socket: that run's server may still be up, and it is its own
            shutil.copytree(Path(os.environ["HEADPRUNE_DEMO_DIR"]) / name, workdir / name, symlinks=True,
                            ignore=shutil.ignore_patterns("*.sock"))
    result = run_demo_snakemake(workdir, "--cores", "2")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    report = run_demo_snakemake(workdir, "--report", "results/demo/report.html")
    assert report.returncode == 0, report.stderr[-3000:]
    return workdir


class DigitTokenizer:
    """Sentences are space-separated token ids: what translate() needs of a tokenizer, for a tiny model."""

    def __call__(self, texts, **_):
        ids = [[int(w) for w in text.split()] + [EOS] for text in texts]
        width = max(map(len, ids))
        return BatchEncoding({"input_ids": torch.tensor([x + [PAD] * (width - len(x)) for x in ids]),
                              "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])})

    def batch_decode(self, generated, skip_special_tokens):
        return [" ".join(str(i) for i in row.tolist() if i not in (0, PAD, EOS)) for row in generated]


def variants(model, attn_type):
    """Three gate settings of one attention type (one head off, a whole layer off, one head kept) and the
    full model: what the batched-variant tests evaluate together and one by one."""
    from headprune.evaluation.runs import gates_keeping_one, gates_without

    return [gates_without(model, [(attn_type, 0, 1)]),
            gates_without(model, [(attn_type, 1, h) for h in range(4)]),
            gates_keeping_one(model, attn_type, 0, 2),
            None]


def repeated(batch, times):
    """A batch repeated once per gate variant, variant-major."""
    return {k: v.repeat(times, *[1] * (v.dim() - 1)) for k, v in batch.items()}
