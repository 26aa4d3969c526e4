"""Test sets (WMT newstest, MTNT) through sacrebleu or URLs; GLUE tasks from their public archives."""


wildcard_constraints:
    testset="[A-Za-z0-9_.-]+",
    task="[a-z0-9_]+",


rule fetch_testset:
    input:
        of_pipeline(PIPELINE.testset_local_sources, wildcard="testset"),
    output:
        source=f"{DATA}/testsets/{{testset}}.{config['translation']['src_lang']}",
        reference=f"{DATA}/testsets/{{testset}}.{config['translation']['tgt_lang']}",
    params:
        spec=of_pipeline(stages.data.testset_params, PIPELINE, wildcard="testset"),
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
        of_pipeline(PIPELINE.glue_local_sources, wildcard="task"),
    output:
        directory(f"{DATA}/glue/{{task}}"),
    params:
        spec=of_pipeline(PIPELINE.glue_task_spec, wildcard="task"),
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


# A language-modelling corpus (WikiText-2 raw: the zip, a .raw file or a parquet split), one text file
# per split, as the usual protocol reads it.
rule fetch_corpus:
    input:
        of_pipeline(PIPELINE.corpus_local_sources, wildcard="corpus"),
    output:
        directory(f"{DATA}/corpora/{{corpus}}"),
    params:
        spec=of_pipeline(stages.data.corpus_params, PIPELINE, wildcard="corpus"),
        raw=f"{DATA}/raw/corpora/{{corpus}}",
    log:
        f"{RESULTS}/logs/fetch_corpus/{{corpus}}.log",
    resources:
        gpu=resource("fetch", "gpu"),
        mem_mb=resource("fetch", "mem_mb"),
        runtime=resource("fetch", "runtime"),
    conda:
        ENV
    script:
        "../scripts/fetch_corpus.py"


# Each split a language model is scored on, tokenized ONCE by its tokenizer and cut into windows.
rule tokenize_corpus:
    input:
        model=study_model,
        corpus=study_attribute("corpus_dir"),
    output:
        directory(PIPELINE.windows_dir("{study}")),
    params:
        tokenize=stage_answer(stages.data.tokenize_params),
    log:
        f"{RESULTS}/logs/tokenize_corpus/{{study}}.log",
    resources:
        gpu=0,
        mem_mb=resource("tokenize_corpus", "mem_mb"),
        runtime=resource("tokenize_corpus", "runtime"),
    conda:
        ENV
    script:
        "../scripts/tokenize_corpus.py"
