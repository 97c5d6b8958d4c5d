"""Run accounting after failures (issue 18 items 1, 2 and the power plot of item 14).

Item 1: the compute after the checkpoint a restart reads back, and the downtime before the
restart, are ``lost``, not useful compute; the redone iterations (rework) are the copy that
survived; a run with a failure never reports a lower EPE than the same run without. Item 2:
the rework announced by the library covers exactly the iterations the whole job had completed
after the restored checkpoint, not one more. Item 14: the power plot labels each kind of phase
once (a legend) and leaves room above and below the trace.

Every figure here is SYNTHETIC: fake meters (constant watts on the monotonic clock) and fake
sysfs trees; none is a measurement of anything. Time is spent with ``sleep`` so that the
runtime's own meter readings see it; assertions compare figures whose differences are many
times any sleep's jitter, never a duration against a wall-clock bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.report.run_plot import plot_run, power_limits, run_figure
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime import Node, PhaseRequest, Settings
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.run_report import (
    REPORT_VERSION,
    PhaseRecord,
    PowerTrace,
    RunReport,
    load_report,
)
from greenckpt.runtime.session import Runtime, RuntimeHook
from tests.platform import fake_power as fp
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree

MIB = 2**20
WATTS = 100.0
REPO = Path(__file__).resolve().parents[2]


class Defaults:
    """A SYNTHETIC policy: two I/O processes, nothing else."""

    name = "defaults"

    def decide(self, request: PhaseRequest) -> Settings:
        return Settings(io_processes=2, source="defaults (test)")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No host ipmitool or pynvml leaks in."""
    fp.hide_ipmitool(monkeypatch, tmp_path)
    fp.install_pynvml(monkeypatch, None)
    yield


def make_runtime(tmp_path: Path, name: str = "rt") -> Runtime:
    """A runtime on a SYNTHETIC VM node (no frequency control) with a 100 W fake meter."""
    root = FakeSysfsRoot(build_tree("vm-no-cpufreq", tmp_path / f"{name}-tree"))
    node = Node(cpus=2, frequency_control=False, frequency_reason="cpufreq not available")
    return Runtime(
        Defaults(),
        root=root,
        meters=[fp.FakeMeter({"package-0": WATTS}, name="rapl")],
        state_file=tmp_path / f"{name}-state.json",
        node=node,
    )


def kinds(records: tuple[PhaseRecord, ...]) -> list[str]:
    return [r.kind for r in records]


def io(rt: Runtime, kind: str, seconds: float, **kw: Any) -> None:
    """One I/O phase of ``seconds``."""
    with rt.phase(kind, path="/ckpt", size=MIB, **kw):  # type: ignore[call-overload]
        time.sleep(seconds)


# ---------------------------------------------------------------------------- item 1: lost work


def test_compute_after_the_restored_checkpoint_and_the_downtime_are_lost(tmp_path: Path) -> None:
    with make_runtime(tmp_path) as rt:
        time.sleep(0.03)  # compute that a checkpoint saves
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.03)  # compute after it, then the crash and the downtime: all "compute"
        io(rt, "restart", 0.01)
        with rt.phase("rework"):
            time.sleep(0.03)
        time.sleep(0.02)
    records = rt.records
    assert kinds(records) == [
        "compute",
        "checkpoint",
        "lost",
        "restart",
        "compute",  # the instant between the restart's end and the rework's begin
        "rework",
        "compute",
    ]
    _, checkpoint, lost, restart, _, _, _ = records
    assert lost.start_s == checkpoint.end_s and lost.end_s == restart.start_s
    (note,) = lost.notes
    assert "newest checkpoint that ended ok (level 1" in note
    assert "did not say which level" in note and "cannot see the crash" in note
    report = rt.report()
    assert report.lost_seconds == pytest.approx(lost.seconds)
    useful = sum(r.seconds for r in records if r.kind in ("compute", "rework"))
    assert report.useful_seconds == pytest.approx(useful)
    assert report.total_energy_j is not None
    assert report.observed_epe == pytest.approx(report.total_energy_j / useful)
    doc = report.to_dict()
    assert doc["lost_s"] == pytest.approx(lost.seconds)
    assert doc["by_kind"]["lost"]["count"] == 1
    assert "lost work and downtime excluded" in doc["epe"]["definition"]
    text = render_run_text(report)
    assert "of which rework" in text and f"lost {lost.seconds:.3f} s" in text
    assert any(line.startswith("lost ") for line in text.splitlines())


