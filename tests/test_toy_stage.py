"""A stage is four files (issue #47): its rules file, its stage module, its script and its schema section. A toy
stage written from those four alone, in a copy of the workflow, is planned by a dry run, its config section is
validated and checked (a bad value refused, naming the key) and the scorecard reads it (docs/layout.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from dry_run import copy_workflow, job_stats, write_config


TOY = {
    "rules/toy.smk": '''"""A toy stage: each study of experiments.toy counts its heads toy.repeats times."""


rule toy:
    input:
        full=f"{RESULTS}/{{study}}/full.json",
    output:
        report(f"{RESULTS}/{{study}}/toy.csv", caption="../report/workflow.rst", category="Toy", subcategory="{study}"),
    params:
        heads=stage_answer(stages.toy.heads),
        repeats=config["toy"]["repeats"],
    log:
        f"{RESULTS}/logs/toy/{{study}}.log",
    resources:
        mem_mb=resource("figures", "mem_mb"),
        runtime=resource("figures", "runtime"),
    script:
        "../scripts/toy.py"
''',
    "headprune/stages/toy.py": '''"""A toy stage (rules/toy.smk): a study's heads counted."""
from __future__ import annotations

from headprune.io.config_error import ConfigError

EXPERIMENTS = ("toy",)


def heads(study) -> int:
    return len(study.heads)


def tables(pipeline) -> list[str]:
    return [f"{pipeline.results_dir}/{study}/toy.csv" for study in pipeline.config["experiments"]["toy"]]


def targets(pipeline) -> list[str]:
    return tables(pipeline)


def report_inputs(pipeline) -> dict[str, list[str]]:
    return {"toy": tables(pipeline)}


def check(pipeline):
    for study in pipeline.experiment_studies("toy"):
        if pipeline.config["toy"]["repeats"] > len(study.heads):
            raise ConfigError(f"config: toy.repeats is more than the {len(study.heads)} heads of '{study.name}'")
''',
    "scripts/toy.py": '''"""The toy stage's job: a study's heads, toy.repeats times."""
from pathlib import Path

Path(snakemake.output[0]).write_text("".join(f"{snakemake.params.heads}\\n" for _ in range(snakemake.params.repeats)))
''',
    "rules/schemas/toy.schema.yaml": '''properties:
  toy:
    type: object
    additionalProperties: false
    default: {}
    properties:
      repeats: {type: integer, minimum: 1, default: 1}
  experiments:
    properties:
      toy: {type: array, items: {type: string}, default: []}
''',
}

# What the toy's config section and experiment make of the workflow, asked of the copy's own package.
ASK = """
import json, sys
from headprune import stages
from headprune.studies import Pipeline
answers = {}
for name in sys.argv[1:]:
    try:
        pipeline = Pipeline.from_file(name)
    except Exception as error:
        answers[name] = {"refused": f"{type(error).__name__}: {error}"}
        continue
    answers[name] = {"experiments": stages.experiments(), "targets": pipeline.targets(),
                     "scorecard": stages.report.scorecard_inputs(pipeline)}
print(json.dumps(answers))
"""


def files(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts}


def test_a_toy_stage_is_four_files(tmp_path):
    copy = copy_workflow(tmp_path / "workflow")
    before = files(copy)
    for name, text in TOY.items():
        (copy / name).write_text(text)
    assert files(copy) - before == set(TOY) and len(TOY) == 4  # nothing else is edited: the copy is the repository's

    def toy(config, repeats=2):
        config["toy"] = {"repeats": repeats}
        config["experiments"]["toy"] = ["demo_en_fr", "mnli"]

    good = write_config(tmp_path / "good.yaml", toy)
    refused = write_config(tmp_path / "schema.yaml", lambda c: toy(c, repeats=0))
    checked = write_config(tmp_path / "check.yaml", lambda c: toy(c, repeats=10**6))
    env = {**os.environ, "PYTHONPATH": str(copy)}
    answers = json.loads(subprocess.run([sys.executable, "-c", ASK, str(good), str(refused), str(checked)], cwd=copy,
                                        env=env, capture_output=True, text=True, check=True).stdout)
    tables = ["results/demo/demo_en_fr/toy.csv", "results/demo/mnli/toy.csv"]
    assert "toy" in answers[str(good)]["experiments"]
    assert set(tables) <= set(answers[str(good)]["targets"])
    assert answers[str(good)]["scorecard"]["toy"] == tables
    assert "toy" in answers[str(refused)]["refused"] and "repeats" in answers[str(refused)]["refused"]
    assert "config: toy.repeats is more than the" in answers[str(checked)]["refused"]

    workdir = tmp_path / "run"
    workdir.mkdir()
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(good),
                          "--directory", str(workdir)], cwd=copy, env=env, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert job_stats(dry.stdout)["toy"] == 2
    scorecard = next(block for block in dry.stdout.split("rule ")[1:] if block.startswith("scorecard:"))
    assert all(table in scorecard.split("output:")[0] for table in tables)  # the report reads the toy's tables
    config = yaml.safe_load(good.read_text())
    assert config["toy"] == {"repeats": 2}
