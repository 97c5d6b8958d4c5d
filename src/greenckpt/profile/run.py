"""A profile run as one library call: check, resume or refuse, open the meters, sweep, save.

Why here and not in the command line: ``greenckpt profile run``, ``greenckpt demo`` and a
Python user all run the same sweep the same way, so the wiring — meters opened, the sampler
started, a node-settings session only when something on the node changes, everything closed
and the node restored however the sweep ends — and the check that a file may be continued
live in one place. The CLI parses flags into these typed inputs and renders what comes back.

    from greenckpt.profile import MeterRequest, SweepSpec, cpu_settings, run_profile

    spec = SweepSpec(path="/local/ckpt", settings=cpu_settings(), processes=(1, 2, 4))
    profile = run_profile(spec, "node.json", meters=MeterRequest("rapl"), resume=True)

Everything is in SI units (bytes, seconds, hertz, watts). What a sweep was asked to measure
with — the meters, the sampling rate, the adaptive mode's scenarios — is recorded in the
spec's ``extra`` (:func:`sweep_extra`), so a resumed sweep is refused unless they agree.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from greenckpt.errors import InvalidValueError
from greenckpt.optimize.profile_data import Profile, ProfileError, load_profile
from greenckpt.platform.meters import MeterOptions, Selection, select_meters
from greenckpt.platform.meters.detect import check_names
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import SysRoot
from greenckpt.platform.sampler import DEFAULT_RATE_HZ, Sampler
from greenckpt.profile.adaptive import DEFAULT_MARGIN, AdaptiveChooser, DecisionScenario
from greenckpt.profile.grid import CpuSetting, SweepError, SweepSpec
from greenckpt.profile.lever_check import levers_metadata
from greenckpt.profile.measure import NodeMeasurer
from greenckpt.profile.meta import collect_metadata
from greenckpt.profile.power import choose_power_domains
from greenckpt.profile.preflight import default_settings, preflight
from greenckpt.profile.progress import ProgressSink
from greenckpt.profile.store import check_writable_target
from greenckpt.profile.sweep import CellChooser, SweepContext, run_sweep
from greenckpt.profile.waiters import WaitLoop
from greenckpt.profile.waiting import ProcessWaiters, WaitersFactory, default_waiting_ranks

DEFAULT_MTBF_S = 24 * 3600.0
"""The adaptive mode's MTBF of one node when none is given."""
RECORDED_KEYS = ("meters", "rate_hz", "meter_csv", "tdp_W", "adaptive")
"""The keys of ``SweepSpec.extra`` that :func:`sweep_extra` owns."""
PYTHON_SPELLING: Mapping[str, str] = {"resume": "resume=True", "force": "force=True"}
"""How messages name the choices, for a Python caller (the CLI passes its flags instead)."""

Note = Callable[[str], None]
"""Receives a line worth telling the user (the CLI prints it on stderr)."""


@dataclass(frozen=True)
class MeterRequest:
    """Which meters a sweep reads, and how; recorded with the sweep (but not ``root``).

    ``names``: a comma list as :func:`~greenckpt.platform.meters.select_meters` takes it
    (``auto``, ``rapl,ipmi``, ``estimator``); recorded as given. ``csv_path``: an external
    meter's log, which makes the csv meter one that must open. ``tdp_w``: the utilisation
    estimator's per-socket TDP. ``rate_hz``: sampler reads per second. ``root``: the root the
    meters read through (tests give a fake tree).
    """

    names: str = "auto"
    csv_path: str | None = None
    tdp_w: float | None = None
    rate_hz: float = DEFAULT_RATE_HZ
    root: SysRoot | str | None = field(default=None, compare=False)

    def recorded(self) -> dict[str, Any]:
        """The ``extra`` keys a profile keeps about its meters (compared on resume)."""
        doc: dict[str, Any] = {"meters": self.names, "rate_hz": self.rate_hz}
        if self.csv_path is not None:
            doc["meter_csv"] = os.path.abspath(self.csv_path)
        if self.tdp_w is not None:
            doc["tdp_W"] = self.tdp_w
        return doc

    def open(self) -> Selection:
        """Open the meters (a context manager: the caller closes them)."""
        names = check_names([n for n in self.names.split(",") if n.strip()]) or ["auto"]
        if self.csv_path is not None and "csv" not in names:
            names.append("csv")  # a log given is a log read, even with auto meters
        options = MeterOptions(
            csv_path=None if self.csv_path is None else os.path.abspath(self.csv_path),
            tdp_w=self.tdp_w,
        )
        return select_meters(names, root=self.root, options=options)


