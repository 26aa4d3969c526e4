"""The package's rooms import downward only (issue #22).

A room is a subpackage of headprune (``models``, ``data``, ...); the top-level modules (``workflow``,
``warm``, ``studies``) are one room, "workflow". Every import of a headprune module, at the top of a file
or inside a function or an ``if TYPE_CHECKING:`` block, absolute or relative, must go to the importing
file's own room or to one that ``ALLOWED`` lists for it. The package's own ``__init__`` imports the rooms of
the public API it exposes (models, scoring, evaluation, analyses, training), lazily, inside its module ``__getattr__`` (every
import of a submodule runs it: nothing at its top), and never ``demo``.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

PACKAGE = Path(__file__).resolve().parents[1] / "headprune"
WORKFLOW = "workflow"  # the room of the package's top-level modules
ROOT = ""  # the package itself (headprune/__init__.py): its public API, importable from anywhere

# room -> the other rooms it may import, bottom to top. A new subpackage needs a line here.
ALLOWED = {
    "io": set(),  # downloads, checksums
    "models": {"io"},  # model access: heads, families, loading, pruning, fairseq checkpoints
    "data": {"io"},  # test sets, GLUE tasks, corpora, batches, BPE, IWSLT, parses
    "scoring": {"models", "data", "io"},  # head scores: importance, Hard Concrete gates, roles
    "evaluation": {"scoring", "models", "data", "io"},  # runs, the kinds of score, their engines, metrics, tests
    "analyses": {"evaluation", "scoring", "models", "data", "io"},  # sweeps, criteria, layouts, screening, Table 4
    "report": {"analyses", "evaluation", "scoring", "models", "data", "io"},  # figures, scorecard
    "training": {"analyses", "evaluation", "scoring", "models", "data", "io"},  # training, fine-tuning, recovery
    "demo": {"training", "analyses", "evaluation", "scoring", "models", "data", "io"},  # the demo's synthetic world
    "stages": {"report", "analyses", "evaluation", "scoring", "models", "data", "io"},  # each stage's jobs
    WORKFLOW: {"stages", "training", "report", "analyses", "evaluation", "scoring", "models", "data", "io"},  # not demo
    ROOT: {"training", "analyses", "evaluation", "scoring", "models"},  # the public API (headprune.__all__), imported lazily: not demo
}


class Import(NamedTuple):
    path: Path  # the importing file
    line: int
    room: str  # the importing file's room
    target: str  # the imported module, e.g. headprune.models.heads
    target_room: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.room or 'the package __init__'} imports {self.target} ({self.target_room})"


def module_name(package: Path, path: Path) -> str:
    parts = (package.name, *path.relative_to(package).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_of_file(package: Path, path: Path) -> str:
    parts = path.relative_to(package).parts
    if len(parts) > 1:
        return parts[0]
    return ROOT if parts[0] == "__init__.py" else WORKFLOW


def is_module(package: Path, name: str) -> bool:
    """Whether ``name`` (package.a.b) is a module or a package of the tree."""
    where = package.parent.joinpath(*name.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def room_of_module(package: Path, name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1:
        return ROOT
    return parts[1] if (package / parts[1]).is_dir() else WORKFLOW


def rooms(package: Path) -> set[str]:
    """Every room of the tree: each subpackage, and "workflow" if there are top-level modules."""
    return {room_of_file(package, path) for path in package.rglob("*.py")} - {ROOT}


def package_imports(package: Path) -> list[Import]:
    """Every import of a module of ``package`` by a file of it (all Import and ImportFrom nodes, anywhere in
    the file; relative imports resolved). ``from package.x import y`` names package.x.y when y is a module."""
    found = []
    for path in sorted(package.rglob("*.py")):
        module = module_name(package, path)
        own_package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        room = room_of_file(package, path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif _lazy_entry(node, package.name):  # Registry.add(name, "package.module:attr"): imported when asked
                targets = [node.args[1].value.partition(":")[0]]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = own_package.split(".")[:len(own_package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" if is_module(package, f"{base}.{alias.name}") else base
                           for alias in node.names]
            else:
                continue
            for target in dict.fromkeys(targets):
                if target == package.name or target.startswith(package.name + "."):
                    found.append(Import(path, node.lineno, room, target, room_of_module(package, target)))
    return sorted(found, key=lambda found: (str(found.path), found.line))  # ast.walk goes breadth first


def _lazy_entry(node, package_name: str) -> bool:
    """Whether ``node`` registers a lazy "module:attr" entry of the package (``headprune.io.registry``)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add"
            and len(node.args) == 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
            and re.fullmatch(rf"{package_name}(\.\w+)+:\w+", node.args[1].value) is not None)


def upward_imports(package: Path, allowed: dict[str, set[str]]) -> list[Import]:
    """The imports ``allowed`` does not allow: to another room than the file's own and those it lists."""
    return [found for found in package_imports(package)
            if found.target_room != ROOT and found.target_room != found.room
            and found.target_room not in allowed.get(found.room, set())]


def test_every_room_imports_downward_only():
    wrong = upward_imports(PACKAGE, ALLOWED)
    assert not wrong, "imports against the layering (tests/test_layering.py's ALLOWED):\n" + "\n".join(map(str, wrong))


def test_the_table_covers_every_room():
    """A new subpackage must get its line in ALLOWED (and a room that is gone loses it)."""
    assert rooms(PACKAGE) == set(ALLOWED) - {ROOT}


def test_every_imported_package_module_exists():
    """A lazy import of a module that moved fails only when its function runs: none is left."""
    missing = [found for found in package_imports(PACKAGE) if not is_module(PACKAGE, found.target)]
    assert not missing, "imports of headprune modules that do not exist:\n" + "\n".join(map(str, missing))


