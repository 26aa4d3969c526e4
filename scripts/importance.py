"""Score every head of a study's model: importance (three estimators), Fisher information, attention
gradient, entropy, confidence (headprune.scoring.importance.head_scores)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.io import atomic
from headprune.scoring.importance import head_scores
from headprune.models.loading import pick_device
from headprune.workflow import importance_batches, load_study_model, logged, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, data, settings = snakemake.params.study, snakemake.params.data, snakemake.params.settings
    device = pick_device(study["device"])
    model, tokenizer = load_study_model(study, device)
    batches = importance_batches(tokenizer, data, model)
    log.info("%s: %d batches, estimator %s", study["name"], len(batches), settings["estimator"])
    constants = None
    if settings.get("constants"):  # mean or optimal masking: I_h of the change to each head's constant
        from headprune.models.head_constants import HeadConstants

        constants = HeadConstants.load(settings["constants"])
        log.info("I_h as |(o_h - c_h) . dL/do_h|, c_h the %s constants of %s", constants.kind, settings["constants"])
    table = head_scores(model, batches, estimator=settings["estimator"], normalize=settings["normalize"],
                        device=device, constants=constants)
    table.insert(0, "study", study["name"])
    atomic.write_csv(table, snakemake.output[0], index=False)
