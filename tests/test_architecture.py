"""The layout of the package, checked: imports run only downward, no import circles, files
stay small, and docs/architecture.md names every file.

The floors below are the ones docs/architecture.md draws. A module may import from a lower
floor, and from its own floor only inside its own package (``optim/adam.py`` from
``optim/optimizer.py``). Every import counts, the ones inside functions too: Python runs a
lazy import the moment the function is called, and an upward one makes the lower floor
depend on the upper.

    python tests/test_architecture.py      # prints the import graph, floor by floor
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "minitransformer"

# Top to bottom. The key is a top-level module or package of minitransformer, or, inside a
# grouping package (GROUPS: a folder that only gathers modules, importing nothing itself), a
# member of it: ``tools.bench``, ``runtime.checkpoint``. Each member keeps the floor it had
# when it stood at the top level.
GROUPS = ("tools", "runtime")
FLOORS: list[tuple[str, ...]] = [
    ("__main__",),
    ("cli",),
    (
        "tools.bench",
        "tools.ablate",
        "tools.scaling",
        "tools.callcount",
        "tools.gpucheck",
        "tools.results",
        "tools.efficient_attention",
    ),
    ("train", "runtime.translator", "runtime.sampler", "tools.explorer"),
    ("tools.viz", "decode", "runtime.distributed", "runtime.pretrained", "tools.heads"),
    ("runtime.runs",),
    ("runtime.checkpoint",),
    ("fast",),
    ("optim",),
    ("nn",),
    ("functional",),
    ("ops",),
    ("gradcheck",),
    ("function",),
    ("tensor",),
    ("backend",),
    ("config", "tools.cupti", "grad_mode"),
    ("data",),
    ("checks",),
    ("errors",),
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}

# Size budgets (lines), from issue 16: one concept per file. Issue 43 dropped the joint
# 400-line wall of tensor.py + function.py: it made every simplification of the engine cost
# a split (the engine is two concepts, the Tensor with its backward walk, and the Function;
# each file keeps the ordinary budget).
FILE_BUDGET = 400
OP_FILE_BUDGET = 160


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute dotted name an ``ImportFrom`` refers to."""
    if node.level == 0:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in the file)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, path, node)
                # ``from pkg import mod`` imports the module pkg.mod; ``from mod import f``, mod
                candidates = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                              for a in node.names]  # fmt: skip
            else:
                continue
            for target in candidates:
                while target and target not in mods:  # a.b.c where only a.b is a module
                    target = target.rpartition(".")[0]
                if target.startswith("minitransformer") and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def top(name: str) -> str:
    """The key of ``name``'s floor: its top-level name, or ``group.member`` inside a group
    (``minitransformer.tools.bench.steps`` -> ``tools.bench``); "" for the package root and
    for a grouping package itself (``minitransformer.tools``), which is no floor."""
    parts = name.split(".")
    if len(parts) > 2 and parts[1] in GROUPS:
        return f"{parts[1]}.{parts[2]}"
    if len(parts) == 2 and parts[1] in GROUPS:
        return ""
    return parts[1] if len(parts) > 1 else ""


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(1000, 10 * len(graph)))
    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_floor():
    missing = sorted({top(m) for m in modules() if top(m) and top(m) not in FLOOR})
    assert not missing, f"modules with no floor in FLOORS (and docs/architecture.md): {missing}"


def test_a_grouping_package_imports_nothing():
    """``tools/__init__.py`` and ``runtime/__init__.py`` gather modules; they are no floor,
    so they import nothing of the package (importing a member runs them first)."""
    graph = import_graph()
    for group in GROUPS:
        assert graph[f"minitransformer.{group}"] == set(), f"{group}/__init__.py imports"


def test_imports_run_only_downward():
    upward = []
    for name, targets in import_graph().items():
        if not top(name):  # minitransformer/__init__.py: the public face imports anything
            continue
        for target in targets:
            if target.removeprefix("minitransformer.") in GROUPS:
                continue  # a grouping package: imports nothing (checked above)
            if not top(target):
                upward.append(f"{name} -> {target} (the package root)")
                continue
            a, b = FLOOR[top(name)], FLOOR[top(target)]
            if b < a or (b == a and top(name) != top(target)):
                upward.append(f"{name} (floor {a}) -> {target} (floor {b})")
    assert not upward, "imports that do not run downward:\n" + "\n".join(sorted(upward))