@dataclass(frozen=True)
class AdaptiveRequest:
    """The adaptive mode: measure only the cells that could change the planner's decision
    for these scenarios (:mod:`greenckpt.profile.adaptive`).

    ``ckpt_sizes`` in bytes per node; ``mtbf_s``: MTBFs of ONE node, the job failing at
    ``nodes / MTBF`` as in ``greenckpt plan``; ``app_power_w`` None: the largest power
    measured; ``margin``: the optimism margin of the bound. Every size is decided for with
    every MTBF.
    """

    ckpt_sizes: Sequence[int]
    mtbf_s: Sequence[float] = (DEFAULT_MTBF_S,)
    app_power_w: float | None = None
    margin: float = DEFAULT_MARGIN
    nodes: int = 1

    def __post_init__(self) -> None:
        if not self.ckpt_sizes or not self.mtbf_s:
            raise InvalidValueError(
                "the adaptive mode needs a checkpoint size and an MTBF to decide for"
            )

    def recorded(self) -> dict[str, Any]:
        """The ``extra.adaptive`` object a profile keeps (lists, as JSON gives them back)."""
        doc: dict[str, Any] = {
            "ckpt_sizes": list(self.ckpt_sizes),
            "mtbf_s": list(self.mtbf_s),
            "app_power_W": self.app_power_w,
            "margin": self.margin,
        }
        if self.nodes != 1:  # absent: one node (profiles made before --nodes)
            doc["nodes"] = self.nodes
        return doc

    def chooser(self, spec: SweepSpec) -> AdaptiveChooser:
        """The cell chooser that decides for every (size, MTBF) pair."""
        scenarios = [
            DecisionScenario(ckpt_size=float(c), rate=self.nodes / m, app_power=self.app_power_w)
            for c in self.ckpt_sizes
            for m in self.mtbf_s
        ]
        return AdaptiveChooser(spec, scenarios, margin=self.margin)


def sweep_extra(meters: MeterRequest, adaptive: AdaptiveRequest | None = None) -> dict[str, Any]:
    """What a sweep records about how it was asked to measure (``SweepSpec.extra``)."""
    extra = meters.recorded()
    if adaptive is not None:
        extra["adaptive"] = adaptive.recorded()
    return extra


def with_recorded(
    spec: SweepSpec, meters: MeterRequest, adaptive: AdaptiveRequest | None = None
) -> SweepSpec:
    """``spec`` with :func:`sweep_extra` in its ``extra`` (its other keys kept)."""
    kept = {k: v for k, v in spec.extra.items() if k not in RECORDED_KEYS}
    return replace(spec, extra={**kept, **sweep_extra(meters, adaptive)})


def cpu_settings(
    frequencies: Sequence[float] | Literal["all", "asfound"] | None = None,
    governors: Sequence[str] | None = None,
    *,
    root: SysRoot | None = None,
) -> tuple[CpuSetting, ...]:
    """The CPU settings to sweep.

    ``frequencies``: Hz to fix; ``"all"`` every offered frequency (refused on a node without
    cpufreq control); ``"asfound"`` leaves the frequency alone; ``None`` every offered
    frequency, or as found without cpufreq control. ``governors``: stock governors measured as
    settings (``()`` none); ``None`` those the node offers, none with ``"asfound"``.
    """
    offered = default_settings(root)
    freqs = [s for s in offered if s.kind == "frequency"]
    govs = [s for s in offered if s.kind == "governor"]
    chosen: list[CpuSetting]
    if frequencies is None:
        chosen = freqs or [CpuSetting.uncontrolled()]
    elif frequencies == "asfound":
        chosen = [CpuSetting.uncontrolled()]
    elif frequencies == "all":
        if not freqs:
            raise SweepError(
                "this node offers no CPU frequencies to fix (no cpufreq control): profile "
                "with the frequency as found (--frequencies asfound)"
            )
        chosen = freqs
    else:
        chosen = [CpuSetting.frequency(hz) for hz in frequencies]
    if governors is not None:
        chosen += [CpuSetting.of_governor(g) for g in governors]
    elif frequencies != "asfound":
        chosen += govs
    return tuple(chosen)


