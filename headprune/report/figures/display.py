"""How the figures and tables name and show things: a metric in display units (BLEU in points, accuracy x100: its
class in headprune.evaluation.metrics says), its axis labels and scores, an attention type's label and a study's
title."""
from __future__ import annotations

from headprune.evaluation.metrics import Metric, metric_of
from headprune.models.attention_types import DEC_SELF, ENC_DEC, ENC_SELF, LABELS

# A decoder-only LM has one attention type, stored as dec_self; "Dec-Dec" would say it has an encoder.
CAUSAL_LABEL = "Causal self-attention"


def type_labels(attn_types) -> dict:
    """Labels of a study's attention types: the paper's for an encoder-decoder or an encoder, and
    CAUSAL_LABEL for dec_self without an encoder (a decoder-only LM, its studied towers beside it)."""
    attn_types = set(attn_types)
    labels = {t: LABELS[t] for t in attn_types}
    if DEC_SELF in attn_types and not attn_types & {ENC_SELF, ENC_DEC}:
        labels[DEC_SELF] = CAUSAL_LABEL
    return labels


def study_title(study: str, family: str | None = None) -> str:
    """A study as figures and tables name it: 'tiny_llama (llama)', the model family being the
    model's config.json model_type as evaluate_full records it in full.json."""
    return f"{study} ({family})" if family else study


def metric_display(metric: str) -> type[Metric]:
    """How a metric is shown (its ``label``, ``scale`` and ``unit``: headprune.evaluation.metrics); an unknown metric
    is shown as is, under its own name."""
    return metric_of(metric)


def change_label(metric: str) -> str:
    """Axis label for a delta: 'BLEU change', 'accuracy change (%)'."""
    display = metric_display(metric)
    return f"{display.label} change" + (f" ({display.unit})" if display.unit else "")


def unit_name(metric: str) -> str:
    """The `unit` column of the CSVs: what a displayed delta is measured in."""
    display = metric_display(metric)
    return display.unit or f"{display.label} points"


def format_score(metric: str, raw_score: float) -> str:
    """'BLEU 36.05', 'accuracy 83.40%'."""
    display = metric_display(metric)
    unit = {"": "", "%": "%"}.get(display.unit, f" ({display.unit})")
    return f"{display.label} {raw_score * display.scale:.2f}{unit}"
