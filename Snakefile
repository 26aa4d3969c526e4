# Michel, Levy and Neubig (2019), "Are Sixteen Heads Really Better than One?", end to end.
# Paper config: config.yaml. Offline demo: snakemake --configfile demo/config.yaml (see README).

include: "rules/common.smk"
include: "rules/hooks.smk"

# Each stage's rules (rules/<stage>.smk beside headprune/stages/<stage>.py): the stages are found, not listed
# here, so a new stage edits no file of the others (docs/layout.md).
for stage_rules in stages.rules_files():

    include: stage_rules


rule all:
    input:
        PIPELINE.targets(),
    default_target: True
