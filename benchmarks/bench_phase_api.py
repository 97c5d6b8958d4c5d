"""Cost of a call of the C phase API (issue 16: < 2 µs with no runtime, < 50 µs with one).

Run: ``python benchmarks/bench_phase_api.py [--rounds 5] [--pairs-quiet 200000]
[--pairs-live 2000]``. Not a test: it builds benchmarks/native/bench_phase_calls.c with
``greenckpt config`` flags and times begin/end pairs of a checkpoint in four set-ups,
interleaved round by round (medians of the rounds):

* no runtime (GREENCKPT_RUNTIME_SOCKET unset): what every call costs a program that runs
  without greenckpt;
* a stale socket (the variable names a path nobody listens on): after the one warning;
* the notification server with a stand-in target (greenckpt.runtime.notify.NotifyServer
  answering fixed settings in this process): the cost of the socket and the server's
  parsing, without the runtime's work;
* the real runtime (``greenckpt run --no-control``): each begin and end also reads every
  meter, decides and accounts, as in a real job; its socket served by the native front
  (libgreenckpt_front answers repeated begins, joining begins and ends at once and the runtime
  accounts them just after, in order);
* the same with the socket served by Python threads (``GREENCKPT_NOTIFY_FRONT=python``: every
  call waits for the runtime's work, as before the native front).

The loop calls begin/end back to back, far faster than any application checkpoints, so the
runtime falls behind in its accounting (the report says by how much); the per-call cost an
application sees is the same whether or not it leaves time between calls.

Per call = wall time of the loop / (2 × pairs); CPU is the calling program's own (the
server's or runtime's CPU is not in it). The targets are checked and the verdict printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.settings import Settings

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "native" / "bench_phase_calls.c"
GREENCKPT = [sys.executable, "-m", "greenckpt"]


class StandIn:
    """A target that answers at once: fixed settings, nothing measured or applied."""

    SETTINGS = Settings(io_processes=2, source="stand-in (benchmark)")
    decisions_repeat = True  # as the runtime's own policies: repeated begins answered at once

    def begin(self, kind: str, **_: object) -> Settings | None:
        return self.SETTINGS

    def end(self, kind: str, **_: object) -> None:
        return None


def build(out: Path) -> Path:
    flags = subprocess.run(
        [*GREENCKPT, "config", "--cflags", "--libs"], capture_output=True, text=True, check=True
    ).stdout.split()
    exe = out / "bench_phase_calls"
    subprocess.run(["cc", "-O2", "-std=c99", *flags, str(SOURCE), "-o", str(exe)], check=True)
    return exe


def parse(stdout: str) -> tuple[float, float]:
    """Seconds per call (wall, CPU) from the program's line."""
    line = next(ln for ln in stdout.splitlines() if ln and ln[0].isdigit())
    calls, wall, cpu, bad = line.split()
    if int(bad):
        raise SystemExit(f"{bad} calls failed")
    return float(wall) / int(calls), float(cpu) / int(calls)


def bare_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GREENCKPT_")}


def setups(exe: Path, tmp: Path, quiet: int, live: int) -> dict[str, Callable[[], str]]:
    def direct(env: dict[str, str], pairs: int) -> str:
        return subprocess.run(
            [str(exe), str(pairs), str(tmp)], capture_output=True, text=True, env=env, check=True
        ).stdout

    def stale() -> str:
        env = {**bare_env(), "GREENCKPT_RUNTIME_SOCKET": str(tmp / "nobody.sock")}
        return direct(env, quiet)

    def stand_in() -> str:
        with NotifyServer(StandIn(), tmp / "s.sock", front="native") as server:  # type: ignore[arg-type]
            return direct({**bare_env(), **server.environ()}, live)

    def runtime(front: str) -> Callable[[], str]:
        def run() -> str:
            cmd = [*GREENCKPT, "run", "--no-control", "-o", str(tmp / "report"), "--"]
            return subprocess.run(
                [*cmd, str(exe), str(live), str(tmp)],
                capture_output=True,
                text=True,
                env={**bare_env(), "GREENCKPT_NOTIFY_FRONT": front},
                check=True,
            ).stdout

        return run

    return {
        "no runtime": lambda: direct(bare_env(), quiet),
        "stale socket": stale,
        "server, stand-in target": stand_in,
        "greenckpt run (real runtime)": runtime("native"),
        "greenckpt run, Python front": runtime("python"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pairs-quiet", type=int, default=200_000)
    p.add_argument("--pairs-live", type=int, default=2_000)
    ns = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="gcb-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        exe = build(tmp)
        runs = setups(exe, tmp, ns.pairs_quiet, ns.pairs_live)
        walls: dict[str, list[float]] = {name: [] for name in runs}
        cpus: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(ns.rounds):  # interleaved: one of each per round
            for name, run in runs.items():
                wall, cpu = parse(run())
                walls[name].append(wall)
                cpus[name].append(cpu)
    print(f"{'set-up':32} {'µs/call (median)':>17} {'CPU µs/call':>12}  rounds={ns.rounds}")
    for name in runs:
        wall_us = statistics.median(walls[name]) * 1e6
        cpu_us = statistics.median(cpus[name]) * 1e6
        print(f"{name:32} {wall_us:17.3f} {cpu_us:12.3f}")
    quiet_us = statistics.median(walls["no runtime"]) * 1e6
    live_us = statistics.median(walls["greenckpt run (real runtime)"]) * 1e6
    print(f"target < 2 µs with no runtime: {'met' if quiet_us < 2 else 'MISSED'} ({quiet_us:.3f})")
    print(f"target < 50 µs with the runtime: {'met' if live_us < 50 else 'MISSED'} ({live_us:.1f})")


if __name__ == "__main__":
    main()
