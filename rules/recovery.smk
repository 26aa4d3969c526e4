"""Recovery after pruning (issue #59): each study of experiments.recovery pruned in the importance order at each of
recovery.percents, trained a few steps by each of recovery.methods on its training data (LoRA merged, full
fine-tuning, distillation from the unpruned model), bias compensation beside them; the recovered model at the cut
(the first percent) exported as a pruned one is. One job per study. Its outputs are written whole or not at all
(headprune.io.atomic): a killed job leaves nothing that looks finished, and Snakemake reruns it."""


rule recover:
    input:
        unpack(stage_answer(stages.recovery.curve)),
        model=study_model,
        data=stage_answer(stages.recovery.eval_data),
        train=stage_answer(stages.recovery.train_data),
    output:
        table=f"{RESULTS}/{{study}}/recovery.csv",
        model=directory(f"{RESULTS}/{{study}}/recovered"),
    params:
        study=study_params,
        recovery=stage_answer(stages.recovery.params),
    log:
        f"{RESULTS}/logs/recover/{{study}}.log",
    threads: rule_threads("recover", 1)
    resources:
        gpu=study_resource("recover", "gpu"),
        mem_mb=study_resource("recover", "mem_mb"),
        runtime=study_resource("recover", "runtime"),
    conda:
        ENV
    script:
        "../scripts/recover.py"
