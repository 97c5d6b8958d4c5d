"""Running a sweep: measure cells, keep the profile file valid after every cell, resume.

Why this shape: a full profile can take hours, so (1) the profile file is rewritten atomically
after each finished cell (:mod:`greenckpt.profile.store`), with ``status: "partial"`` and the
list of finished cells in ``sweep.done`` — a killed sweep leaves a valid, usable profile of
what it measured; (2) resuming loads that file, checks that it records the same sweep on the
same machine and storage, and measures only the cells it lacks; (3) which cell comes next is
a pluggable choice (:class:`CellChooser`): the whole grid in order, or the adaptive mode's
selection (:mod:`greenckpt.profile.adaptive`).

Each cell runs ``warmup + repetitions`` times: write (files kept), then read them back; the
warm-up runs are discarded and a point's throughput and power are the medians of the
repetitions, with their range (max − min) as the spread.

With ``spec.waiting_seconds > 0`` the power of waiting ranks is measured first, for every CPU
setting, C-state setting and wait mode (:mod:`greenckpt.profile.waiting`): before the cells, so
that the adaptive mode's decisions already count it. Its entries are saved with the first cell
(a profile file needs a point); a resumed sweep keeps the entries its file recorded and
measures only those it lacks.

Stopped by a batch system (SIGTERM, or SIGHUP when the terminal goes): while the sweep runs
in the main thread, those signals end it like an exception (``SystemExit`` with status
128 + the signal), so the cell in progress removes its data files and stops its workers on the
way out, the node settings are restored by their own session, and the profile file keeps every
finished cell for a resume.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from greenckpt.optimize.profile_data import Operation, Profile, ProfilePoint, Run
from greenckpt.optimize.waiting import WaitingPower
from greenckpt.profile.grid import Cell, SweepError, SweepSpec, ops_of, point_cell_key
from greenckpt.profile.measure import Measurer, RunResult, median_and_range
from greenckpt.profile.meta import now_iso, tool_version
from greenckpt.profile.progress import Eta, ProgressSink
from greenckpt.profile.store import save_profile
from greenckpt.profile.waiting import WaitersFactory, WaitingKey, measure_waiting, wanted

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_end_the_sweep() -> Iterator[None]:
    """SIGTERM/SIGHUP raise ``SystemExit(128 + signal)`` inside (main thread only).

    Why: their default action ends the process at once, and a sweep killed that way leaves its
    data files (2 GiB by default) on the target; raising instead runs every ``finally`` on the
    way out. A signal the process was told to ignore stays ignored; handlers installed before
    (the node session's, which restores the node and then calls the one it replaced) and after
    keep working, and the previous ones are put back on leaving.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)


Request = tuple[Cell, bool]
"""A cell to measure and whether *quickly* (one run, no warm-up) rather than in full."""


class CellChooser(Protocol):
    """Picks the next cells to measure from those not measured in full yet."""

    mode: str
    """Recorded in the profile's ``sweep.mode`` (``full``, ``adaptive``)."""

    def next_cells(self, measured: Profile | None, pending: Sequence[Cell]) -> list[Request]:
        """Cells of ``pending`` to measure next, each full or quick; empty to stop the sweep.

        ``measured`` holds every point so far (quick ones have ``repetitions == 1``); a cell
        measured quickly stays pending until it is measured in full.
        """
        ...


class FullGrid:
    """Every cell, in the grid's order, in full."""

    mode = "full"

    def next_cells(self, measured: Profile | None, pending: Sequence[Cell]) -> list[Request]:
        return [(c, False) for c in pending]


@dataclass(frozen=True)
class SweepContext:
    """What the profile records besides the points: where, on what, measured how."""

    machine: Mapping[str, Any] = field(default_factory=dict)
    storage: Mapping[str, Any] = field(default_factory=dict)
    meters: tuple[str, ...] = ()
    synthetic: bool = False
    note: str = ""
    levers: Mapping[str, bool] = field(default_factory=dict)
    """Which levers the node had (:func:`greenckpt.profile.lever_check.levers_metadata`): the
    profile's ``levers`` metadata, e.g. whether the planner may split writer and waiter
    cores; empty when not looked at."""


