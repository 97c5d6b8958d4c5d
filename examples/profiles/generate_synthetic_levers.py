"""Generate the SYNTHETIC profile with the levers beyond the core clock (issue 33).

Nothing here is a measurement. Every number comes from the closed-form assumptions below,
derived in docs/model.md ("Levers beyond the core clock"); they exist so that ``greenckpt
plan`` and the tests have a profile with an uncore-frequency axis, a package power limit and
the per-core split before the profiler has measured one on a node that has them.

The node (synthetic): 2 sockets, 16 cores, core frequencies 1.2/1.8/2.4 GHz, uncore 1.2-2.4
GHz (as found: the uncore runs at its maximum under I/O load), an NVMe device, no GPU (the
GPU levers are recorded as absent), per-core cpufreq policies (the per-core split is present).

Run (in examples/profiles):
    python generate_synthetic_levers.py > synthetic-levers.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

GHZ = 1e9
FREQS_GHZ = (1.2, 1.8, 2.4)
F_MAX = 2.4
PROCS = (1, 4, 16)
CORES = 16
SOCKETS = 2

P_FLOOR = 90.0
"""Node power (W) with every core idle and the uncore at its minimum, 1.2 GHz."""
UNCORE_MIN, UNCORE_MAX = 1.2, 2.4
"""Uncore frequency range (GHz); as found, the uncore runs at UNCORE_MAX under I/O."""
UNCORE_W_PER_GHZ = 15.0
"""Uncore power per socket above its minimum, linear in the uncore frequency (W/GHz)."""
UNCORE_KNEE = 1.6
"""Uncore frequency (GHz) above which I/O throughput does not depend on it; below, it scales
as uncore/knee (the mesh and memory controller bound the copy)."""
CORE_W = (1.0, 3.0)
"""A busy I/O process's core: ``a + b (f/F_MAX)^2`` W (a fixed part, a frequency-scaled part)."""
WAIT_SPIN = (0.5, 5.5)
"""A spinning waiting rank: ``a + b (f/F_MAX)^2`` W (nearly a busy core's dynamic power)."""
WAIT_POLITE = (0.05, 0.15)
"""A polite waiting rank (sleeping between tests): ``a + b (f/F_MAX)^2`` W."""
DEVICE_BPS = {"write": 2.0e9, "read": 3.0e9}
"""The device's rate (logical bytes/s) with enough I/O processes."""
PROC_EFF = {1: 0.6, 4: 1.0, 16: 0.9}
"""Fraction of the device's rate reached with n I/O processes (one cannot fill it, many
contend)."""
PER_PROC_BPS = {"write": 0.8e9, "read": 1.0e9}
"""What one I/O process can move at F_MAX; proportional to the core frequency."""
POWER_LIMIT_W = 60.0
"""Package long-term limit of the power-limit points (per package), with the performance
governor: assumed to settle the busy cores at 1.8 GHz, with RAPL's enforcement costing 2 %
of the throughput (POWER_LIMIT_LOSS)."""
POWER_LIMIT_F = 1.8
POWER_LIMIT_LOSS = 0.02
ONDEMAND_F = 2.4
"""Under I/O load ondemand runs the busy cores at the maximum (taken here)."""


def uncore_power(uncore_ghz: float) -> float:
    """Node watts the uncore adds above its minimum (both sockets)."""
    return SOCKETS * UNCORE_W_PER_GHZ * (uncore_ghz - UNCORE_MIN)


def throughput(op: str, f_ghz: float, n: int, uncore_ghz: float) -> float:
    """Logical bytes/s: the least of the device's, the CPU's and the uncore's bound."""
    device = DEVICE_BPS[op] * PROC_EFF[n]
    cpu = n * PER_PROC_BPS[op] * f_ghz / F_MAX
    return min(device, cpu) * min(1.0, uncore_ghz / UNCORE_KNEE)


def power(f_ghz: float, n: int, uncore_ghz: float) -> float:
    """Node watts with n busy I/O processes at f and every other core idle."""
    a, b = CORE_W
    return P_FLOOR + uncore_power(uncore_ghz) + n * (a + b * (f_ghz / F_MAX) ** 2)


