"""greenckpt side by side with VeloC and FTI on the same bytes and ranks (issue 32 item 5).

    python benchmarks/bench_peers.py --veloc-src DIR --fti-src DIR [--ranks 4] [--mib 64 256]
        [--rounds 5] [--dir DIR] [--build-dir DIR] [--json PATH]

No peer code is in the project: the peers are built from source trees the user checked out.
``--veloc-src DIR`` holds one folder per repository of github.com/ECP-VeloC, named as the
repositories are: ``DIR/KVTree``, ``DIR/AXL``, ``DIR/rankstr``, ``DIR/shuffile``, ``DIR/redset``,
``DIR/er`` and ``DIR/VELOC`` (VeloC 1.8's auto-install.py names the tags: KVTree v1.4.0, AXL
v0.8.0, rankstr v0.3.0, shuffile v0.3.0, redset v0.3.0, er v0.4.0). ``--fti-src DIR`` is FTI's
source tree (github.com/leobago/fti, v1.6: the folder with its CMakeLists.txt) or a folder
holding it as ``DIR/fti``. What is not built yet in ``--build-dir`` (default
``$TMPDIR/greenckpt-peers-build``) is built there with CMake and the MPI compilers of this
Python's environment (VeloC: socket queue, POSIX direct transfer; VELOC is copied there first,
since its CMake writes into its source tree), and the harnesses ``native/bench_veloc.c`` and
``native/bench_fti.c`` are compiled against it. A peer whose option is not given is skipped
with one line.

Every rank protects the same number of random bytes on every side, one emulated node per rank
where the library has them (greenckpt: ``ranks_per_node = 1``; FTI: ``Node_size = 1`` with
``Local_test = 1``; VeloC keeps one engine and one scratch directory per host, by design). Each
round runs every job once, in an order that rotates from round to round (round 0 is a warm-up
and not counted), after an ``os.sync()``: VeloC sync; VeloC async (its active backend started
before and stopped after); FTI (a write launch, then two restart launches); and next to each,
the greenckpt job (``_peers_worker.py``) that writes what the peer's job writes, in the same
order, so a cell finds the disk as its counterpart did. Printed per
size: the medians of seconds (barrier to the last rank's return) and CPU-seconds (all ranks,
threads included; VeloC async adds its backend's), the medians over the rounds of the paired
ratios greenckpt / peer, and who is ahead (a ratio outside 0.95..1.05). VeloC calls no fsync
and FTI fsyncs only the file it writes itself, so the peers' rows marked ``+fsync`` include
the fsync of their files, made after their call returned (``returned`` shows the call alone).
Nothing here is a test; timing on a shared VM is noisy: repeat a run before believing a ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _pagereport
from greenckpt.platform.root import PlatformError

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
VELOC_PARTS = ("KVTree", "AXL", "rankstr", "shuffile", "redset", "er", "VELOC")
Cells = dict[str, list[float]]

# (row, greenckpt job, its cell, peer job, peer cell as returned, peer cell made durable)
ROWS: dict[str, list[tuple[str, str, str, str, str, str]]] = {
    "VeloC": [
        ("L1+L4 vs sync", "g-sync", "L1+L4", "veloc-sync", "ckpt", "ckpt+fsync"),
        ("L1 vs async return", "g-sync", "L1", "veloc-async", "return", "return+fsync"),
        (
            "L4 async durable vs wait",
            "g-async",
            "L4-async-durable",
            "veloc-async",
            "return",
            "wait+fsync",
        ),
        (
            "L4 async return vs return",
            "g-async",
            "L4-async-return",
            "veloc-async",
            "return",
            "return",
        ),
        (
            "restart local",
            "g-sync",
            "restart-L1",
            "veloc-sync",
            "restart-scratch",
            "restart-scratch",
        ),
        (
            "restart global",
            "g-sync",
            "restart-L4",
            "veloc-sync",
            "restart-persistent",
            "restart-persistent",
        ),
    ],
    "FTI": [
        ("L1", "g-levels", "L1", "fti", "L1", "L1+fsync"),
        ("L2 partner", "g-levels", "L2", "fti", "L2", "L2+fsync"),
        ("L3 RS (2 of 4)", "g-levels", "L3-rs2", "fti", "L3", "L3+fsync"),
        ("L4", "g-levels", "L4", "fti", "L4", "L4+fsync"),
        ("restart L1", "g-levels", "restart-L1", "fti", "restart-L1", "restart-L1"),
        ("restart L4", "g-levels", "restart-L4", "fti", "restart-L4", "restart-L4"),
    ],
}


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        raise SystemExit(
            f"bench_peers: no {name} (pip install '.[mpi]' brings MPICH's; cmake: "
            "pip install cmake or apt-get install cmake)"
        )
    return found


def _run(cmd: list[str], log: Path, cwd: Path | None = None) -> None:
    with log.open("a") as out:
        proc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"bench_peers: {' '.join(cmd)} failed (see {log}):\n{tail}")


def cmake_install(name: str, src: Path, build: Path, prefix: Path, options: list[str]) -> None:
    """Configure, build and install ``src`` into ``prefix`` unless that was done from ``src``."""
    stamp = prefix / f".built-{name}"
    if stamp.exists() and stamp.read_text() == str(src.resolve()):
        return
    print(f"bench_peers: building {name} from {src} into {prefix}", flush=True)
    log = build / f"{name}.log"
    log.unlink(missing_ok=True)
    common = [
        f"-DCMAKE_INSTALL_PREFIX={prefix}",
        f"-DCMAKE_PREFIX_PATH={prefix}",
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_C_COMPILER={_tool('mpicc')}",
        f"-DCMAKE_CXX_COMPILER={_tool('mpicxx')}",
        f"-DCMAKE_INSTALL_RPATH={prefix}/lib",
    ]
    cmake = _tool("cmake")
    _run([cmake, "-S", str(src), "-B", str(build / name), *common, *options], log)
    _run(
        [
            cmake,
            "--build",
            str(build / name),
            "-j",
            str(os.cpu_count() or 1),
            "--target",
            "install",
        ],
        log,
    )
    stamp.write_text(str(src.resolve()))


def compile_harness(source: Path, prefix: Path, out: Path, libs: list[str]) -> Path:
    newest = max(f.stat().st_mtime for f in (source, source.parent / "bench_common.h"))
    if out.exists() and out.stat().st_mtime >= newest:
        return out
    print(f"bench_peers: compiling {source.name} against {prefix}", flush=True)
    _run(
        [
            _tool("mpicc"),
            "-O2",
            "-Wall",
            "-o",
            str(out),
            str(source),
            f"-I{prefix}/include",
            f"-L{prefix}/lib",
            *libs,
            f"-Wl,-rpath,{prefix}/lib",
        ],
        out.with_suffix(".log"),
    )
    return out


def _part(root: Path, name: str) -> Path:
    """``root/name``, the name's case as the user's checkout has it."""
    for child in root.iterdir() if root.is_dir() else ():
        if child.name.lower() == name.lower() and (child / "CMakeLists.txt").exists():
            return child
    raise SystemExit(f"bench_peers: no {name} source tree (with CMakeLists.txt) in {root}")


def build_veloc(src: Path, build: Path) -> Path:
    prefix = build / "veloc"
    prefix.mkdir(parents=True, exist_ok=True)
    deps = ["-DENABLE_TESTS=OFF", "-DMPI=ON", "-DENABLE_IBM_BBAPI=OFF"]
    for name in VELOC_PARTS[:-1]:
        cmake_install(name, _part(src, name), build, prefix, deps)
    copy = build / "src-VELOC"  # VeloC's CMake writes src/common/comm_queue.hpp in its tree
    if not (prefix / ".built-VELOC").exists():
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(_part(src, "VELOC"), copy)
    opts = ["-DCOMM_QUEUE=socket_queue", "-DPOSIX_IO=direct", "-DVELOC_RESOURCE_MANAGER=NONE"]
    cmake_install("VELOC", copy, build, prefix, opts)
    return compile_harness(
        HERE / "native" / "bench_veloc.c", prefix, build / "bench_veloc", ["-lveloc-client"]
    )


def build_fti(src: Path, build: Path) -> Path:
    prefix = build / "fti"
    prefix.mkdir(parents=True, exist_ok=True)
    tree = src if (src / "CMakeLists.txt").exists() else _part(src, "fti")
    opts = ["-DENABLE_EXAMPLES=OFF", "-DENABLE_FORTRAN=OFF", "-DENABLE_TESTS=OFF"]
    cmake_install("FTI", tree, build, prefix, opts)
    return compile_harness(
        HERE / "native" / "bench_fti.c", prefix, build / "bench_fti", ["-lfti", "-lm"]
    )


# ---------------------------------------------------------------------------- jobs


def launch(cmd: list[str], ranks: int, cwd: Path, env: dict[str, str]) -> Cells:
    """One ``mpiexec`` launch; the cells of its RESULT line."""
    proc = subprocess.run(
        [_tool("mpiexec"), "-n", str(ranks), *cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(
            f"bench_peers: {' '.join(cmd[:2])} failed (status {proc.returncode}):\n"
            f"{proc.stderr[-3000:]}{proc.stdout[-1500:]}"
        )
    cells: Cells = json.loads(lines[-1][len("RESULT ") :])
    return cells


class Job:
    """One peer's job in a round: fresh directories, its launches, its cleanup."""

    def __init__(self, name: str, run: Callable[[Path], Cells]) -> None:
        self.name, self.run = name, run


