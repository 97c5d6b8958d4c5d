"""Generate the SYNTHETIC example profile shipped with greenckpt.

Nothing here is a measurement. The numbers are shaped after the trends saito2013 reports for a
PCIe flash device (Figures 1-4): write throughput falls by about 29 % from 2.1 to 0.8 GHz, reads
less; throughput peaks at two I/O processes and is lowest at 48; node power rises with frequency
and with the number of processes. They exist so that `greenckpt plan` and the tests have a
profile to work on before the profiler (`greenckpt profile`) has measured a real one.

``--shape nfs`` makes the second example, the same node writing to NFS over 1 GbE, shaped after
mills2013 (sections 2.3-2.4): the link, not the CPU, bounds throughput, so lowering the
frequency costs little throughput (8 % for writes, 5 % for reads from 2.1 to 0.8 GHz) while it
still lowers power; one stream cannot fill the link, a few do, many contend (peak at 8
processes); ondemand stays low because the CPUs mostly wait. The two grids have different
shapes, which ``benchmarks/bench_adaptive.py`` needs.

``--shape saito-iodrive|saito-ssd|saito-hdd`` make the three devices of saito2013 (Table 1:
Fusion-io ioDrive, Intel SSD 320, a 4200 rpm Fujitsu HDD) from what its section 2.2 states of
Figures 1-4, with the CPU-bound throughput saturating at a knee frequency where the device
becomes the bound (see SAITO below): these reproduce Table 3's choice for ioDrive (write
1.4 GHz / 2 processes, read 2.1 GHz / 2) and the single process for HDD and SSD; the HDD and
SSD frequencies of Table 3 are not reproduced, because the paper states their throughput and
power are almost constant over the frequency (docs/model.md, "Reference profiles").

Run (in examples/profiles):
    python generate_synthetic.py > synthetic-pcie-flash.json
    python generate_synthetic.py --shape nfs > synthetic-nfs-1gbe.json
    python generate_synthetic.py --shape saito-iodrive > synthetic-saito2013-iodrive.json
    python generate_synthetic.py --shape saito-ssd > synthetic-saito2013-ssd.json
    python generate_synthetic.py --shape saito-hdd > synthetic-saito2013-hdd.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

FREQS_GHZ = (0.8, 1.1, 1.4, 1.7, 2.1)
PROCS = (1, 2, 4, 8, 12, 16, 24, 48)
SHAPES: dict[str, dict[str, Any]] = {
    "pcie": {
        "peak": {"write": 510e6, "read": 735e6},  # bytes/s, the device's rating (Table 1)
        "freq_loss": {"write": 0.29, "read": 0.15},  # throughput lost from 2.1 to 0.8 GHz
        "proc_eff": {
            "write": {1: 0.80, 2: 1.00, 4: 0.93, 8: 0.85, 12: 0.78, 16: 0.72, 24: 0.62, 48: 0.45},
            "read": {1: 0.85, 2: 1.00, 4: 0.98, 8: 0.95, 12: 0.93, 16: 0.90, 24: 0.86, 48: 0.80},
        },
        "stack_w": {"write": 22.0, "read": 12.0},  # CPU work of the flash driver at 2.1 GHz
        "per_proc_w": (2.2, 0.4),  # busy I/O processes: frequency-scaled and fixed parts
        "ondemand": (4, 2.1, 1.7, 0.97),  # from n procs at f_hi GHz, else f_lo; thr factor
        "key": "synthetic:pcie-flash",
        "note": "shaped after the PCIe flash trends of saito2013 Figures 1-4",
    },
    "nfs": {
        "peak": {"write": 117e6, "read": 112e6},  # a 1 GbE link after protocol overhead
        "freq_loss": {"write": 0.08, "read": 0.05},
        "proc_eff": {
            "write": {1: 0.55, 2: 0.80, 4: 0.97, 8: 1.00, 12: 0.96, 16: 0.92, 24: 0.85, 48: 0.70},
            "read": {1: 0.60, 2: 0.85, 4: 0.98, 8: 1.00, 12: 0.98, 16: 0.95, 24: 0.90, 48: 0.80},
        },
        "stack_w": {"write": 10.0, "read": 8.0},  # the network stack
        "per_proc_w": (1.2, 0.3),  # processes mostly waiting on the link
        "ondemand": (8, 1.4, 1.1, 0.98),
        "key": "synthetic:nfs-1gbe",
        "note": "NFS over 1 GbE from the same node, shaped after mills2013 sections 2.3-2.4",
    },
}
SHAPE = SHAPES["pcie"]

SAITO: dict[str, dict[str, Any]] = {
    # Throughput = peak x eff(n) x min(1, f / knee) ** alpha: below the knee the CPU (the
    # flash driver's grooming and wear levelling, saito2013 section 2.1) bounds the I/O, above
    # it the device does. ioDrive: write throughput 29 % lower at 0.8 GHz than at 2.1 GHz
    # (section 2.2: (0.8 / 1.4) ** 0.61 = 0.71), flat from 1.4 GHz; reads CPU-bound up to
    # 2.1 GHz (35 % lower at 0.8 GHz; the paper gives no read figure); two processes exploit
    # the device, more contend, 48 are the slowest and hungriest (Figs 3-4); its power rises
    # with the frequency (Fig 2).
    "saito-iodrive": {
        "peak": {"write": 510e6, "read": 735e6},
        "knee": {"write": 1.4, "read": 2.1},
        "alpha": {"write": 0.61, "read": 0.45},
        "proc_eff": SHAPES["pcie"]["proc_eff"],
        "stack_w": {"write": 22.0, "read": 12.0},
        "per_proc_w": (2.2, 0.4),
        "key": "synthetic:saito2013-iodrive",
        "note": "saito2013's Fusion-io ioDrive as its section 2.2 describes Figures 1-4",
    },
    # SSD (Intel SSD 320, 270/220 MB/s): throughput and power almost constant over the
    # frequency (Figs 1-2), near peak with one process, power growing with processes (Fig 4).
    "saito-ssd": {
        "peak": {"write": 220e6, "read": 270e6},
        "knee": {"write": 0.8, "read": 0.8},
        "alpha": {"write": 0.0, "read": 0.0},
        "proc_eff": {
            op: {1: 1.00, 2: 0.99, 4: 0.98, 8: 0.97, 12: 0.96, 16: 0.95, 24: 0.93, 48: 0.90}
            for op in ("write", "read")
        },
        "stack_w": {"write": 3.0, "read": 2.0},
        "per_proc_w": (0.8, 0.3),
        "key": "synthetic:saito2013-ssd",
        "note": "saito2013's Intel SSD 320 as its section 2.2 describes Figures 1-4",
    },
    # HDD (Fujitsu MHZ2500B, 4200 rpm): constant over the frequency (Figs 1-2), its peak with
    # one process, seeks between more streams cost throughput, power constant (Figs 3-4).
    "saito-hdd": {
        "peak": {"write": 38e6, "read": 42e6},
        "knee": {"write": 0.8, "read": 0.8},
        "alpha": {"write": 0.0, "read": 0.0},
        "proc_eff": {
            op: {1: 1.00, 2: 0.80, 4: 0.65, 8: 0.55, 12: 0.50, 16: 0.47, 24: 0.43, 48: 0.38}
            for op in ("write", "read")
        },
        "stack_w": {"write": 1.0, "read": 1.0},
        "per_proc_w": (0.1, 0.05),
        "key": "synthetic:saito2013-hdd",
        "note": "saito2013's 4200 rpm Fujitsu HDD as its section 2.2 describes Figures 1-4",
    },
}


def throughput(op: str, f: float, n: int) -> float:
    if "knee" in SHAPE:
        bound = min(1.0, f / SHAPE["knee"][op]) ** SHAPE["alpha"][op]
        return float(SHAPE["peak"][op] * SHAPE["proc_eff"][op][n] * bound)
    slow = SHAPE["freq_loss"][op] * (2.1 - f) / 1.3
    return float(SHAPE["peak"][op] * (1.0 - slow) * SHAPE["proc_eff"][op][n])


def power(op: str, f: float, n: int) -> float:
    rel = (f / 2.1) ** 2
    base = 300.0 + 45.0 * rel  # idle node at this frequency
    stack = SHAPE["stack_w"][op] * rel
    scaled, fixed = SHAPE["per_proc_w"]
    return float(base + stack + scaled * n * rel + fixed * n)


def point(op: str, n: int, *, f: float | None = None, gov: str | None = None) -> dict[str, object]:
    if gov == "ondemand":  # ramps to the top only once enough processes load the CPUs
        n_hi, f_hi, f_lo, factor = SHAPE["ondemand"]
        eff_f = f_hi if n >= n_hi else f_lo
        thr, pw = throughput(op, eff_f, n) * factor, power(op, eff_f, n) + 2.0
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
    global SHAPE  # noqa: PLW0603 - a script: one shape per run
    shape = sys.argv[sys.argv.index("--shape") + 1] if "--shape" in sys.argv else "pcie"
    SHAPE = SHAPES[shape] if shape in SHAPES else SAITO[shape]
    points = [point(op, n, f=f) for op in ("write", "read") for f in FREQS_GHZ for n in PROCS]
    if "ondemand" in SHAPE:
        points += [point(op, n, gov="ondemand") for op in ("write", "read") for n in PROCS]
    doc = {
        "format": "greenckpt-profile",
        "format_version": 1,
        "synthetic": True,
        "note": (
            f"SYNTHETIC example, not a measurement: {SHAPE['note']} (4x12-core Opteron 6172 "
            "node, 48 cores). Made by examples/profiles/generate_synthetic.py"
            + (f" --shape {shape}." if shape != "pcie" else ".")
        ),
        "machine": {
            "hostname": "synthetic-node",
            "cpu_model": "AMD Opteron 6172 (synthetic)",
            "cores": 48,
            "frequencies_hz": [round(f * 1e9) for f in FREQS_GHZ],
        },
        "storage": {"key": SHAPE["key"], "kind": SHAPE["key"].split(":")[1], "path": None},
        "meters": ["synthetic"],
        "idle_power": {"value_W": 345.0, "source": "synthetic"},
        "points": points,
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