def simulate(rt: Runtime, *, fail_after: int | None, iterations: int = 20) -> None:
    """A SYNTHETIC run seen through the library's hook: ``iterations`` steps of 5 ms with a
    10 ms level-1 checkpoint every 5; ``fail_after``: the job dies after computing that
    iteration, 0.2 s pass before the restart, which reads the last checkpoint back and
    announces the rework of the iterations completed after it (as the library does)."""
    hook = RuntimeHook(rt)

    def checkpoint() -> None:
        hook.begin("checkpoint", level=1, path="/ckpt", size=MIB, node=0)
        time.sleep(0.01)
        hook.end("checkpoint", node=0, ok=True, seconds=0.01)

    it = 0
    while it < iterations:
        it += 1
        time.sleep(0.005)
        if it == fail_after:
            time.sleep(0.2)  # the job's teardown, the batch system, the relaunch
            hook.begin("restart", level=None, path="/ckpt", size=MIB, node=0)
            time.sleep(0.01)
            hook.end("restart", node=0, ok=True, seconds=0.01)
            restored = it - it % 5
            hook.begin("rework", level=1, path="", size=0, node=0)
            for _ in range(restored + 1, it + 1):
                time.sleep(0.005)
            hook.end("rework", node=0, ok=True, seconds=0.0)
        if it % 5 == 0:
            checkpoint()


def test_a_run_with_a_failure_never_has_a_lower_epe_than_the_same_run_without(
    tmp_path: Path,
) -> None:
    """The issue's case: before, the failed run counted its lost iterations and its downtime
    as useful compute and came out with the *lower* EPE."""
    with make_runtime(tmp_path, "clean") as clean:
        simulate(clean, fail_after=None)
    with make_runtime(tmp_path, "failed") as failed:
        simulate(failed, fail_after=13)
    a, b = clean.report(), failed.report()
    assert a.observed_epe is not None and b.observed_epe is not None
    assert b.observed_epe >= a.observed_epe
    assert kinds(failed.records).count("lost") == 1 and "lost" not in kinds(clean.records)
    # the failed run's useful compute is its 20 iterations (rework included), like the clean
    # run's: the difference between the two EPEs is the lost work, downtime and restart
    assert b.lost_seconds >= 0.2 > b.rework_seconds > 0


def test_the_reworks_level_moves_the_lost_work_back_to_that_levels_checkpoint(
    tmp_path: Path,
) -> None:
    """The restart reads a level-2 checkpoint although a newer level-1 one ended ok (node
    storage lost): the library names the level with the rework, and the compute between the
    two checkpoints becomes lost too; the level-1 checkpoint stays a checkpoint."""
    with make_runtime(tmp_path) as rt:
        hook = RuntimeHook(rt)
        time.sleep(0.01)
        io(rt, "checkpoint", 0.01, level=2)
        time.sleep(0.02)
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.02)
        io(rt, "restart", 0.01)
        assert kinds(rt.records)[-3:] == ["checkpoint", "lost", "restart"]  # level unknown yet
        assert kinds(rt.records)[2] == "compute"
        hook.begin("rework", level=2, path="", size=0, node=0)
        time.sleep(0.01)
        hook.end("rework", node=0, ok=True, seconds=0.01)
    assert kinds(rt.records) == [
        "compute",
        "checkpoint",
        "lost",
        "checkpoint",
        "lost",
        "restart",
        "compute",
        "rework",
        "compute",
    ]
    l2, lost = rt.records[1], rt.records[4]
    assert rt.records[2].start_s == l2.end_s
    for r in (rt.records[2], lost):
        (note,) = r.notes  # the first account's note was replaced, not added to
        assert "the level-2 checkpoint that ended at" in note


