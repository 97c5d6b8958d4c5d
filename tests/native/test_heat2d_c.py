"""examples/c/heat2d.c, the native example (issue 16 item 5): built with the venv's ``mpicc``
and ``greenckpt config`` flags, run under ``greenckpt run`` with ``mpiexec -n 4`` over 2
emulated nodes, a rank killed, then the same command restarting from the committed checkpoint
ends with the same bits as a failure-free run, and the reports hold its checkpoint, restart
and rework phases with the bytes its node leaders announced. A checkpoint that fails to write
is not committed, a damaged one is never restored from, a node's ranks write and read in the
waves the runtime advises, a greenckpt call the runtime refuses is reported and the run goes
on, and bad options are refused in one line with exit status 2.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.settings import Settings
from tests.native.test_phase_api import bare_env, config
from tests.runtime.test_notify import FAKE, FakeTarget

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "c" / "heat2d.c"
NX, NY, RANKS = 64, 64, 4
ROWS = NX // RANKS
BLOCK = 8 * 8 + ROWS * NY * 8 + 8  # one rank's file: header words, its rows, checksum
SHAPE = [
    "--nx", str(NX), "--ny", str(NY), "--iterations", "300", "--interval", "50",
    "--ranks-per-node", "2",
]  # fmt: skip
KILL = ["--kill-at", "170", "--kill-rank", "1"]  # after iteration 170: checkpoint 150 committed


def mpiexec() -> str:
    found = find_mpiexec()
    if found is None:
        pytest.skip("no mpiexec on this machine (pip install '.[mpi]')")
    return found


def build(mpicc: Path, out: Path) -> Path:
    """The example built with ``mpicc`` as its README says (with the warnings as errors)."""
    if not mpicc.exists() or (shutil.which("cc") or shutil.which("gcc")) is None:
        pytest.skip(f"no {mpicc}, or no C compiler (cc, gcc), on this machine")
    flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", *config("--cflags", "--libs")]
    subprocess.run([str(mpicc), *flags, str(EXAMPLE), "-o", str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def heat2d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example, built with the ``mpicc`` beside this Python's ``mpiexec``."""
    return build(Path(mpiexec()).with_name("mpicc"), tmp_path_factory.mktemp("heat2d_c") / "heat2d")


def launch(
    heat2d: Path,
    ckpt: Path,
    *args: str,
    report: Path | None = None,
    n: int = RANKS,
    emulated: int = 0,
    env: dict[str, str] | None = None,
    mpirun: Sequence[str] | None = None,
    python: str = sys.executable,
) -> subprocess.CompletedProcess[str]:
    """``mpiexec -n N heat2d --ckpt-dir CKPT ARGS``, under ``greenckpt run -o REPORT`` when a
    report is asked (``--no-control``: decided and accounted, the node never changed, which
    works on any machine, with or without cpufreq; no profile: the runtime's defaults).
    ``mpirun``: another MPI's launcher and its flags, ``python``: the one greenckpt runs in."""
    launcher = [mpiexec()] if mpirun is None else list(mpirun)
    command = [*launcher, "-n", str(n), str(heat2d), "--ckpt-dir", str(ckpt), *args]
    if report is not None:
        nodes = ["--nodes-emulated", str(emulated)] if emulated else []
        run = [python, "-m", "greenckpt", "run", "--no-control", *nodes, "-o"]
        command = [*run, str(report), "--", *command]
    return subprocess.run(
        command, capture_output=True, text=True, env=env or bare_env(), timeout=300, check=False
    )


