"""``greenckpt notify end --seconds/--node`` and ``begin --node`` reach the run report
(issue 18, item 4): the runtime keeps which nodes announced a phase and the notifiers' own
timing next to its measurement, instead of dropping them at the socket.

Every figure here is SYNTHETIC (fake meters, fake sysfs trees), as in test_accounting.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.run_report import PhaseRecord, load_report
from tests.runtime.test_accounting import _isolated, make_runtime  # noqa: F401 - fixture
from tests.runtime.test_notify import FakeTarget

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gcf-", dir="/tmp" if os.path.isdir("/tmp") else None))
    yield path
    shutil.rmtree(path)


def _notify(server: NotifyServer, cwd: Path, *args: str) -> None:
    env = {**os.environ, **server.environ()}
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "greenckpt", "notify", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _checkpoints(records: tuple[PhaseRecord, ...]) -> list[PhaseRecord]:
    return [r for r in records if r.kind == "checkpoint"]


def test_cli_node_and_seconds_reach_the_report(tmp_path: Path, sock_dir: Path) -> None:
    runtime = make_runtime(tmp_path)
    with runtime, NotifyServer(runtime, sock_dir / "rt.sock") as server:
        _notify(server, tmp_path, "begin", "checkpoint", "--size", "1MiB", "--node", "3")
        _notify(server, tmp_path, "begin", "checkpoint", "--size", "1MiB", "--node", "5")
        _notify(server, tmp_path, "end", "checkpoint", "--node", "5", "--seconds", "0.25")
        _notify(server, tmp_path, "end", "checkpoint", "--node", "3", "--seconds", "2.5")
        _notify(server, tmp_path, "begin", "restart", "--size", "1MiB", "--node", "1")
        _notify(server, tmp_path, "end", "restart", "--node", "1")  # no --seconds: not given
    report = runtime.report()
    (checkpoint,) = _checkpoints(report.records)
    assert checkpoint.nodes == (3, 5)
    assert checkpoint.reported_seconds == 2.5  # the slowest notifier
    (restart,) = [r for r in report.records if r.kind == "restart"]
    assert restart.nodes == (1,) and restart.reported_seconds is None

    path = report.write_json(tmp_path / "report.json")
    (again,) = _checkpoints(load_report(path).records)
    assert again.nodes == (3, 5) and again.reported_seconds == 2.5
    csv_path = report.write_csv(tmp_path / "phases.csv")
    header, *rows = csv_path.read_text().splitlines()
    columns = header.split(",")
    row = next(r.split(",") for r in rows if r.split(",")[1] == "checkpoint")
    assert row[columns.index("nodes")] == "3 5"
    assert float(row[columns.index("reported_seconds")]) == 2.5


def test_the_server_passes_node_and_seconds_on(sock_dir: Path) -> None:
    target = FakeTarget()
    with NotifyServer(target, sock_dir / "rt.sock") as server:
        reply = server.handle(
            b'{"v":1,"event":"begin","kind":"checkpoint","path":"/c","size":1,"node":7}\n'
        )
        assert reply["ok"] is True
        server.handle(b'{"v":1,"event":"end","kind":"checkpoint","node":7,"seconds":1.5}\n')
        server.handle(b'{"v":1,"event":"begin","kind":"restart","path":"/c","size":1}\n')
        server.handle(b'{"v":1,"event":"end","kind":"restart"}\n')
    assert target.nodes == [7, 0]
    assert target.ends == [(7, 1.5), (0, None)]


def test_the_runtime_refuses_an_impossible_duration(tmp_path: Path) -> None:
    with make_runtime(tmp_path) as runtime:
        runtime.begin("checkpoint", path=str(tmp_path), size=1)
        with pytest.raises(ValueError, match="seconds must be a finite number >= 0"):
            runtime.end("checkpoint", seconds=float("nan"))
        assert runtime.active() == {"checkpoint": 1}  # nothing was ended by the refusal
        runtime.end("checkpoint", seconds=0.1)


def test_server_incidents_become_run_notes(tmp_path: Path, sock_dir: Path) -> None:
    runtime = make_runtime(tmp_path)
    with runtime:
        server = NotifyServer(runtime, sock_dir / "rt.sock").start()
        runtime_begin = server.handle(
            b'{"v":1,"event":"begin","kind":"checkpoint","path":"/c","size":1,"node":2}\n'
        )
        assert runtime_begin["ok"] is True
        server.close()  # the checkpoint never ended: the server ends it as failed
    notes = runtime.report().notes
    assert any("had no end when it closed" in n for n in notes)