def test_the_checker_reports_only_upward_imports(tmp_path):
    """A fake package: its low room imports downward, at the top and inside a function, and upward, inside a
    function, under TYPE_CHECKING and relatively; the top-level module imports anything. Only the upward
    imports are reported, with their lines."""
    package = tmp_path / "fakepkg"
    files = {
        "__init__.py": '"""A fake package."""\n',
        "io/__init__.py": "",
        "io/download.py": "import os\n",
        "models/__init__.py": "",
        "models/heads.py": (
            "from typing import TYPE_CHECKING\n"  # 1
            "from fakepkg.io import download\n"  # 2: downward (a module named in a from-import)
            "import fakepkg.models.prune\n"  # 3: its own room
            "from . import prune\n"  # 4: its own room, relative
            "def f():\n"  # 5
            "    from fakepkg.io.download import os\n"  # 6: downward, in a function
            "    from fakepkg.experiments.runs import run\n"  # 7: upward, in a function
            "if TYPE_CHECKING:\n"  # 8
            "    import fakepkg.experiments\n"  # 9: upward, for type checkers only
            "from ..experiments import runs\n"  # 10: upward, relative
            "from .. import tool\n"  # 11: upward, to the top-level modules
        ),
        "models/prune.py": "",
        "experiments/__init__.py": "",
        "experiments/runs.py": "from fakepkg.models.heads import f\nfrom fakepkg.io import download\n",
        "tool.py": "from fakepkg.experiments import runs\nimport fakepkg\n",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    allowed = {"io": set(), "models": {"io"}, "experiments": {"models", "io"}, WORKFLOW: {"experiments", "models", "io"},
               ROOT: set()}

    assert rooms(package) == {"io", "models", "experiments", WORKFLOW}
    wrong = upward_imports(package, allowed)
    assert [(found.path.name, found.line, found.target) for found in wrong] == [
        ("heads.py", 7, "fakepkg.experiments.runs"), ("heads.py", 9, "fakepkg.experiments"),
        ("heads.py", 10, "fakepkg.experiments.runs"), ("heads.py", 11, "fakepkg.tool")]
    assert str(wrong[0]) == f"{package / 'models/heads.py'}:7: models imports fakepkg.experiments.runs (experiments)"
    assert all(found.room == "models" for found in wrong)
    # a room missing from the table may import nothing of the others
    assert {found.path.name for found in upward_imports(package, {})} == {"heads.py", "runs.py", "tool.py"}


def test_the_package_init_imports_lazily_only():
    """``import headprune`` runs before every submodule: its imports of the package sit inside functions
    (the PEP 562 ``__getattr__``), none at its top level."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not [node.lineno for node in top if isinstance(node, ast.Import) or (node.module or "").startswith(
        PACKAGE.name) or node.level], "headprune/__init__.py imports the package at its top level"


def test_the_package_init_spells_out_every_lazy_module():
    """The table name -> module (``_NAMES``) and the imports under ``if TYPE_CHECKING:`` name the same modules: the
    layering and cycle checks read the latter, ``__getattr__`` imports the former."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    table = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "_NAMES" for t in node.targets))
    lazy = {ast.literal_eval(key) for key in table.keys}
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING")
    spelled = {f"{node.module.removeprefix(PACKAGE.name + '.')}.{alias.name}" for node in guarded.body
               for alias in node.names}
    assert lazy == spelled


def module_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in the file (inside functions and under
    TYPE_CHECKING too); a package whose ``__init__`` loads its own modules by name (importlib) depends on each of
    them. A module importing its own parent package is not an edge (Python runs the parent first anyway)."""
    graph: dict[str, set[str]] = {module_name(package, path): set() for path in package.rglob("*.py")}
    for found in package_imports(package):
        source, target = module_name(package, found.path), found.target
        while target and target not in graph:
            target = target.rpartition(".")[0]
        if target and target != source and not source.startswith(target + "."):
            graph[source].add(target)
    for path in package.rglob("__init__.py"):
        if "import_module" in path.read_text(encoding="utf-8"):
            name = module_name(package, path)
            graph[name] |= {m for m in graph if m.rpartition(".")[0] == name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str):
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_inside_a_room_either():
    """No circle of imports between modules, within a room too: imports inside functions and registries that
    load modules by name count (the families, the kinds of score)."""
    found = cycles(module_graph(PACKAGE))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_checker_sees_function_imports_and_registries(tmp_path):
    package = tmp_path / "fakepkg"
    files = {
        "__init__.py": "",
        "models/__init__.py": "",
        "models/heads.py": "def adapter():\n    from fakepkg.models.families import find\n",  # inside a function
        "models/families/__init__.py": "import importlib\ndef find():\n    importlib.import_module('x')\n",
        "models/families/bert.py": "from fakepkg.models.heads import adapter\n",  # back up: a circle
        "models/sites.py": "",
        "models/families/llama.py": "from fakepkg.models.sites import x\n",  # downward: no circle
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert cycles(module_graph(package)) == [["fakepkg.models.families", "fakepkg.models.families.bert",
                                              "fakepkg.models.heads"]]
    (package / "models/families/bert.py").write_text("from fakepkg.models.sites import x\n")
    assert cycles(module_graph(package)) == []


def test_a_lazy_registry_entry_is_an_import(tmp_path):
    package = tmp_path / "fakepkg"
    files = {
        "__init__.py": "",
        "models/__init__.py": "",
        "models/modes.py": "MAKERS.add('mean', 'fakepkg.scoring.makers:mean')\n",  # upward, though lazy
        "scoring/__init__.py": "",
        "scoring/makers.py": "",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    assert [(found.room, found.target) for found in upward_imports(package, {"scoring": {"models"}})] == \
        [("models", "fakepkg.scoring.makers")]
