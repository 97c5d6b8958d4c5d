"""Decision policies: for an I/O phase about to start, the settings to apply.

Why a pluggable decision: saito2013's runtime (section 5, Figure 5) answers every checkpoint and
restart by a *profile lookup* — identify the operation and the path, hence the device (step 1),
look up the CPU frequency and number of I/O processes the model chose (step 2), which the
caller then applies (steps 3 and 4). To know what that lookup is worth, the same run must be
repeatable under the stock cpufreq governors (mills2013 section 3 compares explicit phase
notification against governors that must first detect the I/O), and a node without a profile
or without frequency control must still get a stated, sensible answer. So a decision is one
small interface, :class:`Policy`, with four implementations:

* :class:`ProfilePolicy` (the default): the paper's profile lookup through the optimizer
  (:func:`greenckpt.optimize.plan`), which chooses the checkpoint (write) and restart (read)
  settings jointly with the energy-optimal interval, over codec-compatible pairs only.
* :class:`GovernorPolicy`: a stock governor (``performance``, ``powersave``, ``ondemand``) with
  the I/O parallelism the planner's governor baselines assume, so a run under it is the
  measured counterpart of the planner's modelled baseline.
* :class:`DefaultPolicy`: no profile, or a profile that does not describe this node or this
  storage: frequency left alone, a small stated number of I/O processes.
* anything else with a ``name`` and a ``decide`` method (tests use a fake).

What the profile lookup does, and what is approximate:

* Settings are always a *measured* profile point (a frequency, governor, process count, codec
  and C-state setting that was profiled): an unmeasured frequency or process count is never
  applied, so there is no interpolation across settings. A profile swept at several sizes is
  narrowed to the size nearest the request's (on a log scale) before choosing, as the planner
  does; the *prediction* for the chosen setting is then interpolated between the two profiled
  sizes around the request (linearly in log size), or taken at the nearest profiled size and
  labelled "extrapolated" when the request lies outside them.
* Predicted time is size / throughput and predicted energy is the node's mean power at the
  point × that time, labelled with the point's power source (measured / estimated /
  synthetic). They describe the phase alone, not the run.
* A restart must read with the codec the checkpoint was written with. The request's codec
  (from the manifest) wins; otherwise the policy uses the codec it chose for that level's last
  checkpoint in this run; with neither, it says that it assumed the plan's codec. The planner
  only pairs write and read points of one codec, so the restart's read point is the best
  among those that can read the checkpoint.
* Before using a profile the policy checks that it describes this node (CPU model) and the
  storage of the request's path (the storage key of :mod:`greenckpt.platform.storage`); on a
  mismatch it falls back to :class:`DefaultPolicy` and names both sides in the notes. A
  different host name alone is not a mismatch: a profile describes a kind of node and
  storage, and identical nodes of a cluster share one (see :mod:`greenckpt.profile.merge`).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from greenckpt.errors import InvalidValueError
from greenckpt.io.codec import CodecError, parse_codec
from greenckpt.optimize.planner import (
    BASELINES,
    PlanError,
    Scenario,
    app_processes,
    baseline_point,
    plan,
)
from greenckpt.optimize.profile import Profile, ProfileError, ProfilePoint
from greenckpt.platform.cpuidle import CpuidleController
from greenckpt.platform.probe import probe
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.storage import identify_storage
from greenckpt.runtime.settings import PhaseRequest, Settings
from greenckpt.units import format_size

__all__ = [
    "DEFAULT_IO_PROCESSES",
    "GOVERNOR_POLICIES",
    "NO_FREQUENCY_CONTROL",
    "POLICY_NAMES",
    "DefaultPolicy",
    "GovernorPolicy",
    "Node",
    "Policy",
    "ProfilePolicy",
    "StorageLookup",
    "make_policy",
    "storage_key_of",
]

GOVERNOR_POLICIES: tuple[str, ...] = BASELINES
"""The governor baselines a run can be compared under: exactly those the planner models."""
POLICY_NAMES: tuple[str, ...] = ("profile", *GOVERNOR_POLICIES, "defaults")
"""Every name :func:`make_policy` accepts; ``profile`` is the default."""
DEFAULT_IO_PROCESSES = 4
"""I/O processes used without a profile (capped at the node's CPU count); see
:class:`DefaultPolicy` for why."""
NO_FREQUENCY_CONTROL = "no frequency control on this node: parallelism only"
"""The note on every decision of a node whose CPU frequency cannot be set."""

StorageLookup = Callable[[str], str]
"""Maps a checkpoint path to its storage key; raises PlatformError when it cannot tell."""


def storage_key_of(path: str, root: SysRoot | None = None) -> str:
    """The storage key (profile-lookup key) of the storage that holds ``path``.

    A checkpoint directory may not exist yet when its first checkpoint starts, so the nearest
    existing ancestor is identified instead (it is on the same filesystem unless a mount is
    created in between). Raises :class:`PlatformError` when nothing can be identified.
    """
    chosen = root if root is not None else SysRoot.default()
    current = os.path.abspath(path)
    while True:
        try:
            return identify_storage(current, chosen).key
        except PlatformError:
            parent = os.path.dirname(current)
            if parent == current or os.path.lexists(chosen / current):
                raise
            current = parent


@dataclass(frozen=True)
class Node:
    """What a policy must know about the node it decides for.

    ``cpu_model`` and ``hostname`` are compared with the profile's machine metadata;
    ``frequency_control`` says whether the CPU frequency can be set here (cpufreq present and
    writable), ``frequency_reason`` why not; ``governors`` are those cpufreq offers;
    ``cstate_control`` whether idle states can be switched; ``storage_lookup`` finds the
    storage key of a path (``None``: storage cannot be identified on this node).
    """

    hostname: str | None = None
    cpu_model: str | None = None
    cpus: int = 1
    frequency_control: bool = False
    frequency_reason: str = ""
    governors: tuple[str, ...] = ()
    cstate_control: bool = False
    storage_lookup: StorageLookup | None = None

    def __post_init__(self) -> None:
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int) or self.cpus < 1:
            raise InvalidValueError(f"a node has at least one CPU, got cpus={self.cpus!r}")

    def storage_key(self, path: str) -> str:
        """The storage key of ``path``; PlatformError when it cannot be identified."""
        if self.storage_lookup is None:
            raise PlatformError("this node was described without a storage lookup")
        return self.storage_lookup(path)

    @classmethod
    def detect(cls, root: SysRoot | None = None) -> Node:
        """Describe this node by reading it (through ``root``, for fake trees); change nothing.

        Frequency control needs cpufreq policies *and* write access to them (root, usually):
        a policy whose frequency writes would be refused is no better than none.
        """
        chosen = root if root is not None else SysRoot.default()
        report = probe((), chosen, meters=False)
        caps = {c.name: c for c in report.capabilities}
        freq = caps.get("cpufreq")
        control, reason, governors = False, "cpufreq was not probed", ()
        if freq is not None and not freq.available:
            reason = freq.summary
        elif freq is not None:
            policies = freq.details.get("policies") or [{}]
            governors = tuple(policies[0].get("governors", ()))
            control = freq.details.get("writable") is True
            reason = (
                "" if control else "cpufreq is read-only here: root (or write access) is needed"
            )
        return cls(
            hostname=report.host,
            cpu_model=report.cpu_model,
            cpus=report.logical_cpus or os.cpu_count() or 1,
            frequency_control=control,
            frequency_reason=reason,
            governors=governors,
            cstate_control=_cstates_writable(chosen),
            storage_lookup=lambda path: storage_key_of(path, chosen),
        )


def _cstates_writable(root: SysRoot) -> bool:
    """True when the node has idle states and their ``disable`` files may be written."""
    try:
        info = CpuidleController(root).detect()
    except (PlatformError, OSError, ValueError):
        return False
    return os.access(root / info.states[0].disable_path, os.W_OK)


@runtime_checkable
class Policy(Protocol):
    """Decides the settings of an I/O phase. ``name`` labels runs and reports.

    ``decide`` is called at the start of every checkpoint, flush and restart and must not
    raise for a valid request: a policy that cannot do better returns defaults and says why
    in :attr:`Settings.notes` (a checkpoint must never fail because a lookup did).
    """

    name: str

    def decide(self, request: PhaseRequest) -> Settings:
        """The settings for ``request``."""
        ...


# ---------------------------------------------------------------------------- shared helpers


def _canonical(codec: str | None) -> str | None:
    """A profile's codec label in canonical form (an unparsable label is kept as written)."""
    if codec is None:
        return None
    try:
        spec = parse_codec(codec)
    except CodecError:
        return codec
    return None if spec is None else spec.label


def _has_both_ops(points: Iterable[ProfilePoint]) -> bool:
    return {p.op for p in points} == {"write", "read"}


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True)
class _Fit:
    """Whether a profile describes this node: why not (``mismatch``), and caveats."""

    mismatch: str | None
    notes: tuple[str, ...]


