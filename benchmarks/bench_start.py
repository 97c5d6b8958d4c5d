"""Start-up cost of the command line and of the checkpoint library, side by side in one run.

Run: ``python benchmarks/bench_start.py [--repeats 15] [--src DIR]``.
Not a test: it runs ``greenckpt --help``, ``greenckpt notify --help``,
``python -c "import greenckpt.ckpt"`` and a baseline ``python -c pass`` interleaved (one of
each per round, in a shuffled order), each in a fresh interpreter, and prints per command the
median wall time and the median CPU time (user + system of the child, from ``os.wait4``),
and both as a ratio to the baseline. Targets (issue 19): both commands < 0.2 s and the import
< 0.3 s on the development VM.

``--src`` points the children at another tree's ``src`` (``PYTHONPATH``), e.g. a worktree of
an older commit (``git worktree add /tmp/before HEAD``), to compare before and after with the
same interpreter and packages.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
COMMANDS: dict[str, list[str]] = {
    "python -c pass (baseline)": ["-c", "pass"],
    "greenckpt --help": ["-m", "greenckpt", "--help"],
    "greenckpt notify --help": ["-m", "greenckpt", "notify", "--help"],
    "import greenckpt.ckpt": ["-c", "import greenckpt.ckpt"],
}


def run_once(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one fresh interpreter running ``args``."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {err}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(env: dict[str, str], repeats: int) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds per command over ``repeats`` shuffled rounds."""
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpus: dict[str, list[float]] = {name: [] for name in COMMANDS}
    rng = random.Random(19)
    names = list(COMMANDS)
    for name in names:  # one warm-up round: the page cache and the .pyc files
        run_once(COMMANDS[name], env)
    for _ in range(repeats):
        rng.shuffle(names)
        for name in names:
            wall, cpu = run_once(COMMANDS[name], env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {n: (statistics.median(walls[n]), statistics.median(cpus[n])) for n in COMMANDS}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="rounds (default 15)")
    parser.add_argument("--src", default=str(SRC), help="the src/ directory to import from")
    parser.add_argument(
        "--no-bytecode", action="store_true", help="compile every start (PYTHONDONTWRITEBYTECODE)"
    )
    ns = parser.parse_args()
    # Bytecode as an installed package has it: written once (warm-up) into a private cache.
    # Why: with PYTHONDONTWRITEBYTECODE set (as in the development shell) every start would
    # compile greenckpt's sources again, which costs more than importing them.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ns.src
    with tempfile.TemporaryDirectory(prefix="bench_start-") as cache:
        if ns.no_bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env["PYTHONPYCACHEPREFIX"] = cache
        medians = measure(env, ns.repeats)
    base_wall, base_cpu = medians[next(iter(COMMANDS))]
    cached = "compiled at every start" if ns.no_bytecode else "bytecode cached"
    print(f"src: {ns.src}; {ns.repeats} interleaved rounds; medians; {cached}")
    print(f"{'command':<28} {'wall s':>8} {'cpu s':>8} {'wall/base':>10} {'cpu/base':>9}")
    for name, (wall, cpu) in medians.items():
        print(f"{name:<28} {wall:8.3f} {cpu:8.3f} {wall / base_wall:10.1f} {cpu / base_cpu:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
