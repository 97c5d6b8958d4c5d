"""No two modules of ``src/greenckpt`` import each other (issue 28, item 4).

Why a test: a circle of two files (``a`` imports ``b``, ``b`` imports ``a``) means the two are
one piece of design split in two, or that a piece both need lives in the wrong one; an import
moved into a function, or under ``if TYPE_CHECKING:``, hides the circle from Python but not
from the design. So every import counts here, wherever it is written: at module level, inside
a function or class, and under ``if TYPE_CHECKING:``. The fix is to move the shared piece
where it belongs (below both), or to type the other side by a small Protocol of what is used.

An import is read with :mod:`ast` (nothing is imported). ``import greenckpt.a.b`` and
``from greenckpt.a.b import c`` name module ``greenckpt.a.b``; ``from greenckpt.a import b``
names ``greenckpt.a.b`` when that is a module, else the package ``greenckpt.a``; relative
imports are resolved the same way. Not counted, and why: the implicit import of a module's
parent packages (Python runs ``greenckpt/ckpt/__init__.py`` before any ``greenckpt.ckpt.x``;
that is the package, not a choice of the module), and modules named in strings and imported
with :func:`importlib.import_module` (a registry's ``"module:attribute"`` entries: late
binding by name is their point).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "greenckpt"

KNOWN: set[frozenset[str]] = set()
"""Two-module circles that exist and are known; the test fails when one more appears and when
one of these goes away (then delete it here), so this set only shrinks."""


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line`` (``where``: module, function, TYPE_CHECKING)."""

    source: str
    target: str
    line: int
    where: str


