"""Every C entry point has its Fortran binding (issue 30 item 4): each function greenckpt.h
declares is bound (``bind(C, name=...)``) and public in module ``greenckpt`` under its C name,
and each collective helper of greenckpt_mpi.h is public in module ``greenckpt_mpi`` (header
only: nothing to bind, written in Fortran), with as many arguments as in C. A function added to
a header without its binding fails here, by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from greenckpt.native import fortran_module, fortran_mpi_module, include_dir

_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_C_FUNCTION = re.compile(
    r"^[ \t]*(?:static\s+inline\s+)?(?:const\s+)?\w+[\s*]+(greenckpt_\w+)\s*\(([^)]*)\)", re.M
)


def _top_level(text: str) -> str:
    """C text outside braces (function bodies, struct members) and outside ``#`` lines and
    ``#ifdef __cplusplus`` blocks (their ``extern "C" {``)."""
    text = re.sub(r"#ifdef __cplusplus.*?#endif", "", _C_COMMENT.sub("", text), flags=re.S)
    text = re.sub(r"^[ \t]*#[^\n]*", "", text, flags=re.M)
    out, depth = [], 0
    for ch in text:
        depth += ch == "{"
        if depth == 0:
            out.append(ch)
        depth -= ch == "}" and depth > 0
    return "".join(out)


def c_functions(header: str) -> dict[str, int]:
    """The functions a header declares or defines: name -> number of parameters."""
    found = {}
    for name, params in _C_FUNCTION.findall(_top_level(header)):
        plist = [p for p in params.split(",") if p.strip()]
        found[name] = 0 if [p.strip() for p in plist] == ["void"] else len(plist)
    return found


@dataclass(frozen=True)
class FortranModule:
    public: frozenset[str]
    procedures: dict[str, int]  # name -> number of dummy arguments
    binds: frozenset[str]  # the C names bound with bind(C, name="...")


def _statements(source: str) -> list[str]:
    """Free-form Fortran statements: comments dropped (outside strings), ``&`` lines joined."""
    lines = []
    for line in source.splitlines():
        code, quote = [], ""
        for ch in line:
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "!":
                break
            code.append(ch)
        lines.append("".join(code).rstrip())
    joined = re.sub(r"&\s*\n\s*&?", " ", "\n".join(lines))
    return [s.strip() for s in joined.splitlines() if s.strip()]


def fortran_module_of(source: str) -> FortranModule:
    public: set[str] = set()
    procedures = {}
    binds = set()
    for stmt in _statements(source):
        low = stmt.lower()
        if m := re.match(r"public\s*::\s*(.+)$", low):
            public.update(n.strip() for n in m.group(1).split(","))
        if m := re.search(r'bind\s*\(\s*c\s*,\s*name\s*=\s*["\'](\w+)["\']', stmt, re.I):
            binds.add(m.group(1))
        m = re.match(r"(?:[\w()=, ]+\s+)?(?:function|subroutine)\s+(\w+)\s*\(([^)]*)\)", low)
        if m and not low.startswith("end"):
            procedures[m.group(1)] = len([a for a in m.group(2).split(",") if a.strip()])
    return FortranModule(frozenset(public), procedures, frozenset(binds))


def missing(c: dict[str, int], fortran: FortranModule, bound: bool) -> list[str]:
    """What a header's functions lack in the module, one line each (empty: at parity)."""
    out = []
    for name, arity in sorted(c.items()):
        if bound and name not in fortran.binds:
            out.append(f'{name}: no bind(C, name="{name}") interface')
        if name not in fortran.public or name not in fortran.procedures:
            out.append(f"{name}: no public Fortran procedure {name}")
        elif fortran.procedures[name] != arity:
            out.append(f"{name}: {fortran.procedures[name]} Fortran arguments, {arity} in C")
    return out


def test_every_function_of_greenckpt_h_has_its_fortran_binding() -> None:
    c = c_functions((include_dir() / "greenckpt.h").read_text())
    assert {"greenckpt_begin", "greenckpt_strerror", "greenckpt_kind_name"} <= set(c)
    assert c["greenckpt_begin"] == 5 and c["greenckpt_attached"] == 0
    assert missing(c, fortran_module_of(fortran_module().read_text()), bound=True) == []


def test_every_helper_of_greenckpt_mpi_h_has_its_fortran_procedure() -> None:
    c = c_functions((include_dir() / "greenckpt_mpi.h").read_text())
    assert set(c) == {
        "greenckpt_mpi_init", "greenckpt_mpi_begin", "greenckpt_mpi_end", "greenckpt_mpi_free"
    }  # fmt: skip
    assert c["greenckpt_mpi_begin"] == 6
    assert missing(c, fortran_module_of(fortran_mpi_module().read_text()), bound=False) == []


def test_a_c_function_without_a_binding_is_named() -> None:
    header = (
        (include_dir() / "greenckpt.h")
        .read_text()
        .replace(
            "#ifdef __cplusplus\n}",
            "int greenckpt_new_call(int a,\n    const char *b);\n#ifdef __cplusplus\n}",
        )
    )
    fortran = fortran_module_of(fortran_module().read_text())
    assert missing(c_functions(header), fortran, bound=True) == [
        'greenckpt_new_call: no bind(C, name="greenckpt_new_call") interface',
        "greenckpt_new_call: no public Fortran procedure greenckpt_new_call",
    ]
    wrong = fortran_module_of(
        fortran_module()
        .read_text()
        .replace("function greenckpt_end(kind, ok)", "function greenckpt_end(kind)")
    )
    assert missing(c_functions(header), wrong, bound=True)[:1] == [
        "greenckpt_end: 1 Fortran arguments, 2 in C"
    ]
