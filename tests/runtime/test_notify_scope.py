"""A phase whose process dies in the middle of it does not stay open (issue 16 review): a
begin of scope ``connection`` — what the checkpoint library's SocketHook and libgreenckpt
send — ends, as failed, when the connection that began it closes first; a begin of scope
``job`` (``greenckpt notify begin``, a separate command from its ``end``) outlives its
connection, as the wire format promises.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest

from greenckpt.ckpt.notify_client import (
    BeginRequest,
    EndRequest,
    ProtocolError,
    SocketHook,
    encode,
)
from greenckpt.runtime.notify import NotifyServer
from tests.runtime.test_notify import FakeTarget, server, sock_dir, target  # noqa: F401


def _wait_for(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    """The server ends the phase in the closed connection's thread: wait for it (bounded)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.01)


def test_the_librarys_begin_ends_failed_when_its_connection_closes(
    server: NotifyServer,  # noqa: F811 - the fixture
    target: FakeTarget,  # noqa: F811 - the fixture
) -> None:
    hook = SocketHook(server.socket_path, scope="connection")  # as the library's hook is
    hook.begin("checkpoint", level=1, path="/tmp", size=10, node=0)
    hook.close()  # the rank is killed before its end
    _wait_for(lambda: ("end", "checkpoint", False) in target.calls)
    assert target.calls == [("begin", "checkpoint", "/tmp", 10, 1), ("end", "checkpoint", False)]
    assert server.open_phases() == {}
    assert any("ended there as failed" in i for i in server.incidents)


def test_a_phase_ended_on_its_connection_is_not_ended_again(
    server: NotifyServer,  # noqa: F811 - the fixture
    target: FakeTarget,  # noqa: F811 - the fixture
) -> None:
    with SocketHook(server.socket_path, scope="connection") as hook:
        hook.begin("checkpoint", level=1, path="/tmp", size=10, node=0)
        hook.end("checkpoint", node=0, ok=True, seconds=0.1)
    server.close()
    assert target.calls == [("begin", "checkpoint", "/tmp", 10, 1), ("end", "checkpoint", True)]
    assert server.incidents == ()


def test_a_job_scoped_begin_outlives_its_connection(
    server: NotifyServer,  # noqa: F811 - the fixture
    target: FakeTarget,  # noqa: F811 - the fixture
) -> None:
    with socket.socket(socket.AF_UNIX) as conn:  # as `greenckpt notify begin` does
        conn.connect(server.socket_path)
        conn.sendall(encode(BeginRequest("checkpoint", 1, "/tmp", 10).to_wire()))
        conn.makefile("rb").readline()
    assert server.open_phases() == {"checkpoint": 1}
    with SocketHook(server.socket_path) as other:  # `greenckpt notify end`, another process
        other.request(EndRequest("checkpoint", 0, True, 0.0))
    assert target.calls[-1] == ("end", "checkpoint", True)


def test_an_unknown_scope_is_refused() -> None:
    with pytest.raises(ProtocolError, match='"scope" must be one of job, connection'):
        BeginRequest("checkpoint", 1, "/tmp", 10, scope="forever")  # type: ignore[arg-type]


def test_the_checkpoint_librarys_hook_is_connection_scoped() -> None:
    from greenckpt.ckpt.notify_client import hook_from_env  # noqa: PLC0415

    hook = hook_from_env({"GREENCKPT_RUNTIME_SOCKET": "/tmp/x.sock"})
    assert isinstance(hook, SocketHook) and hook.scope == "connection"
