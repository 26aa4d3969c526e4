"""Beyond the paper (issue #32): one study under each way of switching a head off (masking_modes.modes: zero, the
paper's, mean, optimal, resample, ...). A job per mode runs the single-head ablation and the importance-order
pruning curve under it; the comparison sets the modes side by side: the heads that matter, the % prunable, the
rank correlation of the heads' changes between modes."""


rule masking_mode:
    input:
        unpack(stage_answer(stages.masking_modes.inputs, wildcard="mode")),
    output:
        f"{RESULTS}/{{study}}/masking_modes/{{mode}}.csv",
    wildcard_constraints:
        mode=MASKING_MODES,
    params:
        study=study_params,
        sweep=stage_answer(stages.masking_modes.params, wildcard="mode"),
    log:
        f"{RESULTS}/logs/masking_mode/{{study}}/{{mode}}.log",
    resources:
        gpu=study_resource("prune", "gpu"),
        mem_mb=study_resource("prune", "mem_mb"),
        runtime=study_resource("prune", "runtime"),
    conda:
        ENV
    script:
        "../scripts/masking_mode.py"


rule plot_masking_modes:
    input:
        stage_answer(stages.masking_modes.tables),
    output:
        csv=f"{FIGURES}/{{study}}/masking_modes.csv",
        summary=f"{FIGURES}/{{study}}/masking_modes_summary.csv",
        correlations=f"{FIGURES}/{{study}}/masking_modes_correlations.csv",
        png=report(f"{FIGURES}/{{study}}/masking_modes.png", caption="../report/masking_modes.rst",
                   category="Masking modes", subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/masking_modes.pdf",
    params:
        style=config["figures"]["style"],
        within=config["masking_modes"]["within"],
    log:
        f"{RESULTS}/logs/plot_masking_modes/{{study}}.log",
    resources:
        gpu=resource("figures", "gpu"),
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_masking_modes.py"
