"""Demo: a synthetic en->fr corpus and a tiny translation model, published as a fairseq tarball."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from pathlib import Path

from headprune.demo.corpora import make_translation_corpus
from headprune.demo.models import train_tiny_translation_model
from headprune.io import atomic
from headprune.workflow import logged

with logged(snakemake) as log:
    s = snakemake.params.settings
    # A test set named "train" is the training corpus itself (what the demo's Hard Concrete gates
    # train on and head roles count word frequencies on), not a fresh sample.
    names = [name for name in snakemake.params.testset_names if name != "train"]
    corpus = make_translation_corpus(snakemake.params.workdir, s["train_sentences"],
                                     {name: s["test_sentences"] for name in names}, snakemake.params.seed)
    train_tiny_translation_model(corpus, snakemake.output.checkpoint, layers=s["layers"], heads=s["heads"],
                                 d_model=s["d_model"], ffn=s["ffn"], epochs=s["epochs"], seed=snakemake.params.seed,
                                 num_threads=1)  # tiny models train faster on one thread
    # Publish the test sets where the demo config's URLs point.
    for target in snakemake.output.testsets:
        name = Path(target).name
        atomic.copy_file(Path(snakemake.params.workdir) / name, target)
    log.info("demo translation model and %d test sets written", len(names))
