"""The command's view of greenckpt: ``greenckpt`` on its PATH while ``greenckpt run`` runs it.

Why: a job script under ``greenckpt run`` calls ``greenckpt notify`` (DMTCP's recipe, SCR or
FTI job scripts); when greenckpt was installed in a virtual environment that the job does
not activate, ``greenckpt`` is not on the job's PATH and every announcement fails with
"command not found". So when the command's PATH has no ``greenckpt``, it gets a private
folder, last on its PATH, that holds a ``greenckpt`` which runs this very installation (this
interpreter, ``-m greenckpt``), and ``GREENCKPT`` naming it (unless already set), for scripts
that prefer a variable. A ``greenckpt`` the user put on the PATH is theirs and stays the one
found; nothing else is added, so the job's own ``python`` or ``mpiexec`` are what they were.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["greenckpt_on_path"]


@contextmanager
def greenckpt_on_path(environ: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """The variables to add to the command's environment (``PATH``, ``GREENCKPT``); the folder
    is removed when the block ends."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    if shutil.which("greenckpt", path=path) is not None:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="greenckpt-bin-") as folder:
        wrapper = Path(folder) / "greenckpt"
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m greenckpt "$@"\n')
        wrapper.chmod(0o755)
        added = {"PATH": f"{path}{os.pathsep}{folder}"}
        if not env.get("GREENCKPT"):
            added["GREENCKPT"] = str(wrapper)
        yield added