def env_with(prefix: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if prefix is not None:
        env["LD_LIBRARY_PATH"] = f"{prefix}/lib:{env.get('LD_LIBRARY_PATH', '')}"
        env["VELOC_BIN"] = str(prefix / "bin")
    return env


def greenckpt_job(kind: str, ranks: int, nbytes: int, seed: int) -> Job:
    def run(work: Path) -> Cells:
        for d in ("local", "global"):
            (work / d).mkdir()
        worker = [sys.executable, str(HERE / "_peers_worker.py"), kind, str(work)]
        return launch([*worker, str(nbytes), str(seed)], ranks, work, env_with(None))

    return Job(f"g-{kind}", run)


READY = Path(f"/dev/shm/veloc-backend-ready-{os.getuid()}")  # where veloc-backend keeps its pid


def _backend_pid() -> int | None:
    try:
        pid = int.from_bytes(READY.read_bytes()[:4], "little")
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    return None if state == "Z" else pid


def _stop_backend() -> None:
    pid = _backend_pid()
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)  # the backend this script started: its handler cleans up
    for _ in range(500):
        if _backend_pid() is None:
            return
        time.sleep(0.01)
    raise SystemExit(f"bench_peers: VeloC's backend (pid {pid}) did not stop")


def veloc_job(mode: str, harness: Path, ranks: int, nbytes: int, seed: int) -> Job:
    prefix = harness.parent / "veloc"

    def run(work: Path) -> Cells:
        cfg = work / "veloc.cfg"
        for d in ("scratch", "persistent", "log"):
            (work / d).mkdir()
        cfg.write_text(
            f"scratch = {work / 'scratch'}\npersistent = {work / 'persistent'}\n"
            f"mode = {mode}\nlog_prefix = {work / 'log'}\n"
        )
        env = env_with(prefix)
        cmd = [str(harness), str(cfg), mode, str(nbytes), str(seed)]
        if mode == "sync":
            return launch(cmd, ranks, work, env)
        if _backend_pid() is not None:
            raise SystemExit(f"bench_peers: a VeloC backend is running already ({READY})")
        # started here, outside mpiexec: one the client starts holds the launcher's pipes open
        backend = [str(prefix / "bin" / "veloc-backend"), str(cfg), "--disable-ec"]
        subprocess.run(
            backend,
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
        )
        try:
            return launch([*cmd, str(READY)], ranks, work, env)
        finally:
            _stop_backend()

    return Job(f"veloc-{mode}", run)


