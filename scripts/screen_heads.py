"""Screen every head of a study for a screened Table 1 (ablation.strategy: screened): its screen score on the
importance data (never the test set) under the ablation's masking, and which heads are ablated exactly (the top K,
a seeded sample of the rest): screen.csv (headprune.analyses.screening)."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import time

from headprune.analyses import screening
from headprune.io import atomic
from headprune.models.loading import pick_device
from headprune.workflow import importance_batches, load_evalset, load_study_model, logged, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, params = snakemake.params.study, snakemake.params.screen
    model, tokenizer = load_study_model(study, pick_device(study["device"]))
    started = time.perf_counter()
    screen_set = load_evalset(params["screen_set"]) if "screen_set" in params else None  # a screen that ablates heads
    table = screening.screen_study(model, tokenizer, params, screen_set=screen_set,
                                   batches=lambda: importance_batches(tokenizer, params["data"], model))
    log.info("screen time %.2f s: %s screen of %d heads; %d verified, %d sampled (seed %d)",
             time.perf_counter() - started, params["method"], len(table),
             int((table.verification == screening.VERIFIED).sum()),
             int((table.verification == screening.SAMPLED).sum()),
             params["seed"])
    table.insert(0, "study", study["name"])
    atomic.write_csv(table, snakemake.output[0], index=False)
