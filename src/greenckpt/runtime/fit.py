"""Whether a profile describes this node and storage, and what it predicts for one phase.

Why apart from the policies: the profile lookup and the governor baselines ask the same two
questions of a profile — is it for this CPU model and this storage (a mismatch falls back to
defaults, named in the notes), and what time and energy does a chosen point predict for a
phase of this size (interpolated in log size between profiled sizes, "extrapolated" outside
them) — and must answer them the same way. The power predicted is the phase's as the planner
counts it: the point's plus that of the ranks waiting meanwhile, the very figure the planner's
waiting lookup gave (:class:`~greenckpt.optimize.waiting.WaitingUse`), so a prediction and the
plan behind it never disagree about what the waiters cost. See docs/design/runtime.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from greenckpt.io.codec import CodecError, parse_codec
from greenckpt.optimize.profile_data import Profile, ProfilePoint
from greenckpt.optimize.waiting import WaitingUse
from greenckpt.platform.root import PlatformError
from greenckpt.runtime.node import Node
from greenckpt.runtime.settings import NOT_MEASURED, PhaseRequest
from greenckpt.units import format_size

__all__ = [
    "Fit",
    "canonical_codec",
    "fixed_codec_label",
    "has_both_ops",
    "machine_fit",
    "predictions",
    "storage_fit",
    "waiting_note",
]


def canonical_codec(codec: str | None) -> str | None:
    """A profile's codec label in canonical form (an unparsable label is kept as written)."""
    if codec is None:
        return None
    try:
        spec = parse_codec(codec)
    except CodecError:
        return codec
    return None if spec is None else spec.label


def has_both_ops(points: Iterable[ProfilePoint]) -> bool:
    return {p.op for p in points} == {"write", "read"}


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True)
class Fit:
    """Whether a profile describes this node: why not (``mismatch``), and caveats."""

    mismatch: str | None
    notes: tuple[str, ...]


def machine_fit(profile: Profile, node: Node) -> Fit:
    """Compare the profile's machine metadata with the node (CPU model decides; host notes)."""
    machine = profile.machine
    nodes = machine.get("nodes")
    hosts = [h for h in nodes if isinstance(h, str)] if isinstance(nodes, list) else []
    if not hosts and isinstance(machine.get("hostname"), str):
        hosts = [machine["hostname"]]
    theirs_host = ", ".join(hosts) or "unknown"
    theirs = machine.get("cpu_model")
    notes: list[str] = []
    if profile.synthetic:
        notes.append("the profile is SYNTHETIC: its figures describe no real machine")
    if isinstance(theirs, str) and theirs and node.cpu_model:
        if _normalise(theirs) != _normalise(node.cpu_model):
            return Fit(
                f"profile is for another machine: it was measured on CPU {theirs!r} "
                f"(host {theirs_host}), this node has CPU {node.cpu_model!r} "
                f"(host {node.hostname or 'unknown'})",
                tuple(notes),
            )
    elif not (isinstance(theirs, str) and theirs):
        notes.append("the profile records no CPU model: cannot check that it describes this node")
    else:
        notes.append(f"this node's CPU model is unknown: cannot check the profile's ({theirs!r})")
    if hosts and node.hostname and node.hostname not in hosts:
        notes.append(
            f"profiled on host {theirs_host}, this is {node.hostname}: same CPU model, so the "
            "profile is used (it describes a kind of node)"
        )
    cpus = machine.get("logical_cpus", machine.get("cores"))
    if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus != node.cpus:
        notes.append(f"profiled with {cpus} logical CPUs, this node has {node.cpus}")
    return Fit(None, tuple(notes))


def storage_fit(profile: Profile, node: Node, path: str) -> Fit:
    """Compare the profile's storage key with the storage of ``path``."""
    theirs = profile.storage.get("key")
    theirs_text = theirs if isinstance(theirs, str) and theirs else None
    try:
        mine = node.storage_key(path)
    except (PlatformError, OSError) as exc:
        assumed = f" ({theirs_text})" if theirs_text else ""
        return Fit(
            None,
            (
                f"could not identify the storage of {path} ({exc}): assumed to be the profile's"
                f"{assumed}",
            ),
        )
    if theirs_text is None:
        return Fit(None, (f"the profile records no storage key: cannot check it describes {mine}",))
    if mine != theirs_text:
        return Fit(
            f"profile is for another storage device: it was measured on {theirs_text!r}, "
            f"{path} is on {mine!r}",
            (),
        )
    return Fit(None, ())


def _setting_key(p: ProfilePoint) -> tuple[Any, ...]:
    """Everything that identifies a point's setting and I/O pattern except its size."""
    return (
        p.op,
        p.setting_key,
        p.processes,
        canonical_codec(p.codec),
        p.cstates,
        p.block_size,
        p.layout,
        p.read_method,
        p.data,
    )


