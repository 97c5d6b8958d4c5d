"""The notification socket under load and with lost or cut-short notifications (issue 18,
item 19): every client of a crowded node gets through, a half-sent request is never executed,
a level outside 1-4 is refused, and a phase whose begin was lost is never ended in someone
else's name."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from greenckpt.ckpt.api import Checkpointer
from greenckpt.ckpt.hooks import PhaseAdvice
from greenckpt.ckpt.notify_client import NotifyError, SocketHook
from greenckpt.runtime.notify import NotifyServer
from tests.runtime.test_notify import FakeTarget

CLIENTS = 200


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gcl-", dir="/tmp" if os.path.isdir("/tmp") else None))
    yield path
    shutil.rmtree(path)


def _crowd(server: NotifyServer, clients: int) -> list[BaseException]:
    """``clients`` threads connect at the same moment and each announce one restart."""
    errors: list[BaseException] = []
    lock = threading.Lock()
    gate = threading.Barrier(clients)

    def client(node: int) -> None:
        try:
            gate.wait()
            with SocketHook(server.socket_path, timeout=20.0) as hook:
                hook.begin("restart", level=1, path="/ckpt", size=1, node=node)
                hook.end("restart", node=node, ok=True, seconds=0.0)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_two_hundred_clients_connecting_at_once_all_get_through(sock_dir: Path) -> None:
    target = FakeTarget()
    with NotifyServer(target, sock_dir / "rt.sock") as server:
        errors = _crowd(server, CLIENTS)
        assert errors == []
        assert [c[0] for c in target.calls].count("begin") == CLIENTS
        assert [c[0] for c in target.calls].count("end") == CLIENTS
        assert server.open_phases() == {}


def test_clients_wait_for_room_when_the_backlog_is_full(sock_dir: Path) -> None:
    """A backlog of one connection: a non-blocking connect fails with EAGAIN at once; the
    client must wait and retry within its timeout rather than lose the notification."""
    target = FakeTarget()
    with NotifyServer(target, sock_dir / "rt.sock", backlog=1) as server:
        assert server.backlog == 1
        errors = _crowd(server, 60)
        assert errors == []
        assert [c[0] for c in target.calls].count("begin") == 60


def test_default_backlog_has_room_for_every_rank_of_a_node(sock_dir: Path) -> None:
    with NotifyServer(FakeTarget(), sock_dir / "rt.sock") as server:
        assert server.backlog >= max(socket.SOMAXCONN, 8 * (os.cpu_count() or 1))


@pytest.mark.parametrize("backlog", [0, -3, True])
def test_a_backlog_below_one_is_refused(sock_dir: Path, backlog: int) -> None:
    with pytest.raises(ValueError, match="backlog must be a positive number"):
        NotifyServer(FakeTarget(), sock_dir / "rt.sock", backlog=backlog)


def test_a_connect_that_never_finds_room_fails_within_its_timeout(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(self: socket.socket, address: object) -> None:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    with NotifyServer(FakeTarget(), sock_dir / "rt.sock") as server:
        monkeypatch.setattr(socket.socket, "connect", full)
        with (
            SocketHook(server.socket_path, timeout=0.2) as hook,
            pytest.raises(NotifyError, match=r"within 0.2 s \(its backlog stayed full\)"),
        ):
            hook.ping()


def test_a_request_cut_short_by_close_is_not_executed_and_is_reported(sock_dir: Path) -> None:
    target = FakeTarget()
    with NotifyServer(target, sock_dir / "rt.sock") as server:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.connect(server.socket_path)
            raw.sendall(b'{"v":1,"event":"ping"}\n')
            raw.sendall(b'{"v":1,"event":"begin","kind":"restart","path":"/c","size":1}')
            raw.shutdown(socket.SHUT_WR)
            replies = b""
            while chunk := raw.recv(4096):
                replies += chunk
        assert replies.count(b"\n") == 1  # the ping's reply only
        assert target.calls == []  # the begin without its newline never ran
        for _ in range(200):  # the connection's thread notes it after the client left
            if server.incidents:
                break
            threading.Event().wait(0.01)
        assert len(server.incidents) == 1
        assert "in the middle of a request" in server.incidents[0]
        assert "not executed" in server.incidents[0]


def test_phases_left_open_at_close_are_reported_to_the_target(sock_dir: Path) -> None:
    notes: list[str] = []

    class NotingTarget(FakeTarget):
        def note(self, text: str) -> None:
            notes.append(text)

    target = NotingTarget()
    server = NotifyServer(target, sock_dir / "rt.sock").start()
    with SocketHook(server.socket_path) as hook:
        hook.begin("checkpoint", level=2, path="/c", size=5, node=0)
    server.close()
    assert target.calls[-1] == ("end", "checkpoint", False)
    assert len(notes) == 1 and "1 checkpoint phase(s)" in notes[0]
    assert "had no end when it closed" in notes[0]
    assert server.incidents == (notes[0].removeprefix("notification socket: "),)


def test_level_99_is_refused_by_client_and_server(sock_dir: Path) -> None:
    with NotifyServer(FakeTarget(), sock_dir / "rt.sock") as server:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.connect(server.socket_path)
            raw.sendall(
                b'{"v":1,"event":"begin","kind":"checkpoint","level":99,"path":"/c","size":1}\n'
            )
            reply = raw.recv(4096)
        assert b'"ok":false' in reply and b"from 1 to 4" in reply
        with SocketHook(server.socket_path) as hook, pytest.raises(ValueError, match="1 to 4"):
            hook.begin("checkpoint", level=99, path="/c", size=1, node=0)


class _LosingHook:
    """A runtime that takes ends but never hears of the checkpoint's begin."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def begin(
        self, kind: str, *, level: int | None, path: str, size: int, node: int
    ) -> PhaseAdvice:
        self.calls.append(f"begin {kind}")
        raise OSError("runtime unreachable")

    def end(self, kind: str, *, node: int, ok: bool, seconds: float) -> None:
        self.calls.append(f"end {kind}")


def test_the_library_never_sends_an_end_whose_begin_was_lost(tmp_path: Path) -> None:
    """Another notifier may hold a phase of the same kind open: an end without its begin
    would close that phase early and skew its accounting. The library says so instead."""
    hook = _LosingHook()
    ck = Checkpointer(local_dir=str(tmp_path), hook=hook)
    u = np.zeros(100)
    ck.protect("u", u)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ck.checkpoint(1, iteration=1)
    ck.finalize()
    assert hook.calls == ["begin checkpoint"]
    texts = [str(w.message) for w in caught]
    assert any("start of a checkpoint" in t for t in texts)
    assert any("end of a checkpoint" in t and "its start never arrived" in t for t in texts)
