"""The embedded demo's stand-ins for the internet: synthetic data and tiny models, in the real formats.

Only active with demo/config.yaml (a `demo:` section). Everything lands in
<data_dir>/upstream/, where the demo config's URLs point, so the real fetch rules consume it.
"""


if "demo" in config:

    rule demo_translation:
        # The longest chain of the demo starts here (the translation model's importance, ablation, pruning):
        # start it first, not after the quicker demo models.
        priority: 50
        output:
            checkpoint=f"{DATA}/upstream/demo.en-fr.transformer.tar.bz2",
            testsets=stages.demo.testset_files(PIPELINE),
        params:
            settings=config["demo"]["translation"],
            seed=config["demo"]["seed"],
            testset_names=list(config["translation"]["testsets"]),
            workdir=f"{DATA}/upstream/corpus",
        log:
            f"{RESULTS}/logs/demo/translation.log",
        threads: 1
        resources:
            mem_mb=resource("demo", "mem_mb"),
            runtime=resource("demo", "runtime"),
        conda:
            ENV
        script:
            "../scripts/demo_translation.py"

    rule demo_classification:
        output:
            archive=f"{DATA}/upstream/glue/MNLI.zip",
            # Figure 6's tasks, in the forms the real ones are downloaded in: SST-2 and CoLA as
            # GLUE archives; MRPC as SentEval's two files plus GLUE's dev ids (the MRPC spec in
            # headprune.data.glue splits train/dev by them). Each takes one glue entry in the config.
            sst2_archive=f"{DATA}/upstream/glue/SST-2.zip",
            cola_archive=f"{DATA}/upstream/glue/CoLA.zip",
            msr_paraphrase_train=f"{DATA}/upstream/glue/MRPC/msr_paraphrase_train.txt",
            msr_paraphrase_test=f"{DATA}/upstream/glue/MRPC/msr_paraphrase_test.txt",
            mrpc_dev_ids=f"{DATA}/upstream/glue/MRPC/mrpc_dev_ids.tsv",
            pretrained=f"{DATA}/upstream/bert-tiny.tar.gz",
            roberta=f"{DATA}/upstream/roberta-tiny.tar.gz",
        params:
            settings=config["demo"]["classification"],
            bert=config["demo"]["bert"],
            seed=config["demo"]["seed"],
            workdir=f"{DATA}/upstream/classification",
        log:
            f"{RESULTS}/logs/demo/classification.log",
        threads: 1
        resources:
            mem_mb=resource("demo", "mem_mb"),
            runtime=resource("demo", "runtime"),
        conda:
            ENV
        script:
            "../scripts/demo_classification.py"

    rule demo_language_model:
        output:
            corpus=f"{DATA}/upstream/wikitext-2-raw-v1.zip",
            model=f"{DATA}/upstream/tiny-llama.tar.gz",
        params:
            settings=config["demo"]["language_model"],
            seed=config["demo"]["seed"],
            workdir=f"{DATA}/upstream/language_model",
        log:
            f"{RESULTS}/logs/demo/language_model.log",
        threads: 1
        resources:
            mem_mb=resource("demo", "mem_mb"),
            runtime=resource("demo", "runtime"),
        conda:
            ENV
        script:
            "../scripts/demo_language_model.py"

    rule demo_lm_task:
        # A task in lm-evaluation-harness's YAML format with local data, as a user without hub access
        # writes one (a models entry of kind lm_eval names the YAML): which number a passage said, as multiple choice.
        input:
            corpus=f"{DATA}/upstream/wikitext-2-raw-v1.zip",
        output:
            task=f"{DATA}/upstream/lm_tasks/demo_passkey.yaml",
            test=f"{DATA}/upstream/lm_tasks/demo_passkey.test.jsonl",
            validation=f"{DATA}/upstream/lm_tasks/demo_passkey.validation.jsonl",
            train=f"{DATA}/upstream/lm_tasks/demo_passkey.train.jsonl",
        params:
            settings=config["demo"]["lm_task"],
            seed=config["demo"]["seed"],
        log:
            f"{RESULTS}/logs/demo/lm_task.log",
        threads: 1
        resources:
            mem_mb=resource("demo", "mem_mb"),
            runtime=resource("demo", "runtime"),
        conda:
            ENV
        script:
            "../scripts/demo_lm_task.py"