def fti_config(work: Path, ranks: int) -> str:
    return f"""[basic]
head = 0
node_size = 1
ckpt_dir = {work / "local"}
glbl_dir = {work / "global"}
meta_dir = {work / "meta"}
ckpt_l1 = 0
ckpt_l2 = 0
ckpt_l3 = 0
ckpt_l4 = 0
inline_l2 = 1
inline_l3 = 1
inline_l4 = 1
keep_last_ckpt = 0
keep_l4_ckpt = 0
group_size = {ranks}
max_sync_intv = 0
ckpt_io = 1
enable_staging = 0
enable_dcp = 0
verbosity = 2
[restart]
failure = 0
exec_id = XXXX-XX-XX_XX-XX-XX
[injection]
rank = 0
number = 0
position = 0
frequency = 0
[advanced]
block_size = 1024
transfer_size = 16
general_tag = 2612
ckpt_tag = 711
stage_tag = 406
final_tag = 3107
local_test = 1
"""


def fti_job(harness: Path, ranks: int, nbytes: int, seed: int) -> Job:
    def run(work: Path) -> Cells:
        for d in ("local", "global", "meta"):
            (work / d).mkdir()
        cfg = work / "fti.cfg"
        cfg.write_text(fti_config(work, ranks))
        env = env_with(harness.parent / "fti")
        args = [str(nbytes), str(seed), str(work / "local"), str(work / "global")]
        cells = launch([str(harness), str(cfg), "write", *args], ranks, work, env)
        for cell in ("restart-L4", "restart-L1"):  # L4 was the last checkpoint, then L1
            cells |= launch([str(harness), str(cfg), "restart", *args, cell], ranks, work, env)
        return cells

    return Job("fti", run)


