"""Pretrained models: the fairseq WMT14 en-fr tarball and bert-base-uncased."""


rule fetch_translation_checkpoint:
    input:
        pretrained_translation_local_sources,
    output:
        f"{DATA}/checkpoints/{TRANSLATION}.tar.bz2",
    params:
        checkpoint=config["translation"]["checkpoint"],
    log:
        f"{RESULTS}/logs/fetch_translation_checkpoint.log",
    resources:
        gpu=resource("fetch", "gpu"),
        mem_mb=resource("fetch", "mem_mb"),
        runtime=resource("fetch", "runtime"),
    conda:
        ENV
    script:
        "../scripts/fetch_checkpoint.py"


rule fetch_pretrained_bert:
    input:
        pretrained_local_sources,
    output:
        directory(f"{DATA}/checkpoints/bert-pretrained"),
    params:
        pretrained=config["bert"]["pretrained"],
    log:
        f"{RESULTS}/logs/fetch_pretrained_bert.log",
    resources:
        gpu=resource("fetch", "gpu"),
        mem_mb=resource("fetch", "mem_mb"),
        runtime=resource("fetch", "runtime"),
    conda:
        ENV
    script:
        "../scripts/fetch_pretrained.py"