def test_no_import_circles():
    assert cycles(import_graph()) == []


def test_files_stay_within_their_size_budgets():
    over = []
    for name, path in modules().items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        budget = OP_FILE_BUDGET if name.startswith("minitransformer.ops.") else FILE_BUDGET
        if lines > budget:
            over.append(f"{path.relative_to(ROOT)}: {lines} lines > {budget}")
    assert not over, "files over budget (one concept per file):\n" + "\n".join(over)


def test_the_architecture_page_names_every_file_and_floor():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    unnamed = []
    for path in modules().values():
        rel = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py" or "/files/" in rel:
            continue
        if rel not in page and rel.rsplit("/", 1)[-1] not in page:
            unnamed.append(rel)
    assert not unnamed, f"docs/architecture.md does not mention: {unnamed}"
    for names in FLOORS:
        for n in names:  # tools.bench: named as such or by its folder, tools/bench/
            named = n in page or n.replace(".", "/") in page
            assert named, f"floor member {n!r} is not on docs/architecture.md"


def test_importing_the_library_loads_no_tool():
    """``import minitransformer`` brings the core (and the runtime on first use of
    ``mt.Translator``), never a tool: the tools are the command line's."""
    code = (
        "import sys, minitransformer\n"
        "print(sorted(m for m in sys.modules if m.startswith('minitransformer.tools')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout  # fmt: skip
    assert out.strip() == "[]", out


def test_the_checker_catches_an_upward_import_and_a_circle(tmp_path, monkeypatch):
    """The checks above are not vacuous: a made-up package with ``config`` importing ``cli``
    (upward), two modules importing each other, and a grouped member importing upward
    (``runtime.checkpoint`` -> ``tools.viz``) or sideways on its floor (``tools.bench`` ->
    ``tools.ablate``) is caught."""
    pkg = tmp_path / "minitransformer"
    for folder in ("ops", "tools", "runtime"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("def f():\n    from .cli import main\n")
    (pkg / "cli.py").write_text("from . import config\n")
    (pkg / "ops" / "a.py").write_text("from . import b\n")
    (pkg / "ops" / "b.py").write_text("from .a import x\n")
    (pkg / "tools" / "viz.py").write_text("")
    (pkg / "tools" / "ablate.py").write_text("")
    (pkg / "tools" / "bench.py").write_text("from .ablate import run\n")
    (pkg / "runtime" / "checkpoint.py").write_text("def f():\n    from ..tools import viz\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    graph = import_graph()
    assert "minitransformer.cli" in graph["minitransformer.config"]
    assert graph["minitransformer.runtime.checkpoint"] == {"minitransformer.tools.viz"}
    assert top("minitransformer.runtime.checkpoint") == "runtime.checkpoint"
    assert top("minitransformer.tools") == ""
    found = cycles(graph)
    assert ["minitransformer.ops.a", "minitransformer.ops.b"] in found
    assert ["minitransformer.cli", "minitransformer.config"] in found
    try:
        test_imports_run_only_downward()
    except AssertionError as err:
        for caught in ("config", "runtime.checkpoint", "tools.bench"):
            assert f"minitransformer.{caught} (floor" in str(err), caught
    else:
        raise AssertionError("the upward imports config -> cli, checkpoint -> viz were not caught")


if __name__ == "__main__":
    graph = import_graph()
    for level, names in enumerate(FLOORS):
        print(f"floor {level}: {', '.join(names)}")
        for name in sorted(m for m in graph if top(m) in names):
            inside = sorted(t.removeprefix("minitransformer.") for t in graph[name])
            print(f"  {name.removeprefix('minitransformer.')} -> {', '.join(inside) or '-'}")
    print("circles:", cycles(graph) or "none")