def test_a_restart_that_names_its_level_loses_the_work_since_that_levels_checkpoint(
    tmp_path: Path,
) -> None:
    with make_runtime(tmp_path) as rt:
        io(rt, "checkpoint", 0.01, level=2)
        time.sleep(0.01)
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.01)
        io(rt, "restart", 0.01, level=2)
    assert kinds(rt.records) == [
        "compute",
        "checkpoint",
        "lost",
        "checkpoint",
        "lost",
        "restart",
        "compute",
    ]


def test_a_flushed_copy_is_a_restore_point_of_its_level(tmp_path: Path) -> None:
    """Level 4 by an asynchronous flush: the copy is of the level-1 checkpoint before the
    flush, so a restart from level 4 loses the work since *that* checkpoint."""
    with make_runtime(tmp_path) as rt:
        io(rt, "checkpoint", 0.01, level=1)
        io(rt, "flush", 0.01, level=4)  # background: the compute goes on meanwhile
        time.sleep(0.01)
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.01)
        io(rt, "restart", 0.01, level=4)
    first = rt.records[1]
    assert first.kind == "checkpoint"
    after = [r for r in rt.records if r.start_s >= first.end_s and r.kind != "restart"]
    after = [r for r in after if r.end_s <= rt.records[-2].start_s]
    assert sorted(kinds(tuple(after))) == ["checkpoint", "flush", "lost", "lost"]
    flush = next(r for r in rt.records if r.kind == "flush")
    assert flush.background and flush.ok


def test_a_restart_with_no_checkpoint_of_this_run_before_it_loses_nothing(
    tmp_path: Path,
) -> None:
    """``greenckpt run`` of a job that restarts from an earlier job's checkpoint: the compute
    before the restart is the job's start-up, as in any run, and the restart says why."""
    with make_runtime(tmp_path) as rt:
        time.sleep(0.01)
        io(rt, "restart", 0.01)
        time.sleep(0.01)
    assert kinds(rt.records) == ["compute", "restart", "compute"]
    assert any("written before the runtime started" in n for n in rt.records[1].notes)


def test_a_second_failure_during_the_rework_loses_the_work_since_the_first_restart(
    tmp_path: Path,
) -> None:
    """The job dies again while redoing its lost work, before any new checkpoint: the second
    restart reads the same checkpoint back, so everything since the first restart is lost.
    The dead attempt's rework never ends: the restart ends it, and a late end is ignored."""
    with make_runtime(tmp_path) as rt:
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.01)
        io(rt, "restart", 0.01)
        rt.begin("rework")
        time.sleep(0.02)  # killed here: no end of this rework
        io(rt, "restart", 0.01)
        assert rt.end("rework") is None  # the dead attempt's end, arriving late: ignored
        rt.begin("rework")
        time.sleep(0.01)
        rt.end("rework")
        with pytest.raises(ValueError, match="no rework phase is open"):
            rt.end("rework")
    assert kinds(rt.records) == [
        "compute",
        "checkpoint",
        "lost",
        "restart",
        "lost",  # the instant before the first rework's begin
        "lost",  # the first rework, cut short by the second failure
        "restart",
        "compute",
        "rework",
        "compute",
    ]
    first_restart = rt.records[3]
    assert rt.records[4].start_s == first_restart.end_s
    assert rt.records[5].end_s == rt.records[6].start_s
    assert "the restart that ended at" in rt.records[5].notes[-1]


