"""Beyond the paper: the role of every head. Encoder heads (Voita et al., 2019): positional, syntactic,
rare-word. A decoder-only language model's heads: previous-token, induction, first-token sink and, for a
retrieval study, Wu et al. (2025)'s retrieval score (headprune.scoring.lm_roles).

The eval set's source side is parsed once (roles.parser: stanza, installed with the package and
its English model fetched by a rule; the demo writes gold parses from its own grammar), every head's
attention on those sentences is scored against each role, and the roles are followed through the
I_h pruning steps (pruning.step_percent of the heads per step, in the order of the 'importance'
column; Voita's finding: the specialised heads go last).
"""


rule fetch_parser:
    output:
        directory(f"{DATA}/parser/{config['roles']['stanza']['lang']}"),
    params:
        stanza=config["roles"]["stanza"],
    log:
        f"{RESULTS}/logs/fetch_parser.log",
    resources:
        gpu=resource("fetch", "gpu"),
        mem_mb=resource("fetch", "mem_mb"),
        runtime=resource("fetch", "runtime"),
    conda:
        ENV
    script:
        "../scripts/fetch_parser.py"


rule parse_source:
    input:
        unpack(stage_answer(stages.roles.parse_inputs)),
    output:
        f"{RESULTS}/{{study}}/roles/source.conllu",
    params:
        parse=stage_answer(stages.roles.parse_params),
    log:
        f"{RESULTS}/logs/parse_source/{{study}}.log",
    threads: rule_threads("parse_source", 1)
    resources:
        gpu=study_resource("parse_source", "gpu"),
        mem_mb=study_resource("parse_source", "mem_mb"),
        runtime=study_resource("parse_source", "runtime"),
    conda:
        ENV
    script:
        "../scripts/parse_source.py"


rule head_roles:
    input:
        unpack(stage_answer(stages.roles.inputs)),
    output:
        heads=f"{RESULTS}/{{study}}/head_roles.csv",
        kv_heads=f"{RESULTS}/{{study}}/head_roles_kv.csv",
    params:
        study=study_params,
        roles=stage_answer(stages.roles.params),
    log:
        f"{RESULTS}/logs/head_roles/{{study}}.log",
    threads: rule_threads("head_roles", 1)
    resources:
        gpu=study_resource("head_roles", "gpu"),
        mem_mb=study_resource("head_roles", "mem_mb"),
        runtime=study_resource("head_roles", "runtime"),
    conda:
        ENV
    script:
        "../scripts/head_roles.py"


rule plot_head_roles:
    input:
        roles=f"{RESULTS}/{{study}}/head_roles.csv",
    output:
        png=report(f"{FIGURES}/{{study}}/head_roles.png", caption="../report/head_roles.rst",
                   category="Learned gates and head roles", subcategory="{study}"),
        pdf=f"{FIGURES}/{{study}}/head_roles.pdf",
        steps=f"{FIGURES}/{{study}}/roles_by_step.csv",
        md=report(f"{FIGURES}/{{study}}/roles_by_step.md", caption="../report/head_roles.rst",
                  category="Learned gates and head roles", subcategory="{study}"),
    params:
        style=config["figures"]["style"],
        step_percent=config["pruning"]["step_percent"],
    log:
        f"{RESULTS}/logs/plot_head_roles/{{study}}.log",
    resources:
        gpu=study_resource("figures", "gpu"),
        mem_mb=study_resource("figures", "mem_mb"),
        runtime=study_resource("figures", "runtime"),
    conda:
        ENV
    script:
        "../scripts/plot_head_roles.py"
