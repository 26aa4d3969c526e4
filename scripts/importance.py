"""Score every head of a study's model: importance (three estimators), Fisher information, attention
gradient, entropy, confidence (headprune.importance.head_scores)."""
from headprune.batching import classification_batches, translation_batches
from headprune.data import read_glue_split, read_lines
from headprune.importance import head_scores
from headprune.models import pick_device
from headprune.workflow import load_study_model, logged, subset, threads_for_torch

with logged(snakemake) as log:
    threads_for_torch(snakemake)
    study, data, settings = snakemake.params.study, snakemake.params.data, snakemake.params.settings
    device = pick_device(study["device"])
    model, tokenizer = load_study_model(study, device)
    if data["kind"] == "translation":
        sources, references = [], []
        for testset in data["sets"]:
            sources += read_lines(testset["source"])[:data["max_items"]]
            references += read_lines(testset["reference"])[:data["max_items"]]
        batches = translation_batches(tokenizer, sources, references, data["batch_size"])
    else:
        pairs, labels = read_glue_split(data["tsv"])
        keep = subset(list(range(len(pairs))), data["max_items"], data["seed"])
        batches = classification_batches(tokenizer, [pairs[i] for i in keep], [labels[i] for i in keep],
                                         data["batch_size"], data["max_length"])
    log.info("%s: %d batches, estimator %s", study["name"], len(batches), settings["estimator"])
    table = head_scores(model, batches, estimator=settings["estimator"], normalize=settings["normalize"],
                        device=device)
    table.insert(0, "study", study["name"])
    table.to_csv(snakemake.output[0], index=False)
