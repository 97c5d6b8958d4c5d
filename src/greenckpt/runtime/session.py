"""The runtime of one node: apply the policy's settings for every I/O phase, always put the
node back, and account time and energy to every phase of the run.

Why: saito2013's runtime (section 5, Figure 5) is notified when a checkpoint or restart
starts, looks up the settings for it, applies the CPU frequency and the I/O parallelism, and
restores everything when the phase is over; mills2013 (section 3) shows that this explicit
start/end notification is what makes the saving possible. :class:`Runtime` is that component
for one node — the process that controls the node — and is reached three ways:

* ``with runtime.phase("checkpoint", path=..., size=...) as settings:`` from any code;
* :meth:`Runtime.begin` / :meth:`Runtime.end` from the notification socket (one call per
  notification, from any thread);
* :class:`RuntimeHook`, the :class:`~greenckpt.ckpt.hooks.PhaseHook` the checkpoint library
  calls at the start and end of every checkpoint, flush and restart.

Applying settings. A checkpoint, restart or flush is decided by the :class:`Policy`; its CPU
frequency or governor and its C-state setting are applied through
:class:`~greenckpt.platform.restore.NodeSettings`, which saves every attribute in a state file
*before* the first write and restores it on return, exception and SIGTERM/SIGINT/SIGHUP — and,
after SIGKILL or a crash, through
:func:`~greenckpt.platform.restore.restore_from_state_file` (which :meth:`Runtime.start` calls
itself when it finds a dead session's file). Between phases the node is as it was found, and
no state file exists. The number of I/O processes and the codec are advice returned to the
caller (the library applies them). ``compute`` and ``rework`` change nothing.

What is not applied, and said so in the phase's :class:`Settings` notes and in the report:

* a node without frequency control (no cpufreq, as in most VMs, or cpufreq not writable):
  frequency and governor are left as found — parallelism only;
* a node without C-state control: C-states are left as found;
* ``control=False``: the runtime decides and accounts, and never touches the node;
* a *background* phase — one that runs while the application goes on, as the library's
  asynchronous level-4 flush does (flushes are background unless ``background=False``): its
  CPU settings would slow the application's compute, so only its parallelism is advised.

Overlapping notifications. Several notifiers may report the same kind of phase at once (two
emulated nodes on one host both starting a checkpoint, each rank group's leader): phases are
*reference-counted per kind* — the first begin decides and applies, later begins get the same
settings, and the last end restores; the span from first begin to last end is one record
(``notifiers`` says how many it merged, ``ok`` is False when any ended in failure). Different
kinds at once (a restart while a checkpoint runs, which only a misbehaving notifier does): the
node takes the settings of the kind begun last; when it ends, those of the kind still running
are applied again; both records say so.

Accounting. Every phase boundary is one synchronous reading of every meter
(:meth:`~greenckpt.platform.sampler.Sampler.mark`); a record's energy is the counter delta
between its two boundary readings, so no second integrator exists and the time between I/O
phases is accounted as ``compute`` (or ``rework`` while a rework phase is open) from
:meth:`Runtime.start` to :meth:`Runtime.close`. A phase's end reading is also the next
compute span's start reading, so the records partition the run exactly: their energies add up
to the run's. (Marks rather than :meth:`Sampler.phase` because notifications arrive from
several threads and a sampler phase nests per thread.) A background phase gets its own record
overlapping the compute ones. Every figure carries its source: ``measured`` (RAPL, perf, IPMI,
...) or ``estimated`` (the utilisation estimator, used when nothing is measurable).

Lost work. The runtime cannot see a crash: it sees the compute go on until the restart begins.
So at a restart's begin it re-labels as ``lost`` the compute and rework records from the end of
the checkpoint the restart reads back up to the restart's begin — the work done since that
checkpoint *and* the downtime between the crash and the restart (the job's teardown, the
batch system, the relaunch, which the runtime can only see as more "compute"). Which
checkpoint: the newest one, of the restart's level when the restart or the rework after it
names one (the library names the level of the checkpoint it restored when it announces the
rework), that ended ok; for a flushed copy (level 4 by an asynchronous flush) the level-1
checkpoint the flush copied; and no earlier than the end of the previous restart when no
checkpoint ended ok since (that restart's state is the one being read again). What it cannot
know, and each lost record's note says: with no level named it assumes the newest checkpoint
that ended ok, and a fall-back to an older checkpoint of the same level (a damaged newest one)
is not seen — the lost work is then counted short. A restart with no checkpoint of this run
before it read one written before the runtime started: nothing is re-labelled (the compute
before it is the job's start-up, as in any run). The same iterations done again after the
restart are ``rework`` (announced by the library), the copy that survived: useful compute (see
:mod:`greenckpt.runtime.report`). A rework still open when a restart begins belonged to the
attempt that died: it ends there, and its late end notification is ignored. A restart that
ends failed restored nothing: every compute and rework record before it becomes ``lost`` (the
application stops, or starts afresh from its initial state with the library's
``on_unrecoverable="fresh"``; either way none of that work survived).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Literal, Self, overload

from greenckpt.ckpt.hooks import HookKind, PhaseAdvice
from greenckpt.errors import InvalidValueError
from greenckpt.phases import AccountedKind
from greenckpt.platform.meters.base import Meter, Source
from greenckpt.platform.meters.detect import Selection, select_meters
from greenckpt.platform.restore import NodeSettings, pending_state, restore_from_state_file
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.sampler import DEFAULT_RATE_HZ, Mark, Sampler
from greenckpt.profile.power import PowerChoice, choose_power_domains
from greenckpt.runtime.policy import DEFAULT_IO_PROCESSES, NO_FREQUENCY_CONTROL, Node, Policy
from greenckpt.runtime.report import (
    RUN_KINDS,
    USEFUL_KINDS,
    BaselineRun,
    PhaseRecord,
    PowerTrace,
    RunKind,
    RunReport,
)
from greenckpt.runtime.settings import PHASE_KINDS, PhaseKind, PhaseRequest, Settings

__all__ = [
    "CONTROL_OFF",
    "AccountingKind",
    "PhaseRecord",
    "Runtime",
    "RuntimeHook",
]

AccountingKind = AccountedKind
"""Phases that change nothing and are only accounted."""

CONTROL_OFF = "control off: settings decided and accounted, never applied to the node"
"""The note on every decision of a runtime made with ``control=False``."""
_BACKGROUND = (
    "background phase (the application computes meanwhile): CPU frequency, governor and "
    "C-states not applied, parallelism only"
)
_NO_CSTATES = "no C-state control on this node: C-states left as found"
_LOST = "lost to a failure: computed"
"""How every lost record's note begins (a later, better-informed account replaces it)."""


