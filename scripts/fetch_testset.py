"""Write one test set as source/reference text files, from sacrebleu or from two URLs."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.data.datasets import fetch_sacrebleu_testset, read_lines
from headprune.io.download import fetch
from headprune.workflow import logged

with logged(snakemake) as log:
    spec = snakemake.params.spec
    if "sacrebleu" in spec:
        n_src, n_ref = fetch_sacrebleu_testset(spec["sacrebleu"], snakemake.params.langpair, snakemake.output.source,
                                               snakemake.output.reference, cache_dir=snakemake.params.cache)
    else:
        for key in ("source", "reference"):
            fetch(spec[key]["url"], snakemake.output[key], spec[key].get("sha256"))
        n_src, n_ref = len(read_lines(snakemake.output.source)), len(read_lines(snakemake.output.reference))
    if n_src != n_ref:
        raise ValueError(f"test set {snakemake.wildcards.testset}: {n_src} sources but {n_ref} references")
    log.info("%s: %d sentence pairs", snakemake.wildcards.testset, n_src)
