"""What docs/layout.md says a masking mode, a kind of score and a family touch (issue #47), checked on toys: a
mode is its class (registered by ``@mode``) and reaches the config, the rules' wildcard and ``gated``; a kind is
its file (its config keys included) and its line in ``KINDS``, and is validated and planned; a decoder family the generic adapter finds
needs nothing, and a family with an adapter of its own is its file and its line in ``FAMILIES``. (A kind that
leaves out an answer is refused by tests/test_kinds_abstract.py; a stage is tests/test_toy_stage.py.)"""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import yaml

from dry_run import copy_workflow, planned_jobs, write_config
from headprune import config_schema
from headprune.evaluation.kinds import KINDS
from headprune.models import families, masking
from headprune.models.heads import adapter_for, gated

ROOT = Path(__file__).resolve().parents[1]

# The toy mode, as a developer writes it into headprune/models/masking.py: switched off, a head's output is shrunk
# by a scale from the config rather than removed. Every name it uses is masking.py's own.
TOY_MODE = '''

@mode
@dataclass(frozen=True)
class ToyScaled(_OutputMasking):
    """A head with gate g puts out g * o_h + (1 - g) * scale * o_h (a toy: tests/test_toy_mode_kind_family.py)."""

    scale: float = 0.5
    word: ClassVar[str] = "toy_scaled"
    summary: ClassVar[str] = "toy_scaled (a masked head's output multiplied by a fixed scale)"
    config_key: ClassVar[tuple[str, ...]] = ("toy_scaled",)
    config_schema: ClassVar[dict] = {"properties": {"scale": {"type": "number", "default": 0.5}}}

    @classmethod
    def settings_from_config(cls, section):
        return {"scale": section["scale"]}

    def replacement(self, site, per_head, state):
        return self.scale * per_head
'''
TOY_KIND = '''"""A toy kind of score: classification under a name of its own (tests/test_toy_mode_kind_family.py)."""
from headprune.evaluation.kinds import classification


class Plan(classification.Plan):
    config_properties = {**classification.Plan.config_properties,
                         "toy_label": {"type": "string", "description": "a label its studies carry"}}


class Kind(classification.Kind):
    name = "toy_classification"
    study_side = Plan
'''


def files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts}


def add_toy_mode(copy: Path) -> set[str]:
    with open(copy / "headprune/models/masking.py", "a") as file:
        file.write(TOY_MODE)
    return {"headprune/models/masking.py"}


def add_toy_kind(copy: Path) -> set[str]:
    (copy / "headprune/evaluation/kinds/toy_classification.py").write_text(TOY_KIND)
    registry = copy / "headprune/evaluation/kinds/__init__.py"
    lines = registry.read_text().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if line.startswith("KINDS.add("))
    lines.insert(last + 1, 'KINDS.add("toy_classification", "headprune.evaluation.kinds.toy_classification:Kind")\n')
    registry.write_text("".join(lines))
    return {"headprune/evaluation/kinds/toy_classification.py", "headprune/evaluation/kinds/__init__.py"}


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    """One copy of the workflow with the toy mode and the toy kind written in as the docs say, and what that
    changed: two dry runs share it, and nothing registered there reaches this process."""
    copy = copy_workflow(tmp_path_factory.mktemp("toys") / "workflow")
    before = files(copy)
    touched = {"mode": add_toy_mode(copy), "kind": add_toy_kind(copy)}
    after = files(copy)
    changed = {name for name in after if before.get(name) != after[name]}
    return copy, touched, changed


def dry_run(copy: Path, config: Path, workdir: Path) -> str:
    workdir.mkdir()
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(config), "--directory",
                          str(workdir)], cwd=copy, env={**os.environ, "PYTHONPATH": str(copy)},
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def test_the_toys_touch_the_files_the_docs_name(workflow):
    # Spelled out, not taken from the edits: a toy that needs one more edit to be planned must change the docs too.
    _, touched, changed = workflow
    assert touched["mode"] == {"headprune/models/masking.py"}  # its class
    assert touched["kind"] == {"headprune/evaluation/kinds/toy_classification.py",  # its file, its config keys
                               "headprune/evaluation/kinds/__init__.py"}  # its line in KINDS
    assert changed == touched["mode"] | touched["kind"]


# --- A masking mode -------------------------------------------------------------------------------------------

@pytest.fixture
def toy_mode():
    """The toy mode registered in this process as masking.py's own classes are (its module's ``@mode``), and
    unregistered afterwards, with the schema cache that read it, so that no other test sees it."""
    module = types.ModuleType("toy_mode")
    sys.modules["toy_mode"] = module  # dataclass reads its string annotations through the module
    header = ("from __future__ import annotations\nfrom dataclasses import dataclass\nfrom typing import ClassVar\n"
              "from headprune.models.masking import _OutputMasking, mode\n")
    config_schema._schema.cache_clear()
    try:
        exec(compile(header + TOY_MODE, "toy_mode.py", "exec"), module.__dict__)
        yield module.ToyScaled
    finally:
        if "toy_scaled" in masking.MODES:
            del masking.MODES["toy_scaled"]
        del sys.modules["toy_mode"]
        config_schema._schema.cache_clear()


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(config).eval()


