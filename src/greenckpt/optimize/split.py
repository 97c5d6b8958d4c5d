"""The per-core split: the waiting ranks' cores at a frequency of their own during a phase.

Why: a phase's power is ``W = P_io(point) + (R − n) · w_wait`` (docs/model.md, section 4). On
a node whose cpufreq policies are per core, the cores of the ``R − n`` waiting ranks can run at
another fixed frequency than the writers' (Power-Check's capping of the cores that only wait),
so ``w_wait`` is the waiting power at the *waiters'* setting, chosen independently of the
point's. The point's throughput was measured with the other cores idle, so in the model the
waiters' setting changes only their own power: for each point the best waiters' setting is
the one with the least measured power per waiting rank, found once per point, before the
power cap, the pruning and the pair search see the phase's power (so they stay exact).

What is offered: only when the profile says the node had per-core control (its ``levers``
metadata: ``"per-core split": true``), only for points at a fixed frequency (the writers'
cores need one), and only waiting entries *measured* at a fixed frequency with the point's
C-states in the run's wait mode (a split never rests on a borrowed or missing figure). A split
is used only when it is strictly cheaper than the waiters at the point's own setting.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from greenckpt.optimize.lever_fields import PER_CORE_SPLIT
from greenckpt.optimize.profile_data import Profile
from greenckpt.optimize.setting import CpuSetting
from greenckpt.optimize.waiting import (
    WaitingLookup,
    WaitingPoint,
    WaitingPower,
    WaitingUse,
    WaitMode,
)

__all__ = ["PhaseWaiting", "split_notes", "split_offered"]


class PhaseWaiting:
    """Waiting power per point with or without the per-core split (``split``)."""

    def __init__(
        self,
        entries: Sequence[WaitingPower],
        mode: WaitMode,
        app_ranks: int,
        *,
        split: bool,
    ) -> None:
        self.lookup = WaitingLookup(entries, mode, app_ranks)
        self.split = split
        self.app_ranks = app_ranks
        self._fixed = tuple(w for w in entries if w.mode == mode and w.frequency is not None)
        self._best: dict[bool | None, WaitingPower | None] = {}

    def _cheapest(self, cstates: bool | None) -> WaitingPower | None:
        """The fixed-frequency entry of the mode with the least power per rank at these
        C-states (first in file order on a tie); None when there is none."""
        if cstates not in self._best:
            same = [w for w in self._fixed if w.cstates == cstates]
            self._best[cstates] = (
                min(same, key=lambda w: max(w.power_per_rank, 0.0)) if same else None
            )
        return self._best[cstates]

    def _split_for(self, point: WaitingPoint, base: float) -> WaitingPower | None:
        """The waiters' entry to split to, or None when no split is cheaper than ``base``
        (the waiting power at the point's own setting)."""
        ranks = max(self.app_ranks - point.processes, 0)
        if not self.split or ranks == 0 or point.frequency is None:
            return None
        best = self._cheapest(point.cstates)
        if best is None or best.frequency == point.frequency:
            return None
        return best if ranks * max(best.power_per_rank, 0.0) < base else None

    def extra_power(self, points: Sequence[WaitingPoint]) -> np.ndarray:
        """Watts each point's waiting ranks add, with the split where it is cheaper (as
        :meth:`use` gives them)."""
        base = self.lookup.extra_power(points)
        if not self.split:
            return base
        out = base.copy()
        for i, p in enumerate(points):
            best = self._split_for(p, float(base[i]))
            if best is not None:
                out[i] = max(self.app_ranks - p.processes, 0) * max(best.power_per_rank, 0.0)
        return out

    def use(self, point: WaitingPoint) -> tuple[WaitingUse, CpuSetting | None]:
        """What the point's phase adds for its waiting ranks, and the waiters' own setting
        when the split is used (None: the waiters run at the point's setting)."""
        plain = self.lookup.use(point)
        best = self._split_for(point, plain.power)
        if best is None:
            return plain, None
        per_rank = max(best.power_per_rank, 0.0)
        how = (
            f"{best.power_source} at {best.setting_label} with {best.ranks} waiters: per-core "
            f"split, the waiting ranks' cores at {best.setting_label} while the I/O processes "
            f"run at {point.setting.label}"
        )
        use = WaitingUse(plain.mode, plain.ranks, per_rank, best.power_source, how, exact=True)
        return use, best.setting


def split_offered(profile: Profile) -> bool:
    """Whether the planner may give the waiting ranks' cores their own frequency: only when
    the profile says the node had per-core control."""
    return profile.levers.get(PER_CORE_SPLIT) is True


def split_notes(profile: Profile, ranks_wait: bool, split: bool) -> tuple[str, ...]:
    """Why the waiters' own frequency was not searched, when it could have mattered: some
    point leaves ranks waiting (``ranks_wait``) and the profile measured their power."""
    if split or not ranks_wait or not profile.waiting:
        return ()
    if PER_CORE_SPLIT in profile.levers:
        why = "the node had no per-core frequency control (profile levers: per-core split false)"
    else:
        why = "the profile does not record whether the node had per-core frequency control"
    return (f"per-core split not searched: {why}",)
