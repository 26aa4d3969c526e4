"""The Hard Concrete figure, head roles left while pruning by I_h, and the head roles map, on small hand-made
tables whose expected values are worked out by hand."""
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from headprune.report import figures

STYLE = {"dpi": 50, "width": 3, "height": 2, "font_size": 8}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- Hard Concrete figure

def concrete_table(metric="bleu", with_random=True):
    """Four penalties, rows deliberately not in heads_kept order."""
    rows = [  # penalty, heads_kept, score_concrete, score_importance, score_random
        (0.01, 20, 0.81, 0.80, 0.70),
        (0.1, 5, 0.60, 0.55, 0.30),
        (0.001, 30, 0.83, 0.83, 0.82),
        (0.05, 12, 0.75, 0.72, 0.50),
    ]
    table = pd.DataFrame([{"study": "toy", "penalty": p, "heads_kept": k, "heads_total": 36, "score_full": 0.84,
                           "score_concrete": c, "score_importance": i, "score_random": r, "metric": metric}
                          for p, k, c, i, r in rows])
    return table if with_random else table.drop(columns="score_random")


# the same rows sorted by heads_kept by hand: 5, 12, 20, 30
SORTED_KEPT = [5.0, 12.0, 20.0, 30.0]
SORTED = {"score_concrete": [0.60, 0.75, 0.81, 0.83], "score_importance": [0.55, 0.72, 0.80, 0.83],
          "score_random": [0.30, 0.50, 0.70, 0.82]}
SORTED_PENALTIES = ["0.1", "0.05", "0.01", "0.001"]


@pytest.mark.parametrize("metric, scale", [("bleu", 1.0), ("accuracy", 100.0)])
def test_concrete_figure_plots_every_row_sorted_by_heads_kept(metric, scale):
    figure = figures.build_concrete_figure(concrete_table(metric), STYLE)
    lines = figures.plotted_lines(figure)
    labels = {"Hard Concrete gates": "score_concrete", figures.order_labels()["importance"]: "score_importance",
              figures.order_labels()["random"]: "score_random"}
    assert sorted(lines["label"].unique()) == sorted(labels)
    assert len(lines) == 3 * 4
    for label, column in labels.items():
        line = lines[lines["label"] == label]
        assert line["x"].tolist() == SORTED_KEPT
        np.testing.assert_allclose(line["y"].to_numpy(), np.array(SORTED[column]) * scale, rtol=1e-12)
        assert set(line["panel"]) == {"toy: learned gates vs pruning"}
    assert lines.loc[lines["label"] == "Hard Concrete gates", "linestyle"].iloc[0] == "-"
    assert lines.loc[lines["label"] == figures.order_labels()["importance"], "linestyle"].iloc[0] == "-"
    assert lines.loc[lines["label"] == figures.order_labels()["random"], "linestyle"].iloc[0] == ":"

    (ax,) = figure.axes
    # the full model: a dotted horizontal line at score_full, kept out of the legend
    (full,) = [line for line in ax.get_lines() if line.get_label() == "_full model"]
    np.testing.assert_allclose(full.get_ydata(), [0.84 * scale] * 2)
    assert full.get_linestyle() == ":"
    # each Hard Concrete point labelled with its penalty, at the point
    notes = [(t.get_text(), t.xy) for t in ax.texts]
    assert [text for text, _ in notes] == [f"λ={p}" for p in SORTED_PENALTIES]
    np.testing.assert_allclose([xy for _, xy in notes],
                               [(k, s * scale) for k, s in zip(SORTED_KEPT, SORTED["score_concrete"])])
    assert ax.get_xlabel() == "heads kept (of 36)"
    assert ax.get_ylabel() == ("BLEU" if metric == "bleu" else "accuracy (%)")
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == sorted(labels)


def test_concrete_figure_without_random_scores_draws_two_lines_and_writes_files(tmp_path):
    table = concrete_table(with_random=False)
    lines = figures.plotted_lines(figures.build_concrete_figure(table, STYLE))
    assert sorted(lines["label"].unique()) == sorted(["Hard Concrete gates", figures.order_labels()["importance"]])
    assert lines[lines["label"] == "Hard Concrete gates"]["y"].tolist() == SORTED["score_concrete"]

    paths = figures.concrete_figure(table, tmp_path / "c.png", tmp_path / "c.pdf", STYLE)
    assert paths == [str(tmp_path / "c.png"), str(tmp_path / "c.pdf")]
    assert (tmp_path / "c.png").read_bytes()[:8] == PNG_MAGIC
    assert (tmp_path / "c.pdf").read_bytes()[:5] == b"%PDF-"


def test_concrete_figure_refuses_mixed_metrics_and_missing_columns():
    table = concrete_table()
    table.loc[0, "metric"] = "accuracy"
    with pytest.raises(ValueError):
        figures.build_concrete_figure(table, STYLE)
    with pytest.raises(ValueError, match="score_concrete"):
        figures.build_concrete_figure(concrete_table().drop(columns="score_concrete"), STYLE)


