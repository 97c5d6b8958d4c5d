"""Writes docs/architecture.md's generated sections: ``python -m tests.gen_architecture``.

Why generated: the module index and the table of who imports whom are facts of the source, and
a hand-kept list of ~250 modules drifts with every new one. The rest of the document (the
layers, why, the import rule) is written by hand; ``tests/test_architecture_doc.py`` checks it
against the code and checks that these sections are current (``--check`` does the same here).

The module index: each package's modules (and ``native/``'s C, header and Fortran sources),
each with the first sentence of its docstring or header comment. The import table: for each
layer, the layers and leaves its modules import anywhere in their source (at module level, in
a function, under ``if TYPE_CHECKING:``), read with :mod:`ast` as ``tests/test_import_graph.py``
reads them.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from tests.test_import_graph import imports, modules

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "greenckpt"
DOC = ROOT / "docs" / "architecture.md"
COMMAND = "python -m tests.gen_architecture"

LAYER_ORDER = (
    "cli",
    "testing",
    "study",
    "report",
    "apps",
    "runtime",
    "native",
    "ckpt",
    "profile",
    "io",
    "platform",
    "optimize",
    "model",
    "sim",
)
"""The layers top to bottom, as the document's tree lists them."""

NATIVE_SOURCES = (".c", ".h", ".f90")
"""The non-Python sources the index lists (``native/``'s C, headers, Fortran modules)."""

BEGIN = "<!-- generated: {name} (do not edit; run `" + COMMAND + "`) -->"
END = "<!-- end generated: {name} -->"


def _first_sentence(text: str) -> str:
    """The first sentence of a docstring's first paragraph, on one line."""
    para = " ".join(text.strip().split("\n\n")[0].split())
    found = re.match(r"(.+?\.)(\s|$)", para)
    return found.group(1) if found else para


def _header_comment(path: Path) -> str:
    """A C or Fortran source's summary: its first comment paragraph, past ``name - ``."""
    lines: list[str] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip().removeprefix("/*").removeprefix("*").removeprefix("!").strip()
        if raw.strip() in ("/*", "") and not lines:
            continue
        if not line or raw.strip().startswith("*/"):
            break
        lines.append(line)
    text = " ".join(lines)
    return _first_sentence(text.split(" - ", 1)[1] if " - " in text else text)


def _summary(path: Path) -> str:
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        return _first_sentence(doc) if doc else "(no docstring)"
    return _header_comment(path)


def layer_of(module: str) -> str:
    """``greenckpt.runtime.x`` -> ``runtime/``, ``greenckpt.units`` -> ``units.py``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    if (SRC / parts[1]).is_dir():
        return f"{parts[1]}/"
    return f"{parts[1]}.py"


def _order(name: str) -> tuple[int, str]:
    layer = name.removesuffix("/")
    if layer in LAYER_ORDER:
        return (LAYER_ORDER.index(layer), name)
    return (len(LAYER_ORDER), name)


def module_index() -> str:
    """One line per source file, grouped by layer, the leaves and package root last."""
    by_layer: dict[str, list[Path]] = {}
    for path in sorted(SRC.rglob("*")):
        if path.suffix != ".py" and path.suffix not in NATIVE_SOURCES:
            continue
        rel = path.relative_to(SRC)
        layer = f"{rel.parts[0]}/" if len(rel.parts) > 1 else "the package root and its leaves"
        by_layer.setdefault(layer, []).append(path)
    out = []
    for layer in sorted(by_layer, key=_order):
        out.append(f"`{layer}`" if layer.endswith("/") else layer.capitalize())
        out.append("")
        for path in by_layer[layer]:
            out.append(f"- `{path.relative_to(SRC).as_posix()}`: {_summary(path)}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def layer_imports() -> dict[str, set[str]]:
    """For each layer (and leaf), the other layers and leaves its modules import."""
    known = modules(SRC)
    found: dict[str, set[str]] = {}
    for module, path in known.items():
        source = layer_of(module)
        targets = found.setdefault(source, set())
        for edge in imports(module, path, known):
            target = layer_of(edge.target)
            if target != source:
                targets.add(target)
    return found


def import_table() -> str:
    """Who imports whom at package level: a row per layer, what it imports, what imports it."""
    found = layer_imports()
    users: dict[str, set[str]] = {name: set() for name in found}
    for source, targets in found.items():
        for target in targets:
            users.setdefault(target, set()).add(source)

    def names(items: set[str]) -> str:
        return ", ".join(f"`{n}`" for n in sorted(items, key=_order)) or "nothing"

    rows = ["| layer | imports | imported by |", "| --- | --- | --- |"]
    for layer in sorted(found, key=_order):
        rows.append(f"| `{layer}` | {names(found[layer])} | {names(users[layer])} |")
    return "\n".join(rows) + "\n"


SECTIONS = {"module index": module_index, "imports": import_table}


def render(text: str) -> str:
    """``text`` with every generated section replaced by what the code says now."""
    for name, make in SECTIONS.items():
        begin, end = BEGIN.format(name=name), END.format(name=name)
        head, found, rest = text.partition(begin + "\n")
        if not found:
            raise SystemExit(f"{DOC}: no line {begin!r}")
        _, found, tail = rest.partition(end)
        if not found:
            raise SystemExit(f"{DOC}: no line {end!r}")
        text = f"{head}{begin}\n\n{make()}\n{end}{tail}"
    return text


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in argv:
        if new != text:
            print(f"{DOC} is out of date: run `{COMMAND}`")
            return 1
        return 0
    if new != text:
        DOC.write_text(new, encoding="utf-8")
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
