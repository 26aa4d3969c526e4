"""Iterative pruning: heads sorted once (importance, oracle or random order), 10% of all heads per step."""


wildcard_constraints:
    order="importance|oracle|random",


rule prune:
    input:
        unpack(pruning_inputs),
        model=study_model,
        data=study_eval_data,
    output:
        f"{RESULTS}/{{study}}/pruning/{{order}}.csv",
    params:
        study=study_of,
        pruning=pruning_params,
    log:
        f"{RESULTS}/logs/prune/{{study}}/{{order}}.log",
    resources:
        gpu=resource("prune", "gpu"),
        mem_mb=resource("prune", "mem_mb"),
        runtime=resource("prune", "runtime"),
    conda:
        ENV
    script:
        "../scripts/prune.py"


rule collect_pruning:
    input:
        pruning_order_tables,
    output:
        f"{RESULTS}/{{study}}/pruning.csv",
    log:
        f"{RESULTS}/logs/collect_pruning/{{study}}.log",
    conda:
        ENV
    script:
        "../scripts/concat_tables.py"
