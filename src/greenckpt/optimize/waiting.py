"""The power of the ranks that wait while others write or read: the profile's entries and
their use per profile point.

Why: a profile point's power was measured with its ``n`` I/O processes busy and every other
core idle. In a real phase with ``n`` I/O processes of the ``R`` ranks on the node, the other
``R − n`` ranks wait — politely in the checkpoint library (sleeping between tests) or in MPI's
busy-polling waits — and spinning ranks draw nearly a busy core's power each. So the phase's
power is ``W(f, n) = P_io(f, n) + (R − n) · w_wait(f)`` (docs/model.md, section 4), with
``w_wait`` the profile's power per waiting rank (:class:`WaitingPower`, its ``waiting`` list:
docs/formats.md) at the point's CPU setting and the run's wait mode. Without it, fewer writers
look free whenever the waiters spin.

Which entry a point uses: the one measured at its CPU setting and C-states in that mode; else
the one of that mode at the nearest fixed frequency (same C-states first) — said in the plan's
notes; else none, and the waiters are taken to cost no more than idle, also said.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, Protocol, cast

import numpy as np

from greenckpt.optimize.fields import (
    POWER_SOURCES,
    PowerSource,
    ProfileError,
    choice,
    finite,
    flag,
    number,
    optional_number,
    setting_pair,
)
from greenckpt.optimize.setting import CpuSetting

__all__ = [
    "WAIT_MODES",
    "WaitMode",
    "WaitingLookup",
    "WaitingPoint",
    "WaitingPower",
    "WaitingUse",
    "check_unique_waiting",
    "no_waiting",
    "waiting_from_json",
    "waiting_key",
    "waiting_to_json",
]

WaitMode = Literal["polite", "spin"]
WAIT_MODES: tuple[WaitMode, ...] = ("polite", "spin")
"""How ranks that do no I/O wait during a phase: the checkpoint library's polite waits
(sleeping between tests) or MPI's own busy-polling waits (``GREENCKPT_WAIT=spin``)."""


class WaitingPoint(Protocol):
    """What a lookup reads of a profile point
    (:class:`~greenckpt.optimize.profile_data.ProfilePoint` is one): its CPU setting, C-states
    and I/O processes. A protocol, so that this module, which the profile format imports,
    never imports it back."""

    @property
    def frequency(self) -> float | None: ...
    @property
    def governor(self) -> str | None: ...
    @property
    def cstates(self) -> bool | None: ...
    @property
    def processes(self) -> int: ...
    @property
    def setting(self) -> CpuSetting: ...
    @property
    def setting_key(self) -> str: ...


@dataclass(frozen=True)
class WaitingPower:
    """What one rank that waits during a phase adds to the node's power, at one CPU setting.

    Why the profile records it: a point's ``power`` was measured with its I/O processes busy
    and every other core idle, but during a real phase with ``n`` writers of ``R`` ranks the
    other ``R − n`` ranks wait — politely (sleeping between tests) or spinning in MPI. The
    profiler runs ``ranks`` processes that wait exactly as the library waits and records
    ``(node power with them − idle power at the same setting) / ranks``; the planner adds
    ``(R − n) × power_per_rank`` to the point's power (docs/model.md, section 4).

    ``power_per_rank`` may be slightly negative: polite waiters cost about nothing, and the
    difference of two measured figures is then noise around zero (``power_spread`` says how
    much). ``cpu_fraction`` is the CPU time the waiters used per waiting rank as a fraction
    of one core (from the OS's accounting of the waiter processes).
    """

    mode: WaitMode
    ranks: int
    power_per_rank: float
    power_source: PowerSource
    frequency: float | None = None
    governor: str | None = None
    cstates: bool | None = None
    power_spread: float | None = None
    """Spread (max − min) of the per-rank figure over the window's sub-windows."""
    cpu_fraction: float | None = None
    seconds: float | None = None
    """Length of the metered window."""
    idle_power: float | None = None
    """Node idle power at the same setting, subtracted from the window's power."""
    reliable: bool = True

    def __post_init__(self) -> None:
        _ = self.setting  # refuses both a frequency and a governor, or an unknown governor

    @cached_property
    def setting(self) -> CpuSetting:
        """The CPU setting the waiters were measured under."""
        return CpuSetting.of(self.frequency, self.governor)

    @property
    def setting_key(self) -> str:
        """Machine-readable CPU setting, as :attr:`ProfilePoint.setting_key`."""
        return self.setting.key

    @property
    def setting_label(self) -> str:
        """Human label of the CPU setting, as :attr:`ProfilePoint.setting_label`."""
        return self.setting.label


