"""greenckpt: energy-aware checkpoint/restart for HPC applications.

The package measures how fast and at what power a node writes and reads checkpoints, models an
application's run with failures, and chooses the CPU frequency, I/O parallelism and checkpoint
interval that minimise the energy spent per unit of useful work (EPE). Layers, and what each
may import: docs/architecture.md.

``from greenckpt import Checkpointer`` works, but the package root stays cheap to import (the
CLI imports it): public names of the layers below are imported on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from greenckpt.errors import GreenckptError
from greenckpt.lazy import lazy_names

if TYPE_CHECKING:
    from greenckpt.ckpt import Checkpointer

_LAZY = {"Checkpointer": "greenckpt.ckpt"}
"""Public names re-exported lazily, and the public module they come from."""

__all__ = ["Checkpointer", "GreenckptError"]

__version__ = "0.1.0"


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