def _figures(profile: Profile, point: ProfilePoint, size: int) -> tuple[float, float, list[str]]:
    """``(throughput, power, notes)`` of ``point``'s setting for a phase of ``size`` bytes.

    Between two profiled sizes the figures are interpolated linearly in log size; outside
    them the nearest profiled size's figures are used and the note says "extrapolated".
    """
    if point.size is None or not profile.sizes:
        return (
            point.throughput,
            point.power,
            [
                "the profile does not record the size its points were measured at: time and "
                "energy assume throughput does not depend on size"
            ],
        )
    key = _setting_key(point)
    by_size = {p.size: p for p in profile.points if p.size is not None and _setting_key(p) == key}
    lo = max((s for s in by_size if s <= size), default=None)
    hi = min((s for s in by_size if s >= size), default=None)
    if lo is not None and lo == hi:
        return by_size[lo].throughput, by_size[lo].power, []
    if hi is None and lo is not None:
        at = by_size[lo]
        return (
            at.throughput,
            at.power,
            [
                f"extrapolated: {format_size(size)} is beyond the largest profiled size "
                f"({format_size(lo)}); the figures measured at {format_size(lo)} are used"
            ],
        )
    if lo is None and hi is not None:
        at = by_size[hi]
        return (
            at.throughput,
            at.power,
            [
                f"extrapolated: {format_size(size)} is below the smallest profiled size "
                f"({format_size(hi)}); the figures measured at {format_size(hi)} are used"
            ],
        )
    assert lo is not None and hi is not None  # by_size holds at least point.size
    t = math.log(size / lo) / math.log(hi / lo)
    a, b = by_size[lo], by_size[hi]
    return (
        a.throughput + t * (b.throughput - a.throughput),
        a.power + t * (b.power - a.power),
        [
            f"interpolated: {format_size(size)} lies between the profiled sizes "
            f"{format_size(lo)} and {format_size(hi)} (linear in log size)"
        ],
    )


def predictions(
    profile: Profile, point: ProfilePoint, size: int, waiting: WaitingUse | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Settings keyword arguments for the phase's predicted time, energy and power.

    ``waiting``: what the phase's waiting ranks add, as the planner's lookup gave it for
    ``point`` (:meth:`~greenckpt.optimize.waiting.WaitingLookup.use`, or the plan's
    ``Choice.write_waiting``/``read_waiting``); the predicted power and energy then count them
    and the settings say how many wait, in which mode and from what figure. ``None``: the
    point's power alone (no waiting fields). A profile without waiting entries adds 0 W, so
    its predictions are the point's figures exactly.
    """
    throughput, power, notes = _figures(profile, point, size)
    seconds = size / throughput
    if not point.reliable:
        notes.append("the power figure of the chosen point rests on a failed or degraded reading")
    out: dict[str, Any] = {
        "predicted_seconds": seconds,
        "predicted_energy_j": power * seconds,
        "predicted_power_w": power,
        "power_source": point.power_source,
    }
    if waiting is not None:
        phase = power + waiting.power
        counted = waiting.source if waiting.ranks and waiting.source is not None else None
        out.update(
            predicted_energy_j=phase * seconds,
            predicted_power_w=phase,
            power_source=_less_certain(point.power_source, counted),
            waiting_ranks=waiting.ranks,
            waiting_power_w=waiting.power,
            waiting_source=waiting.source or NOT_MEASURED,
            wait_mode=waiting.mode,
        )
        notes.append(waiting_note(power, waiting))
    return out, notes


def _less_certain(source: str, other: str | None) -> str:
    """The source of a sum of two figures: the less certain one's (synthetic, then estimated)."""
    for label in ("synthetic", "estimated"):
        if label in (source, other):
            return label
    return source


def waiting_note(point_power: float, waiting: WaitingUse) -> str:
    """The predicted phase power in words: the point's, plus how many ranks wait, how, at what
    figure per rank and from where (one line, for the settings' notes)."""
    if waiting.ranks == 0:
        return f"predicted power: the point's {point_power:.1f} W; {waiting.how}"
    return (  # ``how`` starts with the figure's source, or says it was not measured
        f"predicted power {point_power + waiting.power:.1f} W: the point's {point_power:.1f} W "
        f"+ {waiting.ranks} waiting rank{'' if waiting.ranks == 1 else 's'} ({waiting.mode}) × "
        f"{waiting.per_rank:.3g} W per rank "
        f"({waiting.how})"
    )


def fixed_codec_label(request: PhaseRequest) -> str | None:
    """The codec a caller fixed (``None`` also when it fixed "uncompressed")."""
    return request.fixed_codec[1]
