"""greenckpt: energy-aware checkpoint/restart for HPC applications.

The package measures how fast and at what power a node writes and reads checkpoints, models an
application's run with failures, and chooses the CPU frequency, I/O parallelism and checkpoint
interval that minimise the energy spent per unit of useful work (EPE). Layers, and what each
may import: docs/architecture.md.

``from greenckpt import Checkpointer`` works, but the package root stays cheap to import (the
CLI imports it): public names of the layers below are imported on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from greenckpt.errors import GreenckptError

if TYPE_CHECKING:
    from greenckpt.ckpt import Checkpointer

_LAZY = {"Checkpointer": "greenckpt.ckpt"}
"""Public names re-exported lazily, and the public module they come from."""

__all__ = ["Checkpointer", "GreenckptError"]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """A lazily re-exported public name, imported on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
