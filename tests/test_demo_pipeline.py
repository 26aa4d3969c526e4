"""End to end: the embedded demo runs the whole DAG offline and produces every table, figure and the report.

The demo run (about four minutes on 2 cores) happens once per test session, in a
temporary working directory, through the same Snakefile the paper's study uses.
"""
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_snakemake(workdir, *args, timeout=1200):
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
               "--configfile", str(ROOT / "demo" / "config.yaml"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("demo")
    result = run_snakemake(workdir, "--cores", "2")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    report = run_snakemake(workdir, "--report", "results/demo/report.html")
    assert report.returncode == 0, report.stderr[-3000:]
    return workdir


def test_demo_produces_every_table_and_figure(demo_run):
    results = demo_run / "results" / "demo"
    for study in ("demo_en_fr", "mnli"):
        for name in ("table1.csv", "table1.md", "figure1_bins.csv", "figure1.png", "figure1.pdf",
                     "figure3.png", "figure3.pdf"):
            path = results / "figures" / study / name
            assert path.stat().st_size > 0, path
        assert (results / "figures" / study / "figure1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (results / "figures" / study / "figure3.pdf").read_bytes()[:5] == b"%PDF-"
    html = (results / "report.html").read_text(errors="replace")
    for name in ("figure1.png", "figure3.png", "table1.md"):
        assert name in html


def test_demo_translation_study_numbers(demo_run):
    results = demo_run / "results" / "demo" / "demo_en_fr"
    importance = pd.read_csv(results / "importance.csv")
    assert len(importance) == 3 * 2 * 4 and set(importance.attn_type) == {"enc_self", "enc_dec", "dec_self"}
    assert (importance.importance >= 0).all() and importance.entropy_normalized.between(0, 1).all()
    ablation = pd.read_csv(results / "ablation.csv")
    assert len(ablation) == 24 and ablation.p_bootstrap.between(0, 1).all()
    assert (ablation.score_full > 50).all()  # the tiny model really learned the task
    assert ablation.delta.min() < -1  # some heads matter
    pruning = pd.read_csv(results / "pruning.csv")
    assert set(pruning.order) == {"importance", "oracle", "random"}
    assert len(pruning) == 3 * 11
    for _, curve in pruning.groupby("order"):
        curve = curve.sort_values("percent_pruned")
        assert curve.score.iloc[0] > 50 and curve.score.iloc[-1] < 5  # no heads left: no translation


def test_demo_classification_study_numbers(demo_run):
    results = demo_run / "results" / "demo" / "mnli"
    ablation = pd.read_csv(results / "ablation.csv")
    assert len(ablation) == 8 and ablation.p_ttest.between(0, 1).all()
    assert (ablation.score_full > 0.5).all()  # chance is 1/3
    assert ablation.significant.equals(ablation.p_ttest < 0.01)
