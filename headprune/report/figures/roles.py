"""Head roles (beyond the paper): the roles left after each step of pruning by I_h, a layer x head map of
each head's role and importance rank, and a language model's head scores (previous token, induction, sink,
retrieval) as maps."""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from headprune.report.figures.checks import _require_columns
from headprune.report.figures.style import _new_figure, _rc, _style, save_figure
from headprune.io import atomic
from headprune.models.attention_types import KNOWN_TYPES, LABELS

ROLE_COLORS = {"positional": "#1f77b4", "syntactic": "#2ca02c", "rare-word": "#d62728", "other": "#d9d9d9",
               "pruned": "#ffffff", "n/a": "#f7f7f7"}
ROLES = ("positional", "syntactic", "rare-word", "other")
LM_ROLES = ("retrieval", "induction", "previous-token", "sink", "other")  # headprune.scoring.lm_roles.ROLE_PRIORITY


def roles_by_step(roles: pd.DataFrame, step_percent: float = 10.0) -> pd.DataFrame:
    """Which roles are left after each step of global I_h pruning (least important first): one row per
    step, the number of heads of each role still in the model ('n/a': heads without a role measured)."""
    from headprune.evaluation.runs import importance_order, pruning_steps

    _require_columns(roles, ["study", "attn_type", "layer", "head", "importance", "role"], "head roles table")
    role_of = {(r.attn_type, int(r.layer), int(r.head)): r.role for r in roles.itertuples()}
    names = LM_ROLES if is_language_model_roles(roles) else ROLES
    rows = []
    for step, (percent, removed) in enumerate(pruning_steps(importance_order(roles), step_percent)):
        left = collections.Counter(role for head, role in role_of.items() if head not in set(removed))
        rows.append({"study": roles["study"].iloc[0], "step": step, "percent_pruned": percent,
                     "heads_left": len(role_of) - len(removed),
                     **{role: left.get(role, 0) for role in (*names, "pruned", "n/a")}})
    return pd.DataFrame(rows)


def roles_by_step_markdown(steps: pd.DataFrame, out_md) -> str:
    columns = [role for role in steps.columns if role not in ("study", "step", "percent_pruned", "heads_left")
               and steps[role].any()]
    lines = [f"**Head roles left while pruning by $I_h$** ({steps['study'].iloc[0]}): heads of each role "
             "still in the model after each step (Voita et al.: the specialised heads go last).", "",
             "| % pruned | heads left | " + " | ".join(columns) + " |", "|---:|---:|" + "---:|" * len(columns)]
    for row in steps.itertuples(index=False):
        row = row._asdict()
        lines.append(f"| {row['percent_pruned']:.0f} | {row['heads_left']} | "
                     + " | ".join(str(steps.loc[row['step'], role]) for role in columns) + " |")
    Path(out_md).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out_md, "\n".join(lines) + "\n")
    return str(out_md)


def build_head_roles_figure(roles: pd.DataFrame, style: dict | None = None) -> Figure:
    """A layer x head map per attention type with roles, each head coloured by its role and labelled with
    its importance rank (1 = most important of all heads)."""
    from matplotlib.colors import ListedColormap

    _require_columns(roles, ["study", "attn_type", "layer", "head", "importance", "role"], "head roles table")
    style = _style(style)
    measured = roles[roles.role != "n/a"]
    types = [t for t in KNOWN_TYPES if t in set(measured.attn_type)] or list(dict.fromkeys(roles.attn_type))
    names = list(ROLE_COLORS)
    rank = roles["importance"].rank(ascending=False, method="first").astype(int)
    with _rc(style):
        figure, axes = _new_figure(style, len(types))
        for ax, attn_type in zip(axes, types):
            part = roles[roles.attn_type == attn_type]
            grid = part.pivot(index="layer", columns="head", values="role").map(names.index)
            ranks = rank[part.index].to_numpy()
            ax.imshow(grid.to_numpy(), cmap=ListedColormap([ROLE_COLORS[n] for n in names]), vmin=0,
                      vmax=len(names) - 1, aspect="auto")
            for layer, head, r in zip(part["layer"], part["head"], ranks):
                ax.text(head, layer, str(r), ha="center", va="center", fontsize=style["font_size"] * 0.7)
            ax.set_xticks(range(grid.shape[1]))
            ax.set_yticks(range(grid.shape[0]))
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
            ax.set_title(f"{roles['study'].iloc[0]} {LABELS.get(attn_type, attn_type)}")
        present = [n for n in names if n in set(roles.role)]
        figure.legend(handles=[Patch(facecolor=ROLE_COLORS[n], edgecolor="black", label=n) for n in present],
                      loc="outside right center")
    return figure


def head_roles_figure(roles: pd.DataFrame, out_png, out_pdf, style: dict | None = None) -> list[str]:
    return save_figure(build_head_roles_figure(roles, style), out_png, out_pdf, style)


LM_SCORES = {"previous_token": "previous token", "induction": "induction", "sink": "first-token sink",
             "retrieval": "retrieval (Wu et al.)"}


def is_language_model_roles(roles: pd.DataFrame) -> bool:
    """Whether a head_roles table holds a language model's roles (headprune.scoring.lm_roles)."""
    return "induction" in roles.columns


def build_lm_roles_figure(roles: pd.DataFrame, style: dict | None = None) -> Figure:
    """A layer x head map of each score of a language model's heads (previous token, induction, sink,
    retrieval), each cell labelled with its value; a score the table lacks (all NaN) is left out."""
    _require_columns(roles, ["study", "layer", "head", *LM_SCORES], "language model head roles table")
    style = _style(style)
    scores = [name for name in LM_SCORES if roles[name].notna().any()]
    with _rc(style):
        figure, axes = _new_figure(style, max(1, len(scores)))
        for ax, name in zip(axes, scores):
            grid = roles.pivot(index="layer", columns="head", values=name)
            image = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", vmin=0, vmax=max(1.0, np.nanmax(grid.to_numpy(dtype=float))),
                              aspect="auto")
            for (layer, head), value in np.ndenumerate(grid.to_numpy(dtype=float)):
                if np.isfinite(value):
                    ax.text(head, layer, f"{value:.2f}", ha="center", va="center", color="white" if value < 0.5 else "black",
                            fontsize=style["font_size"] * 0.6)
            ax.set_xticks(range(grid.shape[1]))
            ax.set_yticks(range(grid.shape[0]))
            ax.set_xlabel("query head")
            ax.set_ylabel("layer")
            ax.set_title(f"{roles['study'].iloc[0]}: {LM_SCORES[name]}")
        figure.colorbar(image, ax=axes, shrink=0.8)
    return figure
