"""The import directions of ``docs/architecture.md``, enforced on the source.

Every ``import`` and ``from ... import`` of every module under ``src/stripeml``
(including the lazy ones inside functions and ``TYPE_CHECKING`` blocks) is read
with :mod:`ast`; an import of another layer must be one the table allows.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stripeml

SRC = Path(stripeml.__file__).parent

#: layer -> the layers it may import (its own layer always).  Keep in step with
#: the table in docs/architecture.md.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "phases": set(),
    "gc_pause": set(),
    "exact_args": set(),
    "ir": {"phases", "errors"},
    "analysis": {"phases", "ir", "errors"},
    "passes": {"phases", "analysis", "ir", "errors"},
    "tile": {"phases", "analysis", "ir", "errors"},
    "targets": {"phases", "passes", "ir", "errors"},
    "codegen": {"phases", "analysis", "ir", "errors"},
    "runtime": {"phases", "gc_pause", "codegen", "targets", "analysis", "ir", "errors", "version"},
    "explore": {"phases", "runtime", "targets", "analysis", "ir", "errors"},
    "api": {
        "phases",
        "gc_pause",
        "exact_args",
        "explore",
        "runtime",
        "targets",
        "passes",
        "tile",
        "analysis",
        "ir",
        "errors",
    },
    "onnx": {"phases", "gc_pause", "exact_args", "api", "tile", "ir", "errors"},
    "torch": {"onnx", "api", "errors"},
    "autodiff": {"api", "tile", "errors"},
    "edsl": {"api", "autodiff", "tile", "errors"},
    "tuning": {
        "phases",
        "api",
        "runtime",
        "targets",
        "passes",
        "tile",
        "analysis",
        "ir",
        "errors",
    },
    "package": {"api", "onnx", "edsl", "autodiff", "tuning", "targets", "ir", "errors"},
    "cli": {"*"},
    "demo": {"package", "api", "ir", "errors"},
}


def layer_of(module: str) -> str:
    """``stripeml.passes.fuse`` -> ``passes``; ``stripeml`` -> ``package``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    if parts[1] == "__version__":
        return "version"
    return parts[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, module: str | None = None) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every stripeml import in ``path`` (the
    module ``module``, by default the one the path names under ``src/``)."""
    module = module or module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None:  # ``from . import x``: x is a module of the package
                out += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, target))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    found = [(line, t) for line, t in out if t == "stripeml" or t.startswith("stripeml.")]
    return sorted(found)


def violations() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        mine = layer_of(module_name(path))
        allowed = ALLOWED[mine]
        for line, target in imports(path):
            theirs = layer_of(target)
            if theirs == mine or "*" in allowed or theirs in allowed:
                continue
            found.append(f"{path.relative_to(SRC.parent)}:{line}: {mine} imports {target}")
    return found


def test_every_module_is_in_a_layer() -> None:
    layers = {layer_of(module_name(p)) for p in SRC.rglob("*.py")}
    assert layers <= set(ALLOWED), sorted(layers - set(ALLOWED))


def test_imports_point_down() -> None:
    assert violations() == []


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The parser finds imports inside functions and TYPE_CHECKING blocks and
    resolves relative ones, as ``stripeml.ir.probe`` would see them."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from .nodes import Block\n"
        "from .. import errors\n"
        "if TYPE_CHECKING:\n"
        "    from ..runtime.cpu import CpuBackend\n"
        "def f():\n"
        "    import stripeml.passes.fuse\n"
        "    from ..analysis.access import accesses\n"
    )
    assert imports(probe, "stripeml.ir.probe") == [
        (2, "stripeml.ir.nodes"),
        (3, "stripeml.errors"),
        (5, "stripeml.runtime.cpu"),
        (7, "stripeml.passes.fuse"),
        (8, "stripeml.analysis.access"),
    ]
    assert layer_of("stripeml.passes.fuse") == "passes" and layer_of("stripeml") == "package"


def test_architecture_doc_lists_the_same_table() -> None:
    doc = (SRC.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    for layer, allowed in ALLOWED.items():
        row = f"| `{layer}` |"
        assert row in doc, f"docs/architecture.md has no row for {layer}"
        line = next(ln for ln in doc.splitlines() if ln.startswith(row))
        listed = {w.strip("` ") for w in line.split("|")[3].split(",") if w.strip("` ")}
        want = {"anything"} if "*" in allowed else allowed or {"nothing"}
        assert listed == want, (layer, listed, want)
