"""Fine-tune a pretrained encoder on a GLUE task (the paper: 3 epochs, lr 2e-5, batch 32, length 128):
bert.pretrained for every glue study, a models entry's own source for it (kind classification, finetune true)."""


rule finetune:
    input:
        pretrained=stage_answer(stages.finetune.pretrained),
        data=study_attribute("glue_dir"),
    output:
        directory(f"{RESULTS}/models/{{study}}"),
    params:
        settings=stage_answer(stages.finetune.params),
    log:
        f"{RESULTS}/logs/finetune/{{study}}.log",
    threads: rule_threads("finetune", 2)
    resources:
        gpu=study_resource("finetune", "gpu"),
        mem_mb=study_resource("finetune", "mem_mb"),
        runtime=study_resource("finetune", "runtime"),
    conda:
        ENV
    script:
        "../scripts/finetune.py"
