"""Strict JSON for ``--json`` output: non-finite numbers become ``null``.

Python's ``json`` writes ``NaN`` and ``Infinity``, which strict parsers (jq, JavaScript,
most other languages) reject. An infinite interval or an undefined confidence bound is
``null`` in greenckpt's JSON. A leaf module (imports nothing of greenckpt), so the runtime's run
report, the commands and ``report/`` write JSON the same way without an upward import.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps"]


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def dumps(doc: Any) -> str:
    """Indented strict JSON of ``doc`` (NaN and ±inf written as ``null``)."""
    return json.dumps(_finite(doc), indent=2, allow_nan=False)
