"""The tables and figures drawn from the experiments' tables (rules/figures.smk): what the figures that read
several studies' tables (Figure 6, the head maps) and the cross-domain figure take."""
from __future__ import annotations

from headprune.stages import pruning


def table1_attention_type(study):
    """Table 1 shows the encoder self-attention (the paper's); a decoder-only LM's is its only type."""
    return study.attention_types[0]


def cross_domain_inputs(study):
    results = f"{study.pipeline.results_dir}/{study.name}"
    return {"in_domain": f"{results}/eval/ablation.csv", "out_of_domain": f"{results}/ood/ablation.csv"}


def head_maps_inputs(pipeline, lm):
    """The single-head ablation of each study that scores this language model (itself first)."""
    return {name: f"{pipeline.results_dir}/{name}/eval/ablation.csv" for name in pipeline.head_map_studies()[lm]}


def glue_pruning_full(pipeline):
    """Figure 6's studies' full-model results (their model family titles the panels)."""
    return [f"{pipeline.results_dir}/{study.name}/full.json" for study in pipeline.experiment_studies("glue_pruning")]


def glue_pruning_tables(pipeline):
    """Figure 6's tables: each task's importance-order pruning (scope 'all')."""
    return [pruning.table(study, scope, joined) for study in pipeline.experiment_studies("glue_pruning")
            for scope, joined in pruning.jobs(study) if scope == "all"]
