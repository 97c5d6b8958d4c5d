"""Imports point down the layer order of docs/architecture.md, never up (issue 17, item 4).

Why a test: the layer rule is what keeps ``model/`` and ``sim/`` pure, ``platform/`` the only
code that touches the machine, and the CLI thin; an upward import (the runtime's report
importing ``report/`` for its JSON helper, say) is easy to add and hard to see in review. This
reads every module's imports with :mod:`ast` (nothing is imported) and checks each against the
table below, which restates docs/architecture.md's "Import rule"; the test also checks that
the document names every layer, so the two cannot drift apart silently.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "greenckpt"
DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

LEAVES = {"errors", "units", "files", "durable", "jsonout", "phases", "lazy"}
"""Bottom leaf modules every layer may import (``units`` and ``files`` import ``errors``)."""

ALLOWED: dict[str, set[str]] = {
    "model": set(),
    "sim": {"model"},
    "optimize": {"model"},
    "platform": set(),
    "io": {"platform"},
    "profile": {"io", "platform", "optimize", "model"},
    "ckpt": {"io", "platform", "model", "native"},
    "apps": {"ckpt", "io", "platform", "model"},
    "runtime": {"ckpt", "profile", "io", "platform", "optimize", "model", "sim", "native"},
    # the C/C++/Fortran phase API: sources, headers, and where the built libraries are
    "native": set(),
    # fakes and contract suites for tests (pytest allowed); nothing in src/ imports it
    "testing": {"ckpt", "io", "platform", "model"},
    "report": {"runtime", "ckpt", "profile", "io", "platform", "optimize", "model", "sim"},
    # studies: each run through the runtime's library call (greenckpt.runtime.run), its report
    # written and shown as greenckpt run does (report/), then summarised
    "study": {"ckpt", "runtime", "report"},
    "cli": {
        "study",
        "native",
        "report",
        "runtime",
        "apps",
        "ckpt",
        "profile",
        "io",
        "platform",
        "optimize",
        "model",
        "sim",
    },
    # the package itself (its version and GreenckptError) is a leaf too; the public API it
    # re-exports (``from greenckpt import Checkpointer``) is imported lazily (PEP 562)
    "__init__": {"ckpt", "lazy"},
    "__main__": {"cli"},
    "errors": set(),
    "durable": set(),
    "jsonout": set(),
    "phases": set(),
    "lazy": set(),
    "units": {"errors"},
    "files": {"errors"},
}


def _module_of(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append("<relative>")
    return [n for n in found if n == "<relative>" or n.split(".")[0] == "greenckpt"]


def test_every_import_points_down_the_layer_order() -> None:
    upward = []
    for path in sorted(SRC.rglob("*.py")):
        module = _module_of(path)
        layer = _layer(module)
        assert layer in ALLOWED, f"{module}: layer {layer!r} is in no declared layer"
        for name in _imports(path):
            assert name != "<relative>", f"{module}: use absolute imports (greenckpt....)"
            target = _layer(name)
            if target == layer or target in ALLOWED[layer]:
                continue
            if target in LEAVES | {"__init__"} and layer not in LEAVES:
                continue
            upward.append(f"{module} imports {name} ({layer} may not import {target})")
    assert upward == []


def _top_level_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_testing_layer_imports_pytest() -> None:
    """pytest is the ``test`` extra, not a runtime dependency: ``greenckpt.testing`` may use it,
    and since no layer may import ``testing`` (the table above), nothing else reaches it."""
    users = [
        _module_of(path)
        for path in sorted(SRC.rglob("*.py"))
        if _layer(_module_of(path)) != "testing"
        and {"pytest", "_pytest"} & _top_level_imports(path)
    ]
    assert users == []


def test_the_package_root_is_a_leaf() -> None:
    """``greenckpt/__init__.py`` is imported by layers at every height (for ``__version__``):
    at import time it may import nothing but the leaves, or every such import would run
    upward. The public API it re-exports is imported on first use (PEP 562) and named at the
    top only for type checkers (``if TYPE_CHECKING:``), so only top-level imports count."""
    tree = ast.parse((SRC / "__init__.py").read_text(encoding="utf-8"))
    names: list[str] = []
    for node in tree.body:  # the top level only: not the ``if TYPE_CHECKING:`` block
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    names = [n for n in names if n.split(".")[0] == "greenckpt"]
    assert all(_layer(n) in LEAVES for n in names), names


def test_the_architecture_document_names_every_layer() -> None:
    text = DOC.read_text(encoding="utf-8")
    for layer in ALLOWED:
        if layer in ("__init__", "__main__"):
            continue
        name = f"{layer}.py" if layer in LEAVES else f"{layer}/"
        assert f"`{name}`" in text, f"docs/architecture.md does not state the rule for {name}"
