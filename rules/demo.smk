"""The embedded demo's stand-ins for the internet: synthetic data and tiny models, in the real formats.

Only active with demo/config.yaml (a `demo:` section). Everything lands in
<data_dir>/upstream/, where the demo config's URLs point, so the real fetch rules consume it.
"""


if "demo" in config:

    rule demo_translation:
        output:
            checkpoint=f"{DATA}/upstream/demo.en-fr.transformer.tar.bz2",
            testsets=demo_testset_files(),
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
            # a second task (SST-2-like) that a config adds with one glue entry (README, tests/test_daily_use.py)
            sst2_archive=f"{DATA}/upstream/glue/SST-2.zip",
            pretrained=f"{DATA}/upstream/bert-tiny.tar.gz",
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