def _machine_fit(profile: Profile, node: Node) -> _Fit:
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
            return _Fit(
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
    return _Fit(None, tuple(notes))


def _storage_fit(profile: Profile, node: Node, path: str) -> _Fit:
    """Compare the profile's storage key with the storage of ``path``."""
    theirs = profile.storage.get("key")
    theirs_text = theirs if isinstance(theirs, str) and theirs else None
    try:
        mine = node.storage_key(path)
    except (PlatformError, OSError) as exc:
        assumed = f" ({theirs_text})" if theirs_text else ""
        return _Fit(
            None,
            (
                f"could not identify the storage of {path} ({exc}): assumed to be the profile's"
                f"{assumed}",
            ),
        )
    if theirs_text is None:
        return _Fit(
            None, (f"the profile records no storage key: cannot check it describes {mine}",)
        )
    if mine != theirs_text:
        return _Fit(
            f"profile is for another storage device: it was measured on {theirs_text!r}, "
            f"{path} is on {mine!r}",
            (),
        )
    return _Fit(None, ())


def _setting_key(p: ProfilePoint) -> tuple[Any, ...]:
    """Everything that identifies a point's setting and I/O pattern except its size."""
    return (
        p.op,
        p.setting_key,
        p.processes,
        _canonical(p.codec),
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


def _predictions(
    profile: Profile, point: ProfilePoint, size: int
) -> tuple[dict[str, Any], list[str]]:
    """Settings keyword arguments for the phase's predicted time, energy and power."""
    throughput, power, notes = _figures(profile, point, size)
    seconds = size / throughput
    if not point.reliable:
        notes.append("the power figure of the chosen point rests on a failed or degraded reading")
    return (
        {
            "predicted_seconds": seconds,
            "predicted_energy_j": power * seconds,
            "predicted_power_w": power,
            "power_source": point.power_source,
        },
        notes,
    )


def _fixed_codec_label(request: PhaseRequest) -> str | None:
    """The codec a caller fixed (``None`` also when it fixed "uncompressed")."""
    return request.fixed_codec[1]


def _rate_from(rate: float | None, mtbf: float | None) -> float:
    """λ from exactly one of the failure rate and the MTBF."""
    if (rate is None) == (mtbf is None):
        raise InvalidValueError(
            "give exactly one of rate (the job's failure rate, 1/s) and mtbf (seconds)"
        )
    if mtbf is not None:
        if not (math.isfinite(mtbf) and mtbf > 0):
            raise InvalidValueError(f"mtbf must be a finite number of seconds > 0, got {mtbf!r}")
        return 1.0 / mtbf
    assert rate is not None
    return rate


# ---------------------------------------------------------------------------- defaults


class DefaultPolicy:
    """Settings without a (usable) profile: frequency and C-states left as found, codec as
    fixed by the caller (else uncompressed), and ``min(4, CPUs)`` I/O processes.

    Why four: saito2013's measurements (section 4, Figures 1-4) show throughput peaking at a
    few concurrent processes on flash and falling beyond about 16, while power rises with
    every process; writing with all 48 application processes was the worst case on ioDrive.
    A handful of processes uses most of a device's internal parallelism (NVMe queues,
    filesystem concurrency) without that contention; capping at the CPU count keeps I/O
    processes from oversubscribing a small node (a 2-vCPU VM gets 2). It is a stated guess,
    not a measurement: profile the storage to replace it.
    """

    name: str = "defaults"

    def __init__(self, *, node: Node | None = None, reason: str = "no profile: defaults") -> None:
        self.node = node if node is not None else Node.detect()
        self.reason = reason

    @property
    def io_processes(self) -> int:
        """The default number of I/O processes on this node."""
        return max(1, min(DEFAULT_IO_PROCESSES, self.node.cpus))

    def settings(self, request: PhaseRequest, *, source: str, notes: Sequence[str]) -> Settings:
        """Default settings for ``request`` with the given provenance (used by fallbacks)."""
        return Settings(
            io_processes=self.io_processes,
            source=source,
            codec=_fixed_codec_label(request),
            notes=tuple(notes),
        )

    def decide(self, request: PhaseRequest) -> Settings:
        """Defaults for ``request``; the note says they are defaults."""
        return self.settings(request, source="defaults (no profile)", notes=(self.reason,))


# ---------------------------------------------------------------------------- governors


class GovernorPolicy:
    """A stock cpufreq governor for every I/O phase, with the baselines' I/O parallelism.

    The number of I/O processes is the planner's baseline choice — the application's
    processes each doing their own I/O, as in saito2013's experiments: ``app_processes`` if
    given, else the profile's ``machine.cores`` when that count was measured, else the
    largest measured count; without a profile, ``app_processes`` or the node's CPUs. So a run
    under this policy is the measured counterpart of the planner's modelled baseline, and the
    predictions (when the profile has the governor's point) are the planner's figures.
    """

    name: str

    def __init__(
        self,
        governor: str,
        profile: Profile | None = None,
        *,
        node: Node | None = None,
        app_processes: int | None = None,
        frequency_control: bool | None = None,
    ) -> None:
        if governor not in GOVERNOR_POLICIES:
            raise InvalidValueError(
                f"unknown governor policy {governor!r}: use one of {', '.join(GOVERNOR_POLICIES)}"
            )
        if app_processes is not None and app_processes < 1:
            raise InvalidValueError(f"app_processes must be >= 1, got {app_processes!r}")
        self.name = governor
        self.profile = profile
        self.node = node if node is not None else Node.detect()
        self.app_processes = app_processes
        self._forced_frequency = frequency_control is not None
        self.frequency_control = (
            self.node.frequency_control if frequency_control is None else frequency_control
        )
        self._fit = None if profile is None else _machine_fit(profile, self.node)

    def _processes(self, profile: Profile | None) -> int:
        if profile is None:
            return self.app_processes or self.node.cpus
        return app_processes(profile, self.app_processes)

    def decide(self, request: PhaseRequest) -> Settings:
        """The governor, the baseline's I/O processes and, where the profile has the
        governor's point, its predicted time and energy."""
        notes: list[str] = []
        profile = self.profile
        if profile is not None and self._fit is not None:
            notes.extend(self._fit.notes)
            mismatch = self._fit.mismatch
            if mismatch is None:
                storage = _storage_fit(profile, self.node, request.path)
                notes.extend(storage.notes)
                mismatch = storage.mismatch
            if mismatch is not None:
                notes.insert(0, f"{mismatch}; its figures are not used")
                profile = None
        narrowed = None if profile is None else profile.at_size(request.size)
        n = self._processes(narrowed)
        governor: str | None = self.name
        if not self.frequency_control:
            notes.append(_no_frequency_note(self.node, self._forced_frequency))
            governor = None
        elif self.node.governors and self.name not in self.node.governors:
            notes.append(
                f"governor {self.name} is not offered on this node (available: "
                f"{', '.join(self.node.governors)}): frequency left as found"
            )
            governor = None
        predicted: dict[str, Any] = {}
        if narrowed is not None and profile is not None:
            point, how = baseline_point(narrowed, request.op, self.name, n)
            measured = [p.processes for p in narrowed.for_op(request.op)]
            if point is None and measured and n > max(measured):
                notes.append(
                    f"extrapolated: {n} I/O processes is more than the profile measured "
                    f"({max(measured)}); no prediction"
                )
            elif point is None:
                notes.append(f"no prediction: {how}")
            else:
                predicted, more = _predictions(profile, point, request.size)
                notes.extend(more)
                if governor is None:
                    notes.append(f"the prediction is for {how}, which is not applied here")
        return Settings(
            io_processes=n,
            source=f"governor baseline {self.name}",
            governor=governor,
            codec=_fixed_codec_label(request),
            notes=tuple(notes),
            **predicted,
        )


def _no_frequency_note(node: Node, forced: bool) -> str:
    """:data:`NO_FREQUENCY_CONTROL` with why: turned off by the caller, or the node's reason."""
    if forced:
        why = "frequency control turned off"
    else:
        why = node.frequency_reason if not node.frequency_control else ""
    return NO_FREQUENCY_CONTROL + (f"; {why}" if why else "")


# ---------------------------------------------------------------------------- profile lookup


class ProfilePolicy:
    """saito2013's profile lookup: the optimizer's choice of settings for every phase.

    For a checkpoint or flush of ``size`` bytes, :func:`greenckpt.optimize.plan` is run on
    the profile with a :class:`~greenckpt.optimize.Scenario` whose ``ckpt_size`` is that size
    (and the job's failure rate, the application's power and the optional constraints given
    here); its best write point gives the settings. For a restart, the best read point of a
    plan restricted to the checkpoint's codec gives them: the codec in the request (from the
    manifest), else the codec of the last checkpoint of that level decided by this policy.
    See the module docstring for the node/storage checks and what is approximate.

    ``frequency_control``/``cstate_control`` default to what :class:`Node` detected. Without
    frequency control only points measured without it are used when the profile has them
    (else all, and the notes say the predictions assume a setting not applied), and the
    settings leave frequency and governor alone: parallelism (and codec) only. Without
    C-state control, points measured with C-states disabled are not used.

    Thread-safe: the runtime may be asked from several threads (the notification interface).
    """

    name: str = "profile"

    def __init__(
        self,
        profile: Profile,
        *,
        app_power: float,
        rate: float | None = None,
        mtbf: float | None = None,
        node: Node | None = None,
        app_processes: int | None = None,
        max_slowdown: float | None = None,
        power_cap: float | None = None,
        frequency_control: bool | None = None,
        cstate_control: bool | None = None,
    ) -> None:
        self.profile = profile
        self.node = node if node is not None else Node.detect()
        self.rate = _rate_from(rate, mtbf)
        self.app_power = app_power
        self.app_processes = app_processes
        self.max_slowdown = max_slowdown
        self.power_cap = power_cap
        self._scenario(1).validate()  # a bad rate or power fails here, not at a checkpoint
        self._forced_frequency = frequency_control is not None
        self.frequency_control = (
            self.node.frequency_control if frequency_control is None else frequency_control
        )
        self.cstate_control = self.node.cstate_control if cstate_control is None else cstate_control
        self._fit = _machine_fit(profile, self.node)
        self._defaults = DefaultPolicy(node=self.node)
        # The codec of each level's last checkpoint decided here (None: uncompressed).
        self._written: dict[int | None, str | None] = {}
        self._lock = threading.Lock()

    def _scenario(self, size: int) -> Scenario:
        return Scenario(
            ckpt_size=float(size),
            rate=self.rate,
            app_power=self.app_power,
            app_processes=self.app_processes,
            max_slowdown=self.max_slowdown,
            power_cap=self.power_cap,
        )

    def decide(self, request: PhaseRequest) -> Settings:
        """The settings for ``request`` (defaults, with the reason, when the profile cannot
        be used for it)."""
        notes = list(self._fit.notes)
        if self._fit.mismatch is not None:
            return self._fallback(request, self._fit.mismatch, notes)
        storage = _storage_fit(self.profile, self.node, request.path)
        notes.extend(storage.notes)
        if storage.mismatch is not None:
            return self._fallback(request, storage.mismatch, notes)
        candidates, more = self._candidates(request)
        notes.extend(more)
        try:
            result = plan(candidates, self._scenario(request.size))
        except (PlanError, ProfileError) as exc:
            return self._fallback(request, f"profile lookup failed: {exc}", notes)
        point = result.best.write if request.op == "write" else result.best.read
        if request.op == "write":
            with self._lock:
                self._written[request.level] = _canonical(point.codec)
        return self._settings(request, point, notes)

    def _fallback(self, request: PhaseRequest, reason: str, notes: list[str]) -> Settings:
        settings = self._defaults.settings(
            request,
            source="defaults (profile not used)",
            notes=[f"{reason}; using defaults", *notes],
        )
        with self._lock:
            if request.op == "write":
                self._written[request.level] = settings.codec
            elif request.codec is None and request.level in self._written:
                # Defaults still read with the codec the checkpoint was written with.
                settings = replace(settings, codec=self._written[request.level])
        return settings

    def _candidates(self, request: PhaseRequest) -> tuple[Profile, list[str]]:
        """The profile restricted to points this node can apply and to the codec the caller
        fixed or, for a restart, the codec of this level's last checkpoint."""
        notes: list[str] = []
        points = self.profile.points
        if not self.frequency_control:
            free = tuple(p for p in points if p.uncontrolled)
            if _has_both_ops(free):
                points = free
            else:
                notes.append(
                    "the profile has no points measured without frequency control: the "
                    "predictions assume the profiled CPU setting, which is not applied"
                )
        elif self.node.governors:
            offered = tuple(
                p for p in points if p.governor is None or p.governor in self.node.governors
            )
            if _has_both_ops(offered):
                points = offered
        if not self.cstate_control:
            kept = tuple(p for p in points if p.cstates is not False)
            if _has_both_ops(kept):
                points = kept
            else:
                notes.append(
                    "no C-state control on this node, but the profile only has points with "
                    "C-states disabled: the predictions assume them disabled"
                )
        fixed, codec = request.fixed_codec
        if request.op == "read" and not fixed:
            with self._lock:
                known = request.level in self._written
                written = self._written.get(request.level)
            if known:
                fixed, codec = True, written
            else:
                notes.append(
                    "the checkpoint's codec was not given and no checkpoint of this level was "
                    "decided in this run: the restart assumes the codec the plan chooses; "
                    "pass the codec the checkpoint was written with"
                )
        if fixed:
            points = tuple(p for p in points if _canonical(p.codec) == codec)
        return replace(self.profile, points=points), notes

    def _settings(self, request: PhaseRequest, point: ProfilePoint, notes: list[str]) -> Settings:
        frequency: int | None = None
        governor: str | None = None
        if self.frequency_control:
            frequency = None if point.frequency is None else round(point.frequency)
            governor = point.governor
            if point.uncontrolled:
                notes.append(
                    "the chosen point was measured without frequency control: frequency left "
                    "as found"
                )
        else:
            notes.append(_no_frequency_note(self.node, self._forced_frequency))
        predicted, more = _predictions(self.profile, point, request.size)
        notes.extend(more)
        return Settings(
            io_processes=point.processes,
            source="profile lookup",
            frequency_hz=frequency,
            governor=governor,
            codec=_canonical(point.codec),
            cstates=point.cstates if self.cstate_control else None,
            notes=tuple(notes),
            **predicted,
        )


# ---------------------------------------------------------------------------- factory


def make_policy(
    name: str = "profile",
    profile: Profile | None = None,
    *,
    node: Node | None = None,
    app_power: float | None = None,
    rate: float | None = None,
    mtbf: float | None = None,
    app_processes: int | None = None,
    max_slowdown: float | None = None,
    power_cap: float | None = None,
    frequency_control: bool | None = None,
    cstate_control: bool | None = None,
) -> Policy:
    """The policy called ``name`` (one of :data:`POLICY_NAMES`).

    ``profile`` without a profile gives :class:`DefaultPolicy` (stated in its notes), so a
    run never needs a profile to start. The profile policy needs the job's failure rate (or
    MTBF) and the application's power ``W_A``, because the optimizer weighs checkpoint cost
    against rework; the governor and default policies do not.
    """
    if name not in POLICY_NAMES:
        raise InvalidValueError(f"unknown policy {name!r}: use one of {', '.join(POLICY_NAMES)}")
    chosen = node if node is not None else Node.detect()
    if name in GOVERNOR_POLICIES:
        return GovernorPolicy(
            name,
            profile,
            node=chosen,
            app_processes=app_processes,
            frequency_control=frequency_control,
        )
    if name == "defaults" or profile is None:
        return DefaultPolicy(node=chosen)
    if app_power is None:
        raise InvalidValueError(
            "the profile policy needs the application's node power (app_power, W_A in watts)"
        )
    return ProfilePolicy(
        profile,
        app_power=app_power,
        rate=rate,
        mtbf=mtbf,
        node=chosen,
        app_processes=app_processes,
        max_slowdown=max_slowdown,
        power_cap=power_cap,
        frequency_control=frequency_control,
        cstate_control=cstate_control,
    )