def run_size(
    jobs: list[Job], rounds: int, base: Path, back: int = 0
) -> dict[str, dict[str, list[list[float]]]]:
    """Every job once per round, in a rotating order; round 0 not kept. ``back``: bytes of
    free memory touched and freed before every job (:func:`_pagereport.back_free_memory`)."""
    results: dict[str, dict[str, list[list[float]]]] = {job.name: {} for job in jobs}
    backed: list[float] = []
    for r in range(rounds + 1):
        order = jobs[r % len(jobs) :] + jobs[: r % len(jobs)]
        print(
            f"  round {r}{' (warm-up)' if r == 0 else ''}: {', '.join(j.name for j in order)}",
            flush=True,
        )
        for job in order:
            os.sync()  # what the previous job left to write back is not this job's
            if back:
                backed.append(_pagereport.back_free_memory(back)[1])
            work = Path(tempfile.mkdtemp(prefix=f"peers-{job.name}-", dir=base))
            try:
                cells = job.run(work)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            if r > 0:
                for cell, figures in cells.items():
                    results[job.name].setdefault(cell, []).append(figures)
    if backed:
        print(
            f"  before every job {back / 2**30:.1f} GiB of free memory was touched and freed "
            f"(--back-memory): {min(backed):.1f}–{max(backed):.1f} s each",
            flush=True,
        )
    return results


# ---------------------------------------------------------------------------- report


def _ahead(ratio: float, peer: str) -> str:
    return "greenckpt" if ratio < 0.95 else peer if ratio > 1.05 else "even"


