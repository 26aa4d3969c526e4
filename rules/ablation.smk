"""Single-head ablation: the full model once, then ONE JOB PER HEAD, then significance per head."""


wildcard_constraints:
    study="|".join(STUDIES),
    head="[a-z_]+-[0-9]+-[0-9]+",


rule evaluate_full:
    input:
        model=study_model,
        data=study_eval_data,
    output:
        f"{RESULTS}/{{study}}/full.json",
    params:
        study=study_of,
        evaluation=full_eval_params,
    log:
        f"{RESULTS}/logs/evaluate_full/{{study}}.log",
    resources:
        gpu=resource("evaluate", "gpu"),
        mem_mb=resource("evaluate", "mem_mb"),
        runtime=resource("evaluate", "runtime"),
    conda:
        ENV
    script:
        "../scripts/evaluate.py"


rule ablate_head:
    input:
        model=study_model,
        data=study_eval_data,
    output:
        f"{RESULTS}/{{study}}/ablation/{{head}}.json",
    params:
        study=study_of,
        evaluation=full_eval_params,
    log:
        f"{RESULTS}/logs/ablate_head/{{study}}/{{head}}.log",
    resources:
        gpu=resource("ablate", "gpu"),
        mem_mb=resource("ablate", "mem_mb"),
        runtime=resource("ablate", "runtime"),
    conda:
        ENV
    script:
        "../scripts/evaluate.py"


rule significance:
    input:
        full=f"{RESULTS}/{{study}}/full.json",
        heads=ablation_outputs,
        data=study_eval_data,
    output:
        f"{RESULTS}/{{study}}/ablation.csv",
    params:
        study=study_of,
        significance=significance_params,
    log:
        f"{RESULTS}/logs/significance/{{study}}.log",
    resources:
        gpu=resource("significance", "gpu"),
        mem_mb=resource("significance", "mem_mb"),
        runtime=resource("significance", "runtime"),
    conda:
        ENV
    script:
        "../scripts/significance.py"