def scaled_head(module, head, head_dim, scale, handles):
    """The reference: a pre-hook of our own on ``module`` (the model's output projection) scaling one head's slice."""
    def hook(_, args):
        x = args[0].clone()
        x[..., head * head_dim:(head + 1) * head_dim] *= scale
        return (x, *args[1:])
    handles.append(module.register_forward_pre_hook(hook))


def test_a_toy_mode_is_its_class_and_masks_a_head(toy_mode):
    assert masking.MODES["toy_scaled"] is toy_mode
    model, ids = tiny_llama(), torch.tensor([[1, 5, 7, 2, 9, 3]])
    gates = {"dec_self": torch.ones(2, 4)}
    gates["dec_self"][1, 2] = 0.0
    with torch.no_grad():
        full = model(ids).logits
        with gated(model, gates, masking="toy_scaled"):  # a word whose mode needs nothing, as "zero"
            by_word = model(ids).logits
        with gated(model, gates, masking=toy_mode(scale=0.25)):
            by_object = model(ids).logits
        handles = []
        head_dim = model.config.hidden_size // model.config.num_attention_heads
        try:
            scaled_head(model.model.layers[1].self_attn.o_proj, 2, head_dim, 0.5, handles)
            reference = model(ids).logits
            handles.pop().remove()
            scaled_head(model.model.layers[1].self_attn.o_proj, 2, head_dim, 0.25, handles)
            reference_quarter = model(ids).logits
        finally:
            for handle in handles:
                handle.remove()
    assert not torch.allclose(by_word, full, atol=1e-4)
    torch.testing.assert_close(by_word, reference)
    torch.testing.assert_close(by_object, reference_quarter)
    with pytest.raises(KeyError, match="did you mean 'toy_scaled'"):
        masking.MODES["toy_scaledd"]


def test_a_toy_mode_is_a_word_of_the_config(toy_mode, tmp_path):
    def use(config, scale=0.25):
        config["masking_modes"] = {"modes": ["zero", "toy_scaled"]}
        config["models"]["tiny_llama_niah"]["masking"] = "toy_scaled"
        config["toy_scaled"] = {"scale": scale}

    config = yaml.safe_load(write_config(tmp_path / "good.yaml", use).read_text())
    config_schema.validate(config)
    assert config["masking_modes"]["modes"] == ["zero", "toy_scaled"] and config["toy_scaled"] == {"scale": 0.25}
    defaults = yaml.safe_load(write_config(tmp_path / "defaults.yaml", use).read_text())
    del defaults["toy_scaled"]
    assert config_schema.validate(defaults)["toy_scaled"] == {"scale": 0.5}  # its section's defaults, from its class
    bad = yaml.safe_load(write_config(tmp_path / "bad.yaml", lambda c: use(c, scale="half")).read_text())
    with pytest.raises(Exception, match="'half' is not of type 'number'"):
        config_schema.validate(bad)
    misspelt = yaml.safe_load(write_config(tmp_path / "misspelt.yaml", use).read_text())
    misspelt["models"]["tiny_llama_niah"]["masking"] = "toy_scaledd"
    with pytest.raises(Exception, match=r"'toy_scaledd' is not one of \[.*'toy_scaled'"):
        config_schema.validate(misspelt)


def test_a_toy_mode_is_planned_by_the_rules(workflow, tmp_path):
    copy, _, _ = workflow

    def use(config):
        config["masking_modes"] = {"modes": ["zero", "toy_scaled"]}

    stdout = dry_run(copy, write_config(tmp_path / "mode.yaml", use), tmp_path / "run")
    modes = {wildcards["mode"] for rule, wildcards in planned_jobs(stdout) if rule == "masking_mode"}
    assert modes == {"zero", "toy_scaled"}


# --- A kind of score ----------------------------------------------------------------------------------------------

@pytest.fixture
def toy_kind():
    """The toy kind registered in this process as kinds/__init__.py registers its own (a line in ``KINDS``), and
    unregistered afterwards, with the schema cache that read it."""
    module = types.ModuleType("toy_kind")
    exec(compile(TOY_KIND, "toy_kind.py", "exec"), module.__dict__)
    config_schema._schema.cache_clear()
    KINDS.add("toy_classification", module.Kind)
    try:
        yield module.Kind
    finally:
        if "toy_classification" in KINDS:
            del KINDS["toy_classification"]
        config_schema._schema.cache_clear()