def cell_bytes(spec: SweepSpec, cell: Cell, *, quick: bool = False) -> int:
    """Bytes a cell moves (every run, warm-ups included)."""
    runs = (1 + ("read" in spec.ops)) if quick else spec.runs_per_cell()
    return cell.size * runs


def cell_starts(spec: SweepSpec, cell: Cell, *, quick: bool = False) -> int:
    """Worker processes a cell starts (a single worker runs in-process: none)."""
    runs = (1 + ("read" in spec.ops)) if quick else spec.runs_per_cell()
    return runs * cell.processes if cell.processes > 1 else 0


def _point(
    spec: SweepSpec, cell: Cell, op: Operation, runs: Sequence[RunResult], source: Any
) -> ProfilePoint:
    thr, thr_spread = median_and_range([r.throughput for r in runs])
    pw, pw_spread = median_and_range([r.power for r in runs])
    ratios = [r.compression_ratio for r in runs if r.compression_ratio is not None]
    return ProfilePoint(
        op=op,
        processes=cell.processes,
        throughput=thr,
        power=pw,
        power_source=source,
        frequency=None if cell.setting.hz is None else float(cell.setting.hz),
        governor=cell.setting.governor,
        codec=cell.codec,
        cstates=cell.cstates,
        repetitions=len(runs),
        throughput_spread=thr_spread,
        power_spread=pw_spread,
        size=cell.size,
        block_size=spec.block_size,
        layout=spec.layout,
        read_method=runs[0].read_method,
        reliable=all(r.reliable for r in runs),
        runs=tuple(Run(r.throughput, r.power, r.seconds) for r in runs),
        data=spec.data,
        compression_ratio=statistics.median(ratios) if ratios else None,
        **cell.levers.point_fields(),
    )


def measure_cell(
    spec: SweepSpec, measurer: Measurer, cell: Cell, *, quick: bool = False
) -> tuple[list[ProfilePoint], float]:
    """Measure one cell: its points (one per operation) and the seconds of I/O it took.

    ``quick``: one repetition and no warm-up (the adaptive mode's first look at a cell).
    """
    measurer.configure(cell)
    ops = ops_of(spec)
    kept: dict[Operation, list[RunResult]] = {op: [] for op in ops}
    io_seconds = 0.0
    warmup, reps = (0, 1) if quick else (spec.warmup, spec.repetitions)
    try:
        for i in range(warmup + reps):
            results = [measurer.run("write", cell)]
            if "read" in ops:
                results.append(measurer.run("read", cell))
            for r in results:
                io_seconds += r.seconds
                if i >= warmup and r.op in kept:
                    kept[r.op].append(r)
    finally:
        measurer.cleanup(cell)
    source = measurer.power_choice.source
    return [_point(spec, cell, op, kept[op], source) for op in ops], io_seconds


def _summary(points: Sequence[ProfilePoint]) -> str:
    parts = [f"{p.op} {p.throughput / 1e6:,.0f} MB/s {p.power:.1f} W" for p in points]
    return ", ".join(parts) + f" ({points[0].power_source})" if points else "no points"


@dataclass
class _State:
    done: dict[str, list[ProfilePoint]] = field(default_factory=dict)
    quick: set[str] = field(default_factory=set)
    idle: tuple[float, float] | None = None
    io_seconds: float = 0.0
    created: str = ""
    waiting: dict[WaitingKey, WaitingPower] = field(default_factory=dict)


