"""The public API (issue #24): ``import headprune`` stays torch-free, every name of ``headprune.__all__``
has a runnable example in its docstring (run here on the README's tiny Llama), and the README's "Use it
from Python" block runs as a user would copy it."""
from __future__ import annotations

import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

import headprune

ROOT = Path(__file__).resolve().parents[1]
NO_EXAMPLE_YET: set = set()  # every public name has a runnable example


def readme_block() -> str:
    """The python block of the README's "Use it from Python" section."""
    section = (ROOT / "README.md").read_text().split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section should have exactly one python block"
    return blocks[0]


def test_import_is_cheap_and_torch_free():
    code = ("import sys, headprune; names = headprune.__all__; dir(headprune); "
            "heavy = {'torch', 'transformers', 'pandas'} & set(sys.modules); assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_name_resolves_lazily_with_an_example():
    assert len(set(headprune.__all__)) == len(headprune.__all__)
    for name in headprune.__all__:
        value = getattr(headprune, name)
        if name == "CRITERIA":  # a registry: its example is criterion_order's
            assert "importance" in value
            continue
        if name in NO_EXAMPLE_YET:
            continue
        assert ">>>" in (value.__doc__ or ""), f"headprune.{name} has no example in its docstring"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        headprune.nope  # noqa: B018
    from headprune import warm  # a submodule is still imported as one  # noqa: F401


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The README block run in a fresh folder: leaves "tiny" (and "tiny-pruned") there."""
    where = tmp_path_factory.mktemp("readme")
    subprocess.run([sys.executable, "-c", readme_block()], check=True, cwd=where, capture_output=True, text=True)
    return where


def test_the_readme_block_runs(tiny):
    assert (tiny / "tiny" / "config.json").exists()
    pruned = headprune.load_model(tiny / "tiny-pruned")[0]
    assert sum(site.num_heads for site in __import__("headprune.models.heads", fromlist=["x"]).adapter_for(
        pruned).sites(pruned)) == 6  # two of eight heads removed, and loaded back pruned


@pytest.mark.parametrize("name", [n for n in headprune.__all__ if n not in {"CRITERIA", *NO_EXAMPLE_YET}])
def test_docstring_examples_run(name, tiny, monkeypatch):
    import torch

    monkeypatch.chdir(tiny)
    torch.manual_seed(0)
    model, tokenizer = headprune.load_model("tiny")
    text = "the cat sat on the mat and the dog sat on the log . " * 40
    globs = {**{n: getattr(headprune, n) for n in headprune.__all__}, "headprune": headprune, "model": model,
             "tokenizer": tokenizer, "text": text,
             "evalset": headprune.evalset_from_text(tokenizer, text, window=16)}
    value = getattr(headprune, name)
    tests = doctest.DocTestFinder(recurse=False).find(value, name, globs=globs)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).attempted, f"headprune.{name}: no example ran"
    assert not runner.summarize(verbose=False).failed, f"headprune.{name}: its docstring example failed"
