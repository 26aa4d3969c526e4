"""Recovery after pruning (rules/recovery.smk; headprune.training.recovery): the study's model pruned at each of
recovery.percents in the importance order (its pruning curve's steps), recovered by each method on its training data
and by bias compensation, scored on the test set; recovery.csv, and the recovered model at the cut exported."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import pandas as pd

from headprune.evaluation.runs import EvalSettings
from headprune.io import atomic
from headprune.models.loading import pick_device
from headprune.training.recovery import (RecoveryError, RecoverySettings, curve_points, export_recovered,
                                         recovery_table)
from headprune.workflow import load_evalset, load_study_model, logged, read_json, threads_for_torch

# headprune.training.recovery's arguments -> the config keys that set them
KEYS = {"lora_targets": "recovery.lora.targets", "lora_rank": "recovery.lora.rank", "lora_alpha": "recovery.lora.alpha",
        "temperature": "recovery.distill.temperature", "distill_weight": "recovery.distill.weight",
        "method": "recovery.methods", "train_items": "recovery.train_items"}

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, params = snakemake.params.study, snakemake.params.recovery
    full, tokenizer = load_study_model(study, pick_device(study["device"]))
    test, train = load_evalset(params["eval"]), load_evalset(params["train"])
    train.name = params["train"]["name"]
    points = curve_points(pd.read_csv(snakemake.input.curve), read_json(snakemake.input.steps), params["percents"])
    try:
        settings = RecoverySettings(**{k: tuple(v) if isinstance(v, list) else v for k, v in params["settings"].items()})
        table, cut = recovery_table(full, tokenizer, train, test, points, params["methods"], settings,
                                    study=study["name"], export=params["export"],
                                    eval_settings=EvalSettings(**params["evaluation"]))
    except RecoveryError as error:  # a LoRA target that names no module of this model, ...
        raise SystemExit(f"config: {KEYS.get(error.key, 'recovery.' + error.key)}: {error.why}") from None
    point = points[0]  # the cut, on the importance order's curve
    folder, stock = export_recovered(cut, tokenizer, snakemake.output.model, cut.config.headprune_recovery,
                                     base_model=study["model"], criterion="importance",
                                     curve_point={"percent_pruned": point["percent_pruned"],
                                                  "heads_pruned": len(point["heads"]), "score": point["score_pruned"],
                                                  "metric": point["metric"], "unpruned_score": point["score_unpruned"],
                                                  "data": params["eval"].get("name")})
    log.info("the recovered model at %g%% (%s) exported to %s (%s)", params["percents"][0], params["export"], folder,
             "a stock checkpoint" if stock else "remote code")
    atomic.write_csv(table, snakemake.output.table, index=False)
