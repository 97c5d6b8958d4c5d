"""The self-check's options and records: one per check, and the record for a bug report.

Why its own module: the checks (:mod:`~greenckpt.platform.selfcheck_levers`,
:mod:`~greenckpt.platform.selfcheck_meters`) only say what they did and saw; how that becomes
JSON (format ``greenckpt-selfcheck``, docs/formats.md) and Markdown is decided once, here. A
check that could not be done is a record too ("not checked", with why): nothing is dropped.
The options carry the two things tests replace: the load that keeps a CPU busy while a
frequency or a meter is read (a fake tree's counters advance there instead) and the reader of
``/dev/cpu/N/msr`` (whose offsets are register numbers, which no plain file can imitate).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from greenckpt.errors import DeviceIOError
from greenckpt.platform.meters.base import MeterOptions

__all__ = [
    "FAILED",
    "NOT_CHECKED",
    "PASSED",
    "SELFCHECK_FORMAT",
    "SELFCHECK_VERSION",
    "Check",
    "Load",
    "MsrReader",
    "Outcome",
    "SelfCheckOptions",
    "SelfCheckRecord",
    "busy",
    "read_msr",
]

SELFCHECK_FORMAT = "greenckpt-selfcheck"
SELFCHECK_VERSION = 1

Outcome = Literal["passed", "failed", "not checked"]
PASSED: Outcome = "passed"
FAILED: Outcome = "failed"
NOT_CHECKED: Outcome = "not checked"


Load = Callable[[float], None]
"""Keeps the calling CPU busy for the given seconds (tests: advance a fake tree's counters)."""
MsrReader = Callable[[Path, int], int]
"""Reads one model-specific register (its number) of ``dev/cpu/N/msr`` (its path)."""


def busy(seconds: float) -> None:
    """Spin on the calling CPU for ``seconds``: a CPU that idles runs no frequency at all, and a
    meter over an idle node need not rise."""
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n = (n * 1103515245 + 12345) & 0x7FFFFFFF


def read_msr(path: Path, register: int) -> int:
    """One 64-bit register through the msr driver (the file offset is the register number);
    raises ``OSError`` as the OS does (no msr module, not root)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, 8, register)
    finally:
        os.close(fd)
    if len(data) != 8:
        raise DeviceIOError(f"{path}: register {register:#x} read {len(data)} bytes, not 8")
    value: int = struct.unpack("<Q", data)[0]
    return value


@dataclass(frozen=True)
class SelfCheckOptions:
    """How long and how strictly the self-check looks (seconds, relative fractions, hertz).

    ``hold_s``: time at each frequency, busy, before it is read back. ``interval_s``: between
    the two reads of every meter (longer where a meter queries less often). Frequencies agree
    within ``frequency_tolerance`` of the target (at least ``frequency_floor_hz``); two meters
    of one domain within ``meter_tolerance``. ``state_file``: the session's (None: default).
    """

    hold_s: float = 0.3
    interval_s: float = 0.5
    frequency_tolerance: float = 0.05
    frequency_floor_hz: float = 25e6
    meter_tolerance: float = 0.10
    load: Load = busy
    msr_reader: MsrReader = read_msr
    state_file: Path | None = None
    meter_options: MeterOptions = field(default_factory=MeterOptions)

    def frequency_ok(self, target_hz: float, seen_hz: float) -> bool:
        """Whether ``seen_hz`` is close enough to ``target_hz``."""
        margin = max(self.frequency_tolerance * target_hz, self.frequency_floor_hz)
        return abs(seen_hz - target_hz) <= margin


@dataclass(frozen=True)
class Check:
    """One check: what it did, what it saw, and its outcome.

    ``expected`` and ``seen`` are set when it failed (what should have been read, what was);
    ``reason`` when it was not checked (why not). ``details``: the figures, JSON-ready.
    """

    name: str
    outcome: Outcome
    did: str
    observed: str = ""
    expected: str | None = None
    seen: str | None = None
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def passed(
        cls, name: str, did: str, observed: str, details: Mapping[str, Any] | None = None
    ) -> Check:
        """A check that saw what it expected."""
        return cls(name, PASSED, did, observed, details=dict(details or {}))

    @classmethod
    def failed(
        cls,
        name: str,
        did: str,
        *,
        expected: str,
        seen: str,
        observed: str = "",
        details: Mapping[str, Any] | None = None,
    ) -> Check:
        """A check that saw something else than ``expected``: ``seen``."""
        return cls(name, FAILED, did, observed or seen, expected, seen, details=dict(details or {}))

    @classmethod
    def not_checked(cls, name: str, reason: str, did: str = "nothing") -> Check:
        """A check that could not be done, and why."""
        return cls(name, NOT_CHECKED, did, reason=reason)

    @property
    def detail(self) -> str:
        """One line for a table: the reason, the expected/seen pair, or the observation."""
        if self.outcome == NOT_CHECKED:
            return self.reason or ""
        if self.outcome == FAILED:
            return f"expected {self.expected}; seen {self.seen}"
        return self.observed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (docs/formats.md)."""
        return {
            "name": self.name,
            "outcome": self.outcome,
            "did": self.did,
            "observed": self.observed,
            "expected": self.expected,
            "seen": self.seen,
            "reason": self.reason,
            "details": dict(self.details),
        }


@dataclass(frozen=True)
class SelfCheckRecord:
    """Every check of one ``greenckpt probe --check``, with the node it ran on."""

    host: str
    root: str
    kernel: str | None
    cpu_model: str | None
    virtual_machine: bool
    greenckpt_version: str
    created: str
    checks: tuple[Check, ...]

    def count(self, outcome: Outcome) -> int:
        """How many checks ended with ``outcome``."""
        return sum(1 for c in self.checks if c.outcome == outcome)

    @property
    def ok(self) -> bool:
        """True when no check failed (not checked is not a failure)."""
        return self.count(FAILED) == 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON record (format ``greenckpt-selfcheck`` version 1, docs/formats.md)."""
        return {
            "format": SELFCHECK_FORMAT,
            "format_version": SELFCHECK_VERSION,
            "greenckpt_version": self.greenckpt_version,
            "created": self.created,
            "host": self.host,
            "root": self.root,
            "kernel": self.kernel,
            "cpu_model": self.cpu_model,
            "virtual_machine": self.virtual_machine,
            "summary": {
                "passed": self.count(PASSED),
                "failed": self.count(FAILED),
                "not_checked": self.count(NOT_CHECKED),
            },
            "checks": [c.to_dict() for c in self.checks],
        }

    def to_markdown(self) -> str:
        """The record as Markdown, for a bug report."""
        vm = " (virtual machine)" if self.virtual_machine else ""
        lines = [
            f"# greenckpt self-check of {self.host}",
            "",
            f"- greenckpt {self.greenckpt_version}, {self.created}",
            f"- kernel: {self.kernel or 'unknown'}",
            f"- CPU: {self.cpu_model or 'unknown'}{vm}",
            f"- root: `{self.root}`",
            f"- {self.count(PASSED)} passed, {self.count(FAILED)} failed, "
            f"{self.count(NOT_CHECKED)} not checked",
            "",
            "| check | outcome | detail |",
            "| --- | --- | --- |",
            *(f"| {_cell(c.name)} | {c.outcome} | {_cell(c.detail)} |" for c in self.checks),
            "",
            "## What each check did and saw",
            "",
        ]
        for c in self.checks:
            lines.append(f"- **{_cell(c.name)}** ({c.outcome}): did: {c.did}")
            lines.extend(f"  - {text}" for text in _facts(c))
        return "\n".join(lines) + "\n"


def _facts(c: Check) -> Sequence[str]:
    out = []
    if c.observed:
        out.append(f"observed: {c.observed}")
    if c.expected is not None:
        out.append(f"expected: {c.expected}")
    if c.seen is not None and c.seen != c.observed:
        out.append(f"seen: {c.seen}")
    if c.reason:
        out.append(f"not checked: {c.reason}")
    return out


def _cell(text: str) -> str:
    """Text safe in one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
