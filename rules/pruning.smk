"""Iterative pruning: heads sorted by a criterion, 10% of the heads per step.

The paper's orders (importance, oracle, random) draw Figures 3, 4 and 6; with experiments.criteria
every criterion of headprune.analyses.criteria prunes the same way and compare_criteria sets them side by
side (criteria.csv, the summary and its paired bootstrap tests against I_h). ``scope`` "all" prunes
across the whole model; an attention type prunes only within it (Figure 4). A prune job runs
pruning.orders_per_job orders ('importance+fisher'), all their steps in one pass over the test set.
"""

wildcard_constraints:
    order=f"({CRITERION})([+]({CRITERION}))*",
    scope="all|enc_self|enc_dec|dec_self",


rule prune:
    input:
        unpack(stage_answer(stages.pruning.inputs, wildcard="order")),
        model=study_model,
        data=stage_answer(stages.pruning.eval_data),
        masking=stage_answer(stages.pruning.masking_data),
    output:
        scores=f"{RESULTS}/{{study}}/pruning/{{scope}}/{{order}}.csv",
        outputs=f"{RESULTS}/{{study}}/pruning/{{scope}}/{{order}}.outputs.json",
    params:
        study=study_params,
        pruning=stage_answer(stages.pruning.params, wildcard="order"),
    log:
        f"{RESULTS}/logs/prune/{{study}}/{{scope}}/{{order}}.log",
    resources:
        gpu=study_resource("prune", "gpu"),
        mem_mb=study_resource("prune", "mem_mb"),
        runtime=study_resource("prune", "runtime"),
    conda:
        ENV
    script:
        "../scripts/prune.py"


rule collect_pruning:
    input:
        stage_answer(stages.pruning.tables),
    output:
        f"{RESULTS}/{{study}}/pruning.csv",
    log:
        f"{RESULTS}/logs/collect_pruning/{{study}}.log",
    resources:
        gpu=study_resource("collect", "gpu"),
        mem_mb=study_resource("collect", "mem_mb"),
        runtime=study_resource("collect", "runtime"),
    conda:
        ENV
    script:
        "../scripts/concat_tables.py"


rule compare_criteria:
    input:
        unpack(stage_answer(stages.pruning.criteria_inputs)),
        data=stage_answer(stages.pruning.criteria_eval_data),
    output:
        curves=f"{RESULTS}/{{study}}/pruning/criteria.csv",
        summary=f"{RESULTS}/{{study}}/pruning/criteria_summary.csv",
    params:
        study=study_params,
        comparison=stage_answer(stages.pruning.criteria_params),
    log:
        f"{RESULTS}/logs/compare_criteria/{{study}}.log",
    resources:
        gpu=study_resource("significance", "gpu"),
        mem_mb=study_resource("significance", "mem_mb"),
        runtime=study_resource("significance", "runtime"),
    conda:
        ENV
    script:
        "../scripts/compare_criteria.py"
