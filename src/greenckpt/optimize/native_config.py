"""Checkpoint intervals written in the configuration languages of FTI, SCR and VeloC.

Why: users of those libraries set their intervals in the libraries' own files, so a chosen
schedule is only useful once it is written there, with the libraries' units and quirks
(FTI counts whole minutes, SCR counts checkpoints between levels, VeloC has no interval of its
own), and an existing ``config.fti`` is the schedule a user wants evaluated first.

Pure text in, text out: the CLI reads and writes the files (atomically). The meanings follow
the libraries' sources and documentation, cited in docs/user-guide.md ("Intervals in their
language"). Levels are taken lowest first and the top one is the parallel file system: FTI
L1, L2, L3 are filled from the bottom and the top level is L4; SCR's lower levels become
checkpoint descriptors (SINGLE, PARTNER, RS) and the top one ``SCR_FLUSH``; VeloC's lowest is
the application's own checkpoint, a middle one ``ec_interval``, the top one
``persistent_interval``. What a format cannot express is refused with a one-line reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from greenckpt.errors import InvalidValueError

__all__ = [
    "FORMATS",
    "FTI_KEYS",
    "NativeLevel",
    "checkpoints_itself",
    "fti_intervals",
    "fti_minutes",
    "fti_slots",
    "parse_fti",
    "quantum_of",
    "render",
    "update_fti",
]

Format = Literal["fti", "scr", "veloc"]
FORMATS: tuple[Format, ...] = ("fti", "scr", "veloc")
FTI_KEYS = ("ckpt_l1", "ckpt_l2", "ckpt_l3", "ckpt_l4")
_SCR_TYPES = ("SINGLE", "PARTNER", "RS")


@dataclass(frozen=True)
class NativeLevel:
    """One level of a chosen schedule: compute seconds between its checkpoints (``inf``:
    never checkpointed) and its checkpoint time (VeloC's wall-clock windows need it)."""

    name: str
    interval: float
    ckpt_time: float = 0.0


def quantum_of(fmt: Format) -> float:
    """The grid a format's intervals live on: FTI whole minutes, SCR and VeloC whole seconds."""
    return 60.0 if fmt == "fti" else 1.0


def _whole(value: float, quantum: float, what: str) -> int:
    n = round(value / quantum)
    if n < 1 or abs(n * quantum - value) > 1e-9 * value:
        unit = "minutes" if quantum == 60.0 else "seconds"
        raise InvalidValueError(f"{what}: {value:g} s is not a whole number of {unit} >= 1")
    return n


def fti_slots(n_levels: int) -> list[int]:
    """FTI level (0-based) of each of ``n_levels`` levels: the bottom ones L1, L2, L3 in
    order, the top one L4 (a single level is L4: it must survive every failure)."""
    if not 1 <= n_levels <= len(FTI_KEYS):
        raise InvalidValueError(
            f"FTI has 4 levels (ckpt_l1..ckpt_l4); the levels file describes {n_levels}"
        )
    return [*range(n_levels - 1), len(FTI_KEYS) - 1]


def fti_minutes(levels: Sequence[NativeLevel], slots: Sequence[int] | None = None) -> list[int]:
    """``ckpt_l1..ckpt_l4`` for ``levels`` (placed at ``slots``, default :func:`fti_slots`):
    whole minutes, 0 for a level never checkpointed and for FTI levels not used."""
    slots = fti_slots(len(levels)) if slots is None else slots
    out = [0] * len(FTI_KEYS)
    for lv, slot in zip(levels, slots, strict=True):
        if math.isfinite(lv.interval):
            out[slot] = _whole(lv.interval, 60.0, f"FTI interval of {lv.name}")
    return out


def _render_fti(levels: Sequence[NativeLevel], slots: Sequence[int] | None) -> str:
    minutes = fti_minutes(levels, slots)
    slots = fti_slots(len(levels)) if slots is None else slots
    names = {slot: lv.name for lv, slot in zip(levels, slots, strict=True)}
    lines = [
        "# FTI config.fti keys. ckpt_lN: minutes of application time between checkpoints",
        "# of level N taken by FTI_Snapshot (0 disables the level; when several are due",
        "# at once FTI takes the highest). Merge into [basic] of your config.fti, or give",
        "# it with --fti-config to have only these keys updated.",
        "[basic]",
    ]
    for i, key in enumerate(FTI_KEYS):
        lines.append(f"# {names.get(i, 'not used')}")
        lines.append(f"{key} = {minutes[i]}")
    return "\n".join(lines) + "\n"


# --- reading and updating an existing config.fti (iniparser syntax) ---------------------

_SECTION = re.compile(r"\s*\[([^\]]*)\]\s*(?:[;#].*)?$")
_KEY = re.compile(r"\s*([^=;#\s][^=]*?)\s*=[ \t]*")


@dataclass(frozen=True)
class _Value:
    line: int  # 0-based
    start: int  # offsets of the value in the line, comments and spaces excluded
    end: int
    text: str


def _value_span(line: str, start: int) -> tuple[int, int]:
    """Where the value of a ``key = value`` line is: quoted, or up to ``;``/``#`` (iniparser
    ends an unquoted value there), trailing blanks left out."""
    rest = line[start:].rstrip("\r\n")
    if rest[:1] in ('"', "'") and rest.find(rest[0], 1) > 0:
        return start, start + rest.find(rest[0], 1) + 1
    cut = min((i for i in (rest.find(";"), rest.find("#")) if i >= 0), default=len(rest))
    return start, start + len(rest[:cut].rstrip())


def _basic_keys(text: str, where: str) -> dict[str, _Value]:
    """The ``ckpt_lN`` values of the ``[basic]`` section (names case-insensitive, as FTI's
    iniparser reads them); a line that is not a section, comment or ``key = value`` is an
    error, as it is for FTI."""
    section: str | None = None
    seen_basic = False
    found: dict[str, _Value] = {}
    for no, line in enumerate(text.splitlines(keepends=True)):
        body = line.strip()
        if not body or body[0] in ";#":
            continue
        sec = _SECTION.match(line)
        if sec:
            section = sec.group(1).strip().lower()
            seen_basic = seen_basic or section == "basic"
            continue
        key = _KEY.match(line)
        if not key:
            raise InvalidValueError(
                f"{where}: line {no + 1} is not a [section], a comment or key = value: "
                "not an FTI config file"
            )
        name = key.group(1).lower()
        if section != "basic" or name not in (*FTI_KEYS, "fast_forward"):
            continue
        if name in found:
            raise InvalidValueError(
                f"{where}: {name} is set twice in [basic] (lines {found[name].line + 1} and "
                f"{no + 1}): keep one"
            )
        start, end = _value_span(line, key.end())
        found[name] = _Value(no, start, end, line[start:end])
    if not seen_basic:
        raise InvalidValueError(f"{where}: no [basic] section: not an FTI config file")
    return found


def parse_fti(text: str, where: str) -> list[int]:
    """``ckpt_l1..ckpt_l4`` of a ``config.fti``: each must be there, a whole number of
    minutes >= 0 (0 disables the level)."""
    found = _basic_keys(text, where)
    out = []
    for key in FTI_KEYS:
        if key not in found:
            raise InvalidValueError(
                f"{where}: [basic] has no {key} (minutes between level-{key[-1]} checkpoints; "
                "0 disables the level)"
            )
        raw = found[key].text.strip("\"'").strip()
        if not raw.isascii() or not raw.isdigit():
            raise InvalidValueError(
                f"{where}: {key} = {found[key].text!r}: expected a whole number of minutes >= 0"
            )
        out.append(int(raw))
    forward = found.get("fast_forward")
    if forward is not None and forward.text.strip("\"'").strip() not in ("1", ""):
        raise InvalidValueError(
            f"{where}: fast_forward = {forward.text!r} divides FTI's intervals (a testing aid); "
            "greenckpt reads and writes them as real minutes: set fast_forward = 1"
        )
    return out


def update_fti(text: str, minutes: Sequence[int], where: str) -> str:
    """``text`` with only the values of ``ckpt_l1..ckpt_l4`` replaced; every other byte,
    comments and line endings included, stays as it was."""
    parse_fti(text, where)  # refuse to edit what is not a valid config.fti
    found = _basic_keys(text, where)
    lines = text.splitlines(keepends=True)
    for key, value in zip(FTI_KEYS, minutes, strict=True):
        v = found[key]
        line = lines[v.line]
        lines[v.line] = f"{line[: v.start]}{int(value)}{line[v.end :]}"
    return "".join(lines)


def fti_intervals(minutes: Sequence[int], n_levels: int, where: str) -> list[float]:
    """Per-level intervals (seconds, ``inf`` when disabled) that a ``config.fti`` gives the
    ``n_levels`` levels of a levels file, mapped by :func:`fti_slots`. Every one is ``inf``
    when all ``ckpt_lN`` are 0: FTI_Snapshot then takes no checkpoint, the usual config of
    an application that calls FTI_Checkpoint itself (:func:`checkpoints_itself`)."""
    slots = fti_slots(n_levels)
    for i, key in enumerate(FTI_KEYS):
        if i not in slots and minutes[i]:
            mapped = ", ".join(FTI_KEYS[s] for s in slots)
            raise InvalidValueError(
                f"{where}: {key} = {minutes[i]}, but the levels file's {n_levels} level(s) "
                f"map to {mapped}: set {key} = 0 or describe that level"
            )
    return [minutes[s] * 60.0 if minutes[s] else math.inf for s in slots]


def checkpoints_itself(minutes: Sequence[int]) -> bool:
    """Whether a ``config.fti``'s ``ckpt_l1..ckpt_l4`` are all 0: FTI_Snapshot never
    checkpoints, so the application calls FTI_Checkpoint itself and the file holds no
    schedule to evaluate (its keys can still be updated with one)."""
    return not any(minutes)


# --- SCR and VeloC -----------------------------------------------------------------------


def _ratio(lv: NativeLevel, base: NativeLevel, lib: str) -> int:
    r = round(lv.interval / base.interval)
    if r < 1 or abs(r * base.interval - lv.interval) > 1e-9 * lv.interval:
        raise InvalidValueError(
            f"{lib} takes a level every N-th checkpoint: {lv.name}'s interval "
            f"({lv.interval:g} s) is not a multiple of {base.name}'s ({base.interval:g} s)"
        )
    return r


def _every(n: int) -> str:
    return "every checkpoint" if n == 1 else f"one checkpoint in {n}"


def _render_scr(levels: Sequence[NativeLevel]) -> str:
    if len(levels) > len(_SCR_TYPES) + 1:
        raise InvalidValueError(
            f"SCR is written for up to 4 levels (SINGLE, PARTNER, RS, flush); the levels file "
            f"describes {len(levels)}"
        )
    base = levels[0]
    if not math.isfinite(base.interval):
        raise InvalidValueError(f"SCR needs the lowest level ({base.name}) to be checkpointed")
    seconds = _whole(base.interval, 1.0, f"SCR_CHECKPOINT_SECONDS for {base.name}")
    lines = [
        "# SCR configuration (SCR_CONF_FILE). SCR reads a variable of its environment before",
        "# this file: unset SCR_FLUSH, SCR_COPY_TYPE, SCR_CACHE_BYPASS and SCR_CHECKPOINT_*",
        "# in the job's environment, or they override these lines.",
        "# SCR_CHECKPOINT_SECONDS: SCR_Need_checkpoint answers 1 once this many",
        "# seconds have passed since the end of the last checkpoint.",
        f"# {base.name}: every {seconds} s of computation",
        f"SCR_CHECKPOINT_SECONDS={seconds}",
        "# SCR_CHECKPOINT_INTERVAL counts calls of SCR_Need_checkpoint, not seconds: not set",
        f"# here (to count iterations instead, set it to {seconds} s / your iteration time).",
    ]
    top, lower = levels[-1], levels[:-1]
    if lower:
        lines += [
            "# Cache levels: SCR takes, for checkpoint number k, the descriptor with the largest",
            "# INTERVAL dividing k. TYPE follows the levels' order; add STORE=/GROUP= for",
            "# your system. SCR bypasses its cache by default (SCR_CACHE_BYPASS=1: every",
            "# checkpoint straight to the prefix), so the cache levels need it off.",
            "SCR_CACHE_BYPASS=0",
            "SCR_COPY_TYPE=FILE",
        ]
        for i, lv in enumerate(lower):
            if not math.isfinite(lv.interval):
                lines.append(f"# {lv.name}: never checkpointed, no descriptor")
                continue
            lines.append(f"# {lv.name}: {_every(_ratio(lv, base, 'SCR'))}")
            lines.append(f"CKPT={i} INTERVAL={_ratio(lv, base, 'SCR')} TYPE={_SCR_TYPES[i]}")
    lines.append("# Top level: flush to the parallel file system every SCR_FLUSH-th checkpoint")
    lines.append("# (the cost given to greenckpt for it should include the cache write before it).")
    if math.isfinite(top.interval):
        lines.append(f"# {top.name}: {_every(_ratio(top, base, 'SCR'))}")
        lines.append(f"SCR_FLUSH={_ratio(top, base, 'SCR')}")
    else:
        lines.append(f"# {top.name}: never (0 disables periodic flushes)")
        lines.append("SCR_FLUSH=0")
    return "\n".join(lines) + "\n"


def _veloc_window(lv: NativeLevel, base: NativeLevel) -> int:
    """VeloC keeps a checkpoint for a level when at least ``*_interval`` wall-clock seconds
    have passed since the last one it kept: the middle of the window that keeps every m-th
    checkpoint, (m − ½)·(interval + checkpoint time), tolerates jitter either way."""
    if not math.isfinite(lv.interval):
        return -1
    m = _ratio(lv, base, "VeloC")
    return 0 if m == 1 else round((m - 0.5) * (base.interval + base.ckpt_time))


def _veloc_comment(lv: NativeLevel, base: NativeLevel) -> str:
    if not math.isfinite(lv.interval):
        return f"{lv.name}: never"
    return f"{lv.name}: {_every(_ratio(lv, base, 'VeloC'))}"


def _render_veloc(levels: Sequence[NativeLevel]) -> str:
    if len(levels) > 3:
        raise InvalidValueError(
            f"VeloC has 3 levels (scratch, erasure code, persistent); the levels file "
            f"describes {len(levels)}: describe VeloC's levels"
        )
    base = levels[0]
    if not math.isfinite(base.interval):
        raise InvalidValueError(f"VeloC needs the lowest level ({base.name}) to be checkpointed")
    seconds = _whole(base.interval, 1.0, f"checkpoint interval of {base.name}")
    ec = _veloc_window(levels[1], base) if len(levels) == 3 else -1
    persistent = _veloc_window(levels[-1], base)
    lines = [
        "# VeloC configuration (INI). VeloC has no checkpoint interval of its own: the",
        "# application decides when to call VELOC_Checkpoint (or _begin/_end). Call it after",
        f"# every {seconds} s of computation ({base.name}).",
        "# scratch (node-local) and persistent (parallel file system) are required: set them.",
        "# scratch = /node/local/dir",
        "# persistent = /parallel/fs/dir",
        "# ec_interval, persistent_interval: least wall-clock seconds between two erasure-coded",
        "# / persistent checkpoints, checked at each checkpoint (0: every one, -1: never).",
        "# Written as the middle of the window that keeps every m-th checkpoint:",
        f"# (m - 1/2) x ({seconds} s + {base.name}'s checkpoint time {base.ckpt_time:g} s).",
    ]
    if len(levels) == 3:
        lines.append(f"# {_veloc_comment(levels[1], base)}")
    lines.append(f"ec_interval = {ec}")
    lines.append(f"# {_veloc_comment(levels[-1], base)}")
    lines.append(f"persistent_interval = {persistent}")
    return "\n".join(lines) + "\n"


def render(
    fmt: Format,
    levels: Sequence[NativeLevel],
    header: Sequence[str] = (),
    *,
    fti_levels: Sequence[int] | None = None,
) -> str:
    """The configuration text of ``fmt`` for ``levels`` (lowest first), ``header`` lines
    first as comments. ``fti_levels``: FTI level (0-based) of each level, if not the default
    mapping (``greenckpt plan``'s single level)."""
    if not levels:
        raise InvalidValueError("give at least one level")
    if fmt == "fti":
        body = _render_fti(levels, fti_levels)
    elif fmt == "scr":
        body = _render_scr(levels)
    elif fmt == "veloc":
        body = _render_veloc(levels)
    else:
        raise InvalidValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    return "".join(f"# {line}\n" for line in header) + body
