"""``greenckpt run --intercept fti|scr|veloc``: FTI, SCR and VeloC codes announce their phases
with no code change.

Why an environment and not a wrapper program: the interposition library
(``libgreenckpt_intercept.so``, docs/intercept.md) must be loaded into every rank, which
``mpiexec`` starts; ``LD_PRELOAD`` is inherited through it, so prepending the library there (the
user's own preloads kept after it) reaches every rank. ``GREENCKPT_INTERCEPT`` tells it which
family to announce. Why the check of the programs: a user who names a library the program does not
link would otherwise get a run with no phases and no word why; one line before the run says
so, and the run goes on.
"""

from __future__ import annotations

import mmap
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from greenckpt.errors import InvalidValueError
from greenckpt.native import BuildError, intercept_library

__all__ = ["FAMILIES", "intercept_environ", "links_family", "missing_library_note"]

FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "fti": ("FTI", ("FTI_Init", "FTI_Checkpoint", "FTI_Recover", "FTI_Snapshot")),
    "scr": ("SCR", ("SCR_Init", "SCR_Start_output", "SCR_Start_checkpoint", "SCR_Start_restart")),
    "veloc": (
        "VeloC",
        ("VELOC_Init", "VELOC_Checkpoint", "VELOC_Checkpoint_begin", "VELOC_Restart"),
    ),
}
"""Each family ``--intercept`` takes: its name in messages, and calls that show it is linked."""


def intercept_environ(family: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to the command's environment for ``--intercept family``."""
    if family not in FAMILIES:
        raise InvalidValueError(f"--intercept {family!r}: give one of {', '.join(FAMILIES)}")
    try:
        library = str(intercept_library())
    except BuildError as exc:
        raise InvalidValueError(f"--intercept {family}: {exc}") from None
    previous = environ.get("LD_PRELOAD", "").strip()
    return {
        "LD_PRELOAD": f"{library}:{previous}" if previous else library,
        "GREENCKPT_INTERCEPT": family,
    }


def _elf_files(command: Sequence[str]) -> list[Path]:
    """The ELF files the command names: its program (found on the PATH) and any argument that
    is an existing file (``./a.out`` after ``mpiexec -n 4``)."""
    found: list[Path] = []
    for i, word in enumerate(command):
        where = shutil.which(word) if i == 0 else (word if os.path.isfile(word) else None)
        if where is not None and _is_elf(Path(where)):
            found.append(Path(where))
    return found


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _has_any(path: Path, needles: Sequence[bytes]) -> bool:
    """Whether the file holds one of the symbol names (as its string table stores them)."""
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return any(data.find(needle) >= 0 for needle in needles)
    except (OSError, ValueError):  # unreadable, or empty (mmap refuses a size of 0)
        return False


def _libraries(path: Path) -> list[Path]:
    """The shared libraries the program loads, as ``ldd`` resolves them (none if it cannot)."""
    try:
        done = subprocess.run(
            ["ldd", str(path)], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = []
    for line in done.stdout.splitlines():
        _, arrow, rest = line.partition("=>")
        words = rest.split()
        if arrow and words and words[0].startswith("/"):
            found.append(Path(words[0]))
    return found


def links_family(path: Path, family: str) -> bool:
    """Whether the program, or a library it loads, holds one of the family's calls."""
    needles = [b"\0" + name.encode() + b"\0" for name in FAMILIES[family][1]]
    return any(_has_any(p, needles) for p in (path, *_libraries(path)))


def missing_library_note(family: str, command: Sequence[str]) -> str | None:
    """One line when no program named in ``command`` links the family (None when one does)."""
    name, calls = FAMILIES[family]
    programs = _elf_files(command)
    if any(links_family(p, family) for p in programs):
        return None
    named = ", ".join(str(p) for p in programs) or "none found"
    return (
        f"--intercept {family}: no program in the command links {name} (none of {', '.join(calls)}"
        f" is in the programs or their libraries; programs: {named}); the run goes on without "
        f"{name} phases"
    )
