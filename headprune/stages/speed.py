"""Table 4 (rules/speed.smk): the full and the pruned model timed on the eval set at several batch sizes, the
pruned one with the least important heads physically removed."""
from __future__ import annotations


def eval_data(study):
    """Only the eval set: newstest2013 (translation), the GLUE task's folder (its eval split), the LM's windows."""
    return study.scoring.speed_data(study)


def params(study):
    """The eval set (the first/seeded speed.max_items items of it) and how to time it."""
    speed = study.config["speed"]
    evalset = study.evalset_spec()
    if speed.get("max_items") is not None:
        evalset["max_items"] = speed["max_items"]
    settings = {"batch_sizes": speed.get("batch_sizes", [1, 4, 16, 64]), "repeats": speed.get("repeats", 3),
                "prune_percent": speed.get("prune_percent", 50), "warmup_batches": speed.get("warmup_batches", 2),
                # the models timed: the full and the pruned one (Table 4), and on request uniform and stock
                "variants": list(speed.get("variants", ["original", "pruned"]))}
    settings.update(study.scoring.speed_settings(study, speed))
    return {"eval": evalset, "settings": settings}
