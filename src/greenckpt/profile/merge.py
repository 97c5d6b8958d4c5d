"""Profiles of several nodes: compared, then merged into one profile for the whole machine.

Why: on a cluster the same sweep is run on several nodes at once (one profile per node). A plan
for the job needs one figure per operating point, and the median across nodes is that figure:
it ignores one odd node instead of averaging it in. But a median hides *why* a node is odd, so
:func:`compare_profiles` comes first — it flags the nodes off the median by more than a
threshold (a degraded disk, a different BIOS power setting, a noisy neighbour).

Merging refuses what cannot be combined rather than guessing: different storage targets, power
figures over different power domains or from different meters, sweeps of different points.
How each field of a merged point is combined is in docs/design/profiler.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from greenckpt.optimize.lever_fields import LEVER_JSON, lever_labels
from greenckpt.optimize.profile_data import (
    PowerSource,
    Profile,
    ProfileError,
    ProfilePoint,
    cell_key,
)
from greenckpt.optimize.waiting import WaitingPower, waiting_key
from greenckpt.units import format_size

__all__ = [
    "COMPARISON_COLUMNS",
    "DEFAULT_THRESHOLD",
    "Comparison",
    "NodeFigures",
    "NodeSummary",
    "PointComparison",
    "PointKey",
    "compare_profiles",
    "describe_point",
    "merge_profiles",
    "node_names",
    "point_key",
]

PointKey = tuple[Any, ...]
"""A point's cell key (:func:`greenckpt.optimize.profile_data.cell_key`: levers included)."""
"""``(op, setting_key, processes, codec, cstates, size, block_size, layout)``."""

DEFAULT_THRESHOLD = 0.10
"""A node is flagged at a point when its figure is more than 10 % off the nodes' median."""

MERGE_TOOL = "greenckpt merge"


def point_key(p: ProfilePoint) -> PointKey:
    """What identifies a point across nodes' profiles of the same sweep: its cell, the levers
    beyond the core clock included (an uncore cell and its as-found twin are two points)."""
    return cell_key(p)


def describe_point(p: ProfilePoint) -> str:
    """Short human description of a point's key, e.g. ``write 2.10 GHz n=4 S=256 MiB``."""
    parts = [p.op, p.setting_label, f"n={p.processes}"]
    if p.codec is not None:
        parts.append(f"codec={p.codec}")
    if p.cstates is not None:
        parts.append(f"cstates={'on' if p.cstates else 'off'}")
    if p.size is not None:
        parts.append(f"S={format_size(p.size)}")
    if p.block_size is not None:
        parts.append(f"block={format_size(p.block_size)}")
    if p.layout is not None:
        parts.append(p.layout)
    parts.extend(lever_labels(p))
    return " ".join(parts)


def node_names(profiles: Sequence[Profile], names: Sequence[str] | None = None) -> list[str]:
    """The nodes' names: ``names`` if given, else each machine's ``hostname``, else ``node<i>``.

    Raises :class:`ProfileError` when the count does not match or a name repeats (the same
    profile given twice would count twice in every median).
    """
    if names is None:
        chosen = []
        for i, profile in enumerate(profiles):
            host = profile.machine.get("hostname")
            chosen.append(host if isinstance(host, str) and host else f"node{i}")
    else:
        chosen = list(names)
        if len(chosen) != len(profiles):
            raise ProfileError(f"got {len(chosen)} names for {len(profiles)} profiles")
        if not all(isinstance(n, str) and n for n in chosen):
            raise ProfileError("node names must be non-empty strings")
    seen: set[str] = set()
    for name in chosen:
        if name in seen:
            raise ProfileError(
                f"node name {name!r} appears twice (the same profile given twice?); "
                "give each profile a distinct name"
            )
        seen.add(name)
    return chosen


def _indexed(profile: Profile, name: str) -> dict[PointKey, ProfilePoint]:
    by_key: dict[PointKey, ProfilePoint] = {}
    for p in profile.points:
        key = point_key(p)
        if key in by_key:
            raise ProfileError(
                f"{name} has two points {describe_point(p)}: cannot tell which one to use"
            )
        by_key[key] = p
    return by_key


