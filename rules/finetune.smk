"""Fine-tune the pretrained encoder on each GLUE task (the paper: 3 epochs, lr 2e-5, batch 32, length 128)."""


rule finetune:
    input:
        pretrained=f"{DATA}/checkpoints/bert-pretrained",
        data=glue_dir("{task}"),
    output:
        directory(f"{RESULTS}/models/{{task}}"),
    params:
        settings=finetune_params,
    log:
        f"{RESULTS}/logs/finetune/{{task}}.log",
    threads: rule_threads("finetune", 2)
    resources:
        gpu=resource("finetune", "gpu"),
        mem_mb=resource("finetune", "mem_mb"),
        runtime=resource("finetune", "runtime"),
    conda:
        ENV
    script:
        "../scripts/finetune.py"
