"""Single-head ablation: the full model once, then ONE JOB PER HEAD, then significance per head.

Each job loads its model once and evaluates every test set it needs, by role: "eval" (in
domain; Table 1, Figure 1), "ood" (cross-domain; Figure 2), "test" (the full model for
Tables 2-3). One head per layer (Tables 2-3) keeps a single head per layer: one job per
layer tries each head on the selection set.

Under SLURM the ablation jobs of a study (ablate_head, one_head_layer) form the job group
"ablation_{study}": profiles/slurm bundles several of them into one sbatch job
(group-components there). Run locally, Snakemake ignores groups.
"""


wildcard_constraints:
    study="|".join(STUDIES),
    head="[a-z_]+-[0-9]+-[0-9]+([.][.][a-z_]+-[0-9]+-[0-9]+)?",
    layer="[a-z_]+-[0-9]+([.][.][a-z_]+-[0-9]+)?",
    role="|".join(ROLES),


rule evaluate_full:
    input:
        model=study_model,
        data=stage_answer(stages.ablation.full_eval_data),
    output:
        f"{RESULTS}/{{study}}/full.json",
    params:
        study=study_params,
        evaluation=stage_answer(stages.ablation.full_eval_params),
    log:
        f"{RESULTS}/logs/evaluate_full/{{study}}.log",
    resources:
        gpu=study_resource("evaluate", "gpu"),
        mem_mb=study_resource("evaluate", "mem_mb"),
        runtime=study_resource("evaluate", "runtime"),
    conda:
        ENV
    script:
        "../scripts/evaluate.py"


rule ablate_head:
    input:
        model=study_model,
        data=stage_answer(stages.ablation.eval_data),
        masking=stage_answer(stages.ablation.masking_data),
    output:
        f"{RESULTS}/{{study}}/ablation/{{head}}.json",
    params:
        study=study_params,
        evaluation=stage_answer(stages.ablation.job_params, wildcard="head"),
    log:
        f"{RESULTS}/logs/ablate_head/{{study}}/{{head}}.log",
    group:
        "ablation_{study}"
    resources:
        gpu=study_resource("ablate", "gpu"),
        mem_mb=study_resource("ablate", "mem_mb"),
        runtime=study_resource("ablate", "runtime"),
    conda:
        ENV
    script:
        "../scripts/evaluate.py"


rule screen_heads:
    """A screened Table 1 (ablation.strategy: screened): every head scored by the screen on the importance data
    (never the test set), the top K and a seeded sample of the rest picked for exact ablation."""
    input:
        model=study_model,
        data=study_attribute("importance_data"),
        masking=stage_answer(stages.ablation.masking_data),
    output:
        f"{RESULTS}/{{study}}/screen.csv",
    params:
        study=study_params,
        screen=stage_answer(stages.ablation.screen_params),
    log:
        f"{RESULTS}/logs/screen_heads/{{study}}.log",
    resources:
        gpu=study_resource("importance", "gpu"),
        mem_mb=study_resource("importance", "mem_mb"),
        runtime=study_resource("importance", "runtime"),
    conda:
        ENV
    script:
        "../scripts/screen_heads.py"


rule ablate_screened:
    """The heads a screen picked (verified and sampled), each ablated alone, in one job (batched gate variants)."""
    input:
        model=study_model,
        data=stage_answer(stages.ablation.eval_data),
        masking=stage_answer(stages.ablation.masking_data),
        screen=f"{RESULTS}/{{study}}/screen.csv",
    output:
        f"{RESULTS}/{{study}}/ablation/screened.json",
    params:
        study=study_params,
        evaluation=stage_answer(stages.ablation.screened_params),
    log:
        f"{RESULTS}/logs/ablate_head/{{study}}/screened.log",
    resources:
        gpu=study_resource("ablate", "gpu"),
        mem_mb=study_resource("ablate", "mem_mb"),
        runtime=study_resource("ablate", "runtime"),
    conda:
        ENV
    script:
        "../scripts/evaluate.py"


rule significance:
    input:
        full=f"{RESULTS}/{{study}}/full.json",
        heads=stage_answer(stages.ablation.outputs),
        screen=stage_answer(stages.ablation.screen_table),
    output:
        f"{RESULTS}/{{study}}/{{role}}/ablation.csv",
    params:
        study=study_params,
        significance=stage_answer(stages.ablation.significance_params, wildcard="role"),
    log:
        f"{RESULTS}/logs/significance/{{study}}/{{role}}.log",
    resources:
        gpu=study_resource("significance", "gpu"),
        mem_mb=study_resource("significance", "mem_mb"),
        runtime=study_resource("significance", "runtime"),
    conda:
        ENV
    script:
        "../scripts/significance.py"


rule one_head_layer:
    input:
        model=study_model,
        data=stage_answer(stages.ablation.one_head_eval_data),
        masking=stage_answer(stages.ablation.masking_data),
    output:
        f"{RESULTS}/{{study}}/one_head/{{layer}}.json",
    params:
        study=study_params,
        evaluation=stage_answer(stages.ablation.one_head_params, wildcard="layer"),
    log:
        f"{RESULTS}/logs/one_head_layer/{{study}}/{{layer}}.log",
    group:
        "ablation_{study}"
    resources:
        gpu=study_resource("ablate", "gpu"),
        mem_mb=study_resource("ablate", "mem_mb"),
        runtime=study_resource("ablate", "runtime"),
    conda:
        ENV
    script:
        "../scripts/one_head_layer.py"


rule one_head_significance:
    input:
        unpack(stage_answer(stages.ablation.one_head_outputs)),
    output:
        f"{RESULTS}/{{study}}/one_head_per_layer.csv",
    params:
        study=study_params,
        significance=stage_answer(stages.ablation.significance_params, "test"),
    log:
        f"{RESULTS}/logs/one_head_significance/{{study}}.log",
    resources:
        gpu=study_resource("significance", "gpu"),
        mem_mb=study_resource("significance", "mem_mb"),
        runtime=study_resource("significance", "runtime"),
    conda:
        ENV
    script:
        "../scripts/one_head_significance.py"
