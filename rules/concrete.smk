"""Beyond the paper: Voita et al.'s learned head gates (Hard Concrete, L0 penalty), one job per penalty.

Each job trains the gates on the study's training data (translation.train_sets, or the GLUE task's
train split), removes the heads whose gate closed, and evaluates that model next to I_h pruning and
random pruning with the same number of heads kept (paired bootstrap against each).
"""


wildcard_constraints:
    penalty="[0-9][0-9.e+-]*",


rule concrete_gates:
    input:
        model=study_model,
        train=study_attribute("train_data"),
        data=stage_answer(stages.concrete.eval_data),
        importance=study_attribute("importance_table"),
        masking=stage_answer(stages.concrete.masking_data),
    output:
        row=f"{RESULTS}/{{study}}/concrete/{{penalty}}.csv",
        heads=f"{RESULTS}/{{study}}/concrete/{{penalty}}.heads.csv",
        training=f"{RESULTS}/{{study}}/concrete/{{penalty}}.training.csv",
    params:
        study=study_params,
        concrete=stage_answer(stages.concrete.params, wildcard="penalty"),
    log:
        f"{RESULTS}/logs/concrete_gates/{{study}}/{{penalty}}.log",
    threads: rule_threads("concrete_gates", 2)
    resources:
        gpu=study_resource("concrete_gates", "gpu"),
        mem_mb=study_resource("concrete_gates", "mem_mb"),
        runtime=study_resource("concrete_gates", "runtime"),
    conda:
        ENV
    script:
        "../scripts/concrete_gates.py"


rule collect_concrete:
    input:
        stage_answer(stages.concrete.rows),
    output:
        f"{RESULTS}/{{study}}/concrete.csv",
    log:
        f"{RESULTS}/logs/collect_concrete/{{study}}.log",
    resources:
        gpu=study_resource("collect", "gpu"),
        mem_mb=study_resource("collect", "mem_mb"),
        runtime=study_resource("collect", "runtime"),
    conda:
        ENV
    script:
        "../scripts/concat_tables.py"


rule plot_concrete:
    input:
        f"{RESULTS}/{{study}}/concrete.csv",
    output:
        png=report(f"{FIGURES}/{{study}}/concrete.png", caption="../report/concrete.rst",
                   category="Learned gates and head roles", subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/concrete.pdf",
    params:
        style=config["figures"]["style"],
    log:
        f"{RESULTS}/logs/plot_concrete/{{study}}.log",
    resources:
        gpu=study_resource("figures", "gpu"),
        mem_mb=study_resource("figures", "mem_mb"),
        runtime=study_resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_concrete.py"
