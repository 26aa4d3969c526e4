"""Test sets (WMT newstest, MTNT) through sacrebleu or URLs; GLUE tasks from their public archives."""


wildcard_constraints:
    testset="[A-Za-z0-9_.-]+",
    task="[a-z0-9_]+",


rule fetch_testset:
    input:
        testset_local_sources,
    output:
        source=f"{DATA}/testsets/{{testset}}.{config['translation']['src_lang']}",
        reference=f"{DATA}/testsets/{{testset}}.{config['translation']['tgt_lang']}",
    params:
        spec=testset_params,
        langpair=f"{config['translation']['src_lang']}-{config['translation']['tgt_lang']}",
        cache=f"{DATA}/sacrebleu",
    log:
        f"{RESULTS}/logs/fetch_testset/{{testset}}.log",
    resources:
        gpu=resource("fetch", "gpu"),
        mem_mb=resource("fetch", "mem_mb"),
        runtime=resource("fetch", "runtime"),
    conda:
        ENV
    script:
        "../scripts/fetch_testset.py"


rule prepare_glue:
    input:
        glue_local_sources,
    output:
        directory(f"{DATA}/glue/{{task}}"),
    params:
        spec=glue_params,
        raw=f"{DATA}/raw/glue/{{task}}",
    log:
        f"{RESULTS}/logs/prepare_glue/{{task}}.log",
    resources:
        gpu=resource("fetch", "gpu"),
        mem_mb=resource("fetch", "mem_mb"),
        runtime=resource("fetch", "runtime"),
    conda:
        ENV
    script:
        "../scripts/prepare_glue.py"
