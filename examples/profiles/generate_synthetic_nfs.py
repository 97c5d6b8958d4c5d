"""Generate the second SYNTHETIC example profile: the same node writing to NFS over 1 GbE.

Nothing here is a measurement. Shaped after mills2013 (sections 2.3-2.4): on network storage
the link, not the CPU, bounds throughput, so lowering the frequency costs little throughput
(8 % for writes, 5 % for reads from 2.1 to 0.8 GHz) while it still lowers power; one stream
cannot fill the link, a few do, and many contend (peak at 8 processes). With
``generate_synthetic.py`` (PCIe flash) it gives the adaptive-sweep benchmark two grids of
different shape: ``benchmarks/bench_adaptive.py``.

Run: python examples/profiles/generate_synthetic_nfs.py > examples/profiles/synthetic-nfs-1gbe.json
"""

from __future__ import annotations

import json
import sys

FREQS_GHZ = (0.8, 1.1, 1.4, 1.7, 2.1)
PROCS = (1, 2, 4, 8, 12, 16, 24, 48)
PEAK = {"write": 117e6, "read": 112e6}  # bytes/s: a 1 GbE link after protocol overhead
FREQ_LOSS = {"write": 0.08, "read": 0.05}
PROC_EFF = {
    "write": {1: 0.55, 2: 0.80, 4: 0.97, 8: 1.00, 12: 0.96, 16: 0.92, 24: 0.85, 48: 0.70},
    "read": {1: 0.60, 2: 0.85, 4: 0.98, 8: 1.00, 12: 0.98, 16: 0.95, 24: 0.90, 48: 0.80},
}


def throughput(op: str, f: float, n: int) -> float:
    slow = FREQ_LOSS[op] * (2.1 - f) / 1.3
    return PEAK[op] * (1.0 - slow) * PROC_EFF[op][n]


def power(op: str, f: float, n: int) -> float:
    rel = (f / 2.1) ** 2
    base = 300.0 + 45.0 * rel  # idle node at this frequency
    stack = (10.0 if op == "write" else 8.0) * rel  # CPU work of the network stack
    procs = 1.2 * n * rel + 0.3 * n  # I/O processes, mostly waiting on the link
    return base + stack + procs


def point(op: str, n: int, *, f: float | None = None, gov: str | None = None) -> dict[str, object]:
    if gov == "ondemand":  # little CPU load while waiting on the network: stays low
        eff_f = 1.4 if n >= 8 else 1.1
        thr, pw = throughput(op, eff_f, n) * 0.98, power(op, eff_f, n) + 2.0
    else:
        assert f is not None
        thr, pw = throughput(op, f, n), power(op, f, n)
    return {
        "op": op,
        "frequency_hz": None if f is None else round(f * 1e9),
        "governor": gov,
        "processes": n,
        "codec": None,
        "cstates": None,
        "throughput_Bps": round(thr),
        "power_W": round(pw, 1),
        "power_source": "synthetic",
        "repetitions": 1,
    }


def main() -> None:
    points = [point(op, n, f=f) for op in ("write", "read") for f in FREQS_GHZ for n in PROCS]
    points += [point(op, n, gov="ondemand") for op in ("write", "read") for n in PROCS]
    doc = {
        "format": "greenckpt-profile",
        "format_version": 1,
        "synthetic": True,
        "note": (
            "SYNTHETIC example, not a measurement: NFS over 1 GbE from the 48-core node of "
            "synthetic-pcie-flash.json, shaped after mills2013 sections 2.3-2.4. Made by "
            "examples/profiles/generate_synthetic_nfs.py."
        ),
        "machine": {
            "hostname": "synthetic-node",
            "cpu_model": "AMD Opteron 6172 (synthetic)",
            "cores": 48,
            "frequencies_hz": [round(f * 1e9) for f in FREQS_GHZ],
        },
        "storage": {"key": "synthetic:nfs-1gbe", "kind": "nfs", "path": None},
        "meters": ["synthetic"],
        "idle_power": {"value_W": 345.0, "source": "synthetic"},
        "points": points,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