def _end(record: PhaseRecord) -> float:
    return record.end_s


@dataclass
class _Span:
    """An open phase of one kind (reference-counted)."""

    kind: RunKind
    index: int
    start: Mark
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


@dataclass
class _Segment:
    """The open compute or rework span between I/O phases."""

    kind: AccountingKind
    index: int
    start: Mark


class Runtime:
    """The energy-aware runtime of one node (see the module docstring).

    ``policy`` decides the settings of every I/O phase. ``root``: the machine (``/``; a fake
    tree in tests). ``meters``: what to sample (a selection or meters the caller owns), or
    ``None`` to detect the best available (the runtime then owns and closes them; the
    utilisation estimator, labelled estimated, when nothing is measurable). ``control``:
    False decides and accounts but never touches the node. ``state_file``: where the original
    settings are saved before the first change (default:
    :func:`~greenckpt.platform.restore.default_state_file`). ``node``: what the node can
    control (detected through ``root`` when None). ``rate_hz``: the sampler's rate (the power
    trace's resolution; phase energies come from boundary readings whatever the rate).

    Use as a context manager (``with Runtime(policy) as rt:``) or call :meth:`start` and
    :meth:`close`; :meth:`report` once closed. Thread-safe: begin/end may come from any thread.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        root: SysRoot | None = None,
        meters: Selection | Sequence[Meter] | None = None,
        control: bool = True,
        state_file: Path | None = None,
        node: Node | None = None,
        rate_hz: float = DEFAULT_RATE_HZ,
    ) -> None:
        self.policy = policy
        self.root = root if root is not None else SysRoot.default()
        self.control = control
        self.state_file = state_file
        self.rate_hz = rate_hz
        self._meters = meters
        self._owned: Selection | None = None
        if control:
            self.node = node if node is not None else Node.detect(self.root)
        else:
            self.node = node if node is not None else Node()
        self.frequency_control = control and self.node.frequency_control
        self.cstate_control = control and self.node.cstate_control
        self._lock = threading.RLock()
        self._state: Literal["new", "running", "closed"] = "new"
        self._sampler: Sampler | None = None
        self._power: PowerChoice | None = None
        self._settings_session: NodeSettings | None = None
        self._spans: dict[RunKind, _Span] = {}
        self._segment: _Segment | None = None
        self._owner: _Span | None = None
        self._records: list[PhaseRecord] = []
        self._abandoned: dict[RunKind, int] = {}
        self._next_index = 0
        self._order = 0
        self._notes: list[str] = []
        self._t0 = 0.0
        self._start_mark: Mark | None = None
        self._end_mark: Mark | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        """Open node control (restoring what a crashed session left), start sampling, and
        begin accounting compute."""
        with self._lock:
            if self._state != "new":
                raise PlatformError(f"the runtime is already {self._state}; make a new one")
            self._run_notes()
            if self.frequency_control or self.cstate_control:
                self._open_node_control()
            try:
                self._start_sampler()
            except BaseException:
                if self._settings_session is not None:
                    self._settings_session.close()
                    self._settings_session = None
                raise
            assert self._sampler is not None
            mark = self._sampler.mark()
            self._t0 = mark.t_s
            self._start_mark = mark
            self._segment = _Segment("compute", self._take_index(), mark)
            self._state = "running"
        return self

    def _run_notes(self) -> None:
        if not self.control:
            self._notes.append(CONTROL_OFF)
            return
        if not self.node.frequency_control:
            why = f" ({self.node.frequency_reason})" if self.node.frequency_reason else ""
            self._notes.append(f"{NO_FREQUENCY_CONTROL}{why}")
        if not self.node.cstate_control:
            self._notes.append(_NO_CSTATES)

    def _open_node_control(self) -> None:
        pending = pending_state(self.root, self.state_file)
        if pending is not None and not pending.alive:
            restored = restore_from_state_file(self.root, self.state_file)
            what = "discarded (from before the last reboot)" if restored.stale else "restored"
            self._notes.append(
                f"node settings left by an earlier session (pid {pending.pid}, "
                f"{pending.created}) were {what} at start: {len(restored.written)} write(s)"
            )
        session = NodeSettings(self.root, state_file=self.state_file)
        session.__enter__()  # refuses while a live session holds the node
        self._settings_session = session

    def _start_sampler(self) -> None:
        meters = self._meters
        if meters is None:
            self._owned = select_meters(root=self.root)
            meters = self._owned
        try:
            sampler = Sampler(meters, rate_hz=self.rate_hz)
            sampler.start()
        except BaseException:
            if self._owned is not None:
                self._owned.close()
                self._owned = None
            raise
        self._sampler = sampler
        try:
            self._power = choose_power_domains(sampler.domains, sampler.sources)
        except ValueError as exc:
            self._power = None
            self._notes.append(f"no node energy figure, per-domain energy only: {exc}")
        if self._power is not None and self._power.source == "estimated":
            self._notes.append(
                f"power is ESTIMATED ({self._power.scope}), not measured: use the figures for "
                "orders of magnitude, not as a measured saving"
            )

    def close(self) -> None:
        """End every open phase, restore the node, stop sampling; idempotent.

        Raises PlatformError when a setting could not be restored (the state file is then
        kept for ``greenckpt restore``); sampling is stopped and accounting finished anyway.
        """
        with self._lock:
            if self._state == "new":
                self._state = "closed"
                return
            if self._state == "closed":
                return
            for kind in [k for k in RUN_KINDS if k in self._spans]:
                span = self._spans[kind]
                if kind in PHASE_KINDS:
                    span.notes.append("still open when the runtime closed: counted as failed")
                    span.ok = False
                span.refs = 1
                self._end_locked(kind, span.ok)
            assert self._sampler is not None
            mark = self._sampler.mark()
            self._close_segment(mark)
            self._end_mark = mark
            self._state = "closed"
            failure: PlatformError | None = None
            if self._settings_session is not None:
                try:
                    self._settings_session.close()
                except PlatformError as exc:
                    failure = exc
                self._settings_session = None
            self._sampler.stop()
            if self._owned is not None:
                self._owned.close()
                self._owned = None
            if failure is not None:
                raise failure

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        with contextlib.suppress(PlatformError):  # the original exception matters more
            self.close()

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`close`."""
        return self._state == "running"

    @property
    def sampler(self) -> Sampler | None:
        """The sampler (None before :meth:`start`)."""
        return self._sampler

    @property
    def power(self) -> PowerChoice | None:
        """The domains summed into node energy, their scope and source (None: no figure)."""
        return self._power

    @property
    def _power_source(self) -> Source | None:
        if self._power is None:
            return None
        return "estimated" if self._power.source == "estimated" else "measured"

    @property
    def notes(self) -> tuple[str, ...]:
        """Run-level statements (no frequency control, control off, estimated power, ...)."""
        with self._lock:
            return tuple(self._notes)

    def note(self, text: str) -> None:
        """Add a run-level statement to the report, e.g. a notification that was lost (the
        notification socket reports those here, so a skewed phase never goes unsaid)."""
        with self._lock:
            if text not in self._notes:
                self._notes.append(text)

    @property
    def records(self) -> tuple[PhaseRecord, ...]:
        """The finished records so far, in the order the phases started."""
        with self._lock:
            return tuple(sorted(self._records, key=lambda r: r.index))

    def active(self) -> dict[RunKind, int]:
        """Open phases and how many notifiers hold each."""
        with self._lock:
            return {k: s.refs for k, s in self._spans.items()}

    # -- phases ------------------------------------------------------------------------------

    @overload
    def begin(
        self,
        kind: PhaseKind,
        *,
        path: str | None = None,
        size: int = 0,
        level: int | None = None,
        codec: str | None = None,
        background: bool | None = None,
        node: int | None = None,
    ) -> Settings: ...

    @overload
    def begin(
        self,
        kind: AccountingKind,
        *,
        path: str | None = None,
        size: int = 0,
        level: int | None = None,
        codec: str | None = None,
        background: bool | None = None,
        node: int | None = None,
    ) -> None: ...

    def begin(
        self,
        kind: RunKind,
        *,
        path: str | None = None,
        size: int = 0,
        level: int | None = None,
        codec: str | None = None,
        background: bool | None = None,
        node: int | None = None,
    ) -> Settings | None:
        """A phase of ``kind`` starts; for an I/O phase return the settings now applied.

        ``checkpoint``/``restart``/``flush`` need ``path`` and ``size`` (bytes this node
        moves, >= 1); ``background`` says whether the application computes meanwhile
        (default: True for ``flush``, else False). A kind already open gets the settings of
        its first begin (reference counting). ``compute``/``rework`` return None. The
        ``level`` of a restart, or of the rework after it, is the level of the checkpoint the
        restart reads back: it decides which work is accounted as lost (see the module
        docstring). ``lost`` cannot be begun: the runtime accounts it at the restart.
        ``node``: the notifier's node index in the job, kept in the record (``nodes``).
        """
        if kind not in RUN_KINDS:
            raise InvalidValueError(
                f"phase kind must be one of {', '.join(RUN_KINDS)}, got {kind!r}"
            )
        if kind == "lost":
            raise InvalidValueError(
                "lost is not a phase to begin: the runtime accounts the work lost to a failure "
                "itself when the restart begins; begin restart (and rework after it) instead"
            )
        request: PhaseRequest | None = None
        if kind in PHASE_KINDS:
            if path is None or size < 1:
                raise InvalidValueError(
                    f"a {kind} phase needs the path it uses and its size in bytes (>= 1), "
                    f"got path={path!r}, size={size!r}"
                )
            request = PhaseRequest(kind, path, size, level=level, codec=codec)
        with self._lock:
            sampler = self._running_sampler()
            span = self._spans.get(kind)
            if span is not None:
                span.refs += 1
                span.notifiers += 1
                if node is not None:
                    span.nodes.add(node)
                span.size += max(size, 0)
                if level is not None:
                    span.levels.add(level)
                if background is not None and background != span.background:
                    span.notes.append(
                        f"a notifier said background={background}; the first begin's "
                        f"background={span.background} was kept"
                    )
                return span.settings
            mark = sampler.mark()
            self._order += 1
            index = self._take_index() if request is not None else -1  # recorded per segment
            span = _Span(kind, index, mark, self._order, path=path, size=size)
            if node is not None:
                span.nodes.add(node)
            if level is not None:
                span.level = level
                span.levels.add(level)
            if kind == "restart":
                self._abandon_rework()
            self._spans[kind] = span
            if request is None:
                self._resegment(mark, split=True)
                if kind == "rework" and level is not None:
                    self._relabel_lost_for_rework(level)
                return None
            span.background = kind == "flush" if background is None else background
            span.settings = self._effective(self._decide(request), span.background)
            self._resegment(mark, split=kind == "restart")
            if kind == "restart":
                self._relabel_lost(mark.t_s - self._t0, level, span)
            self._reconcile()
            return span.settings

    def end(
        self,
        kind: RunKind,
        ok: bool = True,
        *,
        node: int | None = None,
        seconds: float | None = None,
    ) -> PhaseRecord | None:
        """A phase of ``kind`` ends (``ok`` False: it failed).

        ``node`` and ``seconds``: the notifier's node and how long the phase took by its own
        clock (a checkpoint tool's timing). The runtime times every phase itself from its
        meter readings; the longest notifier timing is kept beside it in the record
        (``reported_seconds``), so a reader can see how late notifications came.

        Returns the record it closed: the I/O phase's, or for ``compute``/``rework`` the
        compute or rework span that ends here; None while other notifiers still hold the
        phase (reference counting) or when nothing was being accounted.
        """
        with self._lock:
            self._running_sampler()
            if kind not in self._spans:
                if self._abandoned.get(kind, 0) > 0:  # its attempt died; the restart ended it
                    self._abandoned[kind] -= 1
                    return None
                raise InvalidValueError(f"no {kind} phase is open")
            if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
                raise InvalidValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
            span = self._spans[kind]
            if node is not None:
                span.nodes.add(node)
            if seconds is not None:
                span.reported_s = max(seconds, span.reported_s or 0.0)
            return self._end_locked(kind, ok)

    def _end_locked(self, kind: RunKind, ok: bool) -> PhaseRecord | None:
        sampler = self._running_sampler()
        span = self._spans[kind]
        span.ok = span.ok and ok
        span.refs -= 1
        if span.refs > 0:
            return None
        del self._spans[kind]
        if kind not in PHASE_KINDS:
            mark = sampler.mark()
            return self._resegment(mark, split=True)
        self._reconcile()
        mark = sampler.mark()
        record = self._make_record(span, mark)
        if kind == "restart" and not span.ok:
            self._relabel_all_lost(record.start_s)
        self._records.append(record)
        self._resegment(mark)
        return record

    @overload
    def phase(
        self,
        kind: PhaseKind,
        *,
        path: str | None = None,
        size: int = 0,
        level: int | None = None,
        codec: str | None = None,
        background: bool | None = None,
    ) -> AbstractContextManager[Settings]: ...

    @overload
    def phase(
        self,
        kind: AccountingKind,
        *,
        path: str | None = None,
        size: int = 0,
        level: int | None = None,
        codec: str | None = None,
        background: bool | None = None,
    ) -> AbstractContextManager[None]: ...

    def phase(
        self,
        kind: PhaseKind | AccountingKind,
        *,
        path: str | None = None,
        size: int = 0,
        level: int | None = None,
        codec: str | None = None,
        background: bool | None = None,
    ) -> AbstractContextManager[Settings | None]:
        """``with runtime.phase("checkpoint", path=p, size=n) as settings:`` — the settings
        are applied inside and restored on leaving, also by an exception or KeyboardInterrupt
        (the phase is then recorded as failed)."""
        return self._phase(kind, path, size, level, codec, background)

    @contextlib.contextmanager
    def _phase(
        self,
        kind: PhaseKind | AccountingKind,
        path: str | None,
        size: int,
        level: int | None,
        codec: str | None,
        background: bool | None,
    ) -> Iterator[Settings | None]:
        settings = self.begin(
            kind,
            path=path,
            size=size,
            level=level,
            codec=codec,
            background=background,
        )
        try:
            yield settings
        except BaseException:
            self.end(kind, ok=False)
            raise
        self.end(kind, ok=True)

    def hook(self) -> RuntimeHook:
        """This runtime as the checkpoint library's :class:`~greenckpt.ckpt.hooks.PhaseHook`."""
        return RuntimeHook(self)

    # -- report ------------------------------------------------------------------------------

    def report(
        self,
        *,
        predicted_epe: float | None = None,
        predicted_source: str | None = None,
        baselines: Iterable[BaselineRun] = (),
        synthetic: bool = False,
    ) -> RunReport:
        """The run's report (after :meth:`close`): per-phase records, run totals from the
        same meter readings, the power trace; ``predicted_epe`` is the planner's
        ``Plan.best.epe`` for comparison, ``synthetic`` labels a run on a fake platform."""
        with self._lock:
            if self._state != "closed" or self._start_mark is None or self._end_mark is None:
                raise PlatformError("close the runtime before asking for its report")
            assert self._sampler is not None
            start, end = self._start_mark, self._end_mark
            power = self._power
            energy = None
            if power is not None:
                delta = start.energy_to(end)
                energy = sum(delta[k] for k in power.keys)
            trace = None
            if power is not None:
                raw = PowerTrace.from_series(self._sampler.series(), power.keys, power.scope)
                kept = [(t - self._t0, w) for t, w in zip(raw.t_s, raw.watts, strict=True)]
                kept = [(t, w) for t, w in kept if t > 0]
                trace = PowerTrace(
                    tuple(t for t, _ in kept), tuple(w for _, w in kept), raw.source, raw.scope
                )
            return RunReport.from_records(
                self._records,
                total_seconds=end.t_s - start.t_s,
                total_energy_j=energy,
                power_source=self._power_source,
                power_scope="" if power is None else power.scope,
                meters=None if power is None else sorted({k.split("/")[0] for k in power.keys}),
                policy=self.policy.name,
                predicted_epe=predicted_epe,
                predicted_source=predicted_source,
                baselines=baselines,
                trace=trace,
                power_domains=() if power is None else power.keys,
                synthetic=synthetic,
                notes=self._notes,
            )

    # -- internals ---------------------------------------------------------------------------

    def _running_sampler(self) -> Sampler:
        if self._state != "running" or self._sampler is None:
            raise PlatformError(
                "the runtime is not running: start it first (with Runtime(...) as rt:)"
                if self._state == "new"
                else "the runtime is closed: no more phases can be accounted"
            )
        return self._sampler

    def _take_index(self) -> int:
        self._next_index += 1
        return self._next_index - 1

    def _decide(self, request: PhaseRequest) -> Settings:
        """The policy's settings; a policy that raises gets defaults with the reason (a
        checkpoint must never fail because a lookup did)."""
        try:
            return self.policy.decide(request)
        except Exception as exc:
            return Settings(
                io_processes=max(1, min(DEFAULT_IO_PROCESSES, self.node.cpus)),
                source="defaults (policy failed)",
                codec=request.fixed_codec[1],
                notes=(
                    f"policy {getattr(self.policy, 'name', '?')} failed: "
                    f"{type(exc).__name__}: {exc}; settings left as found",
                ),
            )

    def _effective(self, decided: Settings, background: bool) -> Settings:
        """The settings the node will get: what this node, ``control`` and a background
        phase allow, with a note for everything the policy asked that is not applied."""
        notes = list(decided.notes)
        frequency, governor, cstates = decided.frequency_hz, decided.governor, decided.cstates
        if not self.control:
            if decided.controls_frequency or cstates is not None:
                notes.append(CONTROL_OFF)
            frequency = governor = cstates = None
        else:
            if not self.frequency_control:
                if not any(n.startswith(NO_FREQUENCY_CONTROL) for n in notes):
                    why = self.node.frequency_reason
                    notes.append(NO_FREQUENCY_CONTROL + (f"; {why}" if why else ""))
                frequency = governor = None
            if cstates is not None and not self.cstate_control:
                notes.append(_NO_CSTATES)
                cstates = None
            if background and (
                frequency is not None or governor is not None or cstates is not None
            ):
                notes.append(_BACKGROUND)
                frequency = governor = cstates = None
        return replace(
            decided,
            frequency_hz=frequency,
            governor=governor,
            cstates=cstates,
            notes=tuple(dict.fromkeys(notes)),
        )

    def _reconcile(self) -> None:
        """Give the node the settings of the open foreground I/O phase begun last (or its own,
        when none), restoring first whatever another phase applied."""
        candidates = [
            s
            for k, s in self._spans.items()
            if k in PHASE_KINDS
            and not s.background
            and s.settings is not None
            and (s.settings.controls_frequency or s.settings.cstates is not None)
        ]
        desired = max(candidates, key=lambda s: s.order, default=None)
        owner = self._owner
        if desired is owner:
            return
        session = self._settings_session
        if owner is not None:
            self._owner = None
            if desired is not None:
                owner.notes.append(
                    f"its settings were replaced while a {desired.kind} phase ran (the node "
                    "takes the settings of the phase begun last)"
                )
            if session is not None:
                try:
                    session.restore()
                except PlatformError as exc:
                    owner.notes.append(f"restoring the node after this phase failed: {exc}")
                    self._notes.append(f"restoring the node failed: {exc}")
        if desired is None or desired.settings is None:
            return
        if owner is not None:
            desired.notes.append(
                f"applied over a {owner.kind} phase's settings (the node takes the settings of "
                "the phase begun last)"
            )
        if session is None:  # cannot happen: settings were stripped without control
            return
        try:
            desired.notes.extend(self._apply(session, desired.settings))
            self._owner = desired
        except PlatformError as exc:
            with contextlib.suppress(PlatformError):
                session.restore()
            desired.settings = replace(
                desired.settings,
                frequency_hz=None,
                governor=None,
                cstates=None,
                notes=(
                    *desired.settings.notes,
                    f"could not apply the CPU settings ({exc}): node left as found",
                ),
            )

    @staticmethod
    def _apply(session: NodeSettings, settings: Settings) -> list[str]:
        notes: list[str] = []
        if settings.frequency_hz is not None:
            notes.extend(session.set_frequency(settings.frequency_hz).notes)
        elif settings.governor is not None:
            notes.extend(session.set_governor(settings.governor).notes)
        if settings.cstates is True:
            session.enable_cstates()
        elif settings.cstates is False:
            session.disable_cstates(deeper_than_s=0.0)
        return notes

    # -- lost work ---------------------------------------------------------------------------

    def _abandon_rework(self) -> None:
        """A restart begins while a rework is open: that rework belonged to the attempt that
        died (no end will come from it), so it ends here; its notifiers' late ends are
        ignored (:meth:`end`)."""
        span = self._spans.pop("rework", None)
        if span is not None:
            self._abandoned["rework"] = self._abandoned.get("rework", 0) + span.refs

    def _relabel_lost_for_rework(self, level: int) -> None:
        """A rework names the level of the checkpoint its restart restored: account the lost
        work of the newest restart again with that level (it can only grow: the newest
        checkpoint of one level is never newer than the newest of all). A rework begun while
        a restart is still open (a misbehaving notifier) says nothing about an older one."""
        restarts = [r for r in self._records if r.kind == "restart"]
        if restarts and "restart" not in self._spans:
            newest = max(restarts, key=lambda r: (r.start_s, r.index))
            self._relabel_lost(newest.start_s, level, None)

    def _relabel_lost(self, before_s: float, level: int | None, span: _Span | None) -> None:
        """Re-label as ``lost`` the compute and rework records from the end of the checkpoint
        a restart beginning at ``before_s`` reads back (of ``level`` when known) to
        ``before_s``; ``span``: the restart's open span, for a note when nothing was lost."""
        origin = self._restored_from(before_s, level)
        if origin is None:
            if span is not None:
                span.notes.append(
                    "no checkpoint of this run ended ok before this restart: it read one "
                    "written before the runtime started, so the compute before it is counted "
                    "as the job's start-up, not as lost work"
                )
            return
        from_s, why = origin
        note = (
            f"{_LOST} after {why}, and the downtime until the restart at {before_s:.3f} s "
            "(the runtime cannot see the crash itself)"
        )
        self._mark_lost(from_s, before_s, note)

    def _relabel_all_lost(self, before_s: float) -> None:
        """A restart that failed restored nothing: whatever the application goes on to do —
        stop, or start afresh from its initial state (the library's
        ``on_unrecoverable="fresh"``) — none of the work computed before it survived, so every
        compute and rework record before ``before_s`` becomes ``lost``. Without this, a run
        that starts afresh would count its first pass and its second as useful work."""
        note = (
            f"{_LOST} before the restart at {before_s:.3f} s, which failed: no checkpoint was "
            "restored, so no work before it survived"
        )
        self._mark_lost(-math.inf, before_s, note)

    def _mark_lost(self, from_s: float, before_s: float, note: str) -> None:
        """Re-label the foreground compute, rework (and already lost) records lying within
        ``[from_s, before_s]`` as ``lost``, with ``note`` replacing any earlier lost note."""
        for i, r in enumerate(self._records):
            if r.background or not (from_s <= r.start_s and r.end_s <= before_s):
                continue
            if r.kind in USEFUL_KINDS or r.kind == "lost":
                notes = tuple(n for n in r.notes if not n.startswith(_LOST))
                self._records[i] = replace(r, kind="lost", notes=(*notes, note))

    def _restored_from(self, before_s: float, level: int | None) -> tuple[float, str] | None:
        """Where the state a restart at ``before_s`` reads back was left: the end of the
        newest checkpoint (of ``level``, when known) that ended ok, or of the previous
        restart when that is newer; with a description for the lost records' note."""
        done = [r for r in self._records if r.ok and not r.background and r.end_s <= before_s]
        checkpoints = [r for r in done if r.kind == "checkpoint"]
        if level is not None:
            copies = [
                r
                for r in self._records
                if r.kind == "flush" and r.ok and r.level == level and r.end_s <= before_s
            ]
            sources = [
                max((c for c in checkpoints if c.end_s <= f.start_s), key=_end, default=None)
                for f in copies
            ]
            checkpoints = [c for c in checkpoints if c.level == level]
            checkpoints += [c for c in sources if c is not None]
        checkpoint = max(checkpoints, key=_end, default=None)
        restart = max((r for r in done if r.kind == "restart"), key=_end, default=None)
        if restart is not None and (checkpoint is None or restart.end_s > checkpoint.end_s):
            return restart.end_s, (
                f"the restart that ended at {restart.end_s:.3f} s (no checkpoint "
                f"{'of level ' + str(level) + ' ' if level is not None else ''}ended ok since, "
                "so this restart reads back the same state or an older one)"
            )
        if checkpoint is None:
            return None
        if level is not None:
            what = f"the level-{level} checkpoint that ended at {checkpoint.end_s:.3f} s"
            if checkpoint.level != level:
                what += f" (its level-{level} copy was made by a flush)"
            return checkpoint.end_s, what + ", the newest of the level the restart read"
        return checkpoint.end_s, (
            f"the newest checkpoint that ended ok (level {checkpoint.level}, at "
            f"{checkpoint.end_s:.3f} s; the restart did not say which level it read: a "
            "fall-back to an older checkpoint would make the lost work longer than counted)"
        )

    def _foreground(self) -> AccountingKind | None:
        """What the time now counts as: None during a foreground I/O phase (it has its own
        record), rework while one is open, else compute."""
        if any(k in PHASE_KINDS and not s.background for k, s in self._spans.items()):
            return None
        return "rework" if "rework" in self._spans else "compute"

    def _resegment(self, mark: Mark, *, split: bool = False) -> PhaseRecord | None:
        """Close the compute/rework span at ``mark`` when what the time counts as changes
        (or ``split``), and open the next one there; return the record closed, if any."""
        wanted = self._foreground()
        closed: PhaseRecord | None = None
        if self._segment is not None and (split or self._segment.kind != wanted):
            closed = self._close_segment(mark)
        if wanted is not None and self._segment is None:
            self._segment = _Segment(wanted, self._take_index(), mark)
        return closed

    def _close_segment(self, mark: Mark) -> PhaseRecord | None:
        seg, self._segment = self._segment, None
        if seg is None:
            return None
        record = self._record(seg.kind, seg.index, seg.start, mark)
        self._records.append(record)
        return record

    def _make_record(self, span: _Span, end: Mark) -> PhaseRecord:
        notes = list(span.notes)
        level = span.level
        if len(span.levels) > 1:
            notes.append(f"merged notifications of levels {sorted(span.levels)}")
            level = None
        return self._record(
            span.kind,
            span.index,
            span.start,
            end,
            level=level,
            path=span.path,
            size=span.size,
            settings=span.settings,
            ok=span.ok,
            background=span.background,
            notifiers=span.notifiers,
            nodes=tuple(sorted(span.nodes)),
            reported_seconds=span.reported_s,
            notes=tuple(notes),
        )

    def _record(
        self,
        kind: RunKind,
        index: int,
        start: Mark,
        end: Mark,
        **extra: object,
    ) -> PhaseRecord:
        energy = start.energy_to(end)
        power = self._power
        sampler = self._sampler
        assert sampler is not None
        return PhaseRecord(
            kind=kind,
            index=index,
            start_s=start.t_s - self._t0,
            end_s=end.t_s - self._t0,
            energy_j=energy,
            sources=dict(sampler.sources),
            node_energy_j=None if power is None else sum(energy[k] for k in power.keys),
            power_source=self._power_source,
            power_domains=() if power is None else power.keys,
            gaps=start.gaps_to(end),
            **extra,  # type: ignore[arg-type]
        )


