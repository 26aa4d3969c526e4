"""Tables and figures of the paper, drawn from the tidy CSVs the pipeline writes.

Every public ``table*`` / ``figure*`` function takes DataFrames, writes files and returns
the list of paths it wrote. The ``build_*`` functions return the matplotlib Figure
without writing it, so tests (and ``plotted_lines``) can look at what is drawn.

Rule: every number drawn is in a CSV. Figures 3 and 4 draw pruning.csv values as they
are; Figure 1 draws histogram counts, which it writes to a bins CSV first and then
draws from that table. Table 1's CSV holds the rounded values its markdown shows.

Display units: BLEU stays in points; metrics in [0, 1] (accuracy, F1, MCC) are shown
x100, as the paper reports accuracy changes in %. Pruning curves keep the raw score.

Matplotlib is used without pyplot (``Figure`` + the Agg canvas), so nothing global is
touched and no display is needed.

The modules: ``display`` (units, labels, titles), ``style`` (a figure's style, panels, saving), ``checks`` (the
tables read), ``lines`` (line plots); the paper's ``tables`` (Table 1, Tables 2-3), ``ablation`` (Figures 1, 2) and
``pruning`` (Figures 3-5, head criteria); beyond the paper, ``concrete`` (Hard Concrete gates), ``roles`` (head
roles) and ``retrieval`` (a language model's retrieval heads). Every public name is importable from here.
"""
from __future__ import annotations

from headprune.report.figures.ablation import (BINS_COLUMNS, DEFAULT_HISTOGRAM_BINS, FIGURE2_COLUMNS,
                                                    NOT_SIGNIFICANT_COLOR, SIGNIFICANT_COLOR, ablation_histogram,
                                                    build_figure1, figure1, figure2, figure2_table)
from headprune.report.figures.checks import ABLATION_COLUMNS
from headprune.report.figures.concrete import build_concrete_figure, concrete_figure
from headprune.report.figures.display import (CAUSAL_LABEL, change_label,
                                                   format_score, metric_display, study_title, type_labels, unit_name)
from headprune.report.figures.lines import build_generic_lines, figure_generic_lines
from headprune.report.figures.pruning import (FIGURE5_COLUMNS, FIGURE5_PANELS, PRUNING_COLUMNS, order_labels,
                                                   order_linestyles,
                                                   build_figure3, build_figure4, build_figure5, build_pruning_figure,
                                                   criteria_figure, criteria_table, figure3, figure3_rows, figure4,
                                                   figure4_rows, figure5, figure5_rows, figure5_table)
from headprune.report.figures.retrieval import (build_perplexity_and_retrieval_figure,
                                                     build_retrieval_heads_figure, perplexity_and_retrieval_table,
                                                     retrieval_heads_table, wu_scores)
from headprune.report.figures.roles import (LM_ROLES, LM_SCORES, ROLE_COLORS, ROLES, build_head_roles_figure,
                                                 build_lm_roles_figure, head_roles_figure, is_language_model_roles,
                                                 roles_by_step, roles_by_step_markdown)
from headprune.report.figures.style import DEFAULT_STYLE, plotted_lines, save_figure
from headprune.report.figures.tables import (TABLE1_COLUMNS, SignificanceSummary, one_head_table,
                                                  significance_summary, table1, table1_cells, table1_grid,
                                                  table1_markdown)
# The attention types and their labels, as the module before this package offered them.
from headprune.models.attention_types import ATTENTION_TYPES, KNOWN_TYPES, LABELS, TYPE_LABELS

__all__ = [
    # display
    "CAUSAL_LABEL", "metric_display", "change_label", "unit_name", "format_score",
    "type_labels", "study_title", "ATTENTION_TYPES", "TYPE_LABELS", "KNOWN_TYPES", "LABELS",
    # style, checks, lines
    "DEFAULT_STYLE", "save_figure", "plotted_lines", "ABLATION_COLUMNS", "build_generic_lines", "figure_generic_lines",
    # tables
    "TABLE1_COLUMNS", "table1_cells", "table1_grid", "SignificanceSummary", "significance_summary", "table1_markdown",
    "table1", "one_head_table",
    # ablation
    "DEFAULT_HISTOGRAM_BINS", "NOT_SIGNIFICANT_COLOR", "SIGNIFICANT_COLOR", "BINS_COLUMNS", "ablation_histogram",
    "build_figure1", "figure1", "FIGURE2_COLUMNS", "figure2_table", "figure2",
    # pruning
    "order_labels", "order_linestyles", "PRUNING_COLUMNS", "build_pruning_figure", "figure3_rows",
    "build_figure3", "figure3", "figure4_rows", "build_figure4", "figure4", "FIGURE5_COLUMNS", "FIGURE5_PANELS",
    "figure5_table", "figure5_rows", "build_figure5", "figure5", "criteria_figure",
    "criteria_table",
    # concrete, roles, retrieval
    "build_concrete_figure", "concrete_figure", "ROLE_COLORS", "ROLES", "LM_ROLES", "roles_by_step",
    "roles_by_step_markdown", "build_head_roles_figure", "head_roles_figure", "LM_SCORES", "is_language_model_roles",
    "build_lm_roles_figure", "wu_scores", "retrieval_heads_table", "build_retrieval_heads_figure",
    "perplexity_and_retrieval_table", "build_perplexity_and_retrieval_figure",
]