def _resume_state(previous: Profile, spec: SweepSpec, ctx: SweepContext) -> _State:
    """The finished cells of a partial profile, after checking it is the same sweep."""
    recorded = previous.sweep.get("spec")
    if not isinstance(recorded, Mapping):
        raise SweepError("the file records no sweep, so it cannot be resumed: profile anew")
    old = SweepSpec.from_json(recorded)
    diff = spec.differences(old)
    if diff:
        raise SweepError(
            f"the file was made by a different sweep (differs in {', '.join(diff)}): repeat "
            "the original options to resume, or write a new file"
        )
    for what, mine, theirs in (
        ("host", ctx.machine.get("hostname"), previous.machine.get("hostname")),
        ("storage", ctx.storage.get("key"), previous.storage.get("key")),
    ):
        if mine != theirs:
            raise SweepError(
                f"the file was measured on {what} {theirs!r}, this is {mine!r}: a profile "
                "describes one machine and storage target; resume it there"
            )
    done_keys = previous.sweep.get("done", [])
    quick_keys = previous.sweep.get("quick", [])
    valid = {c.key for c in spec.cells()}
    state = _State(created=previous.created)
    if not isinstance(done_keys, list) or not isinstance(quick_keys, list):
        raise SweepError("the file's sweep.done/sweep.quick are not lists: profile anew")
    for key in [*done_keys, *quick_keys]:
        if key not in valid:
            raise SweepError(f"the file lists a finished cell {key!r} that the sweep lacks")
        state.done[key] = []
    state.quick = set(quick_keys)
    for p in previous.points:
        key = point_cell_key(p)
        if key in state.done:
            state.done[key].append(p)
    if previous.idle_power is not None:
        state.idle = (previous.idle_power, previous.idle_power_spread or 0.0)
    asked = {(s.key, c, m) for s, c, m in wanted(spec)} if spec.waiting_seconds > 0 else set()
    for w in previous.waiting:
        key = (w.setting_key, w.cstates, w.mode)
        if key in asked:
            state.waiting[key] = w
    io = previous.sweep.get("io_seconds", 0.0)
    state.io_seconds = float(io) if isinstance(io, int | float) else 0.0
    return state


def _profile(
    spec: SweepSpec,
    ctx: SweepContext,
    state: _State,
    chooser: CellChooser,
    source: Any,
    power_keys: tuple[str, ...],
    scope: str,
    status: str,
) -> Profile:
    cells = [c for c in spec.cells() if c.key in state.done]
    points = tuple(p for c in cells for p in state.done[c.key])
    sweep = {
        "spec": spec.to_json(),
        "mode": chooser.mode,
        "done": [c.key for c in cells if c.key not in state.quick],
        "quick": [c.key for c in cells if c.key in state.quick],
        "cells_total": len(spec.cells()),
        "io_seconds": state.io_seconds,
        "power_scope": scope,
    }
    return Profile(
        points=points,
        synthetic=ctx.synthetic,
        note=ctx.note,
        machine=dict(ctx.machine),
        storage=dict(ctx.storage),
        meters=ctx.meters,
        idle_power=None if state.idle is None else state.idle[0],
        idle_power_source=None if state.idle is None else source,
        idle_power_spread=None if state.idle is None else state.idle[1],
        power_domains=power_keys,
        created=state.created,
        tool=tool_version(),
        status="complete" if status == "complete" else "partial",
        sweep=sweep,
        waiting=tuple(
            state.waiting[k] for s, c, m in wanted(spec) if (k := (s.key, c, m)) in state.waiting
        ),
        levers=dict(ctx.levers),
    )


