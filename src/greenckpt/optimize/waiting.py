"""The power of the ranks that wait while others write or read, per profile point.

Why: a profile point's power was measured with its ``n`` I/O processes busy and every other
core idle. In a real phase with ``n`` I/O processes of the ``R`` ranks on the node, the other
``R − n`` ranks wait — politely in the checkpoint library (sleeping between tests) or in MPI's
busy-polling waits — and spinning ranks draw nearly a busy core's power each. So the phase's
power is ``W(f, n) = P_io(f, n) + (R − n) · w_wait(f)`` (docs/model.md, section 4), with
``w_wait`` the profile's power per waiting rank at the point's CPU setting and the run's wait
mode. Without it, fewer writers look free whenever the waiters spin.

Which entry a point uses: the one measured at its CPU setting and C-states in that mode; else
the one of that mode at the nearest fixed frequency (same C-states first) — said in the plan's
notes; else none, and the waiters are taken to cost no more than idle, also said.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from greenckpt.optimize.profile import (
    PowerSource,
    Profile,
    ProfileError,
    ProfilePoint,
    WaitingPower,
    WaitMode,
)
from greenckpt.optimize.setting import CpuSetting

__all__ = ["WaitingLookup", "WaitingUse", "no_waiting"]


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
    """Per-point waiting power of one profile, wait mode and ``R`` ranks per node (cached by
    CPU setting and C-states: a profile has many points per setting)."""

    def __init__(self, profile: Profile, mode: WaitMode, app_ranks: int) -> None:
        self.mode = mode
        self.app_ranks = app_ranks
        self._entries = tuple(w for w in profile.waiting if w.mode == mode)
        for w in self._entries:
            if not math.isfinite(w.power_per_rank):
                raise ProfileError(
                    f"the {mode} waiting power at {w.setting_label} is not a finite number "
                    f"({w.power_per_rank!r} W per rank): fix or remove the entry"
                )
        self._cache: dict[tuple[str, bool | None], tuple[float, PowerSource | None, str, bool]] = {}

    def use(self, point: ProfilePoint) -> WaitingUse:
        """What ``point``'s phase adds for its ``max(R − n, 0)`` waiting ranks."""
        ranks = max(self.app_ranks - point.processes, 0)
        key = (point.setting_key, point.cstates)
        found = self._cache.get(key)
        if found is None:
            found = self._per_rank(point)
            self._cache[key] = found
        per_rank, source, how, exact = found
        if ranks == 0:
            how = f"no rank waits ({point.processes} I/O processes of {self.app_ranks})"
        return WaitingUse(self.mode, ranks, per_rank, source, how, exact)

    def _per_rank(self, point: ProfilePoint) -> tuple[float, PowerSource | None, str, bool]:
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

    def _nearest(self, point: ProfilePoint) -> WaitingPower | None:
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
