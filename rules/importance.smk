"""Head importance I_h, attention entropy and confidence: one forward and backward pass per batch."""


rule importance:
    input:
        model=study_model,
        data=study_attribute("importance_data"),
        constants=stage_answer(stages.importance.constants),
    output:
        f"{RESULTS}/{{study}}/importance.csv",
    params:
        study=study_params,
        data=study_attribute("importance_spec"),
        settings=stage_answer(stages.importance.settings),
    log:
        f"{RESULTS}/logs/importance/{{study}}.log",
    threads: rule_threads("importance", 2)
    resources:
        gpu=study_resource("importance", "gpu"),
        mem_mb=study_resource("importance", "mem_mb"),
        runtime=study_resource("importance", "runtime"),
    conda:
        ENV
    script:
        "../scripts/importance.py"
