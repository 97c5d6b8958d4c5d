"""One phase of a job: the n-th phase of a kind on every node that had it, summed.

Why apart from :mod:`greenckpt.runtime.job` (the leader's collector): a job phase is the
accounting unit of the job report (time, energy with its source) and, since issue 33, says
which levers beyond the core clock its nodes applied and from which source (profile lookup,
fixed flags, a baseline), and how many of them failed — bounded, so a job of many nodes sends
the leader no more than before. The format: docs/formats.md, "Job report".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LEVER_FAILED", "MAX_LEVER_VALUES", "JobPhase"]

LEVER_FAILED = "could not apply the "
"""How a settings note about a lever that failed starts (runtime/control.py writes it)."""
MAX_LEVER_VALUES = 8
"""Distinct values (or failure notes) a job phase keeps per lever; more are counted only."""


@dataclass
class JobPhase:
    """One phase of the job: the n-th phase of a kind on every node that had it.

    ``levers``: per lever beyond the CPU frequency and C-states, the distinct
    ``"<value> (<source>)"`` its nodes applied; ``lever_failures``: how many nodes' settings
    say a lever failed (put back, the phase went on), ``failure_notes`` the first of those
    notes."""

    kind: str
    ordinal: int
    levels: set[int] = field(default_factory=set)
    nodes: int = 0
    failed: int = 0
    node_seconds: float = 0.0
    max_seconds: float = 0.0
    energy_j: float = 0.0
    missing_energy: int = 0
    sources: set[str] = field(default_factory=set)
    start_unix: float = math.inf
    end_unix: float = -math.inf
    background: bool = False
    levers: dict[str, set[str]] = field(default_factory=dict)
    lever_failures: int = 0
    failure_notes: list[str] = field(default_factory=list)

    def add(self, record: Mapping[str, Any], t0_unix: float | None) -> None:
        seconds = float(record["end_s"]) - float(record["start_s"])
        self.nodes += 1
        self.failed += 0 if record.get("ok", True) else 1
        self.node_seconds += seconds
        self.max_seconds = max(self.max_seconds, seconds)
        energy = record.get("node_energy_j")
        if energy is None:
            self.missing_energy += 1
        else:
            self.energy_j += float(energy)
        if record.get("power_source"):
            self.sources.add(str(record["power_source"]))
        if record.get("level") is not None:
            self.levels.add(int(record["level"]))
        self.background = bool(record.get("background", False))
        if t0_unix is not None:
            self.start_unix = min(self.start_unix, t0_unix + float(record["start_s"]))
            self.end_unix = max(self.end_unix, t0_unix + float(record["end_s"]))
        settings = record.get("settings")
        if isinstance(settings, Mapping):
            self._add_levers(settings)

    def _add_levers(self, settings: Mapping[str, Any]) -> None:
        """The levers a node's settings applied, and a lever failure its notes state."""
        source = str(settings.get("source", ""))
        levers = settings.get("levers")
        if isinstance(levers, Mapping):
            for name, value in levers.items():
                seen = self.levers.setdefault(str(name), set())
                if len(seen) < MAX_LEVER_VALUES:
                    seen.add(f"{value} ({source})")
        notes = [str(n) for n in settings.get("notes") or () if str(n).startswith(LEVER_FAILED)]
        if notes:
            self.lever_failures += 1
            for note in notes:
                if note not in self.failure_notes and len(self.failure_notes) < MAX_LEVER_VALUES:
                    self.failure_notes.append(note)

    def to_dict(self, job_t0: float | None) -> dict[str, Any]:
        timed = job_t0 is not None and math.isfinite(self.start_unix)
        return {
            "kind": self.kind,
            "ordinal": self.ordinal,
            "levels": sorted(self.levels),
            "nodes": self.nodes,
            "failed": self.failed,
            "node_seconds": self.node_seconds,
            "max_seconds": self.max_seconds,
            "energy_j": None if self.missing_energy else self.energy_j,
            "nodes_without_energy": self.missing_energy,
            "source": _source(self.sources) if not self.missing_energy else None,
            "start_s": self.start_unix - job_t0 if timed and job_t0 is not None else None,
            "end_s": self.end_unix - job_t0 if timed and job_t0 is not None else None,
            "background": self.background,
            "levers": {name: sorted(values) for name, values in sorted(self.levers.items())},
            "lever_failures": self.lever_failures,
            "lever_failure_notes": list(self.failure_notes),
        }


def _source(sources: Iterable[str]) -> str | None:
    seen = set(sources)
    if not seen:
        return None
    return "estimated" if "estimated" in seen else "measured"
