"""Tables and figures on small synthetic ablation and pruning tables."""
import math

import numpy as np
import pandas as pd
import pytest

from headprune.report import figures

STYLE = {"dpi": 50, "width": 3, "height": 2, "font_size": 8}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def synthetic_ablation(metric="bleu", attn_types=("enc_self", "enc_dec", "dec_self"), layers=3, heads=4, seed=0):
    """One study; deltas spread around 0, every fifth head significant (some up, some down)."""
    rng = np.random.default_rng(seed)
    score_full = 36.05 if metric == "bleu" else 0.834
    spread = 0.5 if metric == "bleu" else 0.005
    rows = []
    for attn_type in attn_types:
        for layer in range(layers):
            for head in range(heads):
                delta = float(rng.normal(0, spread))
                rows.append({"study": "toy", "attn_type": attn_type, "layer": layer, "head": head, "metric": metric,
                             "score_full": score_full, "score": score_full + delta, "delta": delta,
                             "p_bootstrap": float(rng.random()), "p_ttest": math.nan if metric == "bleu" else 0.5,
                             "significant": (layer * heads + head) % 5 == 0, "alpha": 0.01, "n_resamples": 1000})
    return pd.DataFrame(rows)


def synthetic_pruning(studies=("toy",)):
    rows = []
    for study in studies:
        for order, drop in (("importance", 1.0), ("oracle", 2.0), ("random", 3.0)):
            for step in range(6):
                rows.append({"study": study, "order": order, "scope": "all", "step": step,
                             "percent_pruned": 10.0 * step, "heads_pruned": 2 * step,
                             "score": 30.0 - drop * step ** 2, "metric": "bleu"})
        for scope, drop in (("enc_self", 0.5), ("enc_dec", 4.0), ("dec_self", 0.7)):
            for step in range(5):
                rows.append({"study": study, "order": "importance", "scope": scope, "step": step,
                             "percent_pruned": 20.0 * step, "heads_pruned": step,
                             "score": 30.0 - drop * step, "metric": "bleu"})
    # Shuffle so nothing depends on the row order of the CSV.
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0).reset_index(drop=True)


# --------------------------------------------------------------------------- Table 1

@pytest.mark.parametrize("metric, scale", [("bleu", 1.0), ("accuracy", 100.0)])
def test_table1_grid_is_the_deltas_pivoted_by_hand(tmp_path, metric, scale):
    ablation = synthetic_ablation(metric)
    paths = figures.table1(ablation, tmp_path / "t1.csv", tmp_path / "t1.md")
    assert paths == [str(tmp_path / "t1.csv"), str(tmp_path / "t1.md")]

    cells = pd.read_csv(tmp_path / "t1.csv")
    assert list(cells.columns) == figures.TABLE1_COLUMNS
    enc = ablation[ablation["attn_type"] == "enc_self"]
    assert len(cells) == len(enc)

    expected = np.full((3, 4), np.nan)
    for row in enc.itertuples():
        expected[row.layer, row.head] = round(row.delta * scale, 2)
    grid = figures.table1_grid(cells)
    assert list(grid.index) == [1, 2, 3] and list(grid.columns) == [1, 2, 3, 4]
    np.testing.assert_allclose(grid.to_numpy(), expected, atol=1e-12)


def test_table1_marks_exactly_the_significant_cells(tmp_path):
    ablation = synthetic_ablation()
    figures.table1(ablation, tmp_path / "t1.csv", tmp_path / "t1.md")
    cells = pd.read_csv(tmp_path / "t1.csv", keep_default_na=False)
    enc = ablation[ablation["attn_type"] == "enc_self"]
    significant_by_hand = {(r.layer + 1, r.head + 1) for r in enc.itertuples() if r.significant}
    starred = {(r.layer, r.head) for r in cells.itertuples() if r.cell.endswith("*")}
    assert starred == significant_by_hand
    assert set(cells.loc[cells["significant"], ["layer", "head"]].itertuples(index=False, name=None)) == starred

    markdown = (tmp_path / "t1.md").read_text()
    table_lines = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| Layer")]
    assert len(table_lines) == 3
    stars = {(int(line.split("|")[1]), h + 1) for line in table_lines
             for h, cell in enumerate(line.split("|")[2:-1]) if cell.strip().endswith("*")}
    assert stars == significant_by_hand