def waiting_key(w: WaitingPower) -> tuple[str, bool | None, str]:
    """What identifies a waiting entry: ``(setting_key, cstates, mode)``."""
    return (w.setting_key, w.cstates, w.mode)


def _entry_from_json(obj: Any, path: str) -> WaitingPower:
    if not isinstance(obj, dict):
        raise ProfileError(f"{path}: expected an object, got {type(obj).__name__}")
    frequency, governor = setting_pair(obj, path)
    cstates = obj.get("cstates")
    if cstates is not None and not isinstance(cstates, bool):
        raise ProfileError(f"{path}.cstates: expected true, false or null, got {cstates!r}")
    ranks = obj.get("ranks")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ProfileError(f"{path}.ranks: expected an integer >= 1 (waiting ranks), got {ranks!r}")
    return WaitingPower(
        mode=cast(WaitMode, choice(obj, "mode", path, WAIT_MODES)),
        ranks=ranks,
        power_per_rank=finite(obj, "power_per_rank_W", path),
        power_source=cast(PowerSource, choice(obj, "power_source", path, POWER_SOURCES)),
        frequency=frequency,
        governor=governor,
        cstates=cstates,
        power_spread=optional_number(obj, "power_spread_W", path),
        cpu_fraction=optional_number(obj, "cpu_fraction", path),
        seconds=None if obj.get("seconds") is None else number(obj, "seconds", path),
        idle_power=None if obj.get("idle_power_W") is None else number(obj, "idle_power_W", path),
        reliable=flag(obj, "reliable", path, default=True),
    )


def check_unique_waiting(entries: Sequence[WaitingPower], where: str = "profile.waiting") -> None:
    """Raise :class:`ProfileError` when two waiting entries describe the same setting and mode
    (the planner could not tell which to add)."""
    first: dict[tuple[str, bool | None, str], int] = {}
    for i, w in enumerate(entries):
        j = first.setdefault(waiting_key(w), i)
        if j != i:
            raise ProfileError(
                f"{where}[{j}] and {where}[{i}] both give the {w.mode} waiting power at "
                f"{w.setting_label}{_cstates_words(w.cstates)}: keep one of them"
            )


def _cstates_words(cstates: bool | None) -> str:
    return "" if cstates is None else f", C-states {'on' if cstates else 'off'}"


def waiting_from_json(data: Mapping[str, Any], synthetic: bool) -> tuple[WaitingPower, ...]:
    """The optional ``waiting`` list (absent in files written before it existed)."""
    raw = data.get("waiting")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProfileError("profile.waiting: expected a list of waiting-power entries")
    entries = tuple(_entry_from_json(w, f"profile.waiting[{i}]") for i, w in enumerate(raw))
    check_unique_waiting(entries)
    for i, w in enumerate(entries):
        if w.power_source == "synthetic" and not synthetic:
            raise ProfileError(
                f"profile.waiting[{i}].power_source: 'synthetic' needs the profile to say "
                "synthetic: true"
            )
    return entries


def waiting_to_json(w: WaitingPower) -> dict[str, Any]:
    """The JSON object of one waiting entry (the inverse of the loader)."""
    out: dict[str, Any] = {
        "frequency_hz": w.frequency,
        "governor": w.governor,
        "cstates": w.cstates,
        "mode": w.mode,
        "ranks": w.ranks,
        "power_per_rank_W": w.power_per_rank,
        "power_source": w.power_source,
    }
    for key, value in (
        ("power_spread_W", w.power_spread),
        ("cpu_fraction", w.cpu_fraction),
        ("seconds", w.seconds),
        ("idle_power_W", w.idle_power),
    ):
        if value is not None:
            out[key] = value
    if not w.reliable:
        out["reliable"] = False
    return out


@dataclass(frozen=True)
class WaitingUse:
    """The waiting power added to one point's power in a plan, and where it came from."""

    mode: WaitMode
    ranks: int
    """Ranks waiting during the phase: ``max(R − n, 0)``."""
    per_rank: float
    """Watts added per waiting rank (never negative: a negative measurement is noise)."""
    source: PowerSource | None
    """Where ``per_rank`` came from; ``None`` when the profile has no figure (assumed idle)."""
    how: str
    """In words: the entry used (exact, nearest frequency) or why none."""
    exact: bool = True
    """False when the figure is another setting's (nearest frequency) or missing."""

    @property
    def power(self) -> float:
        """Watts added to the phase: ``ranks × per_rank``."""
        return self.ranks * self.per_rank


def no_waiting(mode: WaitMode = "polite") -> WaitingUse:
    """Nothing added: no rank waits (the default of a choice built by hand)."""
    return WaitingUse(mode, 0, 0.0, None, "no rank waits", exact=True)


