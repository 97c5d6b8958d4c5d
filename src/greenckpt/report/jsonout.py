"""Strict JSON for ``--json`` output: kept importable here; it lives in the leaf
:mod:`greenckpt.jsonout`, below every layer that writes JSON (the runtime's run report too)."""

from greenckpt.jsonout import dumps

__all__ = ["dumps"]