def test_table1_summary_counts(tmp_path):
    ablation = synthetic_ablation()
    enc = ablation[ablation["attn_type"] == "enc_self"]
    k = int(enc["significant"].sum())
    m = int((enc["significant"] & (enc["delta"].round(2) > 0)).sum())
    assert 0 < k < len(enc)

    figures.table1(ablation, tmp_path / "t1.csv", tmp_path / "t1.md")
    summary = figures.significance_summary(pd.read_csv(tmp_path / "t1.csv"))
    assert (summary.n_heads, summary.n_significant, summary.n_improve) == (len(enc), k, m)
    assert f"{k} of {len(enc)} heads significant ({m} improve)" in (tmp_path / "t1.md").read_text()


def test_table1_of_the_paper_counts():
    # 96 heads, 8 significant, 4 of them improvements: the paper's line.
    cells = pd.DataFrame({"significant": [True] * 8 + [False] * 88,
                          "delta": [0.1, 0.2, 0.3, 0.4, -0.1, -0.2, -0.3, -0.4] + [0.0] * 88})
    assert str(figures.significance_summary(cells)) == "8 of 96 heads significant (4 improve)"


def test_table1_rejects_a_missing_attention_type_and_two_studies(tmp_path):
    bert = synthetic_ablation("accuracy", attn_types=("enc_self",))
    with pytest.raises(ValueError, match="enc_dec"):
        figures.table1(bert, tmp_path / "t.csv", tmp_path / "t.md", attn_type="enc_dec")
    two = pd.concat([bert, bert.assign(study="other")])
    with pytest.raises(ValueError, match="one study"):
        figures.table1(two, tmp_path / "t.csv", tmp_path / "t.md")


# -------------------------------------------------------------------------- Figure 1

@pytest.mark.parametrize("metric, attn_types", [("bleu", ("enc_self", "enc_dec", "dec_self")),
                                                ("accuracy", ("enc_self",))])
def test_figure1_bins_match_numpy_histogram(tmp_path, metric, attn_types):
    ablation = synthetic_ablation(metric, attn_types)
    paths = figures.figure1(ablation, tmp_path / "figure1.png", tmp_path / "figure1.pdf", STYLE, bins=7)
    assert paths[0] == str(tmp_path / "figure1_bins.csv")  # default: next to the PNG
    bins = pd.read_csv(tmp_path / "figure1_bins.csv")
    assert list(bins.columns) == figures.BINS_COLUMNS
    assert bins["count"].sum() == len(ablation)
    assert bins["count_significant"].sum() == ablation["significant"].sum()
    assert list(dict.fromkeys(bins["attn_type"])) == list(attn_types)

    scale = figures.metric_display(metric).scale
    for attn_type, of_type in bins.groupby("attn_type"):
        edges = np.append(of_type["bin_left"].to_numpy(), of_type["bin_right"].iloc[-1])
        assert len(edges) == 8
        rows = ablation[ablation["attn_type"] == attn_type]
        np.testing.assert_array_equal(of_type["count"], np.histogram(rows["delta"] * scale, bins=edges)[0])
        significant = rows[rows["significant"]]
        np.testing.assert_array_equal(of_type["count_significant"],
                                      np.histogram(significant["delta"] * scale, bins=edges)[0])


def test_figure1_bars_are_the_csv_counts():
    ablation = synthetic_ablation()
    histogram = figures.ablation_histogram(ablation, bins=5)
    figure = figures.build_figure1(histogram, "toy", STYLE)
    assert [ax.get_title() for ax in figure.axes] == ["Enc-Enc", "Enc-Dec", "Dec-Dec"]
    assert figure.axes[0].get_xlabel() == "BLEU change"
    for ax, (_, bins) in zip(figure.axes, histogram.groupby("attn_type", sort=False)):
        not_significant, significant = ax.containers
        np.testing.assert_array_equal([bar.get_height() for bar in not_significant],
                                      bins["count"] - bins["count_significant"])
        np.testing.assert_array_equal([bar.get_height() for bar in significant], bins["count_significant"])


