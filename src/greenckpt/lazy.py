"""Public names a package re-exports without importing them until first use (PEP 562).

Why: ``import greenckpt``, ``greenckpt.ckpt`` and ``greenckpt.runtime`` must stay cheap (a rank
that only announces phases, ``greenckpt --help``: tests/cli/test_cli_start.py), yet offer their
public API by name. Each package lists where its lazy names live and gets its module-level
``__getattr__``/``__dir__`` from :func:`lazy_names`, so the three packages share one
implementation.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, MutableMapping

__all__ = ["lazy_names"]


def lazy_names(
    package: str,
    table: Mapping[str, str],
    namespace: MutableMapping[str, object],
    public: Iterable[str],
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: a name of ``table`` (name → module) is
    imported from its module on first use and kept in ``namespace`` (the package's globals),
    so the next lookup is an ordinary attribute; any other name is an AttributeError."""

    def getattr_(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *public})

    return getattr_, dir_
