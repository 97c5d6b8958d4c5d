"""Prune profile points no plan can choose, so the planner pairs only what can win.

For a fixed interval the model's EPE grows with the checkpoint's time and power (every term of
``J`` does), and the expected time grows with the checkpoint's time; the same holds for the
restart. So a point beaten or matched by another of the same operation and codec (a codec is
what decides which points pair) in both throughput and power can only give pairs that are no
better at any interval, under any time bound: it is never the one chosen. Of points with the
same throughput and power the first in file order is kept, which is the one the exhaustive
search picks on a tie (it takes the first pair, writes before reads, in file order). The power
compared is the phase's — the point's plus its waiting ranks' (:mod:`greenckpt.optimize.waiting`)
— since that is what the model charges; it depends on the point's process count and CPU
setting, so it must be added before pruning, never after. docs/model.md ("Why pruning the
planner's points is exact") has the argument in full.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from greenckpt.optimize.profile_data import ProfilePoint


def _front_mask(throughput: np.ndarray, power: np.ndarray) -> np.ndarray:
    """True where no other point has at least the throughput and at most the power (of equal
    points, only the first is True)."""
    index = np.arange(throughput.size)
    order = np.lexsort((index, power, -throughput))  # fastest first, then cheapest, then first
    p_sorted = power[order]
    before = np.concatenate(([np.inf], np.minimum.accumulate(p_sorted)[:-1]))
    mask = np.zeros(throughput.size, dtype=bool)
    mask[order[p_sorted < before]] = True
    return mask


def nondominated_index(
    points: Sequence[ProfilePoint], powers: Sequence[float] | np.ndarray | None = None
) -> np.ndarray:
    """Indices (ascending) of the points of ``points`` (one operation) that no other point of
    the same codec matches or beats in both throughput and power. ``powers``: the power to
    compare for each point (default each point's own; the planner gives the phase's)."""
    power = (
        np.array([p.power for p in points], dtype=np.float64)
        if powers is None
        else np.asarray(powers, dtype=np.float64)
    )
    groups: dict[str | None, list[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault(p.codec, []).append(i)
    keep = np.zeros(len(points), dtype=bool)
    for idx in groups.values():
        at = np.array(idx, dtype=np.int64)
        thr = np.array([points[i].throughput for i in idx], dtype=np.float64)
        keep[at[_front_mask(thr, power[at])]] = True
    return np.flatnonzero(keep)


def nondominated(
    points: Sequence[ProfilePoint], powers: Sequence[float] | np.ndarray | None = None
) -> tuple[ProfilePoint, ...]:
    """The points :func:`nondominated_index` keeps, in their original order."""
    return tuple(points[i] for i in nondominated_index(points, powers))
