"""The job leader at scale: 10, 100 and 1,000 emulated agents into one JobCollector over TCP.

Run: ``PYTHONPATH=src python benchmarks/bench_job_scale.py [--nodes 10,100,1000]
[--records 50,200]``. Not a test: nothing here asserts a time or a size; it prints them side
by side, with ratios.

The leader (this process) runs the real :class:`~greenckpt.runtime.job.JobCollector` and
builds the real :class:`~greenckpt.runtime.job_report.JobReport`. The agents are threads in
a few worker processes (``--worker``; this file again), so their own work is not counted as
the leader's. Each agent replays a node's stream as the real agent sends it: ``hello``; a
``progress`` snapshot every 2 s of node time, compressed to 0.05 s of wall time, 5 of them;
then, on the leader's ``stop``, its ``final`` summary: ``RunReport``-shaped totals, RECORDS
phase records (``PhaseRecord.to_dict`` of compute / checkpoint L1 / checkpoint L4 / flush,
with their settings) and a 1,000-point power series. Every 97th agent dies midway (its
connection closes after its progress, no final). Energies are SYNTHETIC (invented, labelled
estimated): the benchmark measures the leader's cost, not a node's power.

Measured per case, in the leader's process only:

* ``retained MiB``: Python memory the collector holds once every final arrived (tracemalloc,
  current) — the bound that matters for a long job; ``peak MiB``: the highest it reached,
  including the report's build (tracemalloc, peak);
* ``report KiB``: the job report's JSON;
* ``CPU ms/node``: the leader process's CPU seconds (getrusage) per node, from the collector's
  start to the report, measured in a second pass without tracemalloc (which slows Python);
* ``wall s``: the same pass, from the collector's start to the report built — on this 2-core
  machine the agents' threads compete with the leader for the CPUs, so it is an upper bound.

The ratio column ``x retained (records 4x)`` divides the retained memory at the most records
by the one at the fewest, for the same nodes: 4.0 would mean memory ∝ nodes × phases; near
1.0 means the records are folded into job phases as they arrive (nodes + phases).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

from greenckpt.runtime.job import TOKEN_ENV, JobCollector, encode_message
from greenckpt.runtime.job_report import JobReport
from greenckpt.runtime.records import PhaseRecord
from greenckpt.runtime.settings import Settings

TOKEN = "bench-token"
PROGRESS = 5
"""Progress snapshots per agent (every 2 s of node time, 0.05 s of wall time apart)."""
DIE_EVERY = 97
"""Every DIE_EVERY-th agent dies after its progress (no final)."""
THREADS_PER_WORKER = 125
SERIES_POINTS = 1000


# ---------------------------------------------------------------------------- agents' side


def _records(node: int, count: int) -> list[dict[str, Any]]:
    """``count`` phase records of a node, as the real agent sends them."""
    cycle = ("compute", "checkpoint", "compute", "checkpoint", "flush")
    out = []
    t = 0.0
    for i in range(count):
        kind = cycle[i % len(cycle)]
        seconds = 8.0 if kind == "compute" else 1.5 + 0.01 * (node % 7)
        level = None if kind == "compute" else (1 if i % 10 == 1 else 4)
        power = 180.0 + (node % 13) + (40.0 if kind == "compute" else 0.0)
        settings = None
        if kind != "compute":
            settings = Settings(
                io_processes=4,
                source="profile lookup",
                frequency_hz=1_800_000_000,
                predicted_seconds=seconds * 0.95,
                predicted_energy_j=seconds * 0.95 * power,
                predicted_power_w=power,
                power_source="estimated",
            )
        record = PhaseRecord(
            kind=kind,  # type: ignore[arg-type]
            index=i,
            start_s=t,
            end_s=t + seconds,
            energy_j={"estimator/node": seconds * power},
            sources={"estimator/node": "estimated"},
            node_energy_j=seconds * power,
            power_source="estimated",
            power_domains=("estimator/node",),
            level=level,
            path=None if level is None else f"/scratch/job/ckpt/{i}",
            size=0 if level is None else 2 << 30,
            settings=settings,
            background=kind == "flush",
            nodes=(node,),
            cpu_s=seconds * 0.9,
        )
        out.append(record.to_dict())
        t += 0.0 if kind == "flush" else seconds
    return out


def _summary(node: int, count: int, t0_unix: float) -> dict[str, Any]:
    records = _records(node, count)
    seconds = max(r["end_s"] for r in records)
    energy = sum(r["node_energy_j"] for r in records if not r["background"])
    by_kind: dict[str, dict[str, Any]] = {}
    by_level: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        for table, key in ((by_kind, r["kind"]), (by_level, (r["kind"], r["level"]))):
            if isinstance(key, tuple) and key[1] is None:
                continue
            row = table.setdefault(
                key,  # type: ignore[arg-type]
                {"count": 0, "failed": 0, "seconds": 0.0, "energy_j": 0.0, "source": "estimated"},
            )
            row["count"] += 1
            row["seconds"] += r["seconds"]
            row["energy_j"] += r["node_energy_j"]
    step = seconds / SERIES_POINTS
    return {
        "policy": "profile",
        "power": {"source": "estimated", "scope": "node", "meters": ["estimator"]},
        "total": {"seconds": seconds, "energy_j": energy, "source": "estimated"},
        "cpu": {"total_s": seconds * 0.9},
        "useful_compute_s": sum(r["seconds"] for r in records if r["kind"] == "compute"),
        "rework_s": 0.0,
        "lost_s": 0.0,
        "epe": {"observed_w": None, "predicted_w": None},
        "by_kind": by_kind,
        "by_level": [{"kind": k, "level": lv, **v} for (k, lv), v in by_level.items()],
        "synthetic": True,
        "notes": ["SYNTHETIC: benchmark agent"],
        "records": records,
        "t0_unix": t0_unix,
        "files": [f"/out/nodes/node{node}/report.json"],
        "series": {
            "t_s": [step * (i + 1) for i in range(SERIES_POINTS)],
            "power_w": [200.0 + (node % 13) + (i % 50) for i in range(SERIES_POINTS)],
            "source": "estimated",
        },
    }


def _agent(address: str, token: str, node: int, records: int) -> None:
    import socket  # noqa: PLC0415

    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=300)
    t0 = time.time()
    sock.sendall(
        encode_message(
            {
                "type": "hello",
                "token": token,
                "node": node,
                "host": f"n{node:05d}",
                "pid": os.getpid(),
                "socket": f"/run/greenckpt/job/node{node}.sock",
                "power_source": "estimated",
                "control": True,
                "t0_unix": t0,
            }
        )
    )
    for i in range(1, PROGRESS + 1):
        time.sleep(0.05)
        by = {"compute": {"count": i, "seconds": 8.0 * i, "energy_j": 1700.0 * i}}
        message = {"type": "progress", "t_s": 2.0 * i, "records": i, "energy_j": 1700.0 * i}
        sock.sendall(encode_message({**message, "by_kind": by}))
    if node % DIE_EVERY == DIE_EVERY - 1:
        sock.close()  # dies midway: no final
        return
    reader = sock.makefile("rb")
    while json.loads(reader.readline()).get("type") != "stop":
        pass
    sock.sendall(encode_message({"type": "final", "summary": _summary(node, records, t0)}))
    reader.close()
    sock.close()


def worker(address: str, first: int, count: int, records: int) -> None:
    """``count`` agent threads (nodes ``first``..), token from the environment."""
    token = os.environ[TOKEN_ENV]
    threads = [
        threading.Thread(target=_agent, args=(address, token, first + k, records))
        for k in range(count)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# ---------------------------------------------------------------------------- leader's side


@dataclass
class Case:
    nodes: int
    records: int
    retained_b: int = 0
    peak_b: int = 0
    report_b: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    died: int = 0
    phases: int = 0


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _one(nodes: int, records: int, *, trace: bool) -> tuple[JobReport, float, float, int]:
    """One job: (report, cpu s, wall s, retained bytes)."""
    retained = 0
    wall0, cpu0 = time.monotonic(), _cpu()
    with JobCollector("bench", nodes, TOKEN) as collector:
        env = {**os.environ, TOKEN_ENV: TOKEN}
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--worker",
                    collector.address,
                    str(first),
                    str(min(THREADS_PER_WORKER, nodes - first)),
                    str(records),
                ],
                env=env,
            )
            for first in range(0, nodes, THREADS_PER_WORKER)
        ]
        collector.wait_for({"running", "died"}, 300)
        dying = [k for k in range(nodes) if k % DIE_EVERY == DIE_EVERY - 1]
        if dying:
            collector.wait_for({"died"}, 300, dying)
        collector.stop_all()
        collector.wait_for({"finished", "died"}, 300)
        for w in workers:
            w.wait()
        if trace:
            retained = tracemalloc.get_traced_memory()[0]
        report = JobReport.build(
            job_id="bench",
            launcher=f"bench:{nodes}",
            command=["app"],
            nodes=collector.nodes(),
            phases=collector.phases(),
            started_unix=collector.started_unix,
            ended_unix=time.time(),
        )
    return report, _cpu() - cpu0, time.monotonic() - wall0, retained


def run_case(nodes: int, records: int) -> Case:
    case = Case(nodes, records)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    report, _, _, retained = _one(nodes, records, trace=True)
    case.peak_b = tracemalloc.get_traced_memory()[1] - base
    case.retained_b = retained - base
    tracemalloc.stop()
    del report
    report, case.cpu_s, case.wall_s, _ = _one(nodes, records, trace=False)
    case.report_b = len(json.dumps(report.to_dict()).encode())
    case.died = len(report.doc["states"]["died"])
    case.phases = len(report.doc["phases"])
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="10,100,1000")
    parser.add_argument("--records", default="50,200")
    parser.add_argument("--worker", nargs=4, metavar=("ADDR", "FIRST", "COUNT", "RECORDS"))
    args = parser.parse_args()
    if args.worker:
        address, first, count, records = args.worker
        worker(address, int(first), int(count), int(records))
        return
    nodes = [int(x) for x in args.nodes.split(",")]
    records = [int(x) for x in args.records.split(",")]
    cases = [run_case(n, r) for n in nodes for r in records]
    _print(cases)


def _print(cases: list[Case]) -> None:
    header = (
        f"{'nodes':>6} {'records':>7} {'died':>4} {'job ph':>6} {'retained MiB':>12} "
        f"{'KiB/node':>8} {'peak MiB':>8} {'report KiB':>10} {'CPU ms/node':>11} "
        f"{'wall s':>6} {'x retained (records 4x)':>23}"
    )
    print("job leader at scale (SYNTHETIC agents; leader process only; see the docstring)")
    print(header)
    fewest = {c.nodes: c for c in reversed(cases)}
    for c in cases:
        base = fewest[c.nodes]
        ratio = c.retained_b / base.retained_b if base is not c and base.retained_b else None
        print(
            f"{c.nodes:>6} {c.records:>7} {c.died:>4} {c.phases:>6} "
            f"{c.retained_b / 2**20:>12.2f} {c.retained_b / c.nodes / 1024:>8.1f} "
            f"{c.peak_b / 2**20:>8.2f} {c.report_b / 1024:>10.1f} "
            f"{1000 * c.cpu_s / c.nodes:>11.2f} {c.wall_s:>6.2f} "
            f"{'' if ratio is None else f'{ratio:.2f}':>23}"
        )
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; agents: threads in "
        f"{THREADS_PER_WORKER}-thread worker processes on the same machine"
    )


if __name__ == "__main__":
    main()
