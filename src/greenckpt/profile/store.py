"""Atomic profile files: a reader (or a resumed sweep) never sees a half-written profile.

Why: a sweep can take hours and be killed at any moment (a wall-time limit, Ctrl-C, a node
failure). The profile is rewritten after every finished cell: the new text goes to a temporary
file in the same directory, is fsynced, renamed over the old file, and the directory is fsynced
— so the file on disk is always either the previous complete version or the new one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from greenckpt.errors import InvalidValueError
from greenckpt.io.atomic import write_atomic
from greenckpt.optimize.profile import Profile, profile_to_json


def save_profile(profile: Profile, path: str | os.PathLike[str]) -> None:
    """Write ``profile`` to ``path`` atomically, as strict JSON (a profile holds only finite
    numbers: the loader refuses anything else)."""
    write_atomic(path, json.dumps(profile_to_json(profile), indent=2, allow_nan=False) + "\n")


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