def checksum(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    found = re.findall(r"checksum ([0-9a-f]{16})", done.stdout)
    assert len(found) == 1, done.stdout  # rank 0 alone prints it
    return str(found[0])


def phases(report: Path) -> list[dict[str, Any]]:
    """The records of the example's own phases: no compute, no lost time, and none of the
    job's start-up or teardown (a node's report holds those too)."""
    records = json.loads(report.read_text())["records"]
    return [r for r in records if r["kind"] not in ("compute", "lost", "startup", "teardown")]


def marker(ckpt: Path) -> str:
    return (ckpt / "heat2d.latest").read_text().split()[2]  # the committed iteration


@pytest.fixture(scope="module")
def reference(heat2d: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The failure-free run's checksum, without any runtime (every greenckpt call a no-op)."""
    return checksum(launch(heat2d, tmp_path_factory.mktemp("ref") / "ckpt", *SHAPE))


def test_a_killed_run_restarts_bit_identical_with_its_phases_in_the_report(
    heat2d: Path, reference: str, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    failed = launch(heat2d, ckpt, *SHAPE, *KILL, report=tmp_path / "R1")
    assert failed.returncode != 0  # mpiexec tore the job down
    assert "rank 1 kills itself after iteration 170" in failed.stderr
    assert marker(ckpt) == "150"
    # one runtime for the job: both node leaders' announcements merge into one record each
    job_bytes = RANKS * BLOCK
    assert [(r["kind"], r["level"], r["size"], r["ok"], r["nodes"]) for r in
            phases(tmp_path / "R1" / "report.json")] == [
        ("checkpoint", 1, job_bytes, True, [0, 1])] * 3  # fmt: skip

    restarted = launch(heat2d, ckpt, *SHAPE, report=tmp_path / "R2")
    assert checksum(restarted) == reference
    assert "restarted from iteration 150 (level 1)" in restarted.stdout
    records = phases(tmp_path / "R2" / "report.json")
    assert [r["kind"] for r in records] == ["restart", "rework", "checkpoint", "checkpoint"]
    assert (records[0]["level"], records[0]["size"], records[0]["ok"]) == (1, job_bytes, True)
    assert records[1]["ok"] is True  # iterations 151..170 done again
    assert all(r["size"] == job_bytes and r["ok"] for r in records[2:])


def kill_and_restart_over_emulated_nodes(
    heat2d: Path, reference: str, tmp_path: Path, **how: Any
) -> None:
    """A run over 2 emulated nodes killed after iteration 170, then restarted (``how``: the
    MPI to :func:`launch` with): the same bits as ``reference``, and each node's report
    holds its own bytes (two ranks a node) for every checkpoint, the restart and the
    checkpoints after it."""
    ckpt, node_bytes = tmp_path / "ckpt", 2 * BLOCK
    killed = launch(heat2d, ckpt, *SHAPE, *KILL, report=tmp_path / "R1", emulated=2, **how)
    assert killed.returncode != 0, killed.stdout + killed.stderr
    restarted = launch(heat2d, ckpt, *SHAPE, report=tmp_path / "R2", emulated=2, **how)
    assert checksum(restarted) == reference
    for node in (0, 1):
        before = phases(tmp_path / "R1" / "nodes" / f"node{node}" / "report.json")
        after = phases(tmp_path / "R2" / "nodes" / f"node{node}" / "report.json")
        assert [(r["kind"], r["size"], r["nodes"]) for r in before] == [
            ("checkpoint", node_bytes, [node])] * 3  # fmt: skip
        assert [(r["kind"], r["size"]) for r in after] == [
            ("restart", node_bytes), ("rework", 0), ("checkpoint", node_bytes),
            ("checkpoint", node_bytes)]  # fmt: skip


def test_over_emulated_nodes_each_node_reports_its_own_bytes(
    heat2d: Path, reference: str, tmp_path: Path
) -> None:
    kill_and_restart_over_emulated_nodes(heat2d, reference, tmp_path)


def test_a_checkpoint_that_fails_to_write_is_not_committed(
    heat2d: Path, reference: str, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "heat2d.100.rank1").mkdir(parents=True)  # rank 1's rename onto it fails
    done = launch(heat2d, ckpt, *SHAPE, report=tmp_path / "R")
    assert checksum(done) == reference  # the run goes on
    assert "rank 1: checkpoint 100 not written" in done.stderr
    oks = [(r["kind"], r["ok"]) for r in phases(tmp_path / "R" / "report.json")]
    assert oks == [("checkpoint", True), ("checkpoint", False)] + [("checkpoint", True)] * 3
    assert marker(ckpt) == "250"
    assert not (ckpt / "heat2d.100.rank0").exists()  # the uncommitted files are gone


def test_a_damaged_checkpoint_is_never_restored_from(
    heat2d: Path, reference: str, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    assert launch(heat2d, ckpt, *SHAPE, *KILL).returncode != 0
    block = ckpt / "heat2d.150.rank2"
    data = bytearray(block.read_bytes())
    data[100] ^= 1  # one bit of a temperature
    block.write_bytes(bytes(data))
    done = launch(heat2d, ckpt, *SHAPE, report=tmp_path / "R")
    assert checksum(done) == reference  # computed afresh, the same bits
    assert "heat2d.150.rank2: checksum mismatch" in done.stderr
    assert "does not verify; starting afresh" in done.stdout
    records = phases(tmp_path / "R" / "report.json")
    assert (records[0]["kind"], records[0]["ok"]) == ("restart", False)
    assert "rework" not in [r["kind"] for r in records]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nx", "2"], "--nx needs an integer >= 3, got '2'"),
        (["--iterations", "ten"], "--iterations needs an integer >= 0, got 'ten'"),
        (["--level", "3"], "--level must be 1 (node-local) or 4 (shared), got 3"),
        (["--kill-at", "5", "--kill-rank", "2"], "--kill-rank (2) must be a rank, 0 .. 1"),
        (["--frobnicate"], "unknown option or missing value '--frobnicate'"),
        (["--interval"], "--interval needs an integer >= 0, got ''"),
    ],
)
def test_bad_options_are_refused_in_one_line(
    heat2d: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    done = launch(heat2d, tmp_path / "ckpt", *args, n=2)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr  # once for the whole job
    assert not (tmp_path / "ckpt").exists()  # nothing made


def test_a_checkpoint_of_another_shape_is_refused_and_kept(heat2d: Path, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    assert launch(heat2d, ckpt, *SHAPE, "--iterations", "60", n=2).returncode == 0
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}
    done = launch(heat2d, ckpt, "--nx", "32", "--ny", str(NY), n=2)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"heat2d: {ckpt} holds a {NX} x {NY} run on 2 ranks; run with those or another --ckpt-dir"
    )
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before


@contextlib.contextmanager
def runtime(target: FakeTarget) -> Iterator[dict[str, str]]:
    """A stand-in runtime answering with ``target``: the environment that reaches it."""
    sock_dir = Path(tempfile.mkdtemp(prefix="gch-", dir="/tmp"))  # short: a socket path
    try:
        with NotifyServer(target, sock_dir / "rt.sock") as server:
            yield {**bare_env(), **server.environ()}
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


@pytest.mark.filterwarnings("ignore:greenckpt. could not end:RuntimeWarning")  # the refusals
def test_a_greenckpt_call_that_fails_is_reported_and_the_run_goes_on(
    heat2d: Path, reference: str, tmp_path: Path
) -> None:
    refusing = FakeTarget()
    refusing.refuse_end = True  # the runtime answers every end with an error
    with runtime(refusing) as env:
        done = launch(heat2d, tmp_path / "ckpt", *SHAPE, env=env)
    assert checksum(done) == reference
    reported = [line for line in done.stderr.splitlines() if "going on" in line]
    assert reported and all(
        re.fullmatch(r"heat2d: rank [02]: checkpoint end: .+; going on", line) for line in reported
    ), done.stderr  # one line from a node's leader, ranks 0 and 2
    assert marker(tmp_path / "ckpt") == "250"  # the checkpoints themselves were made


class OneAtATime(FakeTarget):
    """A runtime that advises one I/O process per node for every phase."""

    def begin(self, kind: Any, **fields: Any) -> Settings | None:
        settings = super().begin(kind, **fields)
        return None if settings is None else dataclasses.replace(FAKE, io_processes=1)


def waves(stderr: str) -> dict[tuple[str, str, int], list[tuple[int, int, int, int]]]:
    """The --trace lines: per (phase, iteration, node), each rank's (wave, waves, start, end)
    in the order of its rank."""
    found: dict[tuple[str, str, int], list[tuple[int, int, int, int]]] = {}
    pattern = r"trace rank (\d+) node (\d+) (\w+) (\d+) wave (\d+)/(\d+) io 1 (\d+) (\d+)"
    for _rank, node, what, it, wave, count, start, end in sorted(
        re.findall(pattern, stderr), key=lambda m: int(m[0])
    ):
        found.setdefault((what, it, int(node)), []).append(
            (int(wave), int(count), int(start), int(end))
        )
    return found


def test_ranks_of_a_node_write_and_read_in_the_advised_waves(heat2d: Path, tmp_path: Path) -> None:
    """Advised one I/O process, the two ranks of a node write (and read back) one after the
    other: the node's second rank starts only once its first has finished."""
    ckpt, trace = tmp_path / "ckpt", [*SHAPE, "--trace"]
    with runtime(OneAtATime()) as env:
        first = launch(heat2d, ckpt, *trace, "--iterations", "120", env=env)
        again = launch(heat2d, ckpt, *trace, "--iterations", "130", env=env)
    checksum(first)  # both ran to the end
    checksum(again)
    seen = {**waves(first.stderr), **waves(again.stderr)}
    assert sorted(seen) == [
        (what, it, node) for what, it in [("checkpoint", "100"), ("checkpoint", "50"),
                                          ("restart", "100")] for node in (0, 1)
    ]  # fmt: skip
    for one, two in seen.values():
        assert (one[:2], two[:2]) == ((1, 2), (2, 2))  # node rank 0 first, then node rank 1
        assert one[3] <= two[2]  # not together
