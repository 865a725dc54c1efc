"""The package's layers point down only, and no module imports itself back through others.

Every `import planner.x` / `from planner.x import y` in planner/ is read with `ast`, function-level and
TYPE_CHECKING imports included (an upward import is upward wherever it stands). Layers, lowest first;
packages on one rank are siblings and must not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "planner"

LAYERS: list[set[str]] = [
    {"errors", "__init__", "__main__"},  # __main__ only starts the CLI
    {"specs"},
    {"physics"},
    {"training", "serving"},
    {"search"},
    {"writing"},  # the output files' writer (regular files only, whole or not at all): engines and the CLI use it
    {"engines"},
    {"validate", "calibrate"},
    {"report"},
    {"cli"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
EXEMPT = {("__main__", "cli")}  # `python -m planner` runs the CLI: the entry point sits above everything


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "planner"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "planner":
                continue
            found.add(node.module)
            # `from planner.engines import megatron` imports the module planner.engines.megatron
            for alias in node.names:
                candidate = PACKAGE.parent.joinpath(*node.module.split("."), alias.name)
                if candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists():
                    found.add(f"{node.module}.{alias.name}")
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_has_a_layer():
    tops = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    tops |= {p.stem for p in PACKAGE.glob("*.py")}
    missing = {t for t in tops if t not in RANK} - {"model_specs", "hardware_profiles"}
    assert not missing, f"add {sorted(missing)} to LAYERS in {__file__}"


def test_imports_point_down():
    upward = []
    for module, targets in _graph().items():
        src = _top(module)
        if src not in RANK:
            continue
        for target in targets:
            dst = _top(target)
            if dst == src or (src, dst) in EXEMPT or dst not in RANK:
                continue
            if RANK[dst] >= RANK[src]:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that do not point down:\n" + "\n".join(sorted(upward))


def test_no_import_cycle():
    graph = _graph()
    # Tarjan's strongly connected components; any component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    # a package's __init__ importing its own modules is not a cycle unless they import it back
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("bad", ["planner.cli.check", "planner.engines.load"])
def test_the_checker_sees_an_upward_import(tmp_path, bad):
    """The walker finds function-level imports (the kind that hid the old cycles)."""
    src = tmp_path / "m.py"
    src.write_text(f"def f():\n    from {bad} import x\n", encoding="utf-8")
    assert bad in _imports(src)
