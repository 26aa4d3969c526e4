"""benchmarks/ablation_sweep.py --masking (issue #32 item 7): the modes' data are computed on the study's training
split, not its test set, and a worker evaluating a job under a mode scores each head as the pipeline's own
evaluation under that mode does (EvalSettings masking, constants, pool). In-process, on the toy Llama size."""
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("ablation_sweep_bench", ROOT / "benchmarks" / "ablation_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def keep_threads(monkeypatch):
    import headprune.workflow

    monkeypatch.setattr(headprune.workflow, "keep_freed_memory", lambda: None)  # the worker's process-wide mallopt
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def tiny_study(bench, folder: Path) -> dict:
    """The benchmark's toy Llama perplexity study, its weights spread (std 0.3) so that the modes differ clearly."""
    from transformers import AutoModelForCausalLM

    args = SimpleNamespace(model="llama-tiny", vocab=300, windows=3, window=24, scores=["language_modeling"],
                           threads=1, device="cpu", context_lengths=[64], depths=[50], needles=1, max_new_tokens=4,
                           constants_items=4, constants_batch_size=2, hflm_batch_size=2)
    study, = bench.llama_studies(folder, args)
    model = AutoModelForCausalLM.from_pretrained(study["folder"])
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    model.save_pretrained(study["folder"])
    return study


def test_worker_under_each_mode_scores_as_the_pipeline_and_the_data_are_not_the_test_set(bench, keep_threads,
                                                                                         tmp_path):
    from headprune.evaluation.perplexity import load_windows, window_batches
    from headprune.evaluation.runs import (EvalSet, EvalSettings, all_heads, gates_without, head_name, parse_head_name,
                                            run, score)
    from headprune.models.head_constants import HeadConstants
    from headprune.models.loading import load_causal_lm
    from headprune.scoring.constants import mean_constants

    study = tiny_study(bench, tmp_path / "study")
    data = bench.mode_data(study, ["zero", "mean", "optimal", "resample"], tmp_path / "modes",
                           optimal={"steps": 3, "seed": 1}, resample_items=2)
    assert set(data) >= {"mean", "optimal", "resample"} and "zero" not in data
    assert data["optimal"]["steps"] == 3 and data["optimal"]["per_step"] > 0 and data["optimal"]["rows"] == 2
    for mode in ("mean", "optimal", "resample"):
        assert data[mode]["seconds"] > 0 and Path(data[mode]["path"]).exists()

    model, tokenizer = load_causal_lm(study["folder"])
    mean = HeadConstants.load(data["mean"]["path"])
    on_train = mean_constants(model, window_batches(load_windows(study["importance"]["windows"]), 2), progress=False)
    on_test = mean_constants(model, window_batches(load_windows(study["windows"]), 2), progress=False)
    assert all(torch.equal(mean.values[key], on_train.values[key]) for key in on_train.values)
    assert not all(torch.allclose(mean.values[key], on_test.values[key]) for key in on_test.values)

    chunks = load_windows(study["windows"])
    evalset = EvalSet("language_modeling", chunks, chunks, "perplexity")
    heads = [head_name(head) for head in all_heads(model)][::3]  # 8 heads in 2 layers: 3 of them, in both layers
    scored = {}
    for mode in ("zero", "mean", "optimal", "resample"):
        job = bench.worker_study(bench.masked(study, mode, data))  # what run_worker hands the worker process
        report = bench.worker(job, heads, "cpu", 1, 100, 256, paired=True, scores=True)
        assert report["variants"] == len(heads) and report["a_here"] > 0
        settings = EvalSettings(batch_size=100, masking=job["masking"])
        direct = [score(evalset, run(model, tokenizer, evalset, gates_without(model, [parse_head_name(head)]),
                                     settings)) for head in heads]
        assert report["scores"] == pytest.approx(direct, rel=1e-5), mode
        scored[mode] = report["scores"]
    for mode in ("mean", "optimal", "resample"):  # the mode reached the worker: its scores are not zero masking's
        assert all(abs(a - b) > 1e-3 * abs(b) for a, b in zip(scored[mode], scored["zero"])), mode
