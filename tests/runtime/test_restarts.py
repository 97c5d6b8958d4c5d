"""One restart per failure (issue 30 item 1) and the rework's level in its record (item 6).

Each rank of an MPI code announces its own restart; a level-1 recovery takes microseconds and
has no collective, so one rank's restart can be over before the next rank's begins. The
runtime must still count one restart (one failure, one lost-work accounting, the bytes of
every rank), and tell that apart from a genuine second failure: the same process restarting
again, a checkpoint in between, or a restart long after.

Every figure here is SYNTHETIC: fake meters (constant watts) and fake sysfs trees. Time is
spent with ``sleep`` so the runtime's meter readings see it; no assertion compares a duration
with a wall-clock bound.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenckpt.ckpt.notify_client import SocketHook
from greenckpt.runtime import restarts
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.session import Runtime
from tests.platform import fake_power as fp
from tests.runtime.test_accounting import MIB, io, kinds, make_runtime


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No host ipmitool or pynvml leaks in."""
    fp.hide_ipmitool(monkeypatch, tmp_path)
    fp.install_pynvml(monkeypatch, None)
    yield


def rank_restart(rt: Runtime, pid: int, *, size: int = MIB, level: int | None = None) -> None:
    """One rank's whole restart, announced by process ``pid`` of node 0."""
    rt.begin("restart", path="/ckpt", size=size, level=level, node=0, pid=pid)
    time.sleep(0.002)
    rt.end("restart", node=0)


def failure(rt: Runtime) -> None:
    """A committed checkpoint, then compute that the failure loses."""
    io(rt, "checkpoint", 0.01, level=1)
    time.sleep(0.02)


def test_ranks_restarting_one_after_another_are_one_restart(tmp_path: Path) -> None:
    with make_runtime(tmp_path) as rt:
        failure(rt)
        rt.begin("restart", path="/ckpt", size=MIB, node=0, pid=100)  # two ranks overlap ...
        rt.begin("restart", path="/ckpt", size=MIB, node=0, pid=101)
        rt.end("restart", node=0)
        rt.end("restart", node=0)
        time.sleep(0.005)  # ... the other two come after both have ended, one by one
        rank_restart(rt, 102)
        time.sleep(0.005)
        rank_restart(rt, 103)
        time.sleep(0.01)
    records = rt.records
    assert kinds(records) == ["compute", "checkpoint", "lost", "restart", "compute"]
    _, checkpoint, lost, restart, after = records
    assert restart.size == 4 * MIB and restart.notifiers == 4 and restart.ok
    assert lost.start_s == checkpoint.end_s and lost.end_s == restart.start_s
    assert after.start_s == restart.end_s  # the last rank's end closed the one restart
    (note,) = [n for n in restart.notes if "joined as one restart" in n]
    assert note.startswith("2 notifier(s) began their restart after it had ended")
    report = rt.report()
    assert report.count("restart") == 1
    assert report.lost_seconds == pytest.approx(lost.seconds)


def test_the_same_process_restarting_again_is_a_second_failure(tmp_path: Path) -> None:
    with make_runtime(tmp_path) as rt:
        failure(rt)
        rank_restart(rt, 100)
        rank_restart(rt, 101)  # the other rank of the first restart
        time.sleep(0.005)
        rank_restart(rt, 100)  # rank 0 again: its attempt died, before any checkpoint
        time.sleep(0.005)
    assert kinds(rt.records) == [
        "compute", "checkpoint", "lost", "restart", "lost", "restart", "compute",
    ]  # fmt: skip
    first, second = (r for r in rt.records if r.kind == "restart")
    assert (first.size, first.notifiers) == (2 * MIB, 2)
    assert (second.size, second.notifiers) == (MIB, 1)
    assert "the restart that ended at" in rt.records[4].notes[-1]


def test_a_restart_after_a_checkpoint_is_a_new_failure(tmp_path: Path) -> None:
    with make_runtime(tmp_path) as rt:
        failure(rt)
        rank_restart(rt, 100)
        failure(rt)  # the job went on and checkpointed: a new rank's restart is a new one
        rank_restart(rt, 101)
    assert kinds(rt.records).count("restart") == 2
    assert kinds(rt.records).count("lost") == 2


def test_a_restart_long_after_the_previous_one_is_a_new_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(restarts, "RESTART_JOIN_S", 0.02)
    with make_runtime(tmp_path) as rt:
        failure(rt)
        rank_restart(rt, 100)
        time.sleep(0.1)  # longer than the window: a relaunched attempt, not a straggler
        rank_restart(rt, 101)
    assert kinds(rt.records) == [
        "compute", "checkpoint", "lost", "restart", "lost", "restart", "compute",
    ]  # fmt: skip


def test_an_early_ranks_rework_survives_a_late_ranks_restart(tmp_path: Path) -> None:
    """Rank 0 has restarted and begun its rework when rank 1's restart begins: that is the
    same restart (rank 0's rework is not from a dead attempt), and the rework and compute
    recorded between fold into it."""
    with make_runtime(tmp_path) as rt:
        failure(rt)
        rank_restart(rt, 100, level=1)
        rt.begin("rework", level=1, node=0, pid=100)
        time.sleep(0.005)
        rank_restart(rt, 101, level=1)
        rt.begin("rework", level=1, node=0, pid=101)
        time.sleep(0.02)
        rt.end("rework", node=0)
        assert rt.end("rework", node=0) is not None  # both ends count: nothing abandoned
        time.sleep(0.005)
    assert kinds(rt.records) == ["compute", "checkpoint", "lost", "restart", "rework", "compute"]
    restart, rework = rt.records[3:5]
    assert (restart.size, restart.notifiers, restart.level) == (2 * MIB, 2, 1)
    assert rework.start_s == restart.end_s and rework.level == 1


def test_a_reworks_record_has_the_level_it_was_begun_with(tmp_path: Path) -> None:
    with make_runtime(tmp_path) as rt:
        failure(rt)
        io(rt, "restart", 0.01, level=1)
        with rt.phase("rework", level=1):
            io(rt, "checkpoint", 0.01, level=2)  # splits the rework in two records
        with rt.phase("rework"):
            time.sleep(0.005)
    reworks = [r for r in rt.records if r.kind == "rework"]
    assert [r.level for r in reworks] == [1, 1, None]
    saved = [r for r in rt.report().to_dict()["records"] if r["kind"] == "rework"]
    assert [r["level"] for r in saved] == [1, 1, None]


def test_the_python_notify_api_records_the_reworks_level(tmp_path: Path) -> None:
    with (
        make_runtime(tmp_path) as rt,
        NotifyServer(rt, tmp_path / "rt.sock", front="python") as server,
        SocketHook(server.socket_path) as hook,
    ):
        hook.begin("checkpoint", level=3, path="/ckpt", size=MIB, node=0)
        hook.end("checkpoint", node=0, ok=True, seconds=0.0)
        hook.begin("restart", level=3, path="/ckpt", size=MIB, node=0)
        hook.end("restart", node=0, ok=True, seconds=0.0)
        hook.begin("rework", level=3, path="", size=0, node=0)
        time.sleep(0.005)
        hook.end("rework", node=0, ok=True, seconds=0.0)
    (rework,) = (r for r in rt.report().to_dict()["records"] if r["kind"] == "rework")
    assert rework["level"] == 3
