"""Table 4: inference speed with 50% of the heads physically removed, against the full model (one job per study);
speed.variants adds the uniform layout and its stock checkpoint."""


rule speed:
    input:
        model=study_model,
        data=stage_answer(stages.speed.eval_data),
        importance=study_attribute("importance_table"),
    output:
        runs=f"{RESULTS}/{{study}}/speed.csv",
        table_csv=f"{FIGURES}/{{study}}/table4.csv",
        table_md=report(f"{FIGURES}/{{study}}/table4.md", caption="../report/table4.rst", category="Table 4",
                        subcategory="{study}"),
    params:
        study=study_params,
        speed=stage_answer(stages.speed.params),
    log:
        f"{RESULTS}/logs/speed/{{study}}.log",
    # torch threads (capped by --cores). Timings are only comparable on a quiet machine: threads as
    # large as --cores also keep every other local job off the machine while this one runs.
    threads: config.get("speed", {}).get("threads", 1)
    resources:
        gpu=study_resource("speed", "gpu"),
        mem_mb=study_resource("speed", "mem_mb"),
        runtime=study_resource("speed", "runtime"),
    conda:
        ENV
    script:
        "../scripts/speed.py"
