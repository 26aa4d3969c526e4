"""Figure 5 (training dynamics): the table and figure, the stage's DAG, and the demo stage end to end."""
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from headprune.report import figures

ROOT = Path(__file__).resolve().parents[1]
STYLE = {"dpi": 50, "width": 3, "height": 2, "font_size": 8}


def pruning_table(epoch_scores, study="toy", metric="bleu"):
    """A scripts/prune.py table: importance order, scope all, 0..100% in steps of 20%."""
    return pd.DataFrame([{"study": study, "order": "importance", "scope": "all", "step": step,
                          "percent_pruned": 20.0 * step, "heads_pruned": 2 * step, "score": score, "metric": metric}
                         for step, score in enumerate(epoch_scores)])


TABLES = {
    10: pruning_table([30.0, 29.0, 27.0, 20.0, 5.0, 0.0]),
    1: pruning_table([8.0, 6.4, 4.8, 3.2, 1.6, 0.0]),
    2: pruning_table([0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),  # an epoch with nothing learned yet
}


def test_table_stacks_epochs_with_the_score_relative_to_each_unpruned_model():
    table = figures.figure5_table(TABLES)
    assert list(table.columns) == figures.FIGURE5_COLUMNS
    assert list(table.epoch) == [1] * 6 + [2] * 6 + [10] * 6
    epoch1 = table[table.epoch == 1]
    assert list(epoch1.unpruned_score) == [8.0] * 6
    assert list(epoch1.relative_percent) == pytest.approx([100.0, 80.0, 60.0, 40.0, 20.0, 0.0])  # linear: the paper's early phase
    epoch10 = table[table.epoch == 10]
    assert list(epoch10.relative_percent) == pytest.approx([100.0, 290 / 3, 90.0, 200 / 3, 50 / 3, 0.0])
    assert table[table.epoch == 2].relative_percent.isna().all()  # no unpruned score to compare with
    # rows come out sorted whatever order the prune table had
    shuffled = {1: TABLES[1].sample(frac=1.0, random_state=0)}
    assert list(figures.figure5_table(shuffled).percent_pruned) == [0, 20, 40, 60, 80, 100]


@pytest.mark.parametrize("tables, message", [
    ({}, "no pruning tables"),
    ({1: pruning_table([5.0, 4.0]).iloc[1:]}, "0% pruned"),
    ({1: pruning_table([5.0, 4.0]), 2: pruning_table([5.0, 4.0], study="other")}, "expected one study"),
    ({1: pruning_table([5.0]).drop(columns="score")}, "missing columns"),
])
def test_table_refuses_inconsistent_inputs(tables, message):
    with pytest.raises(ValueError, match=message):
        figures.figure5_table(tables)


def test_figure_draws_the_csv(tmp_path):
    csv = tmp_path / "figure5.csv"
    figures.figure5_table(TABLES).to_csv(csv, index=False)
    table = pd.read_csv(csv)
    figure = figures.build_figure5(table, STYLE)
    drawn = figures.plotted_lines(figure)
    assert set(drawn.panel) == {"toy: pruned model", "relative to the unpruned model"}
    for panel, column in (("toy: pruned model", "score"), ("relative to the unpruned model", "relative_percent")):
        for epoch, rows in table.groupby("epoch"):
            line = drawn[(drawn.panel == panel) & (drawn.label == f"epoch {epoch}")]
            assert list(line.x) == list(rows.percent_pruned)
            expected, got = list(rows[column]), list(line.y)
            assert all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(expected, got)), (panel, epoch)
    colors = drawn.drop_duplicates("label").color
    assert colors.nunique() == 3  # one colour per epoch
    paths = figures.figure5(table, tmp_path / "f5.png", tmp_path / "f5.pdf", STYLE)
    assert paths == [str(tmp_path / "f5.png"), str(tmp_path / "f5.pdf")]
    assert (tmp_path / "f5.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="duplicate"):
        figures.build_figure5(pd.concat([table, table]), STYLE)


# ----------------------------------------------------------------------------------------------
# The stage in the workflow


def snakemake(*args, cwd=ROOT, timeout=900):
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def job_counts(stdout: str) -> dict[str, int]:
    table = stdout.split("Job stats:")[1].split("total")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", table, re.M)}


def write_config(tmp_path, change, base="config.yaml"):
    config = yaml.safe_load((ROOT / base).read_text())
    change(config)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_paper_dry_run_trains_once_and_prunes_every_checkpoint():
    result = snakemake("-n")
    assert result.returncode == 0, result.stderr
    counts = job_counts(result.stdout)
    epochs = yaml.safe_load((ROOT / "config.yaml").read_text())["dynamics"]["train"]["checkpoint_epochs"]
    assert counts["prepare_iwslt"] == counts["train_dynamics"] == counts["plot_dynamics"] == 1
    assert counts["dynamics_importance"] == counts["dynamics_prune"] == len(epochs) == 7
    assert "demo_iwslt" not in counts
    for epoch in epochs:
        assert f"results/iwslt14_de_en/epoch{epoch}/pruning_importance.csv" in result.stdout


def test_without_a_dynamics_section_the_stage_is_off(tmp_path):
    result = snakemake("-n", "--configfile", str(write_config(tmp_path, lambda c: c.pop("dynamics"))))
    assert result.returncode == 0, result.stderr
    assert "train_dynamics" not in job_counts(result.stdout)


@pytest.mark.parametrize("change, message", [
    (lambda c: c["dynamics"]["train"].update(checkpoint_epochs=[1, 50]), "dynamics.train.checkpoint_epochs"),
    (lambda c: c["dynamics"]["train"].update(checkpoint_epochs=[5, 2]), "must be increasing"),
    (lambda c: c["dynamics"].update(importance_set="dev"), "'dev' is not one of"),
    (lambda c: c["dynamics"]["train"].update(learning_rate=1), "'learning_rate' was unexpected"),
    (lambda c: c["dynamics"].update(name="mnli"), "dynamics.name 'mnli'"),
])
def test_bad_dynamics_config_stops_before_any_job(tmp_path, change, message):
    result = snakemake("-n", "--configfile", str(write_config(tmp_path, change)))
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert "Job stats" not in result.stdout


@pytest.fixture(scope="module")
def demo_stage(demo_run):
    """The dynamics stage's outputs in the session's finished demo (conftest.demo_run: the whole demo and its
    report, which the other demo tests read too; this stage alone would take another minute)."""
    return demo_run / "results" / "demo"


def test_demo_stage_trains_prunes_and_reports(demo_stage):
    config = yaml.safe_load((ROOT / "demo" / "config.yaml").read_text())["dynamics"]
    epochs = config["train"]["checkpoint_epochs"]
    for epoch in epochs:
        assert (demo_stage / "demo_de_en" / "checkpoints" / f"epoch{epoch}.tar.bz2").is_file()
        importance = pd.read_csv(demo_stage / "demo_de_en" / f"epoch{epoch}" / "head_importance.csv")
        assert len(importance) == 3 * config["layers"] * config["heads"]
    history = pd.read_csv(demo_stage / "demo_de_en" / "training.csv")
    assert list(history.epoch) == list(range(1, config["train"]["epochs"] + 1))
    assert history.train_loss.is_monotonic_decreasing and history.valid_nll.is_monotonic_decreasing

    table = pd.read_csv(demo_stage / "figures" / "demo_de_en" / "figure5.csv")
    assert sorted(table.epoch.unique()) == epochs
    assert len(table) == len(epochs) * 11  # 0%, 10%, ..., 100% of the 24 heads
    unpruned = table[table.percent_pruned == 0].set_index("epoch").score
    assert unpruned[epochs[-1]] > unpruned[epochs[0]] + 20  # the model learns between the checkpoints
    assert (table[table.percent_pruned == 100].score < 5).all()  # nothing translates without heads
    assert (table[table.percent_pruned == 0].relative_percent.round(6) == 100).all()
    for epoch in epochs:  # each epoch's curve is its own pruning job's output, unchanged
        pruned = pd.read_csv(demo_stage / "demo_de_en" / f"epoch{epoch}" / "pruning_importance.csv")
        assert list(table[table.epoch == epoch].score) == list(pruned.sort_values("percent_pruned").score)

    assert (demo_stage / "figures" / "demo_de_en" / "figure5.pdf").read_bytes()[:5] == b"%PDF-"
    html = (demo_stage / "report.html").read_text(errors="replace")
    assert "figure5.png" in html and "Figure 5" in html