def _say(spelling: Mapping[str, str], what: str) -> str:
    return spelling.get(what, what)


def resume_or_refuse(
    out: str | Path,
    spec: SweepSpec,
    *,
    resume: bool = False,
    force: bool = False,
    spelling: Mapping[str, str] = PYTHON_SPELLING,
    note: Note | None = None,
) -> Profile | None:
    """The profile in ``out`` to continue (partial) or to keep (complete), or None to start
    anew; raises a one-line ``ValueError`` when ``out`` may not be written.

    An existing ``out`` is overwritten only with ``force``; with ``resume`` it is continued if
    it records the same sweep (``spec``, its ``extra`` included), else refused naming what
    differs. ``spelling`` names the choices and the spec's fields in messages (the CLI maps
    them to its flags); ``note`` hears that a resumed ``out`` does not exist yet.
    """
    path = Path(out)
    if not path.exists():
        if resume and note is not None:
            note(f"{path} does not exist yet: starting a new sweep")
        return None
    if path.is_dir():
        raise InvalidValueError(f"cannot write {path}: it is a directory, give a file name")
    if force:
        return None
    if not resume:
        raise InvalidValueError(
            f"{path} exists: {_say(spelling, 'resume')} to continue it or "
            f"{_say(spelling, 'force')} to overwrite"
        )
    previous = load_profile(path)
    if previous.status == "complete":
        return previous
    recorded = previous.sweep.get("spec")
    if not isinstance(recorded, dict):
        raise SweepError(f"{path} records no sweep, so it cannot be resumed: profile anew")
    old = SweepSpec.from_json(recorded)
    diff = [d for d in spec.differences(old) if d != "extra"]
    for key in sorted(set(spec.extra) | set(old.extra)):
        if spec.extra.get(key) != old.extra.get(key):
            diff.append(f"extra.{key}")
    if diff:
        named = ", ".join(f"{d} ({spelling[d]})" if d in spelling else d for d in diff)
        raise SweepError(
            f"{path} was made by a different sweep (differs in {named}): repeat the original "
            "options to resume, or write a new file"
        )
    return previous


def prepare_profile(
    spec: SweepSpec,
    out: str | Path,
    *,
    resume: bool = False,
    force: bool = False,
    spelling: Mapping[str, str] = PYTHON_SPELLING,
    note: Note | None = None,
) -> Profile | None:
    """Everything checked before anything is measured: the sweep against this node
    (:func:`~greenckpt.profile.preflight.preflight`), ``out`` by :func:`resume_or_refuse`,
    and, unless the file is already complete, that ``out`` can be written — so hours of
    measurements are never lost to a bad request. Returns what :func:`resume_or_refuse` does.
    """
    preflight(spec)
    previous = resume_or_refuse(out, spec, resume=resume, force=force, spelling=spelling, note=note)
    if previous is None or previous.status != "complete":
        check_writable_target(out)
    return previous


def needs_node_session(spec: SweepSpec) -> bool:
    """Whether the sweep changes the node (a frequency, a governor, C-states or a lever beyond
    the core clock), and so needs a :class:`~greenckpt.platform.restore.NodeSettings` session
    that restores it."""
    return (
        any(s.kind != "uncontrolled" for s in spec.settings)
        or any(c is not None for c in spec.cstates)
        or not spec.levers.empty
    )


def check_wait_loop(spec: SweepSpec, wait_loop: WaitLoop | None) -> None:
    """Refuse a sweep that asks for the waiting power without the loop to measure it with.

    Why the loop is handed in: the waiters must wait exactly as the checkpoint library's ranks
    wait, with its own :func:`greenckpt.ckpt.wait.complete`, and the profiler sits below the
    checkpoint library (it may not import it); ``greenckpt profile run`` passes it.
    """
    if spec.waiting_seconds > 0 and wait_loop is None:
        raise SweepError(
            "measuring the waiting power needs the checkpoint library's wait loop: pass "
            "wait_loop=greenckpt.ckpt.wait.complete, or waiting_seconds=0 to skip it"
        )


