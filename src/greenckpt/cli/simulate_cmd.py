"""``greenckpt simulate``: placeholder until the simulator lands (registered below)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Add the ``simulate`` sub-command."""
