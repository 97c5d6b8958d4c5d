"""The notification socket's native front (libgreenckpt_front, issue 16's < 50 µs target).

What must hold: a target whose decisions repeat gets repeated begins, joining begins and ends
answered by the front at once, yet sees every request, in arrival order, exactly as the
Python server would pass them; an answer that turns out stale is reported and corrected; a
refused request is reported; phases of a connection that dies are ended; without the
promise (or with ``front="python"``) every line waits for the target, as before. The speed
itself is measured in benchmarks/bench_phase_api.py, not here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from greenckpt.ckpt.notify_client import NotifyError, SocketHook, WireKind
from greenckpt.errors import GreenckptError
from greenckpt.native import include_dir, library_dir
from greenckpt.runtime import front as native
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.settings import Settings
from tests.runtime.test_notify import RawClient

FIRST = Settings(io_processes=2, source="made-up settings of a test")
SECOND = Settings(io_processes=3, source="changed made-up settings of a test")


class RepeatingTarget:
    """Records every call; answers FIRST (or SECOND once ``switch`` is set); refuses an end
    with no phase of its kind open, as the runtime does."""

    decisions_repeat = True

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.open: dict[str, int] = {}
        self.switch = False
        self.notes: list[str] = []

    def begin(self, kind: WireKind, **kw: Any) -> Settings | None:
        self.calls.append(("begin", kind, kw.get("level"), kw.get("size")))
        self.open[kind] = self.open.get(kind, 0) + 1
        return SECOND if self.switch else FIRST

    def end(self, kind: WireKind, *, ok: bool, **_: Any) -> None:
        if self.open.get(kind, 0) == 0:
            raise ValueError(f"no {kind} phase is open")
        self.open[kind] -= 1
        self.calls.append(("end", kind, ok))

    def note(self, text: str) -> None:
        self.notes.append(text)


@pytest.fixture
def native_only() -> None:
    try:
        native._library()
    except (OSError, GreenckptError) as exc:
        pytest.skip(f"libgreenckpt_front cannot be built here: {exc}")


def test_repeated_begins_and_ends_are_answered_at_once_and_all_accounted(
    tmp_path: Path, native_only: None
) -> None:
    target = RepeatingTarget()
    with NotifyServer(target, tmp_path / "s.sock") as server:
        assert server.front == "native"
        with SocketHook(server.socket_path) as hook:
            for _ in range(20):
                advice = hook.begin("checkpoint", level=1, path="/ckpt", size=64, node=0)
                assert advice is not None and advice.io_processes == 2
                hook.end("checkpoint", ok=True, node=0, seconds=0.0)
        assert server.settle()
        answered, waited = server.front_counts()
    # the first begin waited for the target; the 19 repeats and the 20 ends did not
    assert (answered, waited) == (39, 1)
    expected = [("begin", "checkpoint", 1, 64), ("end", "checkpoint", True)] * 20
    assert target.calls == expected
    assert server.incidents == ()


def test_a_begin_joining_an_open_phase_gets_its_answer_and_both_are_passed_on(
    tmp_path: Path, native_only: None
) -> None:
    target = RepeatingTarget()
    with NotifyServer(target, tmp_path / "s.sock") as server:
        first, second = SocketHook(server.socket_path), SocketHook(server.socket_path)
        try:
            a = first.begin("checkpoint", level=1, path="/a", size=10, node=0)
            b = second.begin("checkpoint", level=1, path="/b", size=20, node=1)
            assert a == b
            assert server.settle()
            assert server.open_phases() == {"checkpoint": 2}
            first.end("checkpoint", ok=True, node=0, seconds=0.1)
            second.end("checkpoint", ok=False, node=1, seconds=0.1)
        finally:
            first.close()
            second.close()
        assert server.settle()
        assert server.front_counts() == (3, 1)  # the joining begin and both ends at once
        assert server.open_phases() == {}
    assert [c[0] for c in target.calls] == ["begin", "begin", "end", "end"]
    assert target.calls[-1] == ("end", "checkpoint", False)


def test_a_stale_answer_is_reported_and_the_next_begin_gets_the_new_one(
    tmp_path: Path, native_only: None
) -> None:
    target = RepeatingTarget()
    with (
        NotifyServer(target, tmp_path / "s.sock") as server,
        SocketHook(server.socket_path) as hook,
    ):
        begin = {"level": 1, "path": "/c", "size": 5, "node": 0}
        hook.begin("checkpoint", **begin)  # type: ignore[arg-type]
        hook.end("checkpoint", ok=True, node=0, seconds=0.0)
        assert server.settle()
        target.switch = True  # the target's decision changes (e.g. control was lost)
        stale = hook.begin("checkpoint", **begin)  # type: ignore[arg-type]
        hook.end("checkpoint", ok=True, node=0, seconds=0.0)
        assert server.settle()
        fresh = hook.begin("checkpoint", **begin)  # type: ignore[arg-type]
        hook.end("checkpoint", ok=True, node=0, seconds=0.0)
        assert server.settle()
        incidents = server.incidents
    assert stale is not None and stale.io_processes == 2  # answered before the runtime knew
    assert fresh is not None and fresh.io_processes == 3
    assert len(incidents) == 1 and "differed from the runtime's decision" in incidents[0]
    assert any("differed" in n for n in target.notes)


def test_an_end_answered_at_once_but_refused_by_the_target_is_reported(
    tmp_path: Path, native_only: None
) -> None:
    target = RepeatingTarget()
    with (
        pytest.warns(RuntimeWarning, match="could not end the restart phase"),  # at close
        NotifyServer(target, tmp_path / "s.sock") as server,
        SocketHook(server.socket_path) as hook,
    ):
        hook.begin("restart", level=1, path="/r", size=5, node=0)
        assert server.settle()
        target.open.clear()  # the runtime ended it meanwhile (e.g. a failed restart)
        hook.end(
            "restart", ok=True, node=0, seconds=0.0
        )  # the front still counts it open: answered at once
        assert server.settle()
        assert len(server.incidents) == 1
        assert "then refused by the runtime: no restart phase is open" in server.incidents[0]


def test_a_connection_that_dies_ends_its_phases_and_the_front_forgets_them(
    tmp_path: Path, native_only: None
) -> None:
    target = RepeatingTarget()
    with NotifyServer(target, tmp_path / "s.sock") as server:
        line = (
            b'{"v":1,"event":"begin","kind":"checkpoint","level":1,"path":"/c","size":3,'
            b'"node":0,"pid":7,"scope":"connection"}\n'
        )
        for _ in range(2):  # the second time the begin is answered by the front
            client = RawClient(server.socket_path)
            assert client.ask(line)["ok"] is True
            client.close()  # dies in the middle of its checkpoint
            for _ in range(500):
                if server.settle() and target.calls[-1] == ("end", "checkpoint", False):
                    break
                threading_wait(0.01)
        assert server.front_counts()[0] == 1
        other = RawClient(server.socket_path)
        try:  # the front knows no checkpoint is open: the target answers (and refuses)
            reply = other.ask(b'{"v":1,"event":"end","kind":"checkpoint"}\n')
        finally:
            other.close()
    assert reply["ok"] is False and "no checkpoint phase is open" in reply["error"]
    assert target.calls.count(("end", "checkpoint", False)) == 2


def threading_wait(seconds: float) -> None:
    threading.Event().wait(seconds)


def test_without_the_promise_every_line_waits_for_the_target(
    tmp_path: Path, native_only: None
) -> None:
    class OneOff(RepeatingTarget):
        decisions_repeat = False

    target = OneOff()
    with (
        NotifyServer(target, tmp_path / "s.sock") as server,
        SocketHook(server.socket_path) as hook,
    ):
        for _ in range(3):
            hook.begin("flush", level=4, path="/g", size=9, node=0)
            hook.end("flush", ok=True, node=0, seconds=0.0)
        assert server.front_counts() == (0, 6)
    assert len(target.calls) == 6


def test_front_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with NotifyServer(RepeatingTarget(), tmp_path / "p.sock", front="python") as server:
        assert server.front == "python"
        assert server.front_counts() == (0, 0)
    with pytest.raises(GreenckptError, match="front must be auto, native or python"):
        NotifyServer(RepeatingTarget(), front="rust")  # type: ignore[arg-type]

    def unavailable() -> None:
        raise OSError("no libgreenckpt_front here")

    monkeypatch.setattr(native, "_library", unavailable)
    target = RepeatingTarget()
    with NotifyServer(target, tmp_path / "a.sock") as server:
        assert server.front.startswith("python (libgreenckpt_front unavailable")
        with SocketHook(server.socket_path) as hook:
            assert hook.ping()
    assert any("served by Python" in n for n in target.notes)
    with pytest.raises(NotifyError, match="the native front cannot start"):
        NotifyServer(RepeatingTarget(), tmp_path / "n.sock", front="native").start()
    assert not (tmp_path / "n.sock").exists()  # nothing left behind


C_PROGRAM = r"""
#include <stdio.h>
#include "greenckpt.h"
int main(void) {
    int i, io, bad = 0;
    for (i = 0; i < 300; ++i) {
        bad += greenckpt_begin(GREENCKPT_CHECKPOINT, 1 + i % 2, "/tmp", 1 << 20, &io) != 0;
        bad += io < 1;
        bad += greenckpt_end(GREENCKPT_CHECKPOINT, i % 50 != 0) != 0;
    }
    printf("bad %d\n", bad);
    return bad != 0;
}
"""


def test_a_c_program_under_greenckpt_run_has_every_phase_accounted(
    tmp_path: Path, native_only: None
) -> None:
    """300 back-to-back checkpoints (most answered by the front) all reach the report."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    source = tmp_path / "phases.c"
    source.write_text(textwrap.dedent(C_PROGRAM))
    exe = tmp_path / "phases"
    lib = library_dir()
    subprocess.run(
        [cc, "-std=c99", f"-I{include_dir()}", str(source), f"-L{lib}", f"-Wl,-rpath,{lib}",
         "-lgreenckpt", "-o", str(exe)],
        check=True,
    )  # fmt: skip
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "greenckpt", "run", "--no-control", "--json", "-o", str(out),
         "--", str(exe)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)["report"]
    checkpoints = [r for r in report["records"] if r["kind"] == "checkpoint"]
    assert len(checkpoints) == 300
    assert sum(not r["ok"] for r in checkpoints) == 6  # i % 50 == 0
    assert [r["level"] for r in checkpoints[:4]] == [1, 2, 1, 2]
    assert "bad 0" in done.stderr  # the program's stdout goes to stderr with --json
