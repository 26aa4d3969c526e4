"""Snakemake script: download IWSLT 2014 de-en (or the demo's archive of the same layout) and prepare it
as fairseq's prepare-iwslt14.sh does: train/valid/test text, joint BPE codes, a joined fairseq dictionary."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

import logging
import sys
from pathlib import Path

from headprune.data.iwslt import CleanRules, fetch_iwslt_archive, prepare_iwslt

# Everything, tracebacks included, to the rule's log (headprune.workflow.logged would import torch).
sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (snakemake is injected)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

spec, settings, output = snakemake.params.data, snakemake.params.settings, snakemake.output  # noqa: F821
archive = fetch_iwslt_archive(spec, snakemake.params.archive, progress=False)  # noqa: F821
logging.info("archive %s (%d bytes)", archive, archive.stat().st_size)
summary = prepare_iwslt(
    archive, Path(output.bpecodes).parent, src_lang=settings["src_lang"], tgt_lang=settings["tgt_lang"],
    lowercase=settings["lowercase"], bpe_merges=settings["bpe_merges"], valid_every=settings["valid_every"],
    test_sets=settings["test_sets"], clean=CleanRules(**settings["clean"]), processes=snakemake.threads,  # noqa: F821
    expected_sizes=settings.get("expected_sizes"),
)
logging.info("prepared: %s", summary)
