"""Demo: synthetic English published as WikiText-2 raw (wikitext-2-raw-v1.zip) and a tiny Llama-layout LM with
grouped-query attention trained on its train split (and, with the ``passkey`` settings, on passkey documents cut
from it, so that it retrieves a needle), published as a model-folder tarball."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from pathlib import Path

from headprune.data.wikitext import read_wikitext
from headprune.demo.corpora import make_wikitext_corpus
from headprune.demo.models import train_tiny_llama
from headprune.io import atomic
from headprune.workflow import logged

with logged(snakemake) as log:
    s, seed, out = snakemake.params.settings, snakemake.params.seed, snakemake.output
    corpus = make_wikitext_corpus(out.corpus, s["sentences"], seed)
    folder = train_tiny_llama(Path(snakemake.params.workdir) / "tiny-llama", read_wikitext(corpus, "train"),
                              layers=s["layers"], heads=s["heads"], kv_heads=s["kv_heads"], hidden=s["hidden"],
                              ffn=s["ffn"], window=s["window"], vocab_size=s["vocab_size"], steps=s["steps"],
                              batch_size=s["batch_size"], lr=s["lr"],
                              initializer_range=s.get("initializer_range", 0.02),
                              max_positions=s.get("max_positions"), passkey=s.get("passkey"), seed=seed)
    with atomic.tar_writer(out.model, "w:gz") as archive:
        archive.add(folder, arcname="tiny-llama")
    log.info("demo corpus %s and language model %s written", out.corpus, out.model)
