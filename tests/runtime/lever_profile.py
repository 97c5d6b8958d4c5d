"""A SYNTHETIC profile whose best points set the uncore frequency, the package power limit and
the per-core split (for the runtime's lever tests, and their crashed children).

Why these numbers: every write and read point runs one I/O process at 2.0 GHz at the same
throughput; the points with the levers draw 150 W against 200 W with the levers as found, so
the planner must choose them, and the checkpoint's and restart's levers differ (uncore 1.0 GHz
and 120 W against 1.2 GHz and 130 W), so a test sees them change per phase. The waiting ranks
draw 5 W each at 2.0 GHz and 1 W at 1.2 GHz (measured, the profile says, on a node with
per-core cpufreq), so the planner gives the three waiting ranks' cores 1.2 GHz. Made up: no
machine was measured.
"""

from __future__ import annotations

from dataclasses import replace

from greenckpt.optimize.profile_data import Profile, ProfilePoint
from greenckpt.optimize.waiting import WaitingPower
from greenckpt.runtime.node import Node
from greenckpt.runtime.policy import ProfilePolicy
from tests.runtime.test_policy import fake_node, fake_profile, pt

CKPT_UNCORE_KHZ = 1_000_000
CKPT_LIMIT_W = 120.0
RESTART_UNCORE_KHZ = 1_200_000
RESTART_LIMIT_W = 130.0
IO_HZ = 2_000_000_000
WAITING_HZ = 1_200_000_000


def _point(op: str, mbps: float, watts: float, **levers: object) -> ProfilePoint:
    return replace(pt(op, IO_HZ / 1e9, 1, mbps, watts), **levers)  # type: ignore[arg-type]


def lever_profile() -> Profile:
    """The SYNTHETIC profile of the module docstring."""
    points = (
        _point("write", 1000.0, 150.0, uncore_khz=CKPT_UNCORE_KHZ, power_limit_w=CKPT_LIMIT_W),
        _point("write", 1000.0, 200.0),
        _point("read", 2000.0, 150.0, uncore_khz=RESTART_UNCORE_KHZ, power_limit_w=RESTART_LIMIT_W),
        _point("read", 2000.0, 200.0),
    )
    waiting = tuple(
        WaitingPower(
            mode="polite", ranks=4, power_per_rank=w, power_source="synthetic", frequency=f
        )
        for f, w in ((float(IO_HZ), 5.0), (float(WAITING_HZ), 1.0))
    )
    levers = {"per-core split": True, "uncore frequency": True, "power limit": True}
    return replace(fake_profile(*points, cores=4), waiting=waiting, levers=levers)


def lever_node() -> Node:
    """The node of the fake lever tree (4 CPUs, every control) that matches the profile."""
    return fake_node(cpus=4)


def lever_policy() -> ProfilePolicy:
    """The profile policy over :func:`lever_profile`, four ranks (three wait in a phase)."""
    return ProfilePolicy(
        lever_profile(), node=lever_node(), mtbf=4 * 3600.0, app_power=250.0, app_processes=4
    )
