"""The modules of ``stripeml.onnx`` import each other in a DAG (no circle, lazy imports included)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import stripeml.onnx

ROOT = Path(stripeml.onnx.__file__).resolve().parent
PACKAGE = "stripeml.onnx"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` inside ``module``."""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([name] if name else []))


def imports(module: str) -> set[str]:
    """The ``stripeml.onnx`` modules that ``module`` imports anywhere in its code
    (function-level imports too: a lazy import still closes a circle)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (
                _resolve(module, path.name == "__init__.py", node.level, node.module)
                if node.level
                else node.module or ""
            )
            # `from . import ops` imports the module `ops`; `from .ops import conv` too.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of modules, first = last), or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_cycle_finder_finds_cycles():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_import_graph_reads_relative_imports():
    graph = {m: imports(m) for m in MODULES}
    assert f"{PACKAGE}.builder" in graph[f"{PACKAGE}.registry"]
    assert f"{PACKAGE}.ops.conv" in graph[f"{PACKAGE}.ops.pool"]
    assert f"{PACKAGE}.ops._util" in graph[f"{PACKAGE}.ops.pool"]


def test_onnx_modules_import_in_a_dag():
    graph = {m: imports(m) for m in MODULES}
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_every_op_module_is_registered_by_the_op_library():
    """``stripeml.onnx.ops`` imports each op module by name (so the graph above sees it)."""
    ops = imports(f"{PACKAGE}.ops")
    modules = {m for m in MODULES if m.startswith(f"{PACKAGE}.ops.")}
    assert {m for m in modules if not m.rsplit(".", 1)[1].startswith("_")} <= ops


def test_each_module_imports_alone_in_a_fresh_interpreter():
    """Importing any one module first works (no order of imports is needed)."""
    names = sorted(m for m in MODULES if not m.endswith(".backend"))
    code = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    for key in [k for k in sys.modules if k.startswith('stripeml')]:\n"
        "        del sys.modules[key]\n"
        "    importlib.import_module(name)\n"
        "    from stripeml.onnx.ops import lookup\n"
        "    assert lookup('Conv') is not None and lookup('_ConvBN') is not None, name\n"
    )
    subprocess.run([sys.executable, "-c", code, *names], check=True, timeout=300)
