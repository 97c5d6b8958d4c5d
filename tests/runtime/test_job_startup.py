"""A job's start-up and a node that cannot take part: time before the application starts and
after it ends is start-up and teardown, never useful compute; an agent that cannot start says
why to the leader at once (an ``unable`` message), which a wrong token cannot fake.

Why these matter: on a three-node Slurm job a leader once waited 60 s for agents that had
already failed, printed the wrong reason, and booked the wait as compute on node 0.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.platform.root import SysRoot
from greenckpt.runtime.job import TOKEN_ENV, JobCollector, NodeView
from greenckpt.runtime.job_bounds import MAX_SERIES_POINTS
from greenckpt.runtime.job_report import JobReport
from greenckpt.runtime.launch import reason_of
from greenckpt.runtime.notify_socket import sweep_dead_jobs
from greenckpt.runtime.run_report import USEFUL_KINDS
from greenckpt.runtime.session import Runtime
from tests.runtime.test_job_collector import TOKEN, FakeAgent
from tests.runtime.test_session import FixedPolicy, fake_meter

ROOT = Path(__file__).resolve().parents[2]


def _runtime(tmp_path: Path) -> Runtime:
    return Runtime(
        FixedPolicy(),
        root=SysRoot.default(str(tmp_path / "empty-root")),
        meters=[fake_meter()],
        control=False,
        state_file=tmp_path / "state.json",
    )


def test_time_before_and_after_the_application_is_startup_and_teardown(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    rt.start(application=False)
    time.sleep(0.05)
    rt.application_started()
    with rt.phase("checkpoint", path=str(tmp_path), size=1 << 20):
        pass
    time.sleep(0.02)
    rt.application_ended()
    rt.application_started()  # too late: the application ended, nothing changes
    rt.close()
    records = rt.report().records
    assert [r.kind for r in records] == ["startup", "compute", "checkpoint", "compute", "teardown"]
    assert records[0].seconds >= 0.04
    report = rt.report()
    useful = sum(r.seconds for r in records if r.kind in USEFUL_KINDS)
    assert report.useful_seconds == pytest.approx(useful)
    assert report.useful_seconds < report.total_seconds - records[0].seconds + 1e-9
    assert "startup" not in USEFUL_KINDS and "teardown" not in USEFUL_KINDS


def test_a_runtime_started_as_before_counts_compute_from_the_start(tmp_path: Path) -> None:
    with _runtime(tmp_path) as rt:
        rt.application_ended()
    assert [r.kind for r in rt.report().records] == ["compute", "teardown"]


@pytest.mark.parametrize("kind", ["startup", "teardown"])
def test_no_notifier_can_begin_startup_or_teardown(tmp_path: Path, kind: str) -> None:
    with _runtime(tmp_path) as rt, pytest.raises(InvalidValueError, match="not a phase to begin"):
        rt.begin(kind)  # type: ignore[call-overload]


def test_an_unable_message_marks_the_node_unmanaged_with_its_reason_at_once() -> None:
    with JobCollector("job-1", 2, TOKEN) as collector:
        agent = FakeAgent(collector.address)
        agent.send({"type": "unable", "token": TOKEN, "node": 1, "reason": "no  socket\nhere"})
        assert collector.wait_for({"unmanaged"}, 5.0, [1])
        view = collector.nodes()[1]
        assert (view.state, view.reason, view.told) == ("unmanaged", "no socket here", True)
        assert collector.nodes()[0].state == "starting"
        agent.close()


@pytest.mark.parametrize(
    ("message", "why"),
    [
        ({"type": "unable", "token": "wrong", "node": 0, "reason": "x"}, "wrong job token"),
        ({"type": "unable", "token": TOKEN, "node": 7, "reason": "x"}, "not a node of this job"),
        ({"type": "unable", "token": TOKEN, "node": True, "reason": "x"}, "not a node"),
    ],
)
def test_an_unable_message_must_prove_it_is_the_jobs(message: dict[str, object], why: str) -> None:
    with JobCollector("job-1", 1, TOKEN) as collector:
        agent = FakeAgent(collector.address)
        agent.send(message)
        deadline = time.monotonic() + 5.0
        while not collector.notes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(why in n for n in collector.notes), collector.notes
        assert collector.nodes()[0].state == "starting"
        agent.close()


def test_an_agent_that_cannot_start_tells_the_leader_its_reason_within_5_s(
    tmp_path: Path,
) -> None:
    """The agent's socket folder is a file: it cannot start. Its launcher step (here: the
    process itself, as one agent of an srun step would be) is not watched: the leader
    learns the reason from the agent alone."""
    (tmp_path / "blocked").write_text("a file where the socket's folder should be")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), TOKEN_ENV: TOKEN}
    with JobCollector("job-1", 1, TOKEN) as collector:
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "greenckpt", "agent", "--node", "0", "--job-id", "job-1",
             "--socket", str(tmp_path / "blocked" / "agent.sock"), "--leader",
             collector.address, "--output", str(tmp_path / "out"), "--no-control"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert collector.wait_for({"unmanaged"}, 5.0), "no reason within 5 s"
            assert time.monotonic() - started < 5.0
            view = collector.nodes()[0]
        finally:
            _, err = proc.communicate(timeout=30)
    assert view.told and "blocked" in view.reason and not view.reason.startswith("node 0")
    assert proc.returncode == 1
    assert err.strip().splitlines()[-1] == f"greenckpt agent: error: node 0: {view.reason}"


def test_a_log_line_and_an_unable_message_give_the_same_reason() -> None:
    assert reason_of("greenckpt agent: error: node 12: cannot create it") == "cannot create it"
    assert reason_of("Traceback (most recent call last):") == "Traceback (most recent call last):"


def test_a_dead_agents_job_folder_is_swept_and_nothing_else(tmp_path: Path) -> None:
    base = tmp_path / "greenckpt-0"
    dead, young, busy, live = (base / f"job-{n}" for n in ("1", "2", "3", "4"))
    for d in (dead, young, busy, live):
        d.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(dead / "agent.sock"))
    stale.close()  # bound, nobody listens: what a SIGKILLed agent leaves
    (busy / "report.json").write_text("{}")  # something that is not ours to remove
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(live / "agent.sock"))
    listening.listen(1)
    (base / "job-link").symlink_to(dead)
    old = time.time() - 3600
    for d in (dead, busy, live):
        os.utime(d, (old, old))
    try:
        assert sweep_dead_jobs(str(base)) == [str(dead)]
    finally:
        listening.close()
    assert not dead.exists() and young.exists() and busy.exists() and live.exists()
    assert sweep_dead_jobs(str(tmp_path)) == []  # not greenckpt's folder: never swept


def _checkpoint(start: float, level: int = 1) -> dict[str, object]:
    return {"kind": "checkpoint", "start_s": start, "end_s": start + 1.0, "ok": True,
            "node_energy_j": 10.0, "power_source": "estimated", "level": level,
            "background": False}  # fmt: skip


def _progress(run_s: float, energy: float, phases: list[dict[str, object]]) -> dict[str, object]:
    return {"type": "progress", "t_s": run_s, "records": len(phases), "energy_j": None,
            "by_kind": {}, "run_s": run_s, "node_energy_j": energy, "phases": phases}  # fmt: skip


def test_a_node_that_dies_keeps_the_checkpoints_and_power_its_progress_carried() -> None:
    """The leader merges a node's I/O phases as its progress reports them, and draws its
    power from the energy readings progress carries: a node killed before its final summary
    still has its checkpoints in job-phases.csv and a curve in job-power.png."""
    with JobCollector("job-1", 1, TOKEN) as collector:
        agent = FakeAgent(collector.address)
        agent.hello(0)
        agent.send(_progress(2.0, 200.0, [_checkpoint(0.5)]))
        agent.send(_progress(4.0, 500.0, [_checkpoint(2.5, level=4)]))
        agent.send(_progress(6.0, 700.0, []))
        agent.close()  # killed: no final
        assert collector.wait_for({"died"}, 5.0)
        phases = collector.phases()
        view = collector.nodes()[0]
    assert [(p.kind, p.ordinal, sorted(p.levels)) for p in phases] == [
        ("checkpoint", 0, [1]),
        ("checkpoint", 1, [4]),
    ]
    assert view.series is not None
    assert list(view.series["power_w"]) == [150.0, 100.0]  # (500-200)/2, (700-500)/2
    assert view.series["source"] == "estimated"
    report = JobReport.build(job_id="job-1", launcher="test", command=["app"], nodes=[view],
                             phases=phases, started_unix=1000.0, ended_unix=1010.0)  # fmt: skip
    assert report.doc["series"] is not None and len(report.doc["phases"]) == 2


def test_a_final_summary_does_not_add_the_phases_progress_merged_again() -> None:
    with JobCollector("job-1", 1, TOKEN) as collector:
        agent = FakeAgent(collector.address)
        agent.hello(0)
        agent.send(_progress(2.0, 100.0, [_checkpoint(0.5), _checkpoint(1.5)]))
        final = {"t0_unix": 1000.0, "records": [_checkpoint(0.5), _checkpoint(1.5),
                                                _checkpoint(3.0)]}  # fmt: skip
        agent.send({"type": "final", "summary": final})
        assert collector.wait_for({"finished"}, 5.0)
        phases = collector.phases()
        agent.close()
    assert [(p.ordinal, p.nodes) for p in phases] == [(0, 1), (1, 1), (2, 1)]


def test_energy_points_stay_bounded_and_keep_the_energy() -> None:
    view = NodeView(0, power_source="measured")
    for i in range(1, 5001):
        view.add_energy_point(float(i), 10.0 * i)
    view.add_energy_point(3.0, 1.0)  # out of order: ignored
    view.add_energy_point(6000.0, float("nan"))  # not finite: ignored
    assert len(view.energy_t) <= MAX_SERIES_POINTS
    assert view.energy_j[-1] - view.energy_j[0] == pytest.approx(10.0 * (5000 - 1))
    series = view.progress_series()
    assert series is not None and set(series["power_w"]) == {10.0}
