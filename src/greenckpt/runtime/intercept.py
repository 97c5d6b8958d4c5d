"""``greenckpt run --intercept fti|scr|veloc``: FTI, SCR and VeloC codes announce their phases
with no code change.

Why an environment and not a wrapper program: the interposition library
(``libgreenckpt_intercept.so``, docs/intercept.md) must be loaded into every rank, which
``mpiexec`` starts; ``LD_PRELOAD`` is inherited through it, so prepending the library there (the
user's own preloads kept after it) reaches every rank. ``GREENCKPT_INTERCEPT`` tells it which
family to announce. Why the check of the programs: a user who names a library the program does not
link would otherwise get a run with no phases and no word why; one line before the run says
so, and the run goes on. A job script or ``bash -c`` loop starts its program itself, maybe by a
name known only when it runs: the check looks into it, and where it finds no such program it
says it cannot tell, never that none links the library.
"""

from __future__ import annotations

import mmap
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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


_SHELL = re.compile(r"(?:ba|da|k|z|mk|c|tc|fi|y|a)?sh|busybox|(?:python|perl|ruby|tclsh)[0-9.]*")
"""Programs that run a script: what they start is named in the script, not in the command."""
_MAX_SCRIPT_BYTES = 1 << 20
_MAX_WORDS = 4000
"""Bounds on what is read to find the programs a script names (a job script is short)."""


@dataclass
class _Scan:
    """What the command names: ELF programs, and the scripts and shells that start others."""

    programs: list[Path] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    words: int = 0


def _resolve(word: str, first: bool) -> Path | None:
    """The file a word names: the program (first word, found on the PATH as the shell finds
    it), an existing file, or a command name a launcher finds on the PATH (``mpiexec -n 2
    app``)."""
    if not word or word.startswith("-") or "=" in word:
        return None
    if not first and os.path.isfile(word):
        return Path(word)
    if first or re.fullmatch(r"[\w.+-]+", word):
        found = shutil.which(word)
        return Path(found) if found is not None else None
    return None


def _script_words(text: str) -> list[str]:
    """The words of a shell command line or script, as the shell splits them (roughly: a
    variable stays a word like ``$APP``, found as no file)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes (a here-document, another language): plain words
        return text.split()


def _scan(words: Sequence[str], scan: _Scan, depth: int = 0) -> None:
    """Add to ``scan`` the programs and scripts ``words`` name, looking into shells' command
    strings (``bash -c '...'``) and scripts (``bash job.sh``, ``./job.sh``), two levels deep,
    for the programs they run."""
    shell = after_shell = False  # a shell was named; it was the last word but options
    for i, word in enumerate(words):
        if scan.words >= _MAX_WORDS:
            return
        scan.words += 1
        script_arg = after_shell and not word.startswith("-")
        after_shell = after_shell and word.startswith("-")
        path = _resolve(word, i == 0)
        if path is None:
            if shell and depth < 2 and any(c.isspace() for c in word):  # a command string
                _scan(_script_words(word), scan, depth + 1)
            continue
        if _is_elf(path):
            if str(path) not in scan.seen:
                scan.programs.append(path)
            if _SHELL.fullmatch(path.name):
                if path.name not in scan.scripts:
                    scan.scripts.append(path.name)
                shell = after_shell = True
        elif str(path) not in scan.seen and (script_arg or _read_head(path, 2) == b"#!"):
            scan.scripts.append(str(path))
            if depth < 2:
                text = _read_head(path, _MAX_SCRIPT_BYTES).decode("utf-8", "replace")
                _scan(_script_words(text), scan, depth + 1)
        scan.seen.add(str(path))


def _read_head(path: Path, size: int) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(size)
    except OSError:
        return b""


def _any_links(programs: Sequence[Path], family: str) -> bool:
    """:func:`links_family` for several programs, each shared library read once."""
    needles = [b"\0" + name.encode() + b"\0" for name in FAMILIES[family][1]]
    read: set[Path] = set()
    for program in programs:
        for path in (program, *_libraries(program)):
            if path not in read:
                read.add(path)
                if _has_any(path, needles):
                    return True
    return False


def _some(names: Sequence[str], most: int = 4) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def missing_library_note(family: str, command: Sequence[str]) -> str | None:
    """One line unless a program that ``command`` names, or that a script or shell command
    in it names, links the family (None then). Only a command with neither scripts nor shells
    is known to start no such program; one that runs a script gets a line saying it cannot
    tell (the script may start one by a name found only when it runs)."""
    name, calls = FAMILIES[family]
    scan = _Scan()
    _scan(command, scan)
    if _any_links(scan.programs, family):
        return None
    named = _some([str(p) for p in scan.programs]) or "none found"
    if scan.scripts or not scan.programs:
        what = (
            f"it runs a script or shell ({_some(scan.scripts)}), which starts programs known "
            "only when it runs"
            if scan.scripts
            else "no program file was found for it"
        )
        return (
            f"--intercept {family}: cannot tell whether the command starts a program that links "
            f"{name}: {what}; none of the programs it names links {name} (programs: {named}); "
            f"the run goes on, with {name} phases if a program it starts links {name}"
        )
    return (
        f"--intercept {family}: no program in the command links {name} (none of "
        f"{', '.join(calls)} is in the programs or their libraries; programs: {named}); the run "
        f"goes on without {name} phases"
    )
