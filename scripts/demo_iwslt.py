"""Demo: an IWSLT-style archive (train.tags.de-en.*, IWSLT14.TED*.xml) of the synthetic translation task,
written where demo/config.yaml's dynamics.data.url points, so that the real preparation rule reads it."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import tempfile

from headprune.data.datasets import read_lines
from headprune.data.iwslt import write_iwslt_archive
from headprune.demo.corpora import make_translation_corpus
from headprune.workflow import logged

with logged(snakemake) as log:
    s, langs = snakemake.params.settings, snakemake.params.langs
    src, tgt = langs["src_lang"], langs["tgt_lang"]
    test_sets = list(snakemake.params.test_sets)
    with tempfile.TemporaryDirectory() as workdir:
        corpus = make_translation_corpus(workdir, s["train_sentences"], {name: s["test_sentences"] for name in test_sets},
                                         snakemake.params.seed, shifted_sets=(), src_lang=src, tgt_lang=tgt)

        def pairs(name):
            return list(zip(read_lines(corpus[f"{name}.{src}"]), read_lines(corpus[f"{name}.{tgt}"])))

        write_iwslt_archive(snakemake.output[0], pairs("train"), {name: pairs(name) for name in test_sets},
                            src_lang=src, tgt_lang=tgt)
    log.info("demo IWSLT archive: %d training pairs, %d test sets", s["train_sentences"], len(test_sets))
