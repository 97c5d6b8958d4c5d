"""A node's runtime options, typed, and the one place a node's policy and runtime are built.

Why: a node's agent is started by ``greenckpt run``'s launchers (a process per node, its
options parsed from the flags of ``run``) and by the Slurm plugin (its options from the
site's plugstack.conf, handed through a root-only spool file). Both must build the same
runtime. The plugin used to compose ``greenckpt agent`` flags and parse them with that
command's own parser; now each front end fills a :class:`NodeOptions` and calls
:func:`build_runtime`, and the options cross a process boundary as JSON
(:meth:`NodeOptions.to_dict`, :meth:`NodeOptions.from_dict`). Every quantity is in SI units
(hertz, watts, 1/s), as everywhere inside greenckpt.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenckpt.errors import InvalidValueError
from greenckpt.optimize.profile_data import load_profile
from greenckpt.platform.meters.base import MeterOptions
from greenckpt.platform.meters.detect import select_meters
from greenckpt.platform.root import SysRoot
from greenckpt.platform.sampler import DEFAULT_RATE_HZ
from greenckpt.runtime.fixed_policy import FixedSettings, check_fixed_levers
from greenckpt.runtime.modelled import ModelledEpe, modelled_epe
from greenckpt.runtime.policy import POLICY_NAMES, Node, Policy
from greenckpt.runtime.profiles import NamedProfile, make_storage_policy
from greenckpt.runtime.run_report import RunReport
from greenckpt.runtime.session import Runtime

__all__ = ["NodeOptions", "build_runtime", "node_policy"]


@dataclass(frozen=True)
class NodeOptions:
    """What a node's runtime is built from (the runtime flags of ``greenckpt run``).

    ``policy``: a name of :data:`~greenckpt.runtime.policy.POLICY_NAMES`; ``profiles``: I/O
    profile files, one per storage target; ``io_processes``/``frequency_hz``/``cstates`` and
    the levers (``waiting_frequency_hz``, ``uncore_khz``, ``power_limit_w``,
    ``gpu_memory_mhz``/``gpu_clock_mhz``, ``gpu_power_limit_w``): what ``fixed`` applies;
    ``app_power_w``, ``app_processes`` and ``rate_per_s`` (the job's
    failure rate): the scenario the profile policy and the modelled EPE need; ``control``
    False decides and accounts without touching the node (and is what a node another session
    controls gets, unless ``require_control`` refuses that), ``frequency_control`` False leaves
    the frequency to the batch system; ``meters`` (names, ``auto``), ``meter_csv``, ``tdp_w``
    and ``sample_rate_hz``: what is metered and how often; ``root`` and ``state_file``: an
    emulated node's own sysfs tree and state file; ``previous_job``: the report
    (``job-report.json``) of the earlier job this one restarts after, beside which this
    node's earlier report lies (the work it lost is accounted in this node's report).
    """

    policy: str = "profile"
    profiles: tuple[str, ...] = ()
    io_processes: int | None = None
    frequency_hz: int | None = None
    cstates: bool | None = None
    waiting_frequency_hz: int | None = None
    uncore_khz: int | None = None
    power_limit_w: float | None = None
    gpu_memory_mhz: int | None = None
    gpu_clock_mhz: int | None = None
    gpu_power_limit_w: float | None = None
    app_power_w: float | None = None
    app_processes: int | None = None
    rate_per_s: float | None = None
    control: bool = True
    require_control: bool = False
    frequency_control: bool = True
    meters: tuple[str, ...] = ("auto",)
    meter_csv: str | None = None
    tdp_w: float | None = None
    sample_rate_hz: float = DEFAULT_RATE_HZ
    root: str | None = None
    state_file: str | None = None
    previous_job: str | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICY_NAMES:
            raise InvalidValueError(
                f"policy {self.policy!r} is not one of {', '.join(POLICY_NAMES)}"
            )
        for name in ("app_power_w", "rate_per_s", "tdp_w", "sample_rate_hz"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InvalidValueError(f"{name} must be a finite number > 0, got {value!r}")
        for name in ("io_processes", "app_processes", "frequency_hz"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise InvalidValueError(f"{name} must be an integer >= 1, got {value!r}")

    @property
    def fixed(self) -> FixedSettings:
        """What the ``fixed`` policy applies."""
        return FixedSettings(
            self.io_processes,
            self.frequency_hz,
            self.cstates,
            waiting_frequency_hz=self.waiting_frequency_hz,
            uncore_khz=self.uncore_khz,
            power_limit_w=self.power_limit_w,
            gpu_memory_mhz=self.gpu_memory_mhz,
            gpu_clock_mhz=self.gpu_clock_mhz,
            gpu_power_limit_w=self.gpu_power_limit_w,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (tuples as lists)."""
        doc = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in doc.items()}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> NodeOptions:
        """The options :meth:`to_dict` wrote; InvalidValueError naming an unknown field or a
        value of the wrong kind."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise InvalidValueError(f"unknown node option(s) {', '.join(unknown)}")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in doc.items()}
        try:
            return cls(**values)
        except TypeError as exc:
            raise InvalidValueError(f"node options do not fit: {exc}") from None

    def named_profiles(self) -> tuple[NamedProfile, ...]:
        """The profile files, loaded, each named by its path as given."""
        return tuple(NamedProfile(path, load_profile(path)) for path in self.profiles)

    def modelled(self, report: RunReport, policy: Policy) -> ModelledEpe:
        """The model's EPE at the interval the run used, or why there is none (the option
        that would give what is missing, named as ``greenckpt run`` spells it)."""
        missing = [
            flag
            for flag, value in (
                ("--profile", self.profiles or None),
                ("--app-power", self.app_power_w),
                ("--mtbf (or --job-mtbf)", self.rate_per_s),
            )
            if value is None
        ]
        if missing:
            return ModelledEpe(
                None,
                f"no modelled EPE: the model needs {', '.join(missing)} to say what this "
                "run's interval should cost",
            )
        assert self.rate_per_s is not None and self.app_power_w is not None
        return modelled_epe(report, rate=self.rate_per_s, app_power=self.app_power_w, policy=policy)


def node_policy(
    options: NodeOptions, node: Node, profiles: tuple[NamedProfile, ...] | None = None
) -> Policy:
    """The decision policy of ``options`` on ``node`` (each phase decided from the profile of
    the storage its path is on); ``profiles``: already loaded, else loaded here. The levers
    ``fixed`` sets are checked against the node's root first (one line; nothing applied)."""
    if options.policy == "fixed" and options.control:
        check_fixed_levers(options.fixed, SysRoot.default(options.root))
    return make_storage_policy(
        options.policy,
        options.named_profiles() if profiles is None else profiles,
        node=node,
        app_power=options.app_power_w,
        rate=options.rate_per_s,
        app_processes=options.app_processes,
        fixed=options.fixed,
    )


def build_runtime(options: NodeOptions) -> Runtime:
    """This node's runtime (not started): its root, what it can control, its policy and
    meters. InvalidValueError (one line) for a root that is no folder or a profile that does
    not load."""
    if options.root is not None and not os.path.isdir(options.root):
        raise InvalidValueError(f"its sysfs root {options.root} is not a directory")
    root = SysRoot.default(options.root)
    node = Node.detect(root)
    if not options.frequency_control:
        node = dataclasses.replace(node, frequency_control=False)
    common: dict[str, Any] = {
        "root": root,
        "control": options.control,
        "require_control": options.require_control,
        "node": node,
        "rate_hz": options.sample_rate_hz,
        "state_file": None if options.state_file is None else Path(options.state_file),
    }
    policy = node_policy(options, node)
    auto = options.meters == ("auto",) and options.meter_csv is None
    if options.root is not None and auto:
        return Runtime(policy, meters=None, **common)  # detected through the node's root
    meter_options = MeterOptions(
        csv_path=None if options.meter_csv is None else os.path.abspath(options.meter_csv),
        tdp_w=options.tdp_w,
    )
    meters = select_meters(list(options.meters), options=meter_options)
    return Runtime(policy, meters=meters, **common)