def test_a_rework_begun_inside_a_restart_leaves_the_earlier_restarts_account(
    tmp_path: Path,
) -> None:
    """A misbehaving notifier begins a rework while a restart is open: its level says
    nothing about the previous restart, whose lost work stays as it was."""
    with make_runtime(tmp_path) as rt:
        io(rt, "checkpoint", 0.01, level=2)
        time.sleep(0.01)
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.01)
        io(rt, "restart", 0.01)  # read level 1: the last compute is lost
        time.sleep(0.01)
        rt.begin("restart", path="/ckpt", size=MIB)
        rt.begin("rework", level=2)
        rt.end("rework")
        rt.end("restart")
    assert kinds(rt.records)[:6] == [
        "compute",
        "checkpoint",
        "compute",
        "checkpoint",
        "lost",
        "restart",
    ]


def test_lost_is_the_runtimes_to_account_not_a_phase_to_begin(tmp_path: Path) -> None:
    with make_runtime(tmp_path) as rt:
        with pytest.raises(ValueError, match="lost is not a phase to begin"):
            rt.begin("lost")  # type: ignore[call-overload]
        assert rt.active() == {}


# ---------------------------------------------------------------------------- saved reports


def test_a_format_1_report_loads_with_its_own_definition_and_a_note(tmp_path: Path) -> None:
    """Old saved reports still load: their compute holds the lost work, so useful compute is
    their compute records alone (adding the rework would count it twice)."""
    with make_runtime(tmp_path) as rt:
        time.sleep(0.01)
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.01)
        io(rt, "restart", 0.01)
        with rt.phase("rework"):
            time.sleep(0.01)
    doc = rt.report().to_dict()
    assert doc["format_version"] == REPORT_VERSION == 2
    # what greenckpt wrote before: no "lost" kind (its span was compute), no lost_s
    old = json.loads(json.dumps(doc))
    old["format_version"] = 1
    del old["lost_s"]
    for r in old["records"]:
        if r["kind"] == "lost":
            r["kind"] = "compute"
            r["notes"] = []
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(old))
    loaded = load_report(path)
    compute = sum(r.seconds for r in loaded.records if r.kind == "compute")
    assert loaded.format_version == 1
    assert loaded.useful_seconds == pytest.approx(compute)
    assert loaded.lost_seconds == 0.0
    assert any("run report format 1" in n for n in loaded.notes)
    again = tmp_path / "again.json"
    loaded.write_json(again)  # written back as what it is, and the note not doubled
    twice = load_report(again)
    assert twice.format_version == 1
    assert sum("run report format 1" in n for n in twice.notes) == 1
    del old["format_version"]  # the first reports had no version at all
    path.write_text(json.dumps(old))
    assert load_report(path).format_version == 1
    old["format_version"] = 3
    path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="format 3; this greenckpt reads formats 1 to 2"):
        load_report(path)


def test_lost_records_are_in_the_csv(tmp_path: Path) -> None:
    with make_runtime(tmp_path) as rt:
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.01)
        io(rt, "restart", 0.01)
    path = rt.report().write_csv(tmp_path / "phases.csv")
    rows = path.read_text().splitlines()[1:]
    lost = [row for row in rows if row.split(",")[1] == "lost"]
    assert len(lost) == 1 and "lost to a failure" in lost[0]


# ---------------------------------------------------------------------------- item 14: the plot


def many_checkpoints(n: int = 60, *, flat: bool = True) -> RunReport:
    """A SYNTHETIC 2n-second run: a 0.2 s level-1 checkpoint every 2 s, every fifth level 2."""
    records: list[PhaseRecord] = []
    t = 0.0
    for i in range(n):
        for kind, seconds in (("compute", 1.8), ("checkpoint", 0.2)):
            records.append(
                PhaseRecord(
                    kind=kind,  # type: ignore[arg-type]
                    index=len(records),
                    start_s=t,
                    end_s=t + seconds,
                    energy_j={"rapl/package-0": WATTS * seconds},
                    sources={"rapl/package-0": "measured"},
                    node_energy_j=WATTS * seconds,
                    power_source="measured",
                    power_domains=("rapl/package-0",),
                    level=(2 if i % 5 == 4 else 1) if kind == "checkpoint" else None,
                    path=None if kind == "compute" else "/ckpt",
                    size=0 if kind == "compute" else MIB,
                )
            )
            t += seconds
    times = tuple(0.5 * k for k in range(1, int(t * 2) + 1))
    watts = tuple(WATTS if flat else WATTS + 20 * (k % 3) for k in range(len(times)))
    trace = PowerTrace(times, watts, "measured", "package")
    return RunReport.from_records(records, trace=trace, synthetic=True)


