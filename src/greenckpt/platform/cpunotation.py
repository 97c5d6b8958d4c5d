"""How CPU lists, frequencies and setting names are written in sysfs and in messages.

Why: the kernel prints CPU sets as ``0-3,8`` and frequencies in kHz, and an error naming a
frequency or a C-state must be one short line that tells two table entries apart; cpufreq,
cpuidle and the perf meter share these few parsers and formatters, defined once here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

from greenckpt.errors import InvalidValueError

__all__ = ["format_cpus", "format_hz", "name_choices", "parse_cpu_list"]

_CPU_TOKEN_RE = re.compile(r"(\d+)(?:-(\d+))?")
_FULL_LIST_MAX = 6
"""Up to this many valid names, an error lists them all; beyond, only the closest ones."""


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """CPU numbers from ``"0 1 2 3"`` (affected_cpus) or ``"0-3,8"`` (cpulist format).

    Raises ValueError on anything else (a word, a negative number, a reversed range ``3-1``).
    """
    cpus: list[int] = []
    for token in re.split(r"[\s,]+", text.strip()):
        if not token:
            continue
        m = _CPU_TOKEN_RE.fullmatch(token)
        if m is None:
            raise InvalidValueError(f"not a CPU number or range: {token!r}")
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else int(m.group(2))
        if hi < lo:
            raise InvalidValueError(f"reversed CPU range: {token!r}")
        cpus.extend(range(lo, hi + 1))
    return tuple(sorted(set(cpus)))


def name_choices(wanted: str, valid: Sequence[str]) -> str:
    """What to suggest for a name that is not ``valid``: ``"available a, b, c"`` when there are
    few (at most 6), else the closest names (``"nearest C6, C1E (of 12)"``), so an error stays
    one short line on a node with many options."""
    if len(valid) <= _FULL_LIST_MAX:
        return "available " + (", ".join(valid) if valid else "none")
    close = difflib.get_close_matches(wanted, list(valid), n=3, cutoff=0.5)
    if close:
        return f"nearest {', '.join(close)} (of {len(valid)})"
    shown = ", ".join(valid[:_FULL_LIST_MAX])
    return f"none close; {len(valid)} available: {shown}, ..."


def format_cpus(cpus: Iterable[int]) -> str:
    """``(0, 1, 2, 3, 8)`` as ``"0-3,8"``: short, and the format the kernel itself prints."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts) if parts else "none"


def format_hz(hz: float) -> str:
    """Hertz as GHz with at least two decimals and as many as needed to be exact to the kHz.

    ``2.05e9`` gives ``"2.05 GHz"``, ``2.1e9`` gives ``"2.10 GHz"``, ``2_050_500_000`` gives
    ``"2.0505 GHz"``. Unlike :func:`greenckpt.units.format_frequency` (three significant digits),
    two different table entries never print the same, which matters in "nearest" error messages.
    """
    text = f"{hz / 1e9:.9f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')} GHz"