# ----------------------------------------------------------------------------- roles left while pruning

def roles_table():
    """Five heads: four encoder heads with a role measured, one decoder head without ('n/a').
    Rows in no particular order; importance order, least first:
    enc(0,1) other 0.1 < dec(0,0) n/a 0.2 < enc(1,1) rare-word 0.3 < enc(0,0) positional 0.5
    < enc(1,0) syntactic 0.9."""
    rows = [("enc_self", 1, 0, 0.9, "syntactic"), ("enc_self", 0, 0, 0.5, "positional"),
            ("dec_self", 0, 0, 0.2, "n/a"), ("enc_self", 1, 1, 0.3, "rare-word"), ("enc_self", 0, 1, 0.1, "other")]
    return pd.DataFrame([{"study": "toy", "attn_type": t, "layer": l, "head": h, "importance": i, "role": r}
                         for t, l, h, i, r in rows])


# step, % pruned, heads left, positional, syntactic, rare-word, other, n/a -- by hand: 20% of 5 heads is one
# head per step, removed in increasing importance.
ROLES_BY_STEP = [
    (0, 0.0, 5, 1, 1, 1, 1, 1),
    (1, 20.0, 4, 1, 1, 1, 0, 1),  # enc(0,1) other gone
    (2, 40.0, 3, 1, 1, 1, 0, 0),  # dec(0,0) n/a gone
    (3, 60.0, 2, 1, 1, 0, 0, 0),  # enc(1,1) rare-word gone
    (4, 80.0, 1, 0, 1, 0, 0, 0),  # enc(0,0) positional gone
    (5, 100.0, 0, 0, 0, 0, 0, 0),  # enc(1,0) syntactic gone
]
STEP_COLUMNS = ["step", "percent_pruned", "heads_left", "positional", "syntactic", "rare-word", "other", "n/a"]


def test_roles_by_step_counts_the_roles_left_by_hand():
    steps = figures.roles_by_step(roles_table(), step_percent=20)
    assert list(steps.columns) == ["study", *STEP_COLUMNS[:-1], "pruned", "n/a"]
    assert (steps["pruned"] == 0).all()  # no head of this full model is already removed
    assert set(steps["study"]) == {"toy"}
    assert steps[STEP_COLUMNS].values.tolist() == [list(row) for row in ROLES_BY_STEP]
    # every head left has exactly one of the counted roles
    assert (steps[["positional", "syntactic", "rare-word", "other", "pruned", "n/a"]].sum(axis=1)
            == steps["heads_left"]).all()


def test_roles_by_step_counts_heads_already_removed_as_pruned():
    table = roles_table()
    table.loc[table.role == "other", "role"] = "pruned"
    steps = figures.roles_by_step(table, step_percent=20)
    assert steps["pruned"].tolist() == [1, 0, 0, 0, 0, 0] and (steps["other"] == 0).all()
    assert (steps[["positional", "syntactic", "rare-word", "other", "pruned", "n/a"]].sum(axis=1)
            == steps["heads_left"]).all()


def test_roles_by_step_with_a_step_that_does_not_divide_the_heads():
    # 50% of 5 heads = 2.5 -> round() -> 2 heads removed (Python rounds half to even), then all 5
    steps = figures.roles_by_step(roles_table(), step_percent=50)
    assert steps[STEP_COLUMNS].values.tolist() == [
        [0, 0.0, 5, 1, 1, 1, 1, 1],
        [1, 50.0, 3, 1, 1, 1, 0, 0],
        [2, 100.0, 0, 0, 0, 0, 0, 0],
    ]


def test_roles_by_step_markdown_has_one_row_per_step(tmp_path):
    steps = figures.roles_by_step(roles_table(), step_percent=20)
    path = figures.roles_by_step_markdown(steps, tmp_path / "md" / "roles.md")
    assert path == str(tmp_path / "md" / "roles.md")
    lines = (tmp_path / "md" / "roles.md").read_text().splitlines()
    assert lines[0].startswith("**Head roles left while pruning by $I_h$** (toy)")
    assert lines[1] == ""
    assert lines[2] == "| % pruned | heads left | positional | syntactic | rare-word | other | n/a |"
    assert lines[3] == "|---:|---:|---:|---:|---:|---:|---:|"
    assert lines[4:] == [f"| {p:.0f} | {left} | " + " | ".join(map(str, counts)) + " |"
                         for _, p, left, *counts in ROLES_BY_STEP]
    assert lines[4:] == ["| 0 | 5 | 1 | 1 | 1 | 1 | 1 |", "| 20 | 4 | 1 | 1 | 1 | 0 | 1 |",
                         "| 40 | 3 | 1 | 1 | 1 | 0 | 0 |", "| 60 | 2 | 1 | 1 | 0 | 0 | 0 |",
                         "| 80 | 1 | 0 | 1 | 0 | 0 | 0 |", "| 100 | 0 | 0 | 0 | 0 | 0 | 0 |"]


