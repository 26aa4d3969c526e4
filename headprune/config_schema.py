"""The config's JSON schema: rules/schemas/config.schema.yaml plus what the stages, the masking modes, the kinds of
score and the criteria own.

A stage (``headprune.stages``) may own a config section: its schema is ``rules/schemas/<stage>.schema.yaml``, a
part of the config's schema (its sections under ``properties``, its experiment under
``properties.experiments.properties``) merged into the file's, which describes none of it twice.

A masking mode (``headprune.models.masking``, one class each) declares its config word and its settings' schema
(``config_key``, ``config_schema``); the words of the criteria (``headprune.analyses.criteria.CRITERIA``, the
paper's orders among them), the screens, the layouts and the GLUE tasks' metrics are their registries'
(``vocabularies``); the schema file says none of them, so adding a mode, a criterion, a screen, a layout or a metric
is its class alone. A kind of score (``headprune.evaluation.kinds``) declares its name and the keys of a ``models``
entry only its studies read (its ``Plan``'s ``config_properties``, ``config_required``; ``add_kinds``). ``schema()``
merges them in; ``validate(config)`` checks a config against it and fills in the defaults, as Snakemake's
``validate`` does (rules/common.smk and ``Pipeline.from_file`` call it).
"""
from __future__ import annotations

import copy
import functools
from pathlib import Path

from headprune import stages
from headprune.analyses.criteria import CRITERIA, paper_orders
from headprune.analyses.layouts import LAYOUTS
from headprune.analyses.screening import SCREENS
from headprune.evaluation.metrics import METRICS
from headprune.models.masking import MODES
from headprune.evaluation.kinds import KINDS

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "rules" / "schemas" / "config.schema.yaml"


@functools.cache
def _schema(path: str) -> dict:
    import yaml

    # libyaml's safe loader where PyYAML has it: the same documents, parsed about ten times faster (every Snakemake
    # run reads the schema's eleven files)
    def load(file):
        return yaml.load(file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))

    schema = load(Path(path))
    for stage in stages.STAGES:
        part = Path(path).with_name(f"{stage}.schema.yaml")
        if part.is_file():
            merge(schema, load(part), str(part), path)
    for definition, words in vocabularies().items():
        schema["definitions"][definition]["enum"] = words
    for word, mode in MODES.items():
        if not mode.config_key:
            continue
        where = schema
        for key in mode.config_key:  # a missing section is an object with defaults, as the file writes them
            where = where.setdefault("properties", {}).setdefault(
                key, {"type": "object", "additionalProperties": False, "default": {}})
        if "properties" in where:
            raise ValueError(f"{path} describes {'.'.join(mode.config_key)}, which masking mode '{word}' owns "
                             f"(headprune.models.masking.{mode.__name__}.config_schema)")
        where.update(copy.deepcopy(mode.config_schema))
    add_kinds(schema, path)
    return schema


def add_kinds(schema: dict, path: str) -> None:
    """The kinds of score into a ``models`` entry's schema: their names (its ``kind``), the keys each describes and
    the keys an entry of each must give. A key two kinds describe otherwise, or the file describes too, is refused."""
    entry = schema["properties"]["models"]["additionalProperties"]
    entry["properties"]["kind"]["enum"] = list(KINDS)
    owners, properties = {}, entry["properties"]
    for name, kind in KINDS.items():
        for key, described in kind.study_side.config_properties.items():
            if key in properties and properties[key] != described:
                raise ValueError(f"{'kind ' + owners[key] if key in owners else path} and kind {name} describe "
                                 f"models.<study>.{key} otherwise (headprune.evaluation.kinds.{name})")
            owners.setdefault(key, name)
            properties[key] = copy.deepcopy(described)
        entry.setdefault("allOf", []).append({"if": {"properties": {"kind": {"const": name}}},
                                              "then": {"required": ["kind", *kind.study_side.config_required]}})


def vocabularies() -> dict[str, list[str]]:
    """The words of each vocabulary the schema's definitions name, from their registries: the schema file lists none."""
    return {"masking": list(MODES), "criterion": list(CRITERIA), "paper_order": paper_orders(),
            "screen": list(SCREENS), "layout": list(LAYOUTS),
            "classification_metric": [word for word, metric in METRICS.items() if metric.classification]}


def merge(schema: dict, part: dict, part_path: str, path: str, where: str = "") -> None:
    """``part`` (a stage's schema) into ``schema``, object into object; a value both give is refused."""
    for key, value in part.items():
        here = f"{where}.{key}" if where else key
        if key not in schema:
            schema[key] = copy.deepcopy(value)
        elif isinstance(schema[key], dict) and isinstance(value, dict):
            merge(schema[key], value, part_path, path, here)
        else:
            raise ValueError(f"{part_path} describes {here}, which {path} (or another stage's schema) describes too")


def schema(path: str | Path = SCHEMA_FILE) -> dict:
    """The config's schema (a fresh copy: validation writes defaults into the config, not into it)."""
    return copy.deepcopy(_schema(str(path)))


def validate(config: dict, path: str | Path = SCHEMA_FILE) -> dict:
    """Check ``config`` against the schema and fill in its defaults (in place); a WorkflowError names the key."""
    from jsonschema import Draft202012Validator, ValidationError, validators

    full = schema(path)
    check_properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, subschema):
        for name, property_schema in properties.items():
            if "default" in property_schema and isinstance(instance, dict):
                instance.setdefault(name, copy.deepcopy(property_schema["default"]))
        yield from check_properties(validator, properties, instance, subschema)

    with_defaults = validators.extend(Draft202012Validator, {"properties": set_defaults})
    try:
        with_defaults(full).validate(config)
    except ValidationError as error:
        from snakemake.exceptions import WorkflowError

        raise WorkflowError(f"Error validating config file ({path}).", error) from None
    return config
