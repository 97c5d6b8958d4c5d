"""Generate the SYNTHETIC example profile shipped with greenckpt.

Nothing here is a measurement. The numbers are shaped after the trends saito2013 reports for a
PCIe flash device (Figures 1-4): write throughput falls by about 29 % from 2.1 to 0.8 GHz, reads
less; throughput peaks at two I/O processes and is lowest at 48; node power rises with frequency
and with the number of processes. They exist so that `greenckpt plan` and the tests have a
profile to work on before the profiler (`greenckpt profile`) has measured a real one.

Run: python examples/profiles/generate_synthetic.py > examples/profiles/synthetic-pcie-flash.json
"""

from __future__ import annotations

import json
import sys

FREQS_GHZ = (0.8, 1.1, 1.4, 1.7, 2.1)
PROCS = (1, 2, 4, 8, 12, 16, 24, 48)
PEAK = {"write": 510e6, "read": 735e6}  # bytes/s, the device's rated bandwidth (Table 1)
FREQ_LOSS = {"write": 0.29, "read": 0.15}  # throughput lost from 2.1 to 0.8 GHz
PROC_EFF = {
    "write": {1: 0.80, 2: 1.00, 4: 0.93, 8: 0.85, 12: 0.78, 16: 0.72, 24: 0.62, 48: 0.45},
    "read": {1: 0.85, 2: 1.00, 4: 0.98, 8: 0.95, 12: 0.93, 16: 0.90, 24: 0.86, 48: 0.80},
}


def throughput(op: str, f: float, n: int) -> float:
    slow = FREQ_LOSS[op] * (2.1 - f) / 1.3
    return PEAK[op] * (1.0 - slow) * PROC_EFF[op][n]


def power(op: str, f: float, n: int) -> float:
    rel = (f / 2.1) ** 2
    base = 300.0 + 45.0 * rel  # idle node at this frequency
    groom = (22.0 if op == "write" else 12.0) * rel  # CPU work of the flash driver
    procs = 2.2 * n * rel + 0.4 * n  # busy I/O processes
    return base + groom + procs


def point(op: str, n: int, *, f: float | None = None, gov: str | None = None) -> dict[str, object]:
    if gov == "ondemand":  # ramps to the top only once enough processes load the CPUs
        eff_f = 2.1 if n >= 4 else 1.7
        thr, pw = throughput(op, eff_f, n) * 0.97, power(op, eff_f, n) + 2.0
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
            "SYNTHETIC example, not a measurement: shaped after the PCIe flash trends of "
            "saito2013 Figures 1-4 (4x12-core Opteron 6172 node, 48 cores). Made by "
            "examples/profiles/generate_synthetic.py."
        ),
        "machine": {
            "hostname": "synthetic-node",
            "cpu_model": "AMD Opteron 6172 (synthetic)",
            "cores": 48,
            "frequencies_hz": [round(f * 1e9) for f in FREQS_GHZ],
        },
        "storage": {"key": "synthetic:pcie-flash", "kind": "pcie-flash", "path": None},
        "meters": ["synthetic"],
        "idle_power": {"value_W": 345.0, "source": "synthetic"},
        "points": points,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
