"""The data of the masking modes that put something in a switched-off head's place (issue #32): each head's mean
output, the optimal constant (Li and Janson 2024) and the resample donors, computed once per study on its
importance data (never its eval data) and read by every job that masks that way (ablation, one head per layer,
pruning; models.<study>.masking, ablation.masking, pruning.masking)."""


rule head_constants:
    input:
        model=study_model,
        data=study_attribute("importance_data"),
    output:
        data=f"{RESULTS}/{{study}}/head_constants/{{mode}}.safetensors",
        summary=f"{RESULTS}/{{study}}/head_constants/{{mode}}.csv",
    wildcard_constraints:
        mode=DATA_MODES,
    params:
        study=study_params,
        data=study_attribute("importance_spec"),
        settings=stage_answer(stages.constants.params, wildcard="mode"),
    log:
        f"{RESULTS}/logs/head_constants/{{study}}/{{mode}}.log",
    threads: rule_threads("importance", 2)
    resources:
        gpu=study_resource("importance", "gpu"),
        mem_mb=study_resource("importance", "mem_mb"),
        runtime=study_resource("importance", "runtime"),
    conda:
        ENV
    script:
        "../scripts/head_constants.py"