def measure_profile(
    spec: SweepSpec,
    out: str | Path,
    *,
    previous: Profile | None = None,
    meters: MeterRequest | None = None,
    chooser: CellChooser | None = None,
    progress: ProgressSink | None = None,
    wait_loop: WaitLoop | None = None,
) -> Profile:
    """Open the meters, the sampler and (if the sweep changes the node) a node-settings
    session, and run the sweep into ``out``; all are closed and the node restored however it
    ends. ``previous``: the partial profile to continue (from :func:`prepare_profile`).
    ``wait_loop``: :func:`greenckpt.ckpt.wait.complete`, needed when ``spec.waiting_seconds``
    asks for the waiting power (:func:`check_wait_loop`).

    No checks of the request beyond the sweep's own: call :func:`prepare_profile` first (or
    use :func:`run_profile`, which does both).
    """
    check_wait_loop(spec, wait_loop)
    request = meters if meters is not None else MeterRequest()
    with ExitStack() as stack:
        selection = stack.enter_context(request.open())
        sampler = stack.enter_context(Sampler(selection, rate_hz=request.rate_hz))
        choice = choose_power_domains(sampler.domains, sampler.sources)
        if previous is not None and tuple(previous.power_domains) != choice.keys:
            raise SweepError(
                f"{out} holds power over {', '.join(previous.power_domains) or 'no domain'}, "
                f"these meters give {', '.join(choice.keys)}: resume with the same meters"
            )
        machine, storage = collect_metadata(
            spec.path, meter_lines=[m.describe() for m in selection.meters]
        )
        context = SweepContext(
            machine=machine,
            storage=storage,
            meters=tuple(m.name for m in selection.meters),
            levers=levers_metadata(),
        )
        node = stack.enter_context(NodeSettings()) if needs_node_session(spec) else None
        measurer = NodeMeasurer(spec, sampler, choice, node)
        return run_sweep(
            spec,
            measurer,
            out,
            context=context,
            resume=previous,
            progress=progress,
            chooser=chooser,
            waiters=_waiters(wait_loop),
        )


def _waiters(loop: WaitLoop | None) -> WaitersFactory | None:
    """What opens the waiter processes (a node's worth, waiting with ``loop``)."""
    if loop is None:
        return None
    return lambda: ProcessWaiters(loop, default_waiting_ranks())


def run_profile(
    spec: SweepSpec,
    out: str | Path,
    *,
    meters: MeterRequest | None = None,
    adaptive: AdaptiveRequest | None = None,
    resume: bool = False,
    force: bool = False,
    progress: ProgressSink | None = None,
    note: Note | None = None,
    wait_loop: WaitLoop | None = None,
) -> Profile:
    """Profile the storage holding ``spec.path`` into the file ``out``, and return it.

    The meters and the adaptive mode are recorded in the spec's ``extra``
    (:func:`with_recorded`). An existing ``out`` is refused unless ``resume`` (continue a
    partial profile of the same sweep, measuring only what it lacks; a complete one is
    returned as it is) or ``force`` (overwrite). The file is rewritten after every finished
    cell, so an interrupted run (``KeyboardInterrupt``, ``SIGTERM``) keeps what it measured
    for a ``resume``. ``progress`` hears every finished cell; ``note`` hears remarks worth a
    line. ``wait_loop``: :func:`greenckpt.ckpt.wait.complete` when ``spec.waiting_seconds``
    asks for the waiting power. Raises ``ValueError`` (:class:`SweepError`, one line) for a
    request that cannot run, before anything is measured.
    """
    check_wait_loop(spec, wait_loop)
    request = meters if meters is not None else MeterRequest()
    spec = with_recorded(spec, request, adaptive)
    previous = prepare_profile(spec, out, resume=resume, force=force, note=note)
    if previous is not None and previous.status == "complete":
        return previous
    return measure_profile(
        spec,
        out,
        previous=previous,
        meters=request,
        chooser=None if adaptive is None else adaptive.chooser(spec),
        progress=progress,
        wait_loop=wait_loop,
    )


def file_identity(path: str | Path) -> tuple[int, int] | None:
    """``(inode, mtime_ns)`` of ``path``, None when it does not exist (to tell, after a sweep
    stopped, whether it wrote the file)."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def cells_kept(out: str | Path, before: tuple[int, int] | None, *, resumed: bool) -> int | None:
    """Finished cells in ``out`` after a sweep stopped early; None when the sweep did not
    write it (``before``: :func:`file_identity` taken before the sweep began)."""
    now = file_identity(out)
    if now is None or (now == before and not resumed):
        return None
    try:
        sweep = load_profile(out).sweep
    except ProfileError:
        return None
    return sum(len(v) for k in ("done", "quick") if isinstance(v := sweep.get(k), list))