class RuntimeHook:
    """A :class:`Runtime` as the checkpoint library's
    :class:`~greenckpt.ckpt.hooks.PhaseHook`.

    ``begin`` starts the phase (reference-counted across the library's nodes) and advises the
    number of I/O processes; ``end`` ends it. An ``end`` for a (kind, node) that has no open
    ``begin`` here — its begin failed — is ignored, so one failed notification never
    unbalances the count.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._open: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def begin(
        self, kind: HookKind, *, level: int | None, path: str, size: int, node: int
    ) -> PhaseAdvice:
        """Start the phase; advise the policy's I/O processes (and say why in the note).
        Rework is only accounted: no settings, no advice."""
        if kind == "rework":  # its level: that of the checkpoint the restart restored
            self.runtime.begin("rework", level=level, node=node)
            settings = None
        else:
            settings = self.runtime.begin(
                kind, path=path, size=max(1, size), level=level, node=node
            )
        with self._lock:
            self._open[(kind, node)] = self._open.get((kind, node), 0) + 1
        if settings is None:
            return PhaseAdvice()
        return PhaseAdvice(io_processes=settings.io_processes, note=advice_note(settings))

    def end(self, kind: HookKind, *, node: int, ok: bool, seconds: float) -> None:
        """End the phase begun for ``node``; the runtime measures its own time and keeps
        the library's ``seconds`` beside it."""
        with self._lock:
            held = self._open.get((kind, node), 0)
            if held == 0:
                return
            self._open[(kind, node)] = held - 1
        self.runtime.end(kind, ok=ok, node=node, seconds=seconds)


def advice_note(settings: Settings) -> str:
    """One line for the library's logs: which settings, from which rule, first caveat."""
    note = f"{settings.source}: {settings.label}"
    if settings.notes:
        note += f" ({settings.notes[0]})"
    return note