def test_the_plot_labels_each_kind_once_not_each_phase(tmp_path: Path) -> None:
    report = many_checkpoints()
    fig = run_figure(report)
    (ax,) = fig.axes
    assert len(ax.texts) == 0  # before: one rotated label per checkpoint, overlapping
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == [
        "node power (measured, SYNTHETIC)",
        "compute",
        "checkpoint L1",
        "checkpoint L2",
    ]
    svg = plot_run(report, tmp_path / "power.svg").read_text()
    assert svg.count(">checkpoint L1<") == 1 and svg.count(">checkpoint L2<") == 1


@pytest.mark.parametrize("flat", [True, False], ids=["flat", "varying"])
def test_the_plots_y_axis_leaves_room_above_and_below_the_trace(flat: bool) -> None:
    report = many_checkpoints(10, flat=flat)
    assert report.trace is not None
    low, high = min(report.trace.watts), max(report.trace.watts)
    (ax,) = run_figure(report).axes
    bottom, top = ax.get_ylim()
    assert top > high  # before: the top was the data maximum, a flat trace lay on the frame
    assert bottom < low


def test_power_limits() -> None:
    assert power_limits([100.0, 100.0]) == pytest.approx((0.0, 105.0))
    assert power_limits([50.0, 150.0]) == pytest.approx((0.0, 160.0))
    assert power_limits([0.0, 0.0]) == pytest.approx((-0.5, 0.5))
    assert power_limits([0.2, 10.0]) == pytest.approx((0.2 - 0.98, 10.98))
    assert power_limits([float("nan")]) == (0.0, 1.0)
    assert power_limits([]) == (0.0, 1.0)


def test_a_report_without_trace_gets_the_same_room(tmp_path: Path) -> None:
    records = many_checkpoints(3).records
    (ax,) = run_figure(RunReport.from_records(records)).axes
    bottom, top = ax.get_ylim()
    assert bottom < WATTS < top and top >= WATTS * 1.05


# ---------------------------------------------------------------------------- under MPI

SCRIPT = textwrap.dedent(
    """
    # A SYNTHETIC MPI job for test_accounting.py: ranks in lock step (a barrier before every
    # step, like a halo exchange), a level-1 checkpoint every 5 iterations, the library's
    # calls to the runtime logged on rank 0 with the iteration they came at.
    import json, os, sys, time
    from pathlib import Path
    import numpy as np
    from greenckpt.ckpt.api import Checkpointer
    from greenckpt.ckpt.comm import world
    from greenckpt.ckpt.notify_client import SocketHook

    work, iterations = Path(sys.argv[1]), int(sys.argv[2])
    kill_rank, kill_at = int(sys.argv[3]), int(sys.argv[4])
    comm = world()
    now = {"it": 0}
    log = []

    class Logged:
        def __init__(self, inner):
            self.inner = inner
        def begin(self, kind, **kw):
            log.append(["begin", kind, kw["level"], now["it"]])
            return self.inner.begin(kind, **kw)
        def end(self, kind, **kw):
            log.append(["end", kind, now["it"]])
            return self.inner.end(kind, **kw)

    hook = Logged(SocketHook(os.environ["GREENCKPT_RUNTIME_SOCKET"]))
    ck = Checkpointer(local_dir=str(work / "local"), l1={"every": "5it"}, name="acct",
                      comm=comm, hook=hook)
    u = np.zeros(1000)
    ck.protect("u", u)
    ck.state["it"] = 0
    ck.recover()
    flag = work / "rank0-noted"
    for it in range(ck.state["it"] + 1, iterations + 1):
        now["it"] = it
        comm.barrier()
        u += it
        time.sleep(0.01)
        if comm.rank == kill_rank and it == kill_at:
            # die after computing `it`, once rank 0 has reported it done (deterministic)
            while not flag.exists():
                time.sleep(0.005)
            os._exit(9)
        ck.state["it"] = it
        level = ck.need_checkpoint(it)
        if comm.rank == 0 and it == kill_at:
            flag.write_text("")
        if level is not None:
            ck.checkpoint(level, iteration=it)
    ck.finalize()
    if comm.rank == 0:
        (work / "log.json").write_text(json.dumps(log))
    """
)


