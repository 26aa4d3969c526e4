"""Beyond the paper: which heads a language model needs to find something in its context.

A retrieval study (models entry of kind retrieval) scores a language model on needle-in-a-haystack
items: make_retrieval_items cuts haystacks from its corpus, hides a random value at the configured
depths and context lengths, and writes the items once, so every job (ablation, pruning, one head per
layer, roles) scores the same ones. retrieval_heads is Wu et al. (2025)'s experiment: the top-K heads
by retrieval score (head_roles.csv) masked against K random heads, retrieval and perplexity each.
"""


rule make_retrieval_items:
    input:
        model=study_model,
        corpus=stage_answer(stages.retrieval.corpus_dir),
    output:
        directory(f"{DATA}/retrieval/{{study}}"),
    params:
        settings=stage_answer(stages.retrieval.items_params),
    log:
        f"{RESULTS}/logs/make_retrieval_items/{{study}}.log",
    resources:
        gpu=0,
        mem_mb=resource("tokenize_corpus", "mem_mb"),
        runtime=resource("tokenize_corpus", "runtime"),
    conda:
        ENV
    script:
        "../scripts/make_retrieval_items.py"


rule retrieval_heads:
    input:
        unpack(stage_answer(stages.retrieval.heads_inputs)),
    output:
        f"{RESULTS}/{{study}}/retrieval_heads.csv",
    params:
        study=study_params,
        experiment=stage_answer(stages.retrieval.heads_params),
    log:
        f"{RESULTS}/logs/retrieval_heads/{{study}}.log",
    resources:
        gpu=study_resource("prune", "gpu"),
        mem_mb=study_resource("prune", "mem_mb"),
        runtime=study_resource("prune", "runtime"),
    conda:
        ENV
    script:
        "../scripts/retrieval_heads.py"


rule plot_retrieval_heads:
    input:
        f"{RESULTS}/{{study}}/retrieval_heads.csv",
    output:
        csv=f"{FIGURES}/{{study}}/retrieval_heads.csv",
        png=report(f"{FIGURES}/{{study}}/retrieval_heads.png", caption="../report/retrieval_heads.rst",
                   category="Retrieval heads", subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/retrieval_heads.pdf",
    params:
        style=config["figures"]["style"],
    log:
        f"{RESULTS}/logs/plot_retrieval_heads/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_retrieval_heads.py"


rule plot_perplexity_and_retrieval:
    input:
        unpack(stage_answer(stages.retrieval.side_by_side_inputs)),
    output:
        csv=f"{FIGURES}/{{study}}/perplexity_and_retrieval.csv",
        png=report(f"{FIGURES}/{{study}}/perplexity_and_retrieval.png", caption="../report/perplexity_and_retrieval.rst",
                   category="Retrieval heads", subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/perplexity_and_retrieval.pdf",
    params:
        style=config["figures"]["style"],
    log:
        f"{RESULTS}/logs/plot_perplexity_and_retrieval/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_perplexity_and_retrieval.py"
