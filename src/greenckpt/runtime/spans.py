"""The open spans the runtime accounts: an I/O phase (reference-counted per kind) and the
compute or rework time between them.

Why reference counting: several notifiers may report the same kind of phase at once (two
emulated nodes on one host, each rank group's leader); the first begin decides, later ones
join, the last end closes, and the span is one record that says how many it merged
(docs/design/runtime.md, "Overlapping notifications").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from greenckpt.phases import SegmentKind
from greenckpt.runtime.metering import Reading, RunMeters
from greenckpt.runtime.run_report import PhaseRecord, RunKind
from greenckpt.runtime.settings import PHASE_KINDS, Settings

__all__ = ["AppState", "Segment", "Span", "Timeline"]

AppState = Literal["before", "running", "after"]
"""Where the application is: time before it counts as start-up, after it as teardown."""


@dataclass
class Span:
    """An open phase of one kind (reference-counted)."""

    kind: RunKind
    index: int
    start: Reading
    order: int
    refs: int = 1
    notifiers: int = 1
    level: int | None = None
    levels: set[int] = field(default_factory=set)
    path: str | None = None
    size: int = 0
    settings: Settings | None = None
    background: bool = False
    ok: bool = True
    notes: list[str] = field(default_factory=list)
    nodes: set[int] = field(default_factory=set)
    reported_s: float | None = None
    unknown_sizes: int = 0  # notifiers that could not tell their bytes (size None)

    def join(
        self, *, node: int | None, size: int | None, level: int | None, background: bool | None
    ) -> None:
        """Another notifier begins this kind while it is open: count it; the first begin's
        settings and background flag are kept (a disagreement is noted)."""
        self.refs += 1
        self.notifiers += 1
        if node is not None:
            self.nodes.add(node)
        if size is None:
            self.unknown_sizes += 1
        else:
            self.size += max(size, 0)
        if level is not None:
            self.levels.add(level)
        if background is not None and background != self.background:
            self.notes.append(
                f"a notifier said background={background}; the first begin's "
                f"background={self.background} was kept"
            )

    def record_fields(self) -> dict[str, object]:
        """The record's fields that come from the span (levels of merged notifications that
        disagree leave the level unknown, and say so)."""
        notes = list(self.notes)
        level = self.level
        if len(self.levels) > 1:
            notes.append(f"merged notifications of levels {sorted(self.levels)}")
            level = None
        if self.unknown_sizes:  # a partial sum would pass for the whole: 0 is "unknown"
            notes.append(
                f"size unknown: {self.unknown_sizes} of {self.notifiers} notifier(s) could not "
                "tell their bytes"
            )
        return {
            "level": level,
            "path": self.path,
            "size": 0 if self.unknown_sizes else self.size,
            "settings": self.settings,
            "ok": self.ok,
            "background": self.background,
            "notifiers": self.notifiers,
            "nodes": tuple(sorted(self.nodes)),
            "reported_seconds": self.reported_s,
            "notes": tuple(notes),
        }


@dataclass
class Segment:
    """The open compute, rework, start-up or teardown span between I/O phases. A rework
    segment keeps the rework ``span`` it accounts: its record takes that span's level (the
    level of the checkpoint the restart read back, as the notifiers said), even when the
    span has ended by the time the segment is recorded."""

    kind: SegmentKind
    index: int
    start: Reading
    span: Span | None = None

    def level(self) -> int | None:
        """The record's level: its rework span's (None when its notifiers disagreed)."""
        if self.span is None or len(self.span.levels) > 1:
            return None
        return self.span.level


class Timeline:
    """The run's finished records and the one open :class:`Segment` between I/O phases: what
    the time outside a foreground phase counts as (start-up, compute, rework, teardown), and
    the record of each stretch of it, from the run's meter readings."""

    def __init__(self, meter: RunMeters) -> None:
        self.meter = meter
        self.records: list[PhaseRecord] = []
        self.segment: Segment | None = None
        self.app: AppState = "running"
        self._next_index = 0

    def take_index(self) -> int:
        """The next record's index (records are numbered in the order their spans open)."""
        self._next_index += 1
        return self._next_index - 1

    def foreground(self, spans: Mapping[RunKind, Span]) -> SegmentKind | None:
        """What the time now counts as: None during a foreground I/O phase (it has its own
        record), start-up before the application started and teardown after it ended,
        rework while one is open, else compute."""
        if any(k in PHASE_KINDS and not s.background for k, s in spans.items()):
            return None
        if self.app != "running":
            return "startup" if self.app == "before" else "teardown"
        return "rework" if "rework" in spans else "compute"

    def resegment(
        self, spans: Mapping[RunKind, Span], mark: Reading, *, split: bool = False
    ) -> PhaseRecord | None:
        """Close the compute/rework span at ``mark`` when what the time counts as changes
        (or ``split``), and open the next one there; return the record closed, if any."""
        wanted = self.foreground(spans)
        closed: PhaseRecord | None = None
        if self.segment is not None and (split or self.segment.kind != wanted):
            closed = self.close_segment(mark)
        if wanted is not None and self.segment is None:
            rework = spans.get("rework") if wanted == "rework" else None
            self.segment = Segment(wanted, self.take_index(), mark, rework)
        return closed

    def close_segment(self, mark: Reading) -> PhaseRecord | None:
        """Record the open segment up to ``mark`` (None: none was open)."""
        seg, self.segment = self.segment, None
        if seg is None:
            return None
        record = self.meter.record(seg.kind, seg.index, seg.start, mark, level=seg.level())
        self.records.append(record)
        return record