def report(mib: int, ranks: int, results: dict[str, dict[str, list[list[float]]]]) -> list[str]:
    """The table of one size (a row per comparison of the peers that ran)."""
    rounds = len(next(iter(next(iter(results.values())).values())))
    rows = [
        f"{mib} MiB per rank, {ranks} ranks, {rounds} rounds (medians; g/p: median of the "
        "per-round ratios greenckpt / peer; * = the peer's figure includes an fsync of its "
        "files)",
        f"{'peer':<6}{'row':<27}{'g s':>8}{'g CPU':>7}{'peer s':>9}{'CPU':>7}{'returned':>9}"
        f"{'g/p s':>7}{'g/p CPU':>8}  ahead (s, CPU)",
    ]
    for peer, table in ROWS.items():
        for row, gjob, mine, job, returned, durable in table:
            if job not in results:
                continue
            g, p, r = results[gjob][mine], results[job][durable], results[job][returned]
            med = [statistics.median(x[k] for x in runs) for runs in (g, p) for k in (0, 1)]
            ratio = [
                statistics.median(a[k] / b[k] for a, b in zip(g, p, strict=True)) for k in (0, 1)
            ]
            star = "*" if durable.endswith("fsync") else " "
            rows.append(
                f"{peer:<6}{row:<27}{med[0]:>8.3f}{med[1]:>7.2f}{med[2]:>8.3f}{star}{med[3]:>7.2f}"
                f"{statistics.median(x[0] for x in r):>9.3f}{ratio[0]:>7.2f}{ratio[1]:>8.2f}  "
                f"{_ahead(ratio[0], peer)}, {_ahead(ratio[1], peer)}"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--veloc-src", type=Path, help="folder of VeloC's and its parts' trees")
    parser.add_argument("--fti-src", type=Path, help="FTI's source tree (or a folder with fti/)")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument(
        "--build-dir", type=Path, default=Path(tempfile.gettempdir()) / "greenckpt-peers-build"
    )
    parser.add_argument("--json", type=Path, help="write every round's figures here")
    parser.add_argument("--seed", type=int, default=1)
    _pagereport.add_argument(parser)
    _pagereport.add_back_argument(parser, "where reporting is held, 80%% of the free memory")
    ns = parser.parse_args()
    _pagereport.check_back_argument(parser, ns.back_memory)
    if ns.ranks < 3:
        parser.error(f"--ranks must be >= 3 (level 3 with parity 2 needs 3 nodes), not {ns.ranks}")
    if ns.rounds < 1 or any(m < 1 for m in ns.mib) or max(ns.mib) >= 2048:
        parser.error("--rounds and every --mib must be >= 1, --mib < 2048 (FTI counts in int32)")
    ns.build_dir.mkdir(parents=True, exist_ok=True)
    harness: dict[str, Path] = {}
    for peer, src, build in (("VeloC", ns.veloc_src, build_veloc), ("FTI", ns.fti_src, build_fti)):
        if src is None:
            print(f"bench_peers: {peer} skipped (no --{peer.lower()}-src)")
        else:
            harness[peer] = build(src, ns.build_dir)
    print(
        f"bench_peers: {ns.ranks} ranks, one emulated node each where the library has them, "
        f"in {ns.dir} (cores: {os.cpu_count()})"
    )
    everything: dict[str, Any] = {"ranks": ns.ranks, "rounds": ns.rounds, "sizes": {}}
    try:
        with _pagereport.page_reporting(ns.page_reporting) as memory_note:
            print(f"memory: {memory_note}", flush=True)
            for mib in ns.mib:
                nbytes = mib << 20
                jobs: list[Job] = []  # each greenckpt job next to the peer's it mirrors
                if "VeloC" in harness:
                    for mode in ("sync", "async"):
                        jobs.append(greenckpt_job(mode, ns.ranks, nbytes, ns.seed))
                        jobs.append(veloc_job(mode, harness["VeloC"], ns.ranks, nbytes, ns.seed))
                if "FTI" in harness:
                    jobs.append(greenckpt_job("levels", ns.ranks, nbytes, ns.seed))
                    jobs.append(fti_job(harness["FTI"], ns.ranks, nbytes, ns.seed))
                print(f"{mib} MiB per rank:", flush=True)
                # By default as much as back_free_memory takes (80 % of the free memory):
                # backing one job's footprint (6 GiB for 4 x 256 MiB) was not enough — the
                # 256 MiB jobs still met the faults in some rounds — and 12 GiB was.
                back = _pagereport.back_bytes(ns.back_memory, memory_note, _pagereport.free_bytes())
                results = run_size(jobs, ns.rounds, ns.dir, back)
                everything["sizes"][str(mib)] = results
                print("\n".join(report(mib, ns.ranks, results)), flush=True)
    except PlatformError as exc:
        raise SystemExit(f"bench_peers.py: error: {exc} (or --page-reporting keep)") from None
    if ns.json is not None:
        ns.json.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
