"""A GLUE task's BERT, and a classification models entry with finetune: true, fine-tuned by the pipeline
(rules/finetune.smk): its settings, and the model it starts from."""
from __future__ import annotations


def params(study):
    config, entry = study.config, study.pipeline.glue[study.task]
    own = study.entry.get("finetune")  # the study's, over its task's, over bert.finetune
    return {**config["bert"]["finetune"], **entry.get("finetune", {}), **(own if isinstance(own, dict) else {}),
            "num_labels": len(study.pipeline.glue_task_spec(study.task)["labels"]),
            "train_split": entry.get("train_split", "train"), "eval_split": entry.get("eval_split", "dev"),
            "metric": entry.get("metric", "accuracy"), "device": config["device"]}


def pretrained(study):
    """What a classification study is fine-tuned from: bert.pretrained, or a models entry's source."""
    if study.name in study.pipeline.models:
        return study.fetched_model_folder
    return f"{study.pipeline.data_dir}/checkpoints/bert-pretrained"
