"""Decision policies: for an I/O phase about to start, the settings to apply.

Why a pluggable decision: saito2013's runtime (section 5, Figure 5) answers every checkpoint
and restart by a profile lookup; to know what that is worth, the same run must be repeatable
under the stock governors, and a node without a profile or frequency control must still get a
stated answer. So a decision is one small interface, :class:`Policy`: :class:`ProfilePolicy`
(the default, here), :class:`~greenckpt.runtime.baselines.GovernorPolicy` and
:class:`~greenckpt.runtime.baselines.DefaultPolicy`, or anything with a ``name`` and a
``decide`` method. What the lookup approximates, and why: docs/design/runtime.md.

The node description (:class:`Node`, :mod:`greenckpt.runtime.node`), the profile checks
(:mod:`greenckpt.runtime.fit`) and the baselines (:mod:`greenckpt.runtime.baselines`) live in
their own modules; their public names are still importable from here.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol, runtime_checkable

from greenckpt.ckpt.wait import polite
from greenckpt.errors import InvalidValueError
from greenckpt.optimize.lever_fields import LEVER_ATTRS, PER_CORE_SPLIT
from greenckpt.optimize.planner import PlanError, Scenario, plan
from greenckpt.optimize.profile_data import Profile, ProfileError, ProfilePoint
from greenckpt.optimize.setting import CpuSetting
from greenckpt.optimize.waiting import WaitingUse, WaitMode
from greenckpt.runtime.baselines import (
    DEFAULT_IO_PROCESSES,
    GOVERNOR_POLICIES,
    DefaultPolicy,
    GovernorPolicy,
    decided_frequency,
)
from greenckpt.runtime.fit import (
    canonical_codec,
    has_both_ops,
    machine_fit,
    predictions,
    storage_fit,
)
from greenckpt.runtime.fixed_policy import FixedPolicy, FixedSettings, check_fixed
from greenckpt.runtime.node import (
    NO_FREQUENCY_CONTROL,
    Node,
    StorageLookup,
    frequency_note,
    storage_key_of,
)
from greenckpt.runtime.settings import PhaseRequest, Settings

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

POLICY_NAMES: tuple[str, ...] = ("profile", *GOVERNOR_POLICIES, "defaults", "fixed")
"""Every name :func:`make_policy` accepts; ``profile`` is the default."""


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


# ---------------------------------------------------------------------------- profile lookup


class ProfilePolicy:
    """saito2013's profile lookup: the optimizer's choice of settings for every phase.

    For a checkpoint or flush of ``size`` bytes, :func:`greenckpt.optimize.plan` is run on
    the profile with a :class:`~greenckpt.optimize.Scenario` whose ``ckpt_size`` is that size
    (and the job's failure rate, the application's power and the optional constraints given
    here); its best write point gives the settings. For a restart, the best read point of a
    plan restricted to the checkpoint's codec gives them: the codec in the request (from the
    manifest), else the codec of the last checkpoint of that level decided by this policy.
    See docs/design/runtime.md for the node/storage checks and what is approximate.

    The ranks that do no I/O during a phase wait as the checkpoint library makes them wait:
    politely, or spinning under ``GREENCKPT_WAIT=spin`` (read once, here, by the library's own
    :func:`greenckpt.ckpt.wait.polite`); the planner adds their power per rank from the
    profile for that mode, and the settings' predicted power is that same phase power (the
    plan's ``W_C``/``W_R``), with how many ranks wait and where their figure came from.

    ``frequency_control``/``cstate_control`` default to what :class:`Node` detected. Without
    frequency control only points measured without it are used when the profile has them
    (else all, and the notes say the predictions assume a setting not applied), and the
    settings leave frequency and governor alone: parallelism (and codec) only. Without
    C-state control, points measured with C-states disabled are not used.

    Thread-safe: the runtime may be asked from several threads (the notification interface).
    """

    name: str = "profile"
    deterministic: bool = True
    """The same request gets the same settings (the runtime's native front may repeat them)."""

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
        self.wait_mode: WaitMode = "polite" if polite() else "spin"  # a bad value fails here
        self._scenario(1).validate()  # a bad rate or power fails here, not at a checkpoint
        self.frequency = decided_frequency(self.node, frequency_control)
        self.frequency_control = self.frequency.available
        self.cstate_control = self.node.cstate_control if cstate_control is None else cstate_control
        self._fit = machine_fit(profile, self.node)
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
            wait_mode=self.wait_mode,
        )

    def decide(self, request: PhaseRequest) -> Settings:
        """The settings for ``request`` (defaults, with the reason, when the profile cannot
        be used for it)."""
        notes = list(self._fit.notes)
        if self._fit.mismatch is not None:
            return self._fallback(request, self._fit.mismatch, notes)
        storage = storage_fit(self.profile, self.node, request.path)
        notes.extend(storage.notes)
        if storage.mismatch is not None:
            return self._fallback(request, storage.mismatch, notes)
        candidates, more = self._candidates(request)
        notes.extend(more)
        try:
            result = plan(candidates, self._scenario(request.size))
        except (PlanError, ProfileError) as exc:
            return self._fallback(request, f"profile lookup failed: {exc}", notes)
        best = result.best
        point, waiting, waiters = (
            (best.write, best.write_waiting, best.write_waiting_setting)
            if request.op == "write"
            else (best.read, best.read_waiting, best.read_waiting_setting)
        )
        if request.op == "write":
            with self._lock:
                self._written[request.level] = canonical_codec(point.codec)
        return self._settings(request, point, waiting, notes, waiters)

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
            if has_both_ops(free):
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
            if has_both_ops(offered):
                points = offered
        if not self.cstate_control:
            kept = tuple(p for p in points if p.cstates is not False)
            if has_both_ops(kept):
                points = kept
            else:
                notes.append(
                    "no C-state control on this node, but the profile only has points with "
                    "C-states disabled: the predictions assume them disabled"
                )
        points, levers = self._node_levers(points, notes)
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
            points = tuple(p for p in points if canonical_codec(p.codec) == codec)
        return replace(self.profile, points=points, levers=levers), notes

    def _node_levers(
        self, points: tuple[ProfilePoint, ...], notes: list[str]
    ) -> tuple[tuple[ProfilePoint, ...], Mapping[str, bool]]:
        """The points whose levers this node has, and the profile's lever metadata without
        the per-core split when the node cannot split: a profile made on another node (or
        merged from several) may choose a lever this one lacks, which would fail at every
        phase."""
        have = self.node.levers
        levers = dict(self.profile.levers)
        if have is None:
            return points, levers
        lacking = [name for name, attr in LEVER_ATTRS if not have.get(name, False)]
        if levers.get(PER_CORE_SPLIT) and not have.get(PER_CORE_SPLIT, False):
            levers[PER_CORE_SPLIT] = False
            notes.append("this node has no per-core split: the waiting ranks' cores are not split")
        used = {n for n, attr in LEVER_ATTRS if any(getattr(p, attr) is not None for p in points)}
        missing = [n for n in lacking if n in used]
        if not missing:
            return points, levers
        attrs = [attr for name, attr in LEVER_ATTRS if name in missing]
        kept = tuple(p for p in points if all(getattr(p, a) is None for a in attrs))
        if has_both_ops(kept):
            notes.append(
                f"this node has no {', no '.join(missing)} control: only the profile's points "
                "that leave it as found are used"
            )
            return kept, levers
        notes.append(
            f"this node has no {', no '.join(missing)} control and the profile has no points "
            "without it: the predictions assume a setting that will not be applied"
        )
        return points, levers

    def _settings(
        self,
        request: PhaseRequest,
        point: ProfilePoint,
        waiting: WaitingUse,
        notes: list[str],
        waiters: CpuSetting | None = None,
    ) -> Settings:
        """The chosen point as settings, with its predictions; ``waiting``: the plan's own
        figure for the ranks that wait during the phase (the planner resolved ``R`` and looked
        the per-rank power up), so the predicted power is the ``W_C``/``W_R`` it planned with.
        The point's levers (uncore, power limit, GPU) come with it, and ``waiters``, the
        plan's setting for the waiting ranks' cores, makes the per-core split when it differs
        from the point's."""
        frequency: int | None = None
        governor: str | None = None
        waiting_hz: int | None = None
        if self.frequency_control:
            setting = point.setting
            frequency, governor = setting.hz, setting.governor
            if setting.kind == "uncontrolled":
                notes.append(
                    "the chosen point was measured without frequency control: frequency left "
                    "as found"
                )
            waiting_hz = self._waiting_hz(setting, waiters, notes)
        else:
            notes.append(frequency_note(self.frequency))
        predicted, more = predictions(self.profile, point, request.size, waiting)
        notes.extend(more)
        return Settings(
            io_processes=point.processes,
            source="profile lookup",
            frequency_hz=frequency,
            governor=governor,
            codec=canonical_codec(point.codec),
            cstates=point.cstates if self.cstate_control else None,
            notes=tuple(notes),
            waiting_frequency_hz=waiting_hz,
            uncore_khz=point.uncore_khz,
            power_limit_w=point.power_limit_w,
            gpu_clock_mhz=point.gpu_clock_mhz,
            gpu_memory_mhz=point.gpu_memory_mhz,
            gpu_power_limit_w=point.gpu_power_limit_w,
            **predicted,
        )

    @staticmethod
    def _waiting_hz(
        setting: CpuSetting, waiters: CpuSetting | None, notes: list[str]
    ) -> int | None:
        """The waiting cores' frequency of a per-core split (None: no split)."""
        if waiters is None or waiters == setting:
            return None
        if setting.hz is None or waiters.hz is None:
            notes.append(
                f"the plan gives the waiting ranks' cores {waiters.label} beside the I/O "
                f"processes' {setting.label}: a per-core split needs two fixed frequencies, "
                "so every core gets the I/O processes' setting"
            )
            return None
        return waiters.hz


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
    fixed: FixedSettings | None = None,
) -> Policy:
    """The policy called ``name`` (one of :data:`POLICY_NAMES`); ``fixed``: what ``fixed``
    applies (checked against the node: one line if it cannot).

    ``profile`` without a profile gives :class:`DefaultPolicy` (stated in its notes), so a
    run never needs a profile to start. The profile policy needs the job's failure rate (or
    MTBF) and the application's power ``W_A``, because the optimizer weighs checkpoint cost
    against rework; the governor and default policies do not.
    """
    if name not in POLICY_NAMES:
        raise InvalidValueError(f"unknown policy {name!r}: use one of {', '.join(POLICY_NAMES)}")
    chosen = node if node is not None else Node.detect()
    if name == "fixed":
        settings = fixed or FixedSettings()
        check_fixed(settings, chosen)
        return FixedPolicy(
            settings, node=chosen, default_io=DefaultPolicy(node=chosen).io_processes
        )
    if fixed is not None and fixed != FixedSettings():
        raise InvalidValueError(
            "--io-processes, --frequency, --cstates, --waiting-frequency, --uncore, "
            f"--power-limit, --gpu-clocks and --gpu-power-limit go with --policy fixed, not {name}"
        )
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
