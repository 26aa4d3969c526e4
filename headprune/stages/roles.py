"""What heads do (rules/roles.smk): the eval set's sentences parsed, and each head's roles (Voita et al.'s for
an encoder; previous-token, induction, sink and retrieval scores for a language model)."""
from __future__ import annotations

EXPERIMENTS = ("head_roles",)


def parse_text(study):
    """The eval set's source text, which the roles' parser reads."""
    return study.plan.parse_text(study)


def parse_inputs(study):
    """The eval set's source text, and the parser's model when stanza parses it."""
    parser = [study.pipeline.parser_dir] if study.config["roles"]["parser"] == "stanza" else []
    return {"text": parse_text(study), "parser": parser}


def parse_params(study):
    """Which sentences are parsed (the eval set's source side, or its first text field), and by what."""
    roles = study.config["roles"]
    evalset = study.evalset_spec()
    evalset["max_items"] = roles["max_sentences"]
    return {"eval": evalset, "parser": roles["parser"], "stanza": roles["stanza"]}


def params(study):
    return study.plan.roles_params(study, study.config["roles"])


def inputs(study):
    """What the head_roles job reads: an encoder's parsed source sentences and training data (Voita's roles),
    a language model's text windows and, for a retrieval study, its needle-in-a-haystack items."""
    return study.plan.head_roles_inputs(study, {"model": study.model_path, "importance": study.importance_table})


def targets(pipeline) -> list[str]:
    """The roles' figure and the roles by pruning step, per study of experiments.head_roles."""
    return [f"{pipeline.figures_dir}/{study}/{name}" for study in pipeline.config["experiments"].get("head_roles", [])
            for name in ("head_roles.png", "head_roles.pdf", "roles_by_step.csv", "roles_by_step.md")]