def _at(setting: CpuSetting, cstates: bool | None) -> str:
    """A CPU setting in words: ``2.10 GHz``, ``the ondemand governor``, ``the frequency as
    found``, with the C-states when they were set."""
    if setting.kind == "frequency":
        where = setting.label
    elif setting.kind == "governor":
        where = f"the {setting.governor} governor"
    else:
        where = "the frequency as found"
    return where if cstates is None else f"{where}, C-states {'on' if cstates else 'off'}"


class WaitingLookup:
    """Per-point waiting power from a profile's ``waiting`` entries, for one wait mode and
    ``R`` ranks per node (cached by CPU setting and C-states: a profile has many points per
    setting)."""

    def __init__(self, entries: Sequence[WaitingPower], mode: WaitMode, app_ranks: int) -> None:
        self.mode = mode
        self.app_ranks = app_ranks
        self._entries = tuple(w for w in entries if w.mode == mode)
        for w in self._entries:
            if not math.isfinite(w.power_per_rank):
                raise ProfileError(
                    f"the {mode} waiting power at {w.setting_label} is not a finite number "
                    f"({w.power_per_rank!r} W per rank): fix or remove the entry"
                )
        self._cache: dict[tuple[str, bool | None], tuple[float, PowerSource | None, str, bool]] = {}

    def extra_power(self, points: Sequence[WaitingPoint]) -> np.ndarray:
        """Watts each point's waiting ranks add (``max(R − n, 0) × w``), as :meth:`use` gives
        them, without building a :class:`WaitingUse` per point (a profile may have 40k)."""
        if not self._entries:
            return np.zeros(len(points))
        per_rank: dict[tuple[float | None, str | None, bool | None], float] = {}
        watts = np.empty(len(points))
        ranks = np.empty(len(points))
        for i, p in enumerate(points):
            key = (p.frequency, p.governor, p.cstates)
            w = per_rank.get(key)
            if w is None:
                w = per_rank[key] = self._lookup(p)[0]
            watts[i] = w
            ranks[i] = max(self.app_ranks - p.processes, 0)
        return ranks * watts

    def use(self, point: WaitingPoint) -> WaitingUse:
        """What ``point``'s phase adds for its ``max(R − n, 0)`` waiting ranks."""
        ranks = max(self.app_ranks - point.processes, 0)
        per_rank, source, how, exact = self._lookup(point)
        if ranks == 0:
            how = f"no rank waits ({point.processes} I/O processes of {self.app_ranks})"
        return WaitingUse(self.mode, ranks, per_rank, source, how, exact)

    def _lookup(self, point: WaitingPoint) -> tuple[float, PowerSource | None, str, bool]:
        """The point's per-rank figure, its source, how it was found and whether exactly
        (cached by CPU setting and C-states)."""
        key = (point.setting_key, point.cstates)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._per_rank(point)
        return found

    def _per_rank(self, point: WaitingPoint) -> tuple[float, PowerSource | None, str, bool]:
        where = _at(point.setting, point.cstates)
        for w in self._entries:
            if w.setting_key == point.setting_key and w.cstates == point.cstates:
                how = f"{w.power_source} at {where} with {w.ranks} waiters"
                return (*_figure(w, how), True)
        near = self._nearest(point)
        if near is not None:
            how = (
                f"{near.power_source} at {_at(near.setting, near.cstates)} with {near.ranks} "
                f"waiters, the nearest frequency with a {self.mode} entry (none at {where})"
            )
            return (*_figure(near, how), False)
        return (
            0.0,
            None,
            f"not measured at {where} for {self.mode} waits: assumed to cost no more than idle",
            False,
        )

    def _nearest(self, point: WaitingPoint) -> WaitingPower | None:
        """The mode's fixed-frequency entry nearest the point's frequency, same C-states first
        (None for a point without a fixed frequency, or a profile without such entries)."""
        if point.frequency is None:
            return None
        fixed = [(i, w) for i, w in enumerate(self._entries) if w.frequency is not None]
        if not fixed:
            return None
        f = point.frequency

        def distance(iw: tuple[int, WaitingPower]) -> tuple[bool, float, int]:
            i, w = iw
            return (w.cstates != point.cstates, abs((w.frequency or 0.0) - f), i)

        return min(fixed, key=distance)[1]


def _figure(w: WaitingPower, how: str) -> tuple[float, PowerSource, str]:
    """The entry's per-rank watts (a negative measurement taken as 0 W, and said so)."""
    if w.power_per_rank < 0:
        return (
            0.0,
            w.power_source,
            f"{how}; its {w.power_per_rank:+.3g} W per rank is noise around idle, taken as 0 W",
        )
    return w.power_per_rank, w.power_source, how
