"""Where a sweep writes its profile: the output path is checked before hours of measuring.

Why: a sweep can take hours and be killed at any moment, so its profile is rewritten after
every finished cell, atomically (:func:`greenckpt.optimize.profile_data.save_profile`, beside the
loader so the format is read and written in one module; this module keeps the name for its
callers), and the target is checked for writability before the first cell is measured.
"""

from __future__ import annotations

import os
from pathlib import Path

from greenckpt.errors import InvalidValueError
from greenckpt.optimize.profile_data import save_profile

__all__ = ["check_writable_target", "save_profile"]


def check_writable_target(path: str | os.PathLike[str]) -> None:
    """Raise a one-line ValueError when ``path`` cannot be written (checked before a sweep
    starts, so hours of measurements are never lost to a bad output path)."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InvalidValueError(f"cannot write {target}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InvalidValueError(f"cannot write {target}: directory {directory} is not writable")
    if target.exists() and target.is_dir():
        raise InvalidValueError(f"cannot write {target}: it is a directory, give a file name")
