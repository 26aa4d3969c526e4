"""Fine-tune a pretrained encoder (BERT, RoBERTa, ...) on one GLUE task and save a Hugging Face model folder (safetensors)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from pathlib import Path

from headprune.models.loading import pick_device
from headprune.training.finetune import finetune_bert_classifier
from headprune.workflow import logged

with logged(snakemake) as log:
    s = snakemake.params.settings
    data = Path(snakemake.input.data)
    result = finetune_bert_classifier(
        snakemake.input.pretrained, data / f"{s['train_split']}.tsv", data / f"{s['eval_split']}.tsv",
        snakemake.output[0], num_labels=s["num_labels"], epochs=s["epochs"], lr=s["lr"],
        batch_size=s["batch_size"], max_length=s["max_length"], seed=s["seed"],
        warmup_fraction=s["warmup_fraction"], device=pick_device(s["device"]), num_threads=snakemake.threads,
    )
    log.info("fine-tuned %s: %s", snakemake.wildcards.study, result)