def test_figure_files_are_png_and_pdf_and_the_pdf_is_reproducible(tmp_path):
    ablation = synthetic_ablation()
    pruning = synthetic_pruning()
    for name, draw, data in (("f1", figures.figure1, ablation), ("f3", figures.figure3, pruning),
                             ("f4", figures.figure4, pruning)):
        first = draw(data, tmp_path / f"{name}.png", tmp_path / f"{name}.pdf", STYLE)
        pdf_bytes = (tmp_path / f"{name}.pdf").read_bytes()
        second = draw(data, tmp_path / f"{name}.png", tmp_path / f"{name}.pdf", STYLE)
        assert first == second
        assert (tmp_path / f"{name}.png").read_bytes().startswith(PNG_MAGIC)
        assert pdf_bytes.startswith(b"%PDF-")
        assert b"CreationDate" not in pdf_bytes
        assert (tmp_path / f"{name}.pdf").read_bytes() == pdf_bytes, name


def test_style_sets_size_and_font():
    figure = figures.build_figure3(synthetic_pruning(), {"dpi": 72, "width": 4, "height": 3, "font_size": 13})
    assert tuple(figure.get_size_inches()) == (4, 3)
    assert figure.dpi == 72
    assert figure.axes[0].xaxis.label.get_fontsize() == 13


# ---------------------------------------------------------------------- Figures 3, 4

def test_figure3_draws_one_line_per_order_with_the_csv_scores():
    pruning = synthetic_pruning(studies=("wmt", "mnli"))
    lines = figures.plotted_lines(figures.build_figure3(pruning))
    assert set(lines["panel"]) == {"wmt", "mnli"}
    for study in ("wmt", "mnli"):
        drawn = lines[lines["panel"] == study]
        assert drawn["label"].nunique() == 3
        for order, linestyle in figures.order_linestyles().items():
            line = drawn[drawn["label"] == figures.order_labels()[order]]
            expected = pruning[(pruning["study"] == study) & (pruning["scope"] == "all")
                               & (pruning["order"] == order)].sort_values("step")
            assert set(line["linestyle"]) == {linestyle}
            np.testing.assert_array_equal(line["x"], expected["percent_pruned"])
            np.testing.assert_array_equal(line["y"], expected["score"])


def test_figure3_draws_only_the_orders_present():
    pruning = synthetic_pruning()
    pruning = pruning[pruning["order"] != "oracle"]
    lines = figures.plotted_lines(figures.build_figure3(pruning))
    assert set(lines["label"]) == {figures.order_labels()["importance"], figures.order_labels()["random"]}


def test_figure4_draws_one_line_per_attention_type():
    pruning = synthetic_pruning()
    lines = figures.plotted_lines(figures.build_figure4(pruning))
    assert list(dict.fromkeys(lines["label"])) == ["Enc-Enc", "Enc-Dec", "Dec-Dec"]
    for attn_type, label in figures.TYPE_LABELS.items():
        expected = pruning[(pruning["scope"] == attn_type) & (pruning["order"] == "importance")].sort_values("step")
        line = lines[lines["label"] == label]
        np.testing.assert_array_equal(line["x"], expected["percent_pruned"])
        np.testing.assert_array_equal(line["y"], expected["score"])


def test_pruning_figures_reject_repeated_steps():
    pruning = synthetic_pruning()
    with pytest.raises(ValueError, match="duplicate"):
        figures.build_figure3(pd.concat([pruning, pruning.iloc[:1]]))


def test_generic_lines_and_scatter(tmp_path):
    df = pd.DataFrame({"epoch": [1, 2, 3, 1, 2, 3], "value": [1.0, 2.0, 3.0, 3.0, 2.0, 1.0],
                       "run": ["a", "a", "a", "b", "b", "b"]})
    lines = figures.plotted_lines(figures.build_generic_lines(df, "epoch", "value", "run"))
    np.testing.assert_array_equal(lines.loc[lines["label"] == "b", "y"], [3.0, 2.0, 1.0])
    paths = figures.figure_generic_lines(df, "epoch", "value", None, tmp_path / "g.png", tmp_path / "g.pdf",
                                         STYLE, kind="scatter")
    assert all((tmp_path / name).exists() for name in ("g.png", "g.pdf")) and len(paths) == 2


def _ablation_rows(deltas, study="s", metric="bleu"):
    rows = []
    for i, delta in enumerate(deltas):
        rows.append({"study": study, "attn_type": "enc_self", "layer": i // 4, "head": i % 4, "metric": metric,
                     "score_full": 30.0, "delta": delta, "significant": False})
    return pd.DataFrame(rows)


