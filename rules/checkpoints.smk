"""Pretrained models: the fairseq WMT14 en-fr tarball (converted once into a model folder) and
bert-base-uncased."""


rule fetch_translation_checkpoint:
    input:
        PIPELINE.pretrained_local_sources()["translation"],
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


rule convert_translation_checkpoint:
    input:
        f"{DATA}/checkpoints/{TRANSLATION}.tar.bz2",
    output:
        directory(PIPELINE.translation_model_folder),
    params:
        languages=[config["translation"]["src_lang"], config["translation"]["tgt_lang"]],
    log:
        f"{RESULTS}/logs/convert_translation_checkpoint.log",
    resources:
        gpu=resource("convert", "gpu"),
        mem_mb=resource("convert", "mem_mb"),
        runtime=resource("convert", "runtime"),
    conda:
        ENV
    script:
        "../scripts/convert_checkpoint.py"


rule fetch_pretrained_bert:
    input:
        PIPELINE.pretrained_local_sources()["bert"],
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


# A models entry's source: a hub snapshot (safetensors and tokenizer files only) or a model-folder tarball.
rule fetch_model:
    input:
        of_pipeline(PIPELINE.model_local_sources, wildcard="study"),
    output:
        directory(PIPELINE.fetched_model_folder("{study}")),
    params:
        pretrained=stage_answer(stages.checkpoints.fetch_params),
    log:
        f"{RESULTS}/logs/fetch_model/{{study}}.log",
    resources:
        gpu=resource("fetch", "gpu"),
        mem_mb=resource("fetch", "mem_mb"),
        runtime=resource("fetch", "runtime"),
    conda:
        ENV
    script:
        "../scripts/fetch_pretrained.py"
