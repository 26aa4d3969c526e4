"""Tables and figures (PNG and PDF, each with the CSV it is drawn from), collected into the HTML report."""


rule plot_ablation:
    input:
        ablation=f"{RESULTS}/{{study}}/eval/ablation.csv",
        full=f"{RESULTS}/{{study}}/full.json",
    output:
        table_csv=f"{FIGURES}/{{study}}/table1.csv",
        table_md=report(f"{FIGURES}/{{study}}/table1.md", caption="../report/table1.rst", category="Table 1",
                        subcategory="{study}"),
        bins_csv=f"{FIGURES}/{{study}}/figure1_bins.csv",
        fig_png=report(f"{FIGURES}/{{study}}/figure1.png", caption="../report/figure1.rst", category="Figure 1",
                       subcategory="{study}"),
        fig_pdf=f"{FIGURES}/{{study}}/figure1.pdf",
        bound_csv=f"{FIGURES}/{{study}}/table1_bound.csv",
    params:
        style=config["figures"]["style"],
        attn_type=stage_answer(stages.figures.table1_attention_type),
        confidence=config["ablation"]["screen"]["confidence"],
    log:
        f"{RESULTS}/logs/plot_ablation/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_ablation.py"


rule plot_cross_domain:
    input:
        unpack(stage_answer(stages.figures.cross_domain_inputs)),
    output:
        csv=f"{FIGURES}/{{study}}/figure2.csv",
        png=report(f"{FIGURES}/{{study}}/figure2.png", caption="../report/figure2.rst", category="Figure 2",
                   subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/figure2.pdf",
    params:
        style=config["figures"]["style"],
    log:
        f"{RESULTS}/logs/plot_cross_domain/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_cross_domain.py"


rule plot_one_head:
    input:
        table=f"{RESULTS}/{{study}}/one_head_per_layer.csv",
        full=f"{RESULTS}/{{study}}/full.json",
    output:
        csv=f"{FIGURES}/{{study}}/one_head_per_layer.csv",
        md=report(f"{FIGURES}/{{study}}/one_head_per_layer.md", caption="../report/tables2_3.rst",
                  category="Tables 2-3", subcategory="{study}"),
    log:
        f"{RESULTS}/logs/plot_one_head/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_one_head.py"


rule plot_pruning:
    input:
        pruning=f"{RESULTS}/{{study}}/pruning.csv",
        full=f"{RESULTS}/{{study}}/full.json",
        recovery=stage_answer(stages.figures.figure3_recovery),
    output:
        png=report(f"{FIGURES}/{{study}}/figure3.png", caption="../report/figure3.rst", category="Figure 3",
                   subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/figure3.pdf",
    params:
        style=config["figures"]["style"],
        figure="figure3",
    log:
        f"{RESULTS}/logs/plot_pruning/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_pruning.py"


rule plot_attention_types:
    input:
        pruning=f"{RESULTS}/{{study}}/pruning.csv",
        full=f"{RESULTS}/{{study}}/full.json",
    output:
        png=report(f"{FIGURES}/{{study}}/figure4.png", caption="../report/figure4.rst", category="Figure 4",
                   subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/figure4.pdf",
    params:
        style=config["figures"]["style"],
        figure="figure4",
    log:
        f"{RESULTS}/logs/plot_attention_types/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_pruning.py"


rule plot_glue_pruning:
    input:
        pruning=stages.figures.glue_pruning_tables(PIPELINE),
        full=stages.figures.glue_pruning_full(PIPELINE),
    output:
        png=report(f"{FIGURES}/figure6.png", caption="../report/figure6.rst", category="Figure 6"),
        pdf=f"{FIGURES}/figure6.pdf",
    params:
        style=config["figures"]["style"],
        figure="figure3",  # the same drawing: one panel per study, one line per order
    log:
        f"{RESULTS}/logs/plot_glue_pruning.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_pruning.py"


rule plot_criteria:
    input:
        curves=f"{RESULTS}/{{study}}/pruning/criteria.csv",
        summary=f"{RESULTS}/{{study}}/pruning/criteria_summary.csv",
    output:
        png=report(f"{FIGURES}/{{study}}/criteria.png", caption="../report/criteria.rst", category="Head criteria",
                   subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/criteria.pdf",
        md=report(f"{FIGURES}/{{study}}/criteria_summary.md", caption="../report/criteria.rst",
                  category="Head criteria", subcategory="{study}"),
    params:
        style=config["figures"]["style"],
        test_at=config["criteria"]["test_at"],
    log:
        f"{RESULTS}/logs/plot_criteria/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_criteria.py"


rule plot_head_maps:
    input:
        unpack(of_pipeline(stages.figures.head_maps_inputs, PIPELINE, wildcard="study")),
    output:
        csv=f"{FIGURES}/{{study}}/head_maps.csv",
        correlations=f"{FIGURES}/{{study}}/head_maps_correlations.csv",
        png=report(f"{FIGURES}/{{study}}/head_maps.png", caption="../report/head_maps.rst", category="Head maps",
                   subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/head_maps.pdf",
    params:
        style=config["figures"]["style"],
    log:
        f"{RESULTS}/logs/plot_head_maps/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_head_maps.py"