def test_roles_by_step_markdown_leaves_out_roles_no_head_has(tmp_path):
    roles = roles_table()
    roles = roles[roles["role"].isin(["syntactic", "other"])].reset_index(drop=True)  # two heads
    steps = figures.roles_by_step(roles, step_percent=50)
    # least important first: other (0.1), then syntactic (0.9)
    assert steps[STEP_COLUMNS].values.tolist() == [[0, 0.0, 2, 0, 1, 0, 1, 0], [1, 50.0, 1, 0, 1, 0, 0, 0],
                                                   [2, 100.0, 0, 0, 0, 0, 0, 0]]
    figures.roles_by_step_markdown(steps, tmp_path / "r.md")
    lines = (tmp_path / "r.md").read_text().splitlines()
    assert lines[2:] == ["| % pruned | heads left | syntactic | other |", "|---:|---:|---:|---:|",
                         "| 0 | 2 | 1 | 1 |", "| 50 | 1 | 1 | 0 |", "| 100 | 0 | 0 | 0 |"]


# ----------------------------------------------------------------------------- head roles map

def translation_roles():
    """2 layers x 2 heads of enc_self with roles measured, and dec_self heads all 'n/a' (decoder heads of a
    translation model), as scripts/head_roles.py writes them; rows out of order."""
    rows = [("dec_self", 1, 1, 0.05, "n/a"), ("enc_self", 1, 0, 0.9, "syntactic"),
            ("enc_self", 0, 1, 0.1, "other"), ("dec_self", 0, 0, 0.6, "n/a"),
            ("enc_self", 0, 0, 0.5, "positional"), ("dec_self", 0, 1, 0.2, "n/a"),
            ("enc_self", 1, 1, 0.3, "rare-word"), ("dec_self", 1, 0, 0.7, "n/a")]
    return pd.DataFrame([{"study": "toy", "attn_type": t, "layer": l, "head": h, "importance": i, "role": r}
                         for t, l, h, i, r in rows])


def test_head_roles_figure_maps_each_head_to_its_role_colour_and_importance_rank():
    figure = figures.build_head_roles_figure(translation_roles(), STYLE)
    # only the measured attention type gets a panel; the all-'n/a' decoder type is left out
    (ax,) = figure.axes
    assert ax.get_title() == "toy Enc-Enc"
    (image,) = ax.get_images()
    colours = image.to_rgba(image.get_array())  # (layer, head, RGBA)
    expected = {(0, 0): "positional", (0, 1): "other", (1, 0): "syntactic", (1, 1): "rare-word"}
    for (layer, head), role in expected.items():
        assert to_hex(colours[layer, head]) == figures.ROLE_COLORS[role]
    # importance rank among all 8 heads, by hand: 0.9 enc(1,0)=1, 0.7 dec=2, 0.6 dec=3, 0.5 enc(0,0)=4,
    # 0.3 enc(1,1)=5, 0.2 dec=6, 0.1 enc(0,1)=7, 0.05 dec=8
    ranks = {(int(round(t.get_position()[1])), int(round(t.get_position()[0]))): t.get_text() for t in ax.texts}
    assert ranks == {(1, 0): "1", (0, 0): "4", (1, 1): "5", (0, 1): "7"}
    # the legend lists the roles present, n/a included, in ROLE_COLORS order
    (legend,) = figure.legends
    assert [t.get_text() for t in legend.get_texts()] == ["positional", "syntactic", "rare-word", "other", "n/a"]


def test_head_roles_figure_writes_png_and_pdf(tmp_path):
    paths = figures.head_roles_figure(translation_roles(), tmp_path / "f" / "roles.png", tmp_path / "f" / "roles.pdf",
                                      STYLE)
    assert paths == [str(tmp_path / "f" / "roles.png"), str(tmp_path / "f" / "roles.pdf")]
    assert (tmp_path / "f" / "roles.png").read_bytes()[:8] == PNG_MAGIC
    assert (tmp_path / "f" / "roles.pdf").read_bytes()[:5] == b"%PDF-"


def test_head_roles_figure_with_no_role_measured_draws_every_type(tmp_path):
    roles = translation_roles()
    roles["role"] = "n/a"
    figure = figures.build_head_roles_figure(roles, STYLE)
    # no type measured: one panel per attention type, in the table's order
    assert [ax.get_title() for ax in figure.axes] == ["toy Dec-Dec", "toy Enc-Enc"]
    for ax in figure.axes:
        (image,) = ax.get_images()
        colours = image.to_rgba(image.get_array())
        assert {to_hex(c) for c in colours.reshape(-1, 4)} == {figures.ROLE_COLORS["n/a"]}
    figures.head_roles_figure(roles, tmp_path / "n.png", tmp_path / "n.pdf", STYLE)
    assert (tmp_path / "n.png").read_bytes()[:8] == PNG_MAGIC
