"""Fine-tune the pretrained encoder on each GLUE task (the paper: 3 epochs, lr 2e-5, batch 32, length 128)."""


def finetune_params(wildcards):
    entry = GLUE[wildcards.task]
    return {**config["bert"]["finetune"], "num_labels": len(glue_task_spec(wildcards.task)["labels"]),
            "train_split": entry.get("train_split", "train"), "eval_split": entry.get("eval_split", "dev"),
            "metric": entry.get("metric", "accuracy"), "device": config["device"]}


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
    threads: 2
    resources:
        gpu=resource("finetune", "gpu"),
        mem_mb=resource("finetune", "mem_mb"),
        runtime=resource("finetune", "runtime"),
    conda:
        ENV
    script:
        "../scripts/finetune.py"