def test_figure2_table_pairs_heads_and_correlates(tmp_path):
    import scipy.stats

    in_domain = _ablation_rows([0.1, -2.0, 0.3, -0.5, 0.0, -1.0, 0.2, 0.4])
    ood = _ablation_rows([0.0, -1.5, 0.5, -0.2, 0.1, -1.2, -0.1, 0.3]).sample(frac=1, random_state=0)
    paths = figures.figure2(in_domain, ood, tmp_path / "f2.csv", tmp_path / "f2.png", tmp_path / "f2.pdf")
    table = pd.read_csv(paths[0])
    assert len(table) == 8
    row = table[(table.layer == 0) & (table["head"] == 1)].iloc[0]
    assert (row.delta_in_domain, row.delta_out_of_domain) == (-2.0, -1.5)
    expected = scipy.stats.pearsonr(in_domain.delta, ood.sort_values(["layer", "head"]).delta)
    assert table.pearson_r.iloc[0] == pytest.approx(expected.statistic)
    assert table.p_value.iloc[0] == pytest.approx(expected.pvalue)
    assert (tmp_path / "f2.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="same heads"):
        figures.figure2(in_domain, ood.iloc[:5], tmp_path / "x.csv", tmp_path / "x.png", tmp_path / "x.pdf")


def test_one_head_table_grid(tmp_path):
    table = pd.DataFrame({
        "study": "s", "attn_type": ["enc_self", "enc_self", "enc_dec", "enc_dec"], "layer": [0, 1, 0, 1],
        "best_head": [3, 0, 1, 2], "metric": "bleu", "score_full": 36.05, "score": [34.74, 35.9, 36.29, 22.49],
        "delta": [-1.31, -0.15, 0.24, -13.56], "significant": [True, False, True, True], "alpha": 0.01,
    })
    csv, md = figures.one_head_table(table, tmp_path / "t.csv", tmp_path / "t.md")
    text = open(md).read()
    assert "| 1 | -1.31* | +0.24* |" in text and "| 2 | -0.15 | -13.56* |" in text
    assert "3 of 4 layers" in text
    written = pd.read_csv(csv)
    assert written.layer.tolist() == [1, 2, 1, 2] and written.best_head.tolist() == [4, 1, 2, 3]


# ------------------------------------------------------------- labelled for the model family

def test_a_decoder_only_study_is_labelled_causal_and_titled_with_its_family(tmp_path):
    """A decoder-only LM stores its heads as dec_self; its tables and figures must not call them
    'Dec-Dec' (which says there is an encoder), and they name the model family."""
    ablation = synthetic_ablation(attn_types=("dec_self",)).assign(study="tiny_llama")
    _, md = figures.table1(ablation, tmp_path / "t1.csv", tmp_path / "t1.md", attn_type="dec_self", family="llama")
    first_line = open(md).read().splitlines()[0]
    assert first_line.startswith("**Table 1** (tiny_llama (llama), Causal self-attention):"), first_line
    histogram = figures.ablation_histogram(ablation, bins=4)
    assert [ax.get_title() for ax in figures.build_figure1(histogram, "t", STYLE).axes] == ["Causal self-attention"]
    figures.figure1(ablation, tmp_path / "f1.png", tmp_path / "f1.pdf", STYLE, family="llama")  # title drawn from it
    one_head = pd.DataFrame({"study": "tiny_llama", "attn_type": "dec_self", "layer": [0, 1], "best_head": [1, 0],
                             "metric": "perplexity", "score_full": 7.4, "score": [7.5, 7.6], "delta": [0.1, 0.2],
                             "significant": [True, False], "alpha": 0.01})
    _, md = figures.one_head_table(one_head, tmp_path / "t2.csv", tmp_path / "t2.md", family="llama")
    text = open(md).read()
    assert "(tiny_llama (llama))" in text and "| Layer | Causal self-attention |" in text


def test_an_encoder_decoder_keeps_the_papers_labels_and_panels_name_their_family():
    ablation = synthetic_ablation()
    assert figures.type_labels(ablation["attn_type"]) == figures.TYPE_LABELS
    assert figures.type_labels(["enc_self"]) == {"enc_self": "Enc-Enc"}  # BERT, as the paper labels it
    pruning = synthetic_pruning(studies=("wmt", "mnli"))
    figure = figures.build_figure3(pruning, families={"wmt": "fsmt", "mnli": "bert"})
    assert {ax.get_title() for ax in figure.axes} == {"wmt (fsmt)", "mnli (bert)"}
    assert {ax.get_title() for ax in figures.build_figure3(pruning).axes} == {"wmt", "mnli"}  # no family known