def _point(
    op: str,
    n: int,
    f_ghz: float,
    uncore_khz: int | None,
    *,
    governor: str | None = None,
    limit: float | None = None,
) -> dict[str, Any]:
    uncore = UNCORE_MAX if uncore_khz is None else uncore_khz / 1e6
    thr = throughput(op, f_ghz, n, uncore) * (1 - POWER_LIMIT_LOSS if limit else 1.0)
    out: dict[str, Any] = {
        "op": op,
        "frequency_hz": None if governor else round(f_ghz * GHZ),
        "governor": governor,
        "processes": n,
        "codec": None,
        "cstates": None,
        "throughput_Bps": round(thr),
        "power_W": round(power(f_ghz, n, uncore), 3),
        "power_source": "synthetic",
        "repetitions": 1,
    }
    if uncore_khz is not None:
        out["uncore_khz"] = uncore_khz
    if limit is not None:
        out["power_limit_W"] = limit
    return out


def _waiting(mode: str, coeffs: tuple[float, float]) -> list[dict[str, Any]]:
    """One entry per CPU setting the points use: the fixed frequencies, and the governors,
    which run waiting cores at the maximum frequency (a spinning core is busy; polite ones
    are charged the same for simplicity)."""
    a, b = coeffs
    settings: list[tuple[int | None, str | None, float]]
    settings = [(round(f * GHZ), None, f) for f in FREQS_GHZ]
    settings += [(None, g, F_MAX) for g in ("performance", "ondemand")]
    return [
        {
            "frequency_hz": hz,
            "governor": gov,
            "cstates": None,
            "mode": mode,
            "ranks": CORES - 1,
            "power_per_rank_W": round(a + b * (f / F_MAX) ** 2, 4),
            "power_source": "synthetic",
        }
        for hz, gov, f in settings
    ]


def profile() -> dict[str, Any]:
    """The whole SYNTHETIC profile document."""
    points = []
    for op in ("write", "read"):
        for f in FREQS_GHZ:
            for n in PROCS:
                for unc in (None, 1_200_000, 1_800_000):
                    points.append(_point(op, n, f, unc))
        for n in PROCS:
            points.append(_point(op, n, ONDEMAND_F, None, governor="ondemand"))
        for n in (4, 16):
            points.append(
                _point(op, n, POWER_LIMIT_F, None, governor="performance", limit=POWER_LIMIT_W)
            )
    return {
        "format": "greenckpt-profile",
        "format_version": 2,
        "status": "complete",
        "synthetic": True,
        "note": "SYNTHETIC example, not a measurement: an uncore-frequency axis, a package "
        "power limit and the per-core split, derived from the assumptions of docs/model.md "
        "(section 'Levers beyond the core clock'). Made by "
        "examples/profiles/generate_synthetic_levers.py.",
        "created": "",
        "tool": "examples/profiles/generate_synthetic_levers.py",
        "machine": {
            "hostname": "synthetic-node",
            "cpu_model": "2-socket x86 (synthetic)",
            "cores": CORES,
            "frequencies_hz": [round(f * GHZ) for f in FREQS_GHZ],
            "uncore_khz_range": [round(UNCORE_MIN * 1e6), round(UNCORE_MAX * 1e6)],
        },
        "storage": {"key": "synthetic:nvme-levers", "kind": "nvme", "path": None},
        "meters": ["synthetic"],
        "power_domains": [],
        "idle_power": {"value_W": P_FLOOR, "source": "synthetic"},
        "levers": {
            "cpu frequency": True,
            "uncore frequency": True,
            "per-core split": True,
            "power limit": True,
            "gpu clocks": False,
            "gpu power limit": False,
        },
        "points": points,
        "waiting": _waiting("polite", WAIT_POLITE) + _waiting("spin", WAIT_SPIN),
    }


def main() -> None:
    """Print the profile as JSON."""
    json.dump(profile(), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
