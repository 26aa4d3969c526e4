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


def head_map_studies(pipeline) -> dict[str, list[str]]:
    """Per language model ablated with another study that scores it (retrieval, a task, ...): those studies of
    experiments.ablation, the language model first; one figure maps each head's cost under each score."""
    ablation = pipeline.config["experiments"]["ablation"]
    groups: dict[str, list[str]] = {}
    for study in map(pipeline.study, ablation):
        if study.kind.language_model and study.lm.name in ablation:
            groups.setdefault(study.lm.name, [study.lm.name])
            if study.name != study.lm.name:
                groups[study.lm.name].append(study.name)
    return {lm: names for lm, names in groups.items() if len(names) > 1}


def head_maps_inputs(pipeline, lm):
    """The single-head ablation of each study that scores this language model (itself first)."""
    return {name: f"{pipeline.results_dir}/{name}/eval/ablation.csv" for name in head_map_studies(pipeline)[lm]}


def figure3_recovery(study) -> list[str]:
    """What Figure 3 of a study draws beside its curve: its recovery.csv (rules/recovery.smk), if it is recovered."""
    return [f"{study.pipeline.results_dir}/{study.name}/recovery.csv"] if study.takes_part_in("recovery") else []


def glue_pruning_full(pipeline):
    """Figure 6's studies' full-model results (their model family titles the panels)."""
    return [f"{pipeline.results_dir}/{study.name}/full.json" for study in pipeline.experiment_studies("glue_pruning")]


def glue_pruning_tables(pipeline):
    """Figure 6's tables: each task's importance-order pruning (scope 'all')."""
    return [pruning.table(study, scope, joined) for study in pipeline.experiment_studies("glue_pruning")
            for scope, joined in pruning.jobs(study) if scope == "all"]


def targets(pipeline) -> list[str]:
    """The paper's tables and figures of the experiments that name studies (Table 1 and Figure 1, Figures 2, 3, 4
    and 6, Tables 2-3), the criteria compared and the head maps."""
    experiments, figures = pipeline.config["experiments"], pipeline.figures_dir

    def files(study, *names):
        return [f"{figures}/{study}/{name}" for name in names]

    found = []
    for study in experiments["ablation"]:
        found += files(study, "table1.csv", "table1.md", "figure1_bins.csv", "figure1.png", "figure1.pdf")
    for study in experiments["pruning"]:
        found += files(study, "figure3.png", "figure3.pdf")
        if study in experiments.get("attention_types", []):
            found += files(study, "figure4.png", "figure4.pdf")
    if experiments.get("glue_pruning"):
        found += [f"{figures}/figure6.png", f"{figures}/figure6.pdf"]
    for study in experiments.get("cross_domain", []):
        found += files(study, "figure2.png", "figure2.pdf", "figure2.csv")
    for study in experiments.get("criteria", []):
        found += files(study, "criteria.png", "criteria.pdf", "criteria_summary.md")
    for study in experiments.get("one_head_per_layer", []):
        found += files(study, "one_head_per_layer.csv", "one_head_per_layer.md")
    for lm in head_map_studies(pipeline):
        found += files(lm, "head_maps.png", "head_maps.pdf", "head_maps.csv", "head_maps_correlations.csv")
    return found
