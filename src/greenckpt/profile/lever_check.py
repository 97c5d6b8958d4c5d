"""The lever axes against this node: refused before anything is measured, and recorded.

Why: a sweep of the uncore frequency, the package power limit or the GPU clocks that fails an
hour in — on a node without ``intel_uncore_frequency``, on a limit above what the zone allows
— wastes the hour; every value of every axis is checked against what the node reports before
the first cell, and a lever the node lacks is refused in one line naming the lever and why
(:func:`greenckpt.platform.levers.node_levers`), never guessed. What the node had is recorded
in the profile's ``levers`` metadata, so the planner knows, for example, whether it may give
the waiting ranks' cores another frequency than the writers' (the per-core split).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal

from greenckpt.errors import InvalidValueError
from greenckpt.platform import gpu
from greenckpt.platform.levers import node_levers
from greenckpt.platform.nvml import Nvml, NvmlError
from greenckpt.platform.powercap import plan_power_limit
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.uncore import detect_uncore, plan_uncore
from greenckpt.profile.grid import SweepError, SweepSpec
from greenckpt.profile.lever_cells import LEVER_FLAGS, NO_AXES, LeverAxes

__all__ = ["UNCORE_STEPS", "check_lever_axes", "lever_axes", "levers_metadata"]

UNCORE_STEPS = 5
"""Uncore frequencies ``--uncore all`` measures: from the lowest the node allows to the
highest in equal steps (rounded to 100 MHz, the uncore's ratio unit), as the frequencies of a
cpufreq driver without a table are (:data:`greenckpt.profile.preflight.TABLELESS_STEPS`)."""
UNCORE_ROUND_KHZ = 100_000


def levers_metadata(root: SysRoot | None = None) -> dict[str, bool]:
    """The profile's ``levers`` object: for every lever :func:`node_levers` knows (the CPU
    frequency, the uncore frequency, the per-core split, the power limit, the GPU clocks and
    power limit), whether this node has it."""
    return {info.name: info.present for info in node_levers(root or SysRoot.default())}


def check_lever_axes(spec: SweepSpec, root: SysRoot | None = None) -> None:
    """Raise :class:`SweepError` (one line) for the first lever axis this node cannot sweep:
    a lever it lacks (``--uncore: this node has no uncore frequency control (<why>)``), or a
    value outside the range it reports. Reads only; nothing is written."""
    asked = spec.levers.asked()
    if not asked:
        return
    chosen = root or SysRoot.default()
    infos = {info.name: info for info in node_levers(chosen)}
    for name in asked:
        info = infos.get(name)
        if info is None or not info.present:
            why = info.reason if info is not None else "greenckpt does not know this lever"
            raise SweepError(f"{LEVER_FLAGS[name]}: this node has no {name} control ({why})")
    _check_ranges(spec, chosen)


def _check_ranges(spec: SweepSpec, root: SysRoot) -> None:
    """Every value of every axis within what the node reports (the platform's own checks,
    which read only: a plan is made and not applied), each refused naming its flag."""
    axes = spec.levers
    checks: list[tuple[str, Callable[[], object]]] = []
    checks += [("--uncore", partial(plan_uncore, root, khz)) for khz in axes.uncore_khz]
    checks += [
        ("--power-limit", partial(plan_power_limit, root, w, "package"))
        for w in axes.power_limits_w
    ]
    if axes.gpu_clocks or axes.gpu_power_limits_w:
        checks += _gpu_checks(axes.gpu_clocks, axes.gpu_power_limits_w)
    for flag, check in checks:
        try:
            check()
        except (InvalidValueError, PlatformError) as exc:
            raise SweepError(f"{flag}: {exc}") from None


def _gpu_checks(
    clocks: Sequence[tuple[int, int]], limits: Sequence[float]
) -> list[tuple[str, Callable[[], object]]]:
    """The GPU axes' checks against what every GPU reports (NVML read once)."""
    try:
        with Nvml.open() as nvml:
            gpus = gpu.detect_gpus(nvml)
    except NvmlError as exc:
        flag = "--gpu-clocks" if clocks else "--gpu-power-limit"
        raise SweepError(f"{flag}: NVML could not describe the GPUs: {exc}") from None
    out: list[tuple[str, Callable[[], object]]] = []
    out += [("--gpu-clocks", partial(gpu.check_gpu_clocks, gpus, m, g)) for m, g in clocks]
    out += [("--gpu-power-limit", partial(gpu.check_gpu_power_limit, gpus, w)) for w in limits]
    return out


def _uncore_steps(root: SysRoot) -> tuple[int, ...]:
    """:data:`UNCORE_STEPS` frequencies from the lowest to the highest the node allows."""
    try:
        domains = detect_uncore(root)
    except PlatformError as exc:
        info = {i.name: i for i in node_levers(root)}.get("uncore frequency")
        why = info.reason if info is not None and info.reason else str(exc)
        raise SweepError(f"--uncore: this node has no uncore frequency control ({why})") from None
    lo = max(d.initial_min_khz for d in domains)
    hi = min(d.initial_max_khz for d in domains)
    step = (hi - lo) / (UNCORE_STEPS - 1)
    inner = {
        round((lo + i * step) / UNCORE_ROUND_KHZ) * UNCORE_ROUND_KHZ
        for i in range(1, UNCORE_STEPS - 1)
    }
    return tuple(sorted({lo, hi} | {min(max(k, lo), hi) for k in inner}))


def lever_axes(
    uncore_khz: Sequence[int] | Literal["all"] | None = None,
    power_limits_w: Sequence[float] | None = None,
    gpu_clocks: Sequence[tuple[int, int]] | None = None,
    gpu_power_limits_w: Sequence[float] | None = None,
    *,
    root: SysRoot | None = None,
) -> LeverAxes:
    """The lever axes to sweep (``None``: not swept). ``uncore_khz="all"``: :data:`UNCORE_STEPS`
    frequencies across the range the node allows (refused in one line on a node without
    uncore frequency control); nothing else reads the node."""
    if uncore_khz is None and not (power_limits_w or gpu_clocks or gpu_power_limits_w):
        return NO_AXES
    uncore = _uncore_steps(root or SysRoot.default()) if uncore_khz == "all" else uncore_khz
    return LeverAxes(
        uncore_khz=tuple(uncore or ()),
        power_limits_w=tuple(float(w) for w in power_limits_w or ()),
        gpu_clocks=tuple(gpu_clocks or ()),
        gpu_power_limits_w=tuple(float(w) for w in gpu_power_limits_w or ()),
    )
