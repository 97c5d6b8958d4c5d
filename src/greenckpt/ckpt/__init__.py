"""greenckpt.ckpt — the multilevel checkpoint/restart library (node-local, partner copy,
erasure-coded group, global file system), writing and reading through :mod:`greenckpt.io`.

The public API is :data:`__all__` (``from greenckpt.ckpt import Checkpointer``); every other
name and module here is internal and may change. The names are imported on first use
(PEP 562), so that importing one submodule (the CLI reads the configuration) stays cheap.
Why the library is built as it is: docs/design/checkpointer.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from greenckpt.lazy import lazy_names

if TYPE_CHECKING:
    from greenckpt.ckpt.api import Checkpointer
    from greenckpt.ckpt.comm import Comm
    from greenckpt.ckpt.config import Config, ConfigError, LevelConfig, load_config
    from greenckpt.ckpt.hooks import NullHook, PhaseAdvice, PhaseHook
    from greenckpt.ckpt.levels import (
        LevelSetting,
        LevelSpec,
        SchemeSpec,
        Storage,
        register_level,
        register_scheme,
        unregister_level,
        unregister_scheme,
    )
    from greenckpt.ckpt.manifest import ManifestError
    from greenckpt.ckpt.records import (
        CheckpointError,
        CheckpointInfo,
        RecoveryError,
        RecoveryInfo,
    )
    from greenckpt.ckpt.redundancy.scheme import Redundancy
    from greenckpt.ckpt.schedule import Backoff
    from greenckpt.ckpt.store import StoreError

_PUBLIC = {
    "Backoff": "greenckpt.ckpt.schedule",
    "CheckpointError": "greenckpt.ckpt.records",
    "CheckpointInfo": "greenckpt.ckpt.records",
    "Checkpointer": "greenckpt.ckpt.api",
    "Comm": "greenckpt.ckpt.comm",
    "Config": "greenckpt.ckpt.config",
    "ConfigError": "greenckpt.ckpt.config",
    "LevelConfig": "greenckpt.ckpt.config",
    "LevelSetting": "greenckpt.ckpt.levels",
    "LevelSpec": "greenckpt.ckpt.levels",
    "ManifestError": "greenckpt.ckpt.manifest",
    "NullHook": "greenckpt.ckpt.hooks",
    "PhaseAdvice": "greenckpt.ckpt.hooks",
    "PhaseHook": "greenckpt.ckpt.hooks",
    "RecoveryError": "greenckpt.ckpt.records",
    "RecoveryInfo": "greenckpt.ckpt.records",
    "Redundancy": "greenckpt.ckpt.redundancy.scheme",
    "SchemeSpec": "greenckpt.ckpt.levels",
    "Storage": "greenckpt.ckpt.levels",
    "StoreError": "greenckpt.ckpt.store",
    "load_config": "greenckpt.ckpt.config",
    "register_level": "greenckpt.ckpt.levels",
    "register_scheme": "greenckpt.ckpt.levels",
    "unregister_level": "greenckpt.ckpt.levels",
    "unregister_scheme": "greenckpt.ckpt.levels",
}
"""Each public name and the module that defines it."""

__all__ = [
    "Backoff",
    "CheckpointError",
    "CheckpointInfo",
    "Checkpointer",
    "Comm",
    "Config",
    "ConfigError",
    "LevelConfig",
    "LevelSetting",
    "LevelSpec",
    "ManifestError",
    "NullHook",
    "PhaseAdvice",
    "PhaseHook",
    "RecoveryError",
    "RecoveryInfo",
    "Redundancy",
    "SchemeSpec",
    "Storage",
    "StoreError",
    "load_config",
    "register_level",
    "register_scheme",
    "unregister_level",
    "unregister_scheme",
]


__getattr__, __dir__ = lazy_names(__name__, _PUBLIC, globals(), __all__)
