"""Iterative pruning: heads sorted once (importance, oracle or random order), 10% of the heads per step.

``scope`` "all" prunes across the whole model (Figures 3 and 6); an attention type prunes
only within it (Figure 4).
"""


wildcard_constraints:
    order="importance|oracle|random",
    scope="all|enc_self|enc_dec|dec_self",


rule prune:
    input:
        unpack(pruning_inputs),
        model=study_model,
        data=study_eval_data,
    output:
        f"{RESULTS}/{{study}}/pruning/{{scope}}/{{order}}.csv",
    params:
        study=study_of,
        pruning=pruning_params,
    log:
        f"{RESULTS}/logs/prune/{{study}}/{{scope}}/{{order}}.log",
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
    resources:
        gpu=resource("collect", "gpu"),
        mem_mb=resource("collect", "mem_mb"),
        runtime=resource("collect", "runtime"),
    conda:
        ENV
    script:
        "../scripts/concat_tables.py"
