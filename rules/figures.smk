"""Tables and figures (PNG and PDF, each with the CSV it is drawn from), collected into the HTML report."""


rule plot_ablation:
    input:
        ablation=f"{RESULTS}/{{study}}/ablation.csv",
    output:
        table_csv=f"{FIGURES}/{{study}}/table1.csv",
        table_md=report(f"{FIGURES}/{{study}}/table1.md", caption="../report/table1.rst", category="Table 1",
                        subcategory="{study}"),
        bins_csv=f"{FIGURES}/{{study}}/figure1_bins.csv",
        fig_png=report(f"{FIGURES}/{{study}}/figure1.png", caption="../report/figure1.rst", category="Figure 1",
                       subcategory="{study}"),
        fig_pdf=f"{FIGURES}/{{study}}/figure1.pdf",
    params:
        style=figure_style,
        attn_type="enc_self",
    log:
        f"{RESULTS}/logs/plot_ablation/{{study}}.log",
    conda:
        ENV
    script:
        "../scripts/plot_ablation.py"


rule plot_pruning:
    input:
        pruning=f"{RESULTS}/{{study}}/pruning.csv",
    output:
        fig3_png=report(f"{FIGURES}/{{study}}/figure3.png", caption="../report/figure3.rst", category="Figure 3",
                        subcategory="{study}"),
        fig3_pdf=f"{FIGURES}/{{study}}/figure3.pdf",
    params:
        style=figure_style,
    log:
        f"{RESULTS}/logs/plot_pruning/{{study}}.log",
    conda:
        ENV
    script:
        "../scripts/plot_pruning.py"