def _combined_source(sources: Sequence[PowerSource]) -> PowerSource:
    if "synthetic" in sources:
        return "synthetic"
    if "estimated" in sources:
        return "estimated"
    return "measured"


def _common_fields(maps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The entries every mapping has with the same value, in the first mapping's order."""
    first = maps[0]
    return {k: v for k, v in first.items() if all(k in m and m[k] == v for m in maps[1:])}


def _check_compatible(profiles: Sequence[Profile], names: Sequence[str]) -> None:
    first, name0 = profiles[0], names[0]
    key0 = first.storage.get("key")
    for profile, name in zip(profiles[1:], names[1:], strict=True):
        key = profile.storage.get("key")
        if key != key0:
            raise ProfileError(
                f"storage keys differ: {name0} has {key0!r}, {name} has {key!r} "
                "(merge profiles of the same storage target only)"
            )
    for profile, name in zip(profiles[1:], names[1:], strict=True):
        if sorted(profile.power_domains) != sorted(first.power_domains):
            raise ProfileError(
                f"power domains differ: {name0} has {list(first.power_domains)}, {name} has "
                f"{list(profile.power_domains)} (powers over different domains do not combine)"
            )
        if sorted(profile.meters) != sorted(first.meters):
            raise ProfileError(
                f"power sources differ: {name0} used meters {list(first.meters)}, {name} used "
                f"{list(profile.meters)} (powers from different meters do not combine)"
            )


def _check_same_points(
    indexed: Sequence[dict[PointKey, ProfilePoint]], names: Sequence[str]
) -> None:
    for i, points in enumerate(indexed):
        for j, other in enumerate(indexed):
            if i == j:
                continue
            for key, p in other.items():
                if key not in points:
                    raise ProfileError(
                        f"{names[i]} has no point {describe_point(p)} (measured on "
                        f"{names[j]}): every node must have measured the same sweep"
                    )


def _merge_point(points: Sequence[ProfilePoint]) -> ProfilePoint:
    first = points[0]
    throughputs = [p.throughput for p in points]
    powers = [p.power for p in points]
    methods = sorted({p.read_method for p in points if p.read_method is not None})
    ratios = [p.compression_ratio for p in points if p.compression_ratio is not None]
    kinds = sorted({p.data for p in points if p.data is not None})
    return ProfilePoint(
        op=first.op,
        processes=first.processes,
        throughput=statistics.median(throughputs),
        power=statistics.median(powers),
        power_source=_combined_source([p.power_source for p in points]),
        frequency=first.frequency,
        governor=first.governor,
        codec=first.codec,
        cstates=first.cstates,
        repetitions=sum(p.repetitions for p in points),
        throughput_spread=max(throughputs) - min(throughputs),
        power_spread=max(powers) - min(powers),
        size=first.size,
        block_size=first.block_size,
        layout=first.layout,
        read_method="+".join(methods) if methods else None,
        reliable=all(p.reliable for p in points),
        runs=tuple(run for p in points for run in p.runs),
        data="+".join(kinds) if kinds else None,
        compression_ratio=statistics.median(ratios) if ratios else None,
        **{attr: getattr(first, attr) for attr, _, _ in LEVER_JSON},  # part of the key
    )


def _merge_idle(
    profiles: Sequence[Profile],
) -> tuple[float | None, PowerSource | None, float | None]:
    idles = [(p.idle_power, p.idle_power_source) for p in profiles]
    values = [v for v, _ in idles if v is not None]
    sources = [s for _, s in idles if s is not None]
    if len(values) != len(profiles) or len(sources) != len(profiles):
        return None, None, None
    return statistics.median(values), _combined_source(sources), max(values) - min(values)


def _merge_waiting(profiles: Sequence[Profile]) -> tuple[WaitingPower, ...]:
    """The waiting entries every node has, each merged like a point: the medians across nodes
    (per-rank power, CPU fraction, idle power), ``power_spread`` the spread *between nodes*,
    ``ranks`` the fewest any node used. An entry some node lacks is left out, so a profile
    made before waiting power was measured merges with its entries dropped."""
    by_node = [{waiting_key(w): w for w in p.waiting} for p in profiles]
    out = []
    for key, first in by_node[0].items():
        group = [entries[key] for entries in by_node if key in entries]
        if len(group) < len(profiles):
            continue
        per_rank = [w.power_per_rank for w in group]
        fractions = [w.cpu_fraction for w in group if w.cpu_fraction is not None]
        idles = [w.idle_power for w in group if w.idle_power is not None]
        seconds = [w.seconds for w in group if w.seconds is not None]
        out.append(
            WaitingPower(
                mode=first.mode,
                ranks=min(w.ranks for w in group),
                power_per_rank=statistics.median(per_rank),
                power_source=_combined_source([w.power_source for w in group]),
                frequency=first.frequency,
                governor=first.governor,
                cstates=first.cstates,
                power_spread=max(per_rank) - min(per_rank),
                cpu_fraction=statistics.median(fractions) if fractions else None,
                seconds=statistics.median(seconds) if seconds else None,
                idle_power=statistics.median(idles) if idles else None,
                reliable=all(w.reliable for w in group),
            )
        )
    return tuple(out)


def merge_profiles(profiles: Sequence[Profile], names: Sequence[str] | None = None) -> Profile:
    """One profile from several nodes' profiles of the same sweep (see the module docstring).

    ``names`` label the nodes (default: each machine's ``hostname``, else ``node<i>``). Raises
    :class:`ProfileError` (one line) with fewer than two profiles, different storage keys,
    different power domains or meters, or a point some node lacks.
    """
    if len(profiles) < 2:
        raise ProfileError(f"merging needs at least 2 profiles, got {len(profiles)}")
    labels = node_names(profiles, names)
    _check_compatible(profiles, labels)
    indexed = [_indexed(p, name) for p, name in zip(profiles, labels, strict=True)]
    _check_same_points(indexed, labels)
    points = tuple(
        _merge_point([by_key[point_key(p)] for by_key in indexed]) for p in profiles[0].points
    )
    machine: dict[str, Any] = {"nodes": labels, "merged_from": len(profiles)}
    for k, v in _common_fields([p.machine for p in profiles]).items():
        machine.setdefault(k, v)
    idle, idle_source, idle_spread = _merge_idle(profiles)
    notes = {p.note for p in profiles}
    note = f"merged from {len(profiles)} nodes ({', '.join(labels)}): medians across nodes"
    if len(notes) == 1 and next(iter(notes)):
        note += f"; {next(iter(notes))}"
    sweeps = [p.sweep for p in profiles]
    tools = {p.tool for p in profiles}
    tool = next(iter(tools)) if len(tools) == 1 else ""
    return Profile(
        points=points,
        synthetic=any(p.synthetic for p in profiles),
        note=note,
        machine=machine,
        storage=_common_fields([p.storage for p in profiles]),
        meters=profiles[0].meters,
        idle_power=idle,
        idle_power_source=idle_source,
        idle_power_spread=idle_spread,
        power_domains=profiles[0].power_domains,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        tool=f"{MERGE_TOOL} of {tool}" if tool else MERGE_TOOL,
        status="complete" if all(p.status == "complete" for p in profiles) else "partial",
        sweep=dict(sweeps[0]) if all(s == sweeps[0] for s in sweeps) else {},
        waiting=_merge_waiting(profiles),
        levers=_merge_levers(profiles),
    )


def _merge_levers(profiles: Sequence[Profile]) -> dict[str, bool]:
    """A lever is present on the merged node only where every node had it: the plan applies
    one setting to every node of the job."""
    names = {name for p in profiles for name in p.levers}
    return {n: all(p.levers.get(n, False) for p in profiles) for n in sorted(names)}


# --------------------------------------------------------------------------- comparison

COMPARISON_COLUMNS: tuple[str, ...] = (
    "point",
    "node",
    "throughput MB/s",
    "× median",
    "power W",
    "× median",
    "flag",
)
"""Header of :meth:`Comparison.rows`."""


@dataclass(frozen=True)
class NodeFigures:
    """One node at one point: its figures and their ratio to the nodes' median."""

    node: str
    throughput: float
    power: float
    throughput_rel: float
    """``throughput / median throughput across nodes``."""
    power_rel: float
    """``power / median power across nodes``."""
    throughput_outlier: bool
    power_outlier: bool

    @property
    def outlier(self) -> bool:
        """Either figure is off the median by more than the threshold."""
        return self.throughput_outlier or self.power_outlier

    @property
    def flag(self) -> str:
        """``slow``/``fast`` and ``power-hungry``/``low power`` for flagged figures."""
        flags = []
        if self.throughput_outlier:
            flags.append("slow" if self.throughput_rel < 1 else "fast")
        if self.power_outlier:
            flags.append("power-hungry" if self.power_rel > 1 else "low power")
        return ", ".join(flags)


@dataclass(frozen=True)
class PointComparison:
    """One point key across the nodes."""

    key: PointKey
    label: str
    median_throughput: float
    median_power: float
    nodes: tuple[NodeFigures, ...]


@dataclass(frozen=True)
class NodeSummary:
    """One node over all compared points."""

    node: str
    points: int
    outlier_points: int
    median_throughput_rel: float
    median_power_rel: float
    min_throughput_rel: float
    max_power_rel: float


@dataclass(frozen=True)
class Comparison:
    """Every node's throughput and power relative to the median across nodes, per point.

    Only points every node measured are compared; ``missing`` lists ``(node, point)`` for the
    points some nodes have and this node lacks. With two nodes the median is their mean, so
    both nodes are flagged together: compare three or more to tell which one is off.
    """

    names: tuple[str, ...]
    threshold: float
    points: tuple[PointComparison, ...]
    missing: tuple[tuple[str, str], ...] = ()

    @property
    def outliers(self) -> tuple[tuple[PointComparison, NodeFigures], ...]:
        """Every flagged (point, node), in point then node order."""
        return tuple((pc, nf) for pc in self.points for nf in pc.nodes if nf.outlier)

    @property
    def outlier_nodes(self) -> tuple[str, ...]:
        """Nodes flagged at one point or more, in node order."""
        flagged = {nf.node for _, nf in self.outliers}
        return tuple(n for n in self.names if n in flagged)

    def summary(self) -> tuple[NodeSummary, ...]:
        """Per node: how many points are flagged and its typical and worst ratios."""
        out = []
        for name in self.names:
            figures = [nf for pc in self.points for nf in pc.nodes if nf.node == name]
            if not figures:
                continue
            out.append(
                NodeSummary(
                    node=name,
                    points=len(figures),
                    outlier_points=sum(nf.outlier for nf in figures),
                    median_throughput_rel=statistics.median(nf.throughput_rel for nf in figures),
                    median_power_rel=statistics.median(nf.power_rel for nf in figures),
                    min_throughput_rel=min(nf.throughput_rel for nf in figures),
                    max_power_rel=max(nf.power_rel for nf in figures),
                )
            )
        return tuple(out)

    def rows(self, *, only_outliers: bool = False) -> list[tuple[str, ...]]:
        """Display rows under :data:`COMPARISON_COLUMNS` (MB/s, W, ratios to 3 decimals)."""
        rows: list[tuple[str, ...]] = []
        for pc in self.points:
            for nf in pc.nodes:
                if only_outliers and not nf.outlier:
                    continue
                rows.append(
                    (
                        pc.label,
                        nf.node,
                        f"{nf.throughput / 1e6:.1f}",
                        f"{nf.throughput_rel:.3f}",
                        f"{nf.power:.1f}",
                        f"{nf.power_rel:.3f}",
                        nf.flag,
                    )
                )
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: nodes, threshold, per point its key fields, medians and every node."""
        points = []
        for pc in self.points:
            op, setting, processes, codec, cstates, size, block, layout, *levers = pc.key
            points.append(
                {
                    "point": pc.label,
                    "op": op,
                    "setting": setting,
                    "processes": processes,
                    "codec": codec,
                    "cstates": cstates,
                    "size_bytes": size,
                    "block_size_bytes": block,
                    "layout": layout,
                    **{
                        key: value
                        for (_, key, _), value in zip(LEVER_JSON, levers, strict=True)
                        if value is not None
                    },
                    "median_throughput_Bps": pc.median_throughput,
                    "median_power_W": pc.median_power,
                    "nodes": [
                        {
                            "node": nf.node,
                            "throughput_Bps": nf.throughput,
                            "power_W": nf.power,
                            "throughput_rel": nf.throughput_rel,
                            "power_rel": nf.power_rel,
                            "throughput_outlier": nf.throughput_outlier,
                            "power_outlier": nf.power_outlier,
                            "flag": nf.flag,
                        }
                        for nf in pc.nodes
                    ],
                }
            )
        return {
            "nodes": list(self.names),
            "threshold": self.threshold,
            "outlier_nodes": list(self.outlier_nodes),
            "summary": [
                {
                    "node": s.node,
                    "points": s.points,
                    "outlier_points": s.outlier_points,
                    "median_throughput_rel": s.median_throughput_rel,
                    "median_power_rel": s.median_power_rel,
                    "min_throughput_rel": s.min_throughput_rel,
                    "max_power_rel": s.max_power_rel,
                }
                for s in self.summary()
            ],
            "missing": [{"node": node, "point": label} for node, label in self.missing],
            "points": points,
        }


def compare_profiles(
    profiles: Sequence[Profile],
    names: Sequence[str] | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
) -> Comparison:
    """Each node's figures relative to the median across nodes, flagging ``|rel − 1| > threshold``.

    Unlike :func:`merge_profiles` this does not refuse different storage or meters (it is the
    look before the merge), but it needs at least two profiles with distinct names.
    """
    if len(profiles) < 2:
        raise ProfileError(f"comparing needs at least 2 profiles, got {len(profiles)}")
    if not threshold > 0:
        raise ProfileError(f"threshold must be > 0 (0.10 flags 10 % off), got {threshold!r}")
    labels = node_names(profiles, names)
    indexed = [_indexed(p, name) for p, name in zip(profiles, labels, strict=True)]
    order: dict[PointKey, ProfilePoint] = {}
    for by_key in indexed:
        for key, p in by_key.items():
            order.setdefault(key, p)
    compared = []
    missing: list[tuple[str, str]] = []
    for key, example in order.items():
        absent = [name for name, by_key in zip(labels, indexed, strict=True) if key not in by_key]
        if absent:
            missing.extend((name, describe_point(example)) for name in absent)
            continue
        points = [by_key[key] for by_key in indexed]
        mt = statistics.median(p.throughput for p in points)
        mp = statistics.median(p.power for p in points)
        figures = []
        for name, p in zip(labels, points, strict=True):
            t_rel, p_rel = p.throughput / mt, p.power / mp
            figures.append(
                NodeFigures(
                    node=name,
                    throughput=p.throughput,
                    power=p.power,
                    throughput_rel=t_rel,
                    power_rel=p_rel,
                    throughput_outlier=abs(t_rel - 1) > threshold,
                    power_outlier=abs(p_rel - 1) > threshold,
                )
            )
        compared.append(
            PointComparison(
                key=key,
                label=describe_point(example),
                median_throughput=mt,
                median_power=mp,
                nodes=tuple(figures),
            )
        )
    return Comparison(
        names=tuple(labels),
        threshold=threshold,
        points=tuple(compared),
        missing=tuple(missing),
    )
