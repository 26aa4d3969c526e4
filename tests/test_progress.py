"""Progress lines in a job's log (headprune.io.progress): when they come, what they say, what they cost, and
that the evaluation loops report every (gate setting, item) row once without changing their outputs."""
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import DigitTokenizer, bert_batch, tiny_bert, tiny_fsmt
from test_adapter_contract import tiny_llama_gqa
from headprune.io.progress import ENV, Progress, counted, duration, interval

ROOT = Path(__file__).resolve().parents[1]
LOGGER = "test.progress"


class Clock:
    """A clock that moves only when told to."""

    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def messages(caplog, name=LOGGER):
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_lines_come_every_interval_with_done_rate_and_time_left(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    with Progress(2000, "ablate", "rows", log=logging.getLogger(LOGGER), every=5, clock=clock) as progress:
        for _ in range(20):
            clock.now += 1
            progress.update(100)
    assert messages(caplog) == [
        "ablate: 500/2000 rows (25%), 100 rows/s, 15 s left",
        "ablate: 1000/2000 rows (50%), 100 rows/s, 10 s left",
        "ablate: 1500/2000 rows (75%), 100 rows/s, 5 s left",
        "ablate: done 2000/2000 rows in 20 s, 100 rows/s",  # no 100% line before the final one
    ]


def test_the_interval_counts_from_the_last_line_and_slow_steps_report_each(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    with Progress(10, "train", "steps", log=logging.getLogger(LOGGER), every=5, clock=clock) as progress:
        for seconds in (3, 3, 3, 12, 1):
            clock.now += seconds
            progress.update()
    assert messages(caplog) == [
        "train: 2/10 steps (20%), 0.333 steps/s, 24 s left",  # at 6 s
        "train: 4/10 steps (40%), 0.190 steps/s, 32 s left",  # at 21 s: the next line is due 5 s after the last
        "train: stopped at 5/10 steps (50%) after 22 s, 0.227 steps/s",
    ]


def test_settings_worth_and_a_note(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    calls = []
    progress = Progress(12 * 400, "classify, 12 gate settings x 400 examples", "rows", per=(400, "settings"),
                        log=logging.getLogger(LOGGER), every=60, clock=clock)
    progress.note = lambda: calls.append(1) or "loss 0.123"
    for _ in range(10):
        clock.now += 9
        progress.update(480)
    progress.close()
    progress.close()  # once only
    assert messages(caplog) == [
        "classify, 12 gate settings x 400 examples: 3360/4800 rows (70%) = 8.4/12 settings, 53.3 rows/s, 27 s left, "
        "loss 0.123",
        "classify, 12 gate settings x 400 examples: done 4800/4800 rows = 12 settings in 1 min 30 s, 53.3 rows/s, "
        "loss 0.123",
    ]
    assert len(calls) == 2  # the note is made only for the lines written


def test_a_fast_loop_writes_one_final_line(caplog):
    caplog.set_level(logging.INFO)
    total = 0
    for item in counted(range(10000), "fast loop", "items", log=logging.getLogger(LOGGER), every=5):
        total += item
    assert total == sum(range(10000))
    (line,) = messages(caplog)
    assert line.startswith("fast loop: done 10000/10000 items in 0 s, ") and line.endswith(" items/s")


def test_unknown_total(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()

    def items():
        for i in range(12):
            clock.now += 1
            yield i

    read = counted(items(), "read", "items", log=logging.getLogger(LOGGER), every=5, clock=clock)
    assert list(read) == list(range(12))
    assert messages(caplog) == ["read: 5 items, 1.0 items/s", "read: 10 items, 1.0 items/s",
                                "read: done 12 items in 12 s, 1.0 items/s"]


def test_the_final_line_comes_when_the_loop_breaks_or_fails(caplog):
    caplog.set_level(logging.INFO)
    clock = Clock()
    for i in counted(range(10), "search", "items", log=logging.getLogger(LOGGER), every=5, clock=clock):
        clock.now += 1
        if i == 2:
            break
    with pytest.raises(RuntimeError):
        with Progress(4, "evaluate", "batches", log=logging.getLogger(LOGGER), every=5, clock=clock) as progress:
            clock.now += 2
            progress.update()
            raise RuntimeError("out of memory")
    assert messages(caplog) == ["search: stopped at 2/10 items (20%) after 3 s, 0.667 items/s",
                                "evaluate: stopped at 1/4 batches (25%) after 2 s, 0.500 batches/s"]


def test_disabled_logs_nothing_and_no_work_logs_its_end(caplog):
    caplog.set_level(logging.INFO)
    with Progress(10, "quiet", log=logging.getLogger(LOGGER), every=0, enabled=False) as progress:
        progress.update(10)
    with Progress(0, "nothing to do", "rows", log=logging.getLogger(LOGGER), clock=Clock()):
        pass
    assert messages(caplog) == ["nothing to do: done 0/0 rows in 0 s"]


def test_the_interval_from_the_environment(monkeypatch, caplog):
    monkeypatch.delenv(ENV, raising=False)
    assert interval() == 5.0 and Progress(1).every == 5.0
    monkeypatch.setenv(ENV, "0.5")
    assert Progress(1).every == 0.5 and Progress(1, every=2).every == 2
    for wrong in ("soon", "-1", "nan"):
        monkeypatch.setenv(ENV, wrong)
        with caplog.at_level(logging.WARNING):
            assert interval() == 5.0
    assert len([r for r in caplog.records if ENV in r.getMessage()]) == 3


def test_durations():
    assert [duration(s) for s in (0, 7.6, 59.4, 60, 87, 3599, 3600, 7500, float("inf"))] == [
        "0 s", "8 s", "59 s", "1 min 00 s", "1 min 27 s", "59 min 59 s", "1 h 00 min", "2 h 05 min", "?"]


# --- the evaluation loops ----------------------------------------------------------------------------------


def rows_lines(caplog, name):
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_run_variants_reports_every_row_once_and_its_outputs_do_not_change(monkeypatch, caplog):
    """The ablation job's loop: all variants x all windows, counted in rows as the variant groups finish."""
    from headprune.evaluation.runs import EvalSet, EvalSettings, gates_without, run_variants

    monkeypatch.setenv(ENV, "0")  # a line at every update
    model = tiny_llama_gqa()
    windows = torch.randint(3, 40, (12, 10), generator=torch.Generator().manual_seed(0)).tolist()
    evalset = EvalSet("language_modeling", windows, windows, "perplexity")
    gates = [None] + [gates_without(model, [("dec_self", layer, head)]) for layer in range(2) for head in range(4)]
    settings = dict(batch_size=5, variant_batch_size=10)
    quiet = run_variants(model, None, evalset, gates, EvalSettings(progress=False, **settings))
    caplog.set_level(logging.INFO)
    reported = run_variants(model, None, evalset, gates, EvalSettings(**settings))
    assert reported == quiet
    lines = rows_lines(caplog, "headprune.evaluation.perplexity")
    what = "perplexity, 9 gate settings x 12 windows: "
    assert all(line.startswith(what) for line in lines), lines
    assert lines[-1].startswith(what + "done 108/108 rows = 9 settings in ")
    done = [int(line[len(what):].split("/")[0]) for line in lines[:-1]]
    assert done == sorted(done) and 1 < len(done) and done[-1] < 108  # several lines, counts only grow
    assert all("/108 rows (" in line and "/9 settings, " in line and " left" in line for line in lines[:-1])

    caplog.clear()
    run_variants(model, None, evalset, gates, EvalSettings(progress=False, **settings))
    assert not rows_lines(caplog, "headprune.evaluation.perplexity")


def test_classification_and_translation_count_every_row(monkeypatch, caplog):
    from conftest import variants
    from headprune.evaluation.evaluate import predict_classes_variants, translate_variants

    monkeypatch.setenv(ENV, "3600")  # the final lines only
    caplog.set_level(logging.INFO)
    bert = tiny_bert()
    batches = [bert_batch(seed=1), bert_batch(seed=2, batch=3)]
    predict_classes_variants(bert, batches, variants(bert, "enc_self"), variant_batch_size=8, progress=True)
    (line,) = rows_lines(caplog, "headprune.evaluation.evaluate")
    assert line.startswith("classify, 4 gate settings x 7 examples: done 28/28 rows = 4 settings in ")

    caplog.clear()
    fsmt = tiny_fsmt()
    sources = ["5 6 7", "8 9", "10 11 12 13", "14"]
    translate_variants(fsmt, DigitTokenizer(), sources, variants(fsmt, "dec_self"), beam=2, batch_size=3,
                       variant_batch_size=6, max_len_a=1.0, max_len_b=3, progress=True)
    (line,) = rows_lines(caplog, "headprune.evaluation.evaluate")
    assert line.startswith("translate, 4 gate settings x 4 sentences: done 16/16 rows = 4 settings in ")


RULE_LOG = """
import sys, types
import torch
sys.path.insert(0, "tests")
from test_adapter_contract import tiny_llama_gqa
from headprune.evaluation.runs import EvalSet, EvalSettings, gates_without, run_variants
from headprune.workflow import logged

with logged(types.SimpleNamespace(log=[sys.argv[1]], rule="evaluate")) as log:
    model = tiny_llama_gqa()
    model.save_pretrained(sys.argv[1] + ".model")  # transformers' own bars ("Writing model shards") stay out
    model = type(model).from_pretrained(sys.argv[1] + ".model")
    windows = torch.randint(3, 40, (6, 8), generator=torch.Generator().manual_seed(0)).tolist()
    gates = [None] + [gates_without(model, [("dec_self", 0, head)]) for head in range(4)]
    run_variants(model, None, EvalSet("language_modeling", windows, windows, "perplexity"), gates,
                 EvalSettings(batch_size=3))
    log.info("eval time")
"""


def test_a_rule_log_gets_plain_timestamped_lines(tmp_path):
    """In a job (headprune.workflow.logged) the lines land in the rule's log, one per line, no carriage
    returns (nor transformers' bars when it saves and loads a model, though imported before the log began);
    a job faster than the interval writes the final line alone."""
    log = tmp_path / "logs" / "evaluate.log"
    result = subprocess.run([sys.executable, "-c", RULE_LOG, str(log)], cwd=ROOT, capture_output=True, text=True,
                            env={**__import__("os").environ, ENV: "5"})
    assert result.returncode == 0, result.stderr
    text = log.read_text()
    assert "\r" not in text
    lines = text.splitlines()
    progress = [line for line in lines if "perplexity, 5 gate settings x 6 windows" in line]
    assert len(progress) == 1, text
    assert " INFO perplexity, 5 gate settings x 6 windows: done 30/30 rows = 5 settings in " in progress[0]
    assert progress[0][:4].isdigit() and lines[-1].endswith("eval time")