def modules(src: Path) -> dict[str, Path]:
    """Every module under ``src`` (the package folder) by dotted name; a package by its own."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _owner(name: str, known: dict[str, Path]) -> str | None:
    """The longest module or package of ``known`` that ``name`` is or lies in."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[Edge]:
    """Every import of another module of ``known`` that ``module``'s source names."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    root = next(iter(known)).split(".")[0]

    def visit(node: ast.AST, where: str) -> Iterator[Edge]:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                inner = "function" if where == "module" else where
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                inner = "TYPE_CHECKING"
            targets: list[str] = []
            line = getattr(child, "lineno", 0)
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" for a in child.names] or [base]
            for name in targets:
                if name.split(".")[0] != root:
                    continue
                target = _owner(name, known)
                if target is not None and target != module:
                    yield Edge(module, target, line, inner)
            yield from visit(child, inner)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), "module")


def two_module_circles(src: Path) -> dict[frozenset[str], list[Edge]]:
    """Each pair of modules that import each other, with the imports that make the circle."""
    known = modules(src)
    edges: dict[tuple[str, str], list[Edge]] = {}
    for module, path in known.items():
        for edge in imports(module, path, known):
            edges.setdefault((edge.source, edge.target), []).append(edge)
    return {
        frozenset(pair): edges[pair] + edges[(pair[1], pair[0])]
        for pair in edges
        if (pair[1], pair[0]) in edges and pair[0] < pair[1]
    }


def _describe(found: dict[frozenset[str], list[Edge]]) -> list[str]:
    return sorted(
        "; ".join(
            dict.fromkeys(f"{e.source}:{e.line} imports {e.target} ({e.where})" for e in edges)
        )
        for edges in found.values()
    )


def test_no_two_modules_import_each_other() -> None:
    found = two_module_circles(SRC)
    new = {pair: edges for pair, edges in found.items() if pair not in KNOWN}
    assert _describe(new) == [], "move the shared piece below both, or type one side by a Protocol"


def test_the_known_circles_still_exist() -> None:
    """A known circle that was removed leaves :data:`KNOWN`, so none can come back unseen."""
    gone = KNOWN - set(two_module_circles(SRC))
    assert gone == set(), f"no longer a circle: delete from KNOWN: {sorted(map(sorted, gone))}"


def _is_reexport_only(statement: ast.stmt) -> bool:
    """An import, ``__all__ = [...]`` (or ``+=``), or a bare string (a docstring)."""
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return True
    if isinstance(statement, ast.Expr):
        return isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)
    targets: list[ast.expr] = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AugAssign | ast.AnnAssign):
        targets = [statement.target]
    return bool(targets) and all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def reexport_shims(src: Path) -> list[str]:
    """Every module of ``src`` (not a package's ``__init__``) that only re-exports names.

    A shim is a module whose body is nothing but imports, ``__all__`` and strings, with at
    least one import of the package itself (``from greenckpt.x import name``): it keeps an old
    path alive for names that live elsewhere. Why a test (issue 28, item 4): two paths for one
    name split the importers, hide where the code is, and outlive every reason for them; an
    importer names the module that defines what it uses. A package's ``__init__`` is its public
    face, and may gather its modules' names.
    """
    root = src.name
    found = []
    for module, path in modules(src).items():
        if path.name == "__init__.py":
            continue
        body = ast.parse(path.read_text(encoding="utf-8")).body
        own = [
            s
            for s in body
            if isinstance(s, ast.ImportFrom)
            and (s.level > 0 or (s.module or "").split(".")[0] == root)
        ]
        if own and all(_is_reexport_only(s) for s in body):
            found.append(module)
    return sorted(found)


def test_no_module_only_re_exports_another() -> None:
    assert reexport_shims(SRC) == [], "import the names from the module that defines them"


def modules_named_like_packages(src: Path) -> list[str]:
    """Every module of ``src`` (not a package's ``__init__``) whose name is a package's name.

    Why a test (issue 28, item 4): ``from greenckpt.runtime import report`` beside the package
    ``greenckpt.report`` reads as the package, and a reader (or a grep for ``report``) takes one
    for the other. Decided: a module may not share its last name with any package of
    greenckpt, anywhere in the tree. Two modules of different packages may share a name
    (``ckpt/store.py``, ``profile/store.py``): each is read with its package, as
    ``ckpt.store`` and ``profile.store``, and the packages say which job each does.
    """
    found = modules(src)
    packages = {
        name.rpartition(".")[2] for name, path in found.items() if path.name == "__init__.py"
    }
    return sorted(
        name
        for name, path in found.items()
        if path.name != "__init__.py" and name.rpartition(".")[2] in packages
    )


def test_no_module_has_a_package_s_name() -> None:
    assert modules_named_like_packages(SRC) == [], "rename the module by what it holds"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "pkg"
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return src


def test_every_form_of_import_makes_a_circle(tmp_path: Path) -> None:
    """The reader sees a circle through a function's import, a TYPE_CHECKING import, a
    relative import, ``from pkg.sub import module`` and ``import pkg.sub.module``."""
    src = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "",
            "sub/a.py": "def f():\n    from pkg.sub import b\n",
            "sub/b.py": "import typing\nif typing.TYPE_CHECKING:\n    from . import a\n",
            "sub/c.py": "from .d import X\n",
            "sub/d.py": "import pkg.sub.c\n",
            "sub/e.py": "from pkg.sub.f import Y\n",
            "sub/f.py": "import os\n",
        },
    )
    found = two_module_circles(src)
    assert set(found) == {
        frozenset({"pkg.sub.a", "pkg.sub.b"}),
        frozenset({"pkg.sub.c", "pkg.sub.d"}),
    }
    wheres = {e.where for e in found[frozenset({"pkg.sub.a", "pkg.sub.b"})]}
    assert wheres == {"function", "TYPE_CHECKING"}


def test_a_package_and_its_module_importing_each_other_is_a_circle(tmp_path: Path) -> None:
    """``pkg/__init__.py`` re-exporting from ``pkg.a`` while ``pkg.a`` imports a name from
    ``pkg`` (not a module) is a circle; the implicit import of the parent package is not."""
    src = _tree(
        tmp_path,
        {
            "__init__.py": "from pkg.a import A\n",
            "a.py": "from pkg import VERSION\nA = 1\n",
            "b.py": "from pkg.a import A\n",
        },
    )
    assert set(two_module_circles(src)) == {frozenset({"pkg", "pkg.a"})}


def test_a_module_of_only_imports_and_all_is_a_shim(tmp_path: Path) -> None:
    """A shim is found whether it imports absolutely or relatively; a package's ``__init__``,
    a module that defines something and a module importing only other libraries are not."""
    src = _tree(
        tmp_path,
        {
            "__init__.py": "from pkg.real import X\n__all__ = ['X']\n",
            "real.py": "X = 1\n",
            "shim.py": '"""Old path."""\nfrom __future__ import annotations\n'
            "from pkg.real import X\n__all__ = ['X']\n",
            "relative.py": "from .real import X as X\n",
            "user.py": "from pkg.real import X\nY = X + 1\n",
            "other.py": "import os\nfrom os import path\n",
        },
    )
    assert reexport_shims(src) == ["pkg.relative", "pkg.shim"]


def test_a_module_named_like_any_package_is_found(tmp_path: Path) -> None:
    """A module named like a package elsewhere (``run/report.py`` beside ``report/``) or like
    a nested package is found; two modules of one name in different packages are not."""
    src = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "report/__init__.py": "",
            "report/store.py": "",
            "run/__init__.py": "",
            "run/report.py": "",
            "run/store.py": "",
            "run/deep/__init__.py": "",
            "deep.py": "",
        },
    )
    assert modules_named_like_packages(src) == ["pkg.deep", "pkg.run.report"]
