"""Every checkpoint level side by side on the same bytes (issue 19 item 3's targets).

    python benchmarks/bench_levels.py [--ranks 4] [--mib 64 256] [--rounds 5] [--dir DIR]

For each size, one ``mpiexec -n RANKS`` job (``_levels_worker.py``: one emulated node per
rank, incompressible data, codec none) runs level 1 (node-local), level 2 (partner copy),
level 3 with parity 1 (XOR) and level 3 with parity 2 (Reed–Solomon) once per round in a
rotating order, so the machine's drift is shared; the first round is a warm-up and not
counted. Printed per level: the median wall time of the checkpoint call (barrier to the last
rank's return), the median CPU-seconds of all ranks in it, and the median over the rounds of
each round's ratio to level 1 (paired: both ran within seconds of each other) — the targets
are L2 <= 2x L1, L3 XOR <= 2x L1, L3 RS(t=2) <= 3x L1. Every emulated node writes to the same
device here, so the job also runs level 1 with each level's stored bytes (rows ``L1xF``, F =
bytes stored over level 1's): ``x floor`` is the level's time over that run's, how far the
level is from what the device and level 1's own path need for its bytes. Timing on a shared
VM is noisy: read the ratios, and repeat the run before believing one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _pagereport
from greenckpt.platform.root import PlatformError

HERE = Path(__file__).resolve().parent
TARGETS = {"L1": 1.0, "L2": 2.0, "L3-xor": 2.0, "L3-rs2": 3.0}


def _mpiexec() -> str:
    found = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which(
        "mpiexec"
    )
    if found is None:
        raise SystemExit("bench_levels: no mpiexec (pip install '.[mpi]' installs MPICH's)")
    return found


def run_job(ranks: int, nbytes: int, rounds: int, base: Path, seed: int) -> dict[str, Any]:
    """One worker job: its per-level (seconds, cpu_s) lists and stored bytes."""
    work = Path(tempfile.mkdtemp(prefix="levels-", dir=base))
    (work / "local").mkdir()
    try:
        proc = subprocess.run(
            [_mpiexec(), "-n", str(ranks), sys.executable, str(HERE / "_levels_worker.py"),
             str(work), str(nbytes), str(rounds), str(seed)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(
            f"bench_levels: the job failed (status {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    doc: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return doc


def paired(results: dict[str, list[list[float]]], name: str, base: str, index: int) -> float:
    """Median over the rounds of ``name``'s figure over ``base``'s in the same round."""
    pairs = zip(results[name], results[base], strict=True)
    return statistics.median(x[index] / y[index] for x, y in pairs)


def report(mib: int, doc: dict[str, Any]) -> list[str]:
    """The table of one size; verdict lines at the end."""
    results: dict[str, list[list[float]]] = doc["results"]
    stored: dict[str, int] = doc["stored"]
    floors: dict[str, str] = doc["floors"]
    rows = [f"{mib} MiB per rank, {len(results['L1'])} rounds (medians; ratios: medians of "
            "per-round ratios)",
            f"{'run':<10}{'seconds':>9}{'x L1':>7}{'CPU-s':>8}{'x L1':>7}{'stored':>8}"
            f"{'x floor':>9}  target"]  # fmt: skip
    for name, runs in results.items():
        wall = statistics.median(x[0] for x in runs)
        cpu = statistics.median(x[1] for x in runs)
        ratio = paired(results, name, "L1", 0)
        floor = f"{paired(results, name, floors[name], 0):>9.2f}" if name in floors else " " * 9
        target = ""
        if name in TARGETS and name != "L1":
            target = f"<= {TARGETS[name]:.0f}x {'met' if ratio <= TARGETS[name] else 'NOT met'}"
        rows.append(
            f"{name:<10}{wall:>9.3f}{ratio:>7.2f}{cpu:>8.2f}{paired(results, name, 'L1', 1):>7.2f}"
            f"{stored[name] / stored['L1']:>7.2f}x{floor}  {target}"
        )
    rows.append(
        "stored: bytes the run keeps on all emulated nodes, x L1's; they share one device here. "
        "L1xF: level 1 storing F times the bytes (the floor: what level 1's own path needs to "
        "store as much as the level does on this machine); x floor: the level's time over it"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--seed", type=int, default=1)
    _pagereport.add_argument(parser)
    ns = parser.parse_args()
    if ns.ranks < 3:
        parser.error(f"--ranks must be >= 3 (level 3 with parity 2 needs 3 nodes), not {ns.ranks}")
    if ns.rounds < 1 or any(m < 1 for m in ns.mib):
        parser.error("--rounds and every --mib must be >= 1")
    print(f"bench_levels: {ns.ranks} ranks, one emulated node each, in {ns.dir} "
          f"(cores: {os.cpu_count()})")  # fmt: skip
    try:
        with _pagereport.page_reporting(ns.page_reporting) as memory_note:
            print(f"memory: {memory_note}", flush=True)
            for mib in ns.mib:
                if _pagereport.held(memory_note):  # see _pagereport.back_free_memory
                    backed, took = _pagereport.back_free_memory(_pagereport.free_bytes())
                    print(f"backed {backed / 2**30:.1f} GiB of free memory first ({took:.1f} s)")
                doc = run_job(ns.ranks, mib << 20, ns.rounds, ns.dir, ns.seed)
                print("\n".join(report(mib, doc)), flush=True)
    except PlatformError as exc:
        raise SystemExit(f"bench_levels.py: error: {exc} (or --page-reporting keep)") from None


if __name__ == "__main__":
    main()