def test_a_toy_kind_is_validated_and_planned(workflow, tmp_path, toy_kind):
    copy, _, _ = workflow

    def use(config, label="toy"):
        config["models"]["toy_roberta"] = {**config["models"]["roberta_mnli"], "kind": "toy_classification",
                                           **({"toy_label": label} if label is not None else {})}
        config["experiments"] = {"ablation": ["roberta_mnli", "toy_roberta"]}

    path = write_config(tmp_path / "kind.yaml", use)
    config_schema.validate(yaml.safe_load(path.read_text()))  # its name and its key, from its class
    bad = yaml.safe_load(write_config(tmp_path / "bad.yaml", lambda c: use(c, label=3)).read_text())
    with pytest.raises(Exception, match="3 is not of type 'string'"):
        config_schema.validate(bad)
    del KINDS["toy_classification"]
    config_schema._schema.cache_clear()
    unlabelled = write_config(tmp_path / "unlabelled.yaml", lambda c: use(c, label=None))
    with pytest.raises(Exception, match="'toy_classification' is not one of"):  # the repository knows no such kind
        config_schema.validate(yaml.safe_load(unlabelled.read_text()))
    KINDS.add("toy_classification", toy_kind)
    jobs = planned_jobs(dry_run(copy, path, tmp_path / "run"))

    def plan(study):
        return sorted(rule for rule, wildcards in jobs if wildcards.get("study") == study)

    # the toy is classification under another name: the same jobs as the study it copies
    assert plan("toy_roberta") and plan("toy_roberta") == plan("roberta_mnli")


def test_a_kind_that_describes_a_key_otherwise_is_refused(toy_kind):
    plan = toy_kind.study_side  # the toy's own plan class, which no other test reads
    plan.config_properties = {**plan.config_properties, "window": {"type": "string"}}
    with pytest.raises(ValueError, match=r"kind language_modeling and kind toy_classification describe "
                                         r"models.<study>.window otherwise"):
        config_schema.schema()


# --- A family -------------------------------------------------------------------------------------------------------

def test_a_decoder_family_the_generic_adapter_finds_needs_nothing():
    """BioGPT (docs/models.md: passes) is named nowhere in headprune: the generic decoder adapter gates it."""
    from transformers import BioGptConfig, BioGptForCausalLM

    assert not any("biogpt" in path.read_text().lower() for path in (ROOT / "headprune").rglob("*.py"))
    torch.manual_seed(0)
    model = BioGptForCausalLM(BioGptConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, max_position_embeddings=32)).eval()
    assert type(adapter_for(model)).__module__ == "headprune.models.families.decoder"
    ids = torch.tensor([[2, 5, 7, 3, 9, 4]])
    gates = {"dec_self": torch.ones(2, 4)}
    gates["dec_self"][0, 3] = 0.0
    handles = []
    with torch.no_grad():
        full = model(ids).logits
        with gated(model, gates):
            masked = model(ids).logits
        try:
            scaled_head(model.biogpt.layers[0].self_attn.out_proj, 3, 8, 0.0, handles)
            reference = model(ids).logits
        finally:
            for handle in handles:
                handle.remove()
    assert not torch.allclose(masked, full, atol=1e-4)
    torch.testing.assert_close(masked, reference)


TOY_FAMILY = '''"""A toy family with an adapter of its own (tests/test_toy_mode_kind_family.py)."""
from headprune.models.sites import HeadAdapter

MODEL_TYPES = ("toyfam",)


class ToyAdapter(HeadAdapter):
    pass


def match(model):
    return ToyAdapter() if getattr(model.config, "model_type", None) in MODEL_TYPES else None
'''


class ToyModel(torch.nn.Module):
    """A model of a type no family serves: no layout the generic adapters know."""

    def __init__(self):
        super().__init__()
        self.config = types.SimpleNamespace(model_type="toyfam")
        self.proj = torch.nn.Linear(4, 4)


def test_a_family_with_its_own_adapter_is_its_file_and_its_line(tmp_path, monkeypatch):
    (tmp_path / "toyfam.py").write_text(TOY_FAMILY)
    monkeypatch.syspath_prepend(str(tmp_path))
    toy = ToyModel()
    with pytest.raises(ValueError, match="no head adapter for model type 'toyfam'"):
        adapter_for(toy)
    families.families.cache_clear()
    families.FAMILIES.add("toyfam", "toyfam:match")  # its line in FAMILIES, lazy as the others
    try:
        adapter = adapter_for(toy)
        assert type(adapter).__module__ == "toyfam" and type(adapter).__name__ == "ToyAdapter"
    finally:
        del families.FAMILIES["toyfam"]
        families.families.cache_clear()
        sys.modules.pop("toyfam", None)
