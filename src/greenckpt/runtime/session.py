"""The runtime of one node: apply the policy's settings for every I/O phase, always put the
node back, and account time and energy to every phase of the run.

Why: saito2013's runtime (section 5, Figure 5) is notified when a checkpoint or restart starts,
looks up the settings for it, applies them and restores everything when the phase is over;
mills2013 (section 3) shows that this explicit start/end notification is what makes the saving
possible. :class:`Runtime` is that component for one node, reached from any code
(``with runtime.phase(...)``), from the notification socket (:meth:`Runtime.begin` /
:meth:`Runtime.end`, from any thread) and from the checkpoint library
(:class:`~greenckpt.runtime.hook.RuntimeHook`). What it applies and when is decided in
:mod:`greenckpt.runtime.control`, the spans it accounts are :mod:`greenckpt.runtime.spans`,
the work a failure lost is re-labelled by :mod:`greenckpt.runtime.lost`, and the ranks'
restarts of one failure are joined into one by :mod:`greenckpt.runtime.restarts`. The design —
overlapping notifications, accounting by meter marks, lost work — is in
docs/design/runtime.md.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Literal, Self, overload

from greenckpt.errors import InvalidValueError
from greenckpt.phases import AccountedKind
from greenckpt.platform.meters.base import Meter
from greenckpt.platform.meters.detect import Selection
from greenckpt.platform.nodelock import NodeHeldError
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.sampler import DEFAULT_RATE_HZ, Sampler
from greenckpt.profile.power import PowerChoice
from greenckpt.runtime.control import (
    CONTROL_OFF,
    NodeControl,
    decide,
    effective_settings,
    run_notes,
)
from greenckpt.runtime.hook import RuntimeHook, advice_note
from greenckpt.runtime.lost import NO_CHECKPOINT_BEFORE, relabel_all_lost, relabel_lost
from greenckpt.runtime.metering import Reading, RunMeters
from greenckpt.runtime.node import Node
from greenckpt.runtime.policy import Policy
from greenckpt.runtime.restarts import (
    Notifier,
    RestartGroup,
    abandon_rework,
    relabel_for_rework,
)
from greenckpt.runtime.run_report import (
    RUN_KINDS,
    BaselineRun,
    PhaseRecord,
    RunKind,
    RunReport,
)
from greenckpt.runtime.settings import (
    PHASE_KINDS,
    PhaseKind,
    PhaseRequest,
    Settings,
    phase_request,
)
from greenckpt.runtime.spans import AppState, Segment, Span, Timeline

__all__ = [
    "CONTROL_OFF",
    "AccountingKind",
    "PhaseRecord",
    "Runtime",
    "RuntimeHook",
    "advice_note",
]

AccountingKind = AccountedKind
"""Phases that change nothing and are only accounted."""


class Runtime:
    """The energy-aware runtime of one node (see the module docstring and docs/design/runtime.md).

    ``policy`` decides the settings of every I/O phase. ``root``: the machine (``/``; a fake
    tree in tests). ``meters``: what to sample (a selection or meters the caller owns), or
    ``None`` to detect the best available (the runtime then owns and closes them; the
    utilisation estimator, labelled estimated, when nothing is measurable). ``control``:
    False decides and accounts but never touches the node. ``state_file``: where the original
    settings are saved before the first change (default:
    :func:`~greenckpt.platform.restore.default_state_file`). ``node``: what the node can
    control (detected through ``root`` when None). ``rate_hz``: the sampler's rate (the power
    trace's resolution; phase energies come from boundary readings whatever the rate).
    ``require_control``: refuse to start (PlatformError) when another live session controls
    the node; by default such a run goes on with control off (``shared_with`` names the
    other session, and a note says so): clusters share nodes between jobs.

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
        require_control: bool = False,
    ) -> None:
        self.policy = policy
        self.require_control = require_control
        self.shared_with: str | None = None
        """The session that controls the node when another one held it at start (this one
        then runs with control off), else None."""
        self.root = root if root is not None else SysRoot.default()
        self.control = control
        self.state_file = state_file
        self.rate_hz = rate_hz
        self._meter = RunMeters(meters, self.root, rate_hz)
        if control:
            self.node = node if node is not None else Node.detect(self.root)
        else:
            self.node = node if node is not None else Node()
        self.frequency_control = control and self.node.frequency_control
        self.cstate_control = control and self.node.cstate_control
        self._lock = threading.RLock()
        self._state: Literal["new", "running", "closed"] = "new"
        self._spans: dict[RunKind, Span] = {}
        self._line = Timeline(self._meter)  # the records, and the segment between phases
        self._abandoned: dict[RunKind, int] = {}
        self._restart: RestartGroup | None = None  # the newest restart (runtime/restarts.py)
        self._order = 0
        self._notes: list[str] = []
        self._node_control = NodeControl(self.root, state_file, self._notes)
        self._start_mark: Reading | None = None
        self._end_mark: Reading | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, *, application: bool = True) -> Self:
        """Open node control (restoring what a crashed session left), start sampling, and
        begin accounting compute — or, with ``application=False``, start-up until
        :meth:`application_started` (a job's agent starts before the application does, and
        the wait for the other nodes' agents is not useful compute)."""
        with self._lock:
            if self._state != "new":
                raise PlatformError(f"the runtime is already {self._state}; make a new one")
            self._line.app = "running" if application else "before"
            self._notes.extend(run_notes(self.node, control=self.control))
            if self.frequency_control or self.cstate_control:
                try:
                    self._node_control.open()
                except NodeHeldError as exc:
                    if self.require_control:
                        raise
                    self._share(exc)
            try:
                mark = self._meter.start(self._notes)
            except BaseException:
                self._node_control.close()
                raise
            self._start_mark = mark
            self._line.segment = Segment(
                "compute" if application else "startup", self._line.take_index(), mark
            )
            self._state = "running"
        return self

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
            self._running_sampler()
            mark = self._meter.mark()
            self._line.close_segment(mark)
            self._end_mark = mark
            self._state = "closed"
            failure: PlatformError | None = None
            try:
                self._node_control.close()
            except PlatformError as exc:
                failure = exc
            self._meter.stop()
            if failure is not None:
                raise failure

    def energy_so_far(self) -> tuple[float, float | None]:
        """Seconds since :meth:`start` and the node's energy over them (None: no node
        figure), from one reading now: a job's agent sends it with its progress, so the
        leader can draw a node's power even when the node dies before its final summary."""
        with self._lock:
            self._running_sampler()
            assert self._start_mark is not None
            mark = self._meter.mark()
            return mark.t_s - self._start_mark.t_s, self._meter.node_energy(self._start_mark, mark)

    def _share(self, held: NodeHeldError) -> None:
        """Another live session controls this node (a node shared between jobs): run,
        meter and account all the same, with control off, and say which session has it."""
        self.control = self.frequency_control = self.cstate_control = False
        self.shared_with = held.holder
        self._notes.append(
            f"shared node: another {held.holder} controls this node's settings, so this run "
            "decides and accounts with control off (--require-control refuses instead)"
        )
        self._notes.append(CONTROL_OFF)

    def application_started(self) -> None:
        """The application starts now: start-up ends and compute begins (a no-op when it is
        already running or has ended)."""
        self._application("before", "running")

    def application_ended(self) -> None:
        """The application has ended: what follows until :meth:`close` is teardown, never
        useful compute (a no-op unless it was running or starting)."""
        self._application("before", "after")
        self._application("running", "after")

    def _application(self, was: AppState, now: AppState) -> None:
        with self._lock:
            if self._state != "running" or self._line.app != was:
                return
            self._line.app = now
            self._line.resegment(self._spans, self._meter.mark())

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
        return self._meter.sampler

    @property
    def power(self) -> PowerChoice | None:
        """The domains summed into node energy, their scope and source (None: no figure)."""
        return self._meter.power

    @property
    def notes(self) -> tuple[str, ...]:
        """Run-level statements (no frequency control, control off, estimated power, ...)."""
        with self._lock:
            return tuple(self._notes)

    @property
    def decisions_repeat(self) -> bool:
        """Whether the policy promises the same settings for the same request (its
        ``deterministic`` attribute): the notification socket's native front then answers a
        repeated begin at once and the runtime checks the answer (runtime/front.py)."""
        return bool(getattr(self.policy, "deterministic", False))

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
            return tuple(sorted(self._line.records, key=lambda r: r.index))

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
        size: int | None = 0,
        level: int | None = None,
        codec: str | None = None,
        background: bool | None = None,
        node: int | None = None,
        pid: int | None = None,
    ) -> Settings: ...

    @overload
    def begin(
        self,
        kind: AccountingKind,
        *,
        path: str | None = None,
        size: int | None = 0,
        level: int | None = None,
        codec: str | None = None,
        background: bool | None = None,
        node: int | None = None,
        pid: int | None = None,
    ) -> None: ...

    def begin(
        self,
        kind: RunKind,
        *,
        path: str | None = None,
        size: int | None = 0,
        level: int | None = None,
        codec: str | None = None,
        background: bool | None = None,
        node: int | None = None,
        pid: int | None = None,
    ) -> Settings | None:
        """A phase of ``kind`` starts; for an I/O phase return the settings now applied.

        ``checkpoint``/``restart``/``flush`` need ``path`` and ``size`` (bytes this node
        moves, >= 1, or ``None`` when the notifier cannot know them: planned as 1 byte,
        recorded as unknown); ``background`` says whether the application computes meanwhile
        (default: True for ``flush``, else False). A kind already open gets the settings of
        its first begin (reference counting). ``compute``/``rework`` return None. The
        ``level`` of a restart, or of the rework after it, is the level of the checkpoint the
        restart reads back: it decides which work is accounted as lost (see the module
        docstring). ``lost`` cannot be begun: the runtime accounts it at the restart.
        ``node``: the notifier's node index in the job, kept in the record (``nodes``);
        ``pid``: its process id. The ranks' restarts of one attempt are one restart even when
        they do not overlap (:mod:`greenckpt.runtime.restarts`, told apart by node and pid).
        """
        request = phase_request(kind, path, size, level, codec)
        notifier: Notifier = (node, pid)
        with self._lock:
            self._running_sampler()
            span = self._spans.get(kind)
            if span is None and kind == "restart" and self._restart is not None:
                now_s = self._meter.mark().t_s - self._meter.t0
                span = self._restart.rejoin(
                    notifier, now_s, self._line.records, self._spans, self._line.segment
                )
                if span is not None:  # the time since it ended is the restart's again
                    self._line.segment = None
                    self._node_control.reconcile(self._spans)
            if span is not None:
                span.join(node=node, size=size, level=level, background=background)
                if kind == "restart" and self._restart is not None:
                    self._restart.notifiers.add(notifier)
                return span.settings
            span = self._open_span(kind, self._meter.mark(), request, path, size, level, node)
            if kind == "restart":
                self._restart = RestartGroup(span, {notifier})
            if request is None:
                self._line.resegment(self._spans, span.start, split=True)
                if kind == "rework" and level is not None:
                    relabel_for_rework(self._line.records, self._spans, level)
                return None
            return self._begin_io(span, request, background)

    def _open_span(
        self,
        kind: RunKind,
        mark: Reading,
        request: PhaseRequest | None,
        path: str | None,
        size: int | None,
        level: int | None,
        node: int | None,
    ) -> Span:
        """Open the first span of ``kind`` at ``mark`` (a restart ends an open rework)."""
        self._order += 1
        index = self._line.take_index() if request is not None else -1  # recorded per segment
        span = Span(kind, index, mark, self._order, path=path, size=size or 0)
        span.unknown_sizes = int(size is None)
        if node is not None:
            span.nodes.add(node)
        if level is not None:
            span.level = level
            span.levels.add(level)
        if kind == "restart":
            abandon_rework(self._spans, self._abandoned)
        self._spans[kind] = span
        return span

    def _begin_io(self, span: Span, request: PhaseRequest, background: bool | None) -> Settings:
        """Decide and apply the settings of a new I/O phase; a restart re-labels the work
        lost since the checkpoint it reads back."""
        span.background = span.kind == "flush" if background is None else background
        span.settings = effective_settings(
            decide(self.policy, request, self.node),
            self.node,
            control=self.control,
            background=span.background,
        )
        self._line.resegment(self._spans, span.start, split=span.kind == "restart")
        if span.kind == "restart":
            before_s = span.start.t_s - self._meter.t0
            if not relabel_lost(self._line.records, before_s, request.level):
                span.notes.append(NO_CHECKPOINT_BEFORE)
        self._node_control.reconcile(self._spans)
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
        self._running_sampler()
        span = self._spans[kind]
        span.ok = span.ok and ok
        span.refs -= 1
        if span.refs > 0:
            return None
        del self._spans[kind]
        if kind not in PHASE_KINDS:
            mark = self._meter.mark()
            return self._line.resegment(self._spans, mark, split=True)
        self._node_control.reconcile(self._spans)
        mark = self._meter.mark()
        if self._restart is not None:
            self._restart.closing(span)
        record = self._meter.record(span.kind, span.index, span.start, mark, **span.record_fields())
        if kind == "restart" and not span.ok:
            relabel_all_lost(self._line.records, record.start_s)
        if self._restart is not None and self._restart.span is span:
            self._restart.record = record
        self._line.records.append(record)
        self._line.resegment(self._spans, mark)
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
            return self._meter.report(
                self._line.records,
                self._start_mark,
                self._end_mark,
                policy=self.policy.name,
                predicted_epe=predicted_epe,
                predicted_source=predicted_source,
                baselines=baselines,
                synthetic=synthetic,
                notes=self._notes,
            )

    # -- internals ---------------------------------------------------------------------------

    def _running_sampler(self) -> Sampler:
        sampler = self._meter.sampler
        if self._state != "running" or sampler is None:
            raise PlatformError(
                "the runtime is not running: start it first (with Runtime(...) as rt:)"
                if self._state == "new"
                else "the runtime is closed: no more phases can be accounted"
            )
        return sampler