def run_sweep(
    spec: SweepSpec,
    measurer: Measurer,
    out: str | Path,
    *,
    context: SweepContext | None = None,
    resume: Profile | None = None,
    progress: ProgressSink | None = None,
    chooser: CellChooser | None = None,
    clock: Callable[[], float] = time.monotonic,
    waiters: WaitersFactory | None = None,
) -> Profile:
    """Measure the grid (or the chooser's part of it) into the profile file ``out``.

    ``resume``: a partial profile of the same sweep (loaded from ``out``); its cells are kept
    and not measured again. The file is valid after every cell; the returned profile is the
    final one (``status: "complete"``). ``waiters`` opens the waiter processes of the waiting
    power (:class:`~greenckpt.profile.waiting.ProcessWaiters`), needed when
    ``spec.waiting_seconds > 0``.
    """
    spec.validate()
    if spec.waiting_seconds > 0 and waiters is None:
        raise SweepError(
            "measuring the waiting power (waiting_seconds > 0) needs waiter processes: "
            "pass waiters=, or waiting_seconds=0 to skip it"
        )
    with _signals_end_the_sweep():
        return _run_sweep(
            spec,
            measurer,
            out,
            ctx=context or SweepContext(),
            resume=resume,
            progress=progress,
            chooser=chooser,
            clock=clock,
            waiters=waiters,
        )


def _waiting_phase(
    spec: SweepSpec,
    measurer: Measurer,
    waiters: WaitersFactory | None,
    state: _State,
    save: Callable[[], None],
) -> None:
    """The waiting power (when the spec asks for it) of every setting the state lacks, each
    entry kept in ``state`` and saved at once when the file already has a point (else with
    the first cell)."""
    if spec.waiting_seconds <= 0:
        return
    assert waiters is not None  # run_sweep refuses it

    def keep(entry: WaitingPower) -> None:
        state.waiting[(entry.setting_key, entry.cstates, entry.mode)] = entry
        if state.done:  # a profile file needs a point
            save()

    measure_waiting(spec, measurer, waiters, state.waiting, keep)


def _run_sweep(
    spec: SweepSpec,
    measurer: Measurer,
    out: str | Path,
    *,
    ctx: SweepContext,
    resume: Profile | None,
    progress: ProgressSink | None,
    chooser: CellChooser | None,
    clock: Callable[[], float],
    waiters: WaitersFactory | None,
) -> Profile:
    choose: CellChooser = chooser or FullGrid()
    state = _resume_state(resume, spec, ctx) if resume is not None else _State()
    state.created = state.created or now_iso()
    cells = spec.cells()
    eta = Eta(
        total_bytes=sum(cell_bytes(spec, c) for c in cells),
        total_starts=sum(cell_starts(spec, c) for c in cells),
    )
    for c in cells:
        if c.key in state.done:
            q = c.key in state.quick
            eta.skip(cell_bytes(spec, c, quick=q), cell_starts(spec, c, quick=q))
    if progress is not None:
        progress.started(len(cells), len(state.done), eta)
    power = measurer.power_choice
    if state.idle is None and spec.idle_seconds > 0:
        state.idle = measurer.idle(spec.idle_seconds)

    def snapshot(status: str) -> Profile:
        return _profile(spec, ctx, state, choose, power.source, power.keys, power.scope, status)

    _waiting_phase(spec, measurer, waiters, state, lambda: save_profile(snapshot("partial"), out))
    pending = [c for c in cells if c.key not in state.done or c.key in state.quick]
    while pending:
        current = snapshot("partial") if state.done else None
        batch = [(c, q) for c, q in choose.next_cells(current, pending) if c in pending]
        batch = [(c, q) for c, q in batch if not (q and c.key in state.done)]
        if not batch:
            break
        for cell, quick in batch:
            t0 = clock()
            points, io_s = measure_cell(spec, measurer, cell, quick=quick)
            state.done[cell.key] = points
            state.io_seconds += io_s
            if quick:
                state.quick.add(cell.key)
            else:
                state.quick.discard(cell.key)
                pending.remove(cell)
            eta.add(
                cell_bytes(spec, cell, quick=quick),
                clock() - t0,
                cell_starts(spec, cell, quick=quick),
            )
            save_profile(snapshot("partial"), out)
            if progress is not None:
                look = "quick look (1 run): " if quick else ""
                progress.cell_done(len(state.done), cell, look + _summary(points), eta)
    if not state.done:
        raise SweepError("the sweep measured nothing: check the grid and the adaptive options")
    final = snapshot("complete")
    save_profile(final, out)
    if progress is not None:
        progress.finished(eta)
    return final
