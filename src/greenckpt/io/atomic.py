"""Replace a small file atomically: what profiles and checkpoint manifests are written with.

The helpers live in the leaf module :mod:`greenckpt.durable`, so that ``platform/`` (below
``io/``) uses the same ones; this module keeps their names importable where ``io/`` and the
layers above it have always found them.
"""

from __future__ import annotations

from greenckpt.durable import fsync_directory, write_atomic, write_durable

__all__ = ["fsync_directory", "write_atomic", "write_durable"]
