"""A masking mode's data for one study: what its class names as ``data_maker`` (headprune.scoring.constants: each
head's mean output, or its optimal constant learned from the mean, or the resample donors) on the study's
importance data; a safetensors file the jobs read, and a CSV summary (one row per head, or per stream)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.io import atomic
from headprune.models.loading import pick_device
from headprune.models.masking import MODES
from headprune.scoring.constants import DATA_MAKERS
from headprune.workflow import importance_batches, load_study_model, logged, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, data, settings = snakemake.params.study, snakemake.params.data, snakemake.params.settings
    word = settings["mode"]
    mode = MODES[word]
    make = DATA_MAKERS[word]
    device = pick_device(study["device"])
    model, tokenizer = load_study_model(study, device)
    batches = importance_batches(tokenizer, data, model)
    described = f"{study['name']}'s importance data ({len(batches)} batches)"
    log.info("%s: %s masking's data from %s (%s)", study["name"], word, described, mode.data_maker)
    made = make(model, batches, data=described, device=device, **mode.data_options(settings))
    log.info("made: %s", made.meta)
    with atomic.atomic_path(snakemake.output.data) as tmp:
        made.save(tmp)  # safetensors
    summary = made.summary()
    summary.insert(0, "study", study["name"])
    summary.insert(1, "mode", word)
    atomic.write_csv(summary, snakemake.output.summary, index=False)