@pytest.fixture
def mpiexec() -> str:
    found = find_mpiexec()
    if found is None:
        pytest.skip("no mpiexec (pip install 'greenckpt[mpi]')")
    return found


def mpi_job(
    mpiexec: str, tmp_path: Path, server: NotifyServer, *, kill: tuple[int, int] | None
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    (tmp_path / "local").mkdir(exist_ok=True)
    (tmp_path / "rank0-noted").unlink(missing_ok=True)
    rank, at = kill if kill is not None else (-1, -1)
    env = {**os.environ, **server.environ(), "PYTHONPATH": str(REPO / "src")}
    command = [mpiexec, "-n", "3", sys.executable, str(script), str(tmp_path), "12"]
    return subprocess.run(
        [*command, str(rank), str(at)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("kill_at", "rework"),
    [(6, None), (8, (5, 7))],
    ids=["killed-right-after-a-checkpoint", "killed-two-iterations-later"],
)
def test_rework_is_what_the_whole_job_had_completed(
    mpiexec: str, tmp_path: Path, kill_at: int, rework: tuple[int, int] | None
) -> None:
    """Rank 2 dies after computing ``kill_at`` but before reporting it done, once rank 0 has
    reported it: the job completed ``kill_at - 1``. After a checkpoint at 5, a kill at 6
    leaves no rework (before: rank 0's note of 6 made iteration 6 rework); a kill at 8
    makes iterations 6 and 7 rework, announced at the recovery (iteration 5) and ended when
    7 is done again."""
    with make_runtime(tmp_path) as rt, NotifyServer(rt, tmp_path / "rt.sock") as server:
        killed = mpi_job(mpiexec, tmp_path, server, kill=(2, kill_at))
        assert killed.returncode != 0, killed.stderr
        again = mpi_job(mpiexec, tmp_path, server, kill=None)
        assert again.returncode == 0, again.stderr
    log = json.loads((tmp_path / "log.json").read_text())
    reworks = [entry for entry in log if entry[1] == "rework"]
    if rework is None:
        assert reworks == []
        assert "rework" not in kinds(rt.records)
    else:
        _, ended = rework
        assert reworks == [["begin", "rework", 1, 0], ["end", "rework", ended]]  # 0: recovery
        assert kinds(rt.records).count("rework") == 1
    restart = next(r for r in rt.records if r.kind == "restart")
    checkpoints = [r for r in rt.records if r.kind == "checkpoint" and r.end_s < restart.start_s]
    assert checkpoints[-1].ok  # the one at iteration 5: the first attempt's last
    lost = [r for r in rt.records if r.kind == "lost"]
    assert lost and lost[0].start_s == checkpoints[-1].end_s
    assert lost[-1].end_s == restart.start_s


def heat(mpiexec: str, work: Path, result: Path) -> list[str]:
    return [
        mpiexec, "-n", "4", sys.executable, "-m", "greenckpt.apps.heat2d",
        "--nx", "128", "--ny", "128", "--iterations", "40", "--l1-every", "10it",
        "--local-dir", str(work / "local"), "--ranks-per-node", "2", "--name", "acct",
        "--result", str(result),
    ]  # fmt: skip


def test_heat2d_killed_after_a_checkpoint_loses_work_and_never_looks_cheaper(
    mpiexec: str, tmp_path: Path
) -> None:
    """The real 2-D heat example under mpiexec, through a runtime and its notification
    socket (SYNTHETIC power: a 100 W fake meter): once failure-free, once with rank 2 killed
    after computing iteration 21 (the checkpoint at 20 committed) and restarted. The
    failed run's lost work runs from the checkpoint at 20 to the restart, nothing is rework
    (iteration 21 was never completed by the whole job), the result is the same bits, and
    its observed EPE is not below the clean run's."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("GREENCKPT_INJECT", None)
    reports: dict[str, RunReport] = {}
    digests: dict[str, str] = {}
    for name, kill in (("clean", False), ("failed", True)):
        work = tmp_path / name
        (work / "local").mkdir(parents=True)
        with (
            make_runtime(tmp_path, name) as rt,
            NotifyServer(rt, tmp_path / f"{name}.sock") as server,
        ):
            run_env = {**env, **server.environ()}
            if kill:
                killed = subprocess.run(
                    heat(mpiexec, work, work / "killed.json"),
                    env={**run_env, "GREENCKPT_INJECT": "kill@compute:rank=2,iteration=21"},
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                assert killed.returncode != 0, killed.stderr
            done = subprocess.run(
                heat(mpiexec, work, work / "result.json"),
                env=run_env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
        reports[name] = rt.report()
        result = json.loads((work / "result.json").read_text())
        digests[name] = result["digest"]
        if kill:
            assert result["restored"]["iteration"] == 20
    assert digests["failed"] == digests["clean"]
    clean, failed = reports["clean"], reports["failed"]
    assert "lost" not in [r.kind for r in clean.records]
    records = failed.records
    assert "rework" not in kinds(records)
    restart = next(r for r in records if r.kind == "restart")
    before = [r for r in records if r.kind == "checkpoint" and r.end_s <= restart.start_s]
    lost = [r for r in records if r.kind == "lost"]
    assert len(before) == 2 and all(r.ok for r in before)  # at iterations 10 and 20
    assert lost[0].start_s == before[-1].end_s and lost[-1].end_s == restart.start_s
    assert failed.lost_seconds > 0
    assert clean.observed_epe is not None and failed.observed_epe is not None
    assert failed.observed_epe >= clean.observed_epe


def test_a_failed_restart_loses_all_the_work_before_it(tmp_path: Path) -> None:
    """A restart that restores nothing (every checkpoint damaged), after which the library
    starts afresh (on_unrecoverable="fresh") and computes everything again: the first pass is
    lost in full, not only what followed its last checkpoint — else the fresh run would count
    both passes as useful work and look cheaper per unit of work than a clean run."""
    with make_runtime(tmp_path, "clean") as clean:
        time.sleep(0.06)
        io(clean, "checkpoint", 0.01, level=1)
        time.sleep(0.06)
    with make_runtime(tmp_path, "fresh") as rt:
        time.sleep(0.06)  # the first pass, saved by a checkpoint that will not restore
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.03)  # the first pass goes on, then the crash
        with pytest.raises(RuntimeError), rt.phase("restart", path="/ckpt", size=MIB):
            time.sleep(0.01)
            raise RuntimeError("no checkpoint could be restored")
        time.sleep(0.06)  # the fresh start: the same work again
        io(rt, "checkpoint", 0.01, level=1)
        time.sleep(0.06)
    records = rt.records
    restart = next(r for r in records if r.kind == "restart")
    assert not restart.ok
    before = [r for r in records if r.end_s <= restart.start_s and r.kind != "checkpoint"]
    assert before and all(r.kind == "lost" for r in before)
    assert any("which failed: no checkpoint was restored" in n for r in before for n in r.notes)
    after = [r for r in records if r.start_s >= restart.end_s]
    assert "lost" not in kinds(tuple(after))
    a, b = clean.report(), rt.report()
    assert a.observed_epe is not None and b.observed_epe is not None
    assert b.observed_epe >= a.observed_epe
