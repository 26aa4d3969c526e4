# Michel, Levy and Neubig (2019), "Are Sixteen Heads Really Better than One?", end to end.
# Paper config: config.yaml. Offline demo: snakemake --configfile demo/config.yaml (see README).

include: "rules/common.smk"
include: "rules/hooks.smk"
include: "rules/demo.smk"
include: "rules/data.smk"
include: "rules/checkpoints.smk"
include: "rules/finetune.smk"
include: "rules/importance.smk"
include: "rules/constants.smk"
include: "rules/ablation.smk"
include: "rules/pruning.smk"
include: "rules/figures.smk"
include: "rules/dynamics.smk"
include: "rules/speed.smk"
include: "rules/concrete.smk"
include: "rules/roles.smk"
include: "rules/retrieval.smk"
include: "rules/masking_modes.smk"
include: "rules/report.smk"


rule all:
    input:
        PIPELINE.targets(),
    default_target: True
