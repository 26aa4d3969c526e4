"""Figure 5 (Section 6): training dynamics. Train the IWSLT 2014 de-en transformer (6 layers x 8 heads)
from its public data, keep checkpoints at the configured epochs, and for each checkpoint estimate
head importance (valid set) and prune in importance order (test set); one BLEU curve per epoch.

Only active with a `dynamics:` section in the config. The demo prepares an IWSLT-style archive of
its synthetic task (rule demo_iwslt), which the real preparation rule then reads. What the jobs read, are asked
and write is headprune.stages.dynamics's.
"""

DYNAMICS = stages.dynamics.of(PIPELINE)  # Figure 5's IWSLT model, or None


if DYNAMICS:

    if "demo" in config:

        rule demo_iwslt:
            output:
                DYNAMICS.section["data"]["url"],
            params:
                settings=config["demo"]["dynamics"],
                seed=config["demo"]["seed"],
                langs={"src_lang": DYNAMICS.section["src_lang"], "tgt_lang": DYNAMICS.section["tgt_lang"]},
                test_sets=DYNAMICS.section["test_sets"],
            log:
                f"{RESULTS}/logs/demo/iwslt.log",
            threads: 1
            resources:
                mem_mb=resource("demo", "mem_mb"),
                runtime=resource("demo", "runtime"),
            conda:
                ENV
            script:
                "../scripts/demo_iwslt.py"

    rule prepare_iwslt:
        input:
            DYNAMICS.local_sources,
        output:
            **DYNAMICS.prepared_files,
        params:
            data=DYNAMICS.section["data"],
            settings=DYNAMICS.prepare_settings,
            archive=DYNAMICS.archive_path,
        log:
            f"{RESULTS}/logs/prepare_iwslt/{DYNAMICS.name}.log",
        threads: rule_threads("prepare_iwslt", 2)
        # Training is the longest chain of the study: start it before the many short jobs.
        priority: 10
        resources:
            gpu=resource("prepare_iwslt", "gpu"),
            mem_mb=resource("prepare_iwslt", "mem_mb"),
            runtime=resource("prepare_iwslt", "runtime"),
        conda:
            ENV
        script:
            "../scripts/prepare_iwslt.py"

    rule train_dynamics:
        input:
            **DYNAMICS.prepared_files,
        output:
            checkpoints=DYNAMICS.checkpoints,
            history=f"{RESULTS}/{DYNAMICS.name}/training.csv",
        params:
            settings=DYNAMICS.model_settings,
            train=DYNAMICS.section["train"],
        log:
            f"{RESULTS}/logs/train_dynamics/{DYNAMICS.name}.log",
        threads: 1
        priority: 10
        resources:
            gpu=resource("train_dynamics", "gpu"),
            mem_mb=resource("train_dynamics", "mem_mb"),
            runtime=resource("train_dynamics", "runtime"),
        conda:
            ENV
        script:
            "../scripts/train_dynamics.py"

    rule dynamics_importance:
        input:
            model=of_pipeline(DYNAMICS.checkpoint, wildcard="epoch"),
            data=DYNAMICS.importance_data,
        output:
            f"{RESULTS}/{DYNAMICS.name}/epoch{{epoch}}/head_importance.csv",
        params:
            study=of_pipeline(DYNAMICS.study_params, wildcard="epoch"),
            data=DYNAMICS.importance_params(),
            settings=config["importance"],
        log:
            f"{RESULTS}/logs/dynamics_importance/{DYNAMICS.name}/epoch{{epoch}}.log",
        wildcard_constraints:
            epoch="[0-9]+",
        threads: 1
        resources:
            gpu=resource("importance", "gpu"),
            mem_mb=resource("importance", "mem_mb"),
            runtime=resource("importance", "runtime"),
        conda:
            ENV
        script:
            "../scripts/importance.py"

    rule dynamics_prune:
        input:
            importance=f"{RESULTS}/{DYNAMICS.name}/epoch{{epoch}}/head_importance.csv",
            model=of_pipeline(DYNAMICS.checkpoint, wildcard="epoch"),
            data=DYNAMICS.eval_data,
        output:
            scores=f"{RESULTS}/{DYNAMICS.name}/epoch{{epoch}}/pruning_{{order}}.csv",
        params:
            study=of_pipeline(DYNAMICS.study_params, wildcard="epoch"),
            pruning=DYNAMICS.pruning_params(),
        log:
            f"{RESULTS}/logs/dynamics_prune/{DYNAMICS.name}/epoch{{epoch}}_{{order}}.log",
        wildcard_constraints:
            epoch="[0-9]+",
            order="importance",
        threads: 1
        resources:
            gpu=resource("prune", "gpu"),
            mem_mb=resource("prune", "mem_mb"),
            runtime=resource("prune", "runtime"),
        conda:
            ENV
        script:
            "../scripts/prune.py"

    rule plot_dynamics:
        input:
            pruning=DYNAMICS.pruning_tables,
        output:
            csv=f"{FIGURES}/{DYNAMICS.name}/figure5.csv",
            png=report(f"{FIGURES}/{DYNAMICS.name}/figure5.png", caption="../report/figure5.rst", category="Figure 5",
                       subcategory=DYNAMICS.name),
            pdf=f"{FIGURES}/{DYNAMICS.name}/figure5.pdf",
        params:
            epochs=DYNAMICS.epochs,
            style=config["figures"]["style"],
        log:
            f"{RESULTS}/logs/plot_dynamics/{DYNAMICS.name}.log",
        resources:
            gpu=resource("figures", "gpu"),
            mem_mb=resource("figures", "mem_mb"),
            runtime=resource("figures", "runtime"),
        conda:
            ENV
        script:
            "../scripts/plot_dynamics.py"
