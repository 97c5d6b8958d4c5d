"""The notification interface: wire format, server, SocketHook client and ``greenckpt notify``.

The server drives a fake target that records its calls and returns made-up settings (labelled
as such); nothing here measures or changes the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from greenckpt import __version__
from greenckpt.ckpt.hooks import PhaseAdvice
from greenckpt.ckpt.notify_client import (
    MAX_LINE_BYTES,
    SOCKET_ENV,
    BeginRequest,
    EndRequest,
    NotifyError,
    PingRequest,
    ProtocolError,
    SocketHook,
    WireKind,
    advice_from_reply,
    decode,
    encode,
    hook_from_env,
    parse_request,
)
from greenckpt.cli.main import main
from greenckpt.runtime.notify import SOCKET_NAME, NotifyServer
from greenckpt.runtime.settings import Settings
from tests.conftest import ROOT

GIB = 2**30
FAKE = Settings(
    io_processes=2,
    source="fake policy",
    frequency_hz=1_400_000_000,
    notes=("made-up settings of a test",),
)


class FakeTarget:
    """Records begin/end calls and counts open phases per kind; refuses a begin of 13 bytes
    and an end with no phase of its kind open, as the runtime does (to test error replies)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.open: dict[str, int] = {}
        self.inside = 0
        self.max_inside = 0
        self.refuse_end = False
        self.nodes: list[int | None] = []  # begin's node, per call
        self.ends: list[tuple[int | None, float | None]] = []  # end's node and seconds

    def begin(
        self,
        kind: WireKind,
        *,
        path: str | None,
        size: int | None,
        level: int | None,
        codec: str | None = None,
        node: int | None = None,
        pid: int | None = None,
    ) -> Settings | None:
        self.nodes.append(node)
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        try:
            if size == 13:
                raise ValueError("unlucky size\nsecond line")
            self.calls.append(("begin", kind, path, size, level))
            self.open[kind] = self.open.get(kind, 0) + 1
            return None if kind == "compute" else FAKE
        finally:
            self.inside -= 1

    def end(
        self, kind: WireKind, *, ok: bool, node: int | None = None, seconds: float | None = None
    ) -> object:
        self.ends.append((node, seconds))
        self.inside += 1
        self.max_inside = max(self.max_inside, self.inside)
        try:
            if self.refuse_end:
                raise RuntimeError("cannot restore")
            if not self.open.get(kind):
                raise ValueError(f"no {kind} phase is open")
            self.open[kind] -= 1
            self.calls.append(("end", kind, ok))
            return None
        finally:
            self.inside -= 1


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory (Unix socket paths are limited to ~107 bytes)."""
    base = "/tmp" if os.path.isdir("/tmp") else None
    path = Path(tempfile.mkdtemp(prefix="gcn-", dir=base))
    yield path
    shutil.rmtree(path)


@pytest.fixture
def target() -> FakeTarget:
    return FakeTarget()


@pytest.fixture
def server(target: FakeTarget, sock_dir: Path) -> Iterator[NotifyServer]:
    with NotifyServer(target, sock_dir / "rt.sock") as srv:
        yield srv


def _env(server: NotifyServer) -> dict[str, str]:
    env = dict(os.environ)
    env.update(server.environ())
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


class RawClient:
    """A client that sends arbitrary bytes and reads reply lines."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.reader = self.sock.makefile("rb")

    def ask(self, data: bytes) -> dict[str, Any]:
        self.sock.sendall(data)
        line = self.reader.readline()
        assert line.endswith(b"\n"), line
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


# ------------------------------------------------------------------------------ wire format


def test_requests_round_trip_through_the_wire() -> None:
    for request in (
        BeginRequest("checkpoint", level=2, path="/ckpt", size=GIB, node=3, pid=42),
        EndRequest("restart", node=1, ok=False, seconds=2.5),
        PingRequest(),
    ):
        line = encode(request.to_wire())
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert parse_request(decode(line)) == request


def test_begin_defaults_for_absent_fields() -> None:
    request = parse_request({"v": 1, "event": "begin", "kind": "flush", "extra": [1]})
    assert request == BeginRequest("flush", level=None, path="", size=0, node=0, pid=0)


BAD_MESSAGES = {
    "not-json": (b"{nope", "not valid JSON"),
    "not-object": (b"[1, 2]", "must be a JSON object"),
    "empty": (b"   ", "empty message"),
    "not-utf8": (b'{"v": 1, "event": "\xff"}', "not UTF-8"),
    "nan": (b'{"v": 1, "event": "end", "kind": "flush", "seconds": NaN}', "not valid JSON"),
    "no-version": (b'{"event": "ping"}', '"v"'),
    "version-2": (b'{"v": 2, "event": "ping"}', "version 2 is not supported"),
    "unknown-event": (b'{"v": 1, "event": "explode"}', '"event" must be one of'),
    "unknown-kind": (b'{"v": 1, "event": "begin", "kind": "nap"}', '"kind" must be one of'),
    "level-string": (
        b'{"v": 1, "event": "begin", "kind": "checkpoint", "level": "2"}',
        '"level" must be an integer',
    ),
    "level-zero": (
        b'{"v": 1, "event": "begin", "kind": "checkpoint", "level": 0}',
        '"level" must be an integer from 1 to 4',
    ),
    "size-bool": (
        b'{"v": 1, "event": "begin", "kind": "checkpoint", "size": true}',
        '"size" must be an integer',
    ),
    "size-negative": (
        b'{"v": 1, "event": "begin", "kind": "checkpoint", "size": -1}',
        '"size" must be an integer >= 0',
    ),
    "level-99": (
        b'{"v": 1, "event": "begin", "kind": "checkpoint", "level": 99}',
        '"level" must be an integer from 1 to 4 or null, got 99',
    ),
    "path-number": (b'{"v": 1, "event": "begin", "kind": "restart", "path": 7}', '"path"'),
    "ok-string": (b'{"v": 1, "event": "end", "kind": "restart", "ok": "yes"}', '"ok"'),
    "seconds-negative": (
        b'{"v": 1, "event": "end", "kind": "restart", "seconds": -1}',
        '"seconds" must be a finite number >= 0',
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_MESSAGES))
def test_bad_message_is_refused_with_one_line(name: str) -> None:
    line, message = BAD_MESSAGES[name]
    with pytest.raises(ProtocolError) as info:
        parse_request(decode(line))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_version_error_names_both_versions() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request({"v": 7, "event": "ping"})
    assert "version 7" in str(info.value) and "version 1" in str(info.value)


def test_client_refuses_to_build_bad_requests() -> None:
    with pytest.raises(ProtocolError, match='"kind"'):
        BeginRequest("nap", size=1)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match='"seconds"'):
        EndRequest("checkpoint", seconds=float("inf"))


# ------------------------------------------------------------------------------ in process


def test_begin_end_from_socket_hook(server: NotifyServer, target: FakeTarget) -> None:
    with SocketHook(server.socket_path) as hook:
        advice = hook.begin("checkpoint", level=1, path="/scratch/ckpt", size=GIB, node=0)
        assert advice.io_processes == 2
        assert "1.40 GHz, 2 I/O processes" in advice.note
        assert "fake policy" in advice.note and "made-up settings" in advice.note
        assert server.open_phases() == {"checkpoint": 1}
        hook.end("checkpoint", node=0, ok=True, seconds=1.5)
        assert hook.ping() == f"greenckpt {__version__}"
    assert target.calls == [
        ("begin", "checkpoint", "/scratch/ckpt", GIB, 1),
        ("end", "checkpoint", True),
    ]
    assert server.open_phases() == {}


def test_begin_reply_carries_the_settings(server: NotifyServer) -> None:
    client = RawClient(server.socket_path)
    try:
        reply = client.ask(encode(BeginRequest("restart", path="/d", size=5).to_wire()))
        assert reply["v"] == 1 and reply["ok"] is True
        assert reply["io_processes"] == 2
        assert reply["settings"]["frequency_hz"] == 1_400_000_000
        assert reply["settings"]["source"] == "fake policy"
        assert reply["settings"]["label"] == FAKE.label
        assert reply["writer_cpus"] == [] == reply["settings"]["writer_cpus"]  # no split
        assert client.ask(encode(EndRequest("restart").to_wire())) == {"v": 1, "ok": True}
    finally:
        client.close()


def test_the_writer_cpus_of_a_split_reach_the_library_and_bad_ones_are_refused() -> None:
    reply = {"v": 1, "ok": True, "io_processes": 2, "note": "", "writer_cpus": [0, 1]}
    assert advice_from_reply(reply).writer_cpus == (0, 1)
    del reply["writer_cpus"]  # a runtime from before the per-core split
    assert advice_from_reply(reply).writer_cpus == ()
    for bad in ("0,1", [0, -1], [True], [0.5]):
        with pytest.raises(ProtocolError, match='"writer_cpus" must be a list of CPU numbers'):
            advice_from_reply({**reply, "writer_cpus": bad})


def test_compute_phase_gets_no_io_advice(server: NotifyServer, target: FakeTarget) -> None:
    with SocketHook(server.socket_path) as hook:
        reply = hook.request(BeginRequest("compute"))
        assert reply["io_processes"] is None and reply["settings"] is None
        hook.request(EndRequest("compute"))
    assert target.calls == [("begin", "compute", None, 0, None), ("end", "compute", True)]


def test_failed_end_is_passed_on(server: NotifyServer, target: FakeTarget) -> None:
    with SocketHook(server.socket_path) as hook:
        hook.begin("flush", level=4, path="/pfs", size=10, node=0)
        hook.end("flush", node=0, ok=False, seconds=0.1)
    assert target.calls[-1] == ("end", "flush", False)


def test_overlapping_begins_are_all_passed_on(server: NotifyServer, target: FakeTarget) -> None:
    first, second = SocketHook(server.socket_path), SocketHook(server.socket_path)
    try:
        a = first.begin("checkpoint", level=1, path="/a", size=10, node=0)
        b = second.begin("checkpoint", level=1, path="/b", size=20, node=1)
        assert a == b
        assert server.open_phases() == {"checkpoint": 2}
        first.end("checkpoint", node=0, ok=False, seconds=1.0)
        second.end("checkpoint", node=1, ok=True, seconds=1.0)
    finally:
        first.close()
        second.close()
    assert target.calls == [
        ("begin", "checkpoint", "/a", 10, 1),
        ("begin", "checkpoint", "/b", 20, 1),
        ("end", "checkpoint", False),
        ("end", "checkpoint", True),
    ]
    assert server.open_phases() == {}


def test_begin_and_end_over_separate_connections(server: NotifyServer, target: FakeTarget) -> None:
    with SocketHook(server.socket_path) as hook:
        hook.begin("restart", level=2, path="/x", size=3, node=0)
    with SocketHook(server.socket_path) as hook:
        hook.end("restart", node=0, ok=True, seconds=0.0)
    assert [c[0] for c in target.calls] == ["begin", "end"]


def test_target_refusal_becomes_notify_error(server: NotifyServer, target: FakeTarget) -> None:
    with SocketHook(server.socket_path) as hook:
        with pytest.raises(NotifyError) as info:
            hook.begin("checkpoint", level=1, path="/p", size=13, node=0)
        text = str(info.value)
        assert server.socket_path in text and "unlucky size second line" in text
        assert "\n" not in text
        assert server.open_phases() == {}
        assert hook.ping().startswith("greenckpt ")  # same connection, still usable


def test_target_bug_is_reported_with_its_type(server: NotifyServer, target: FakeTarget) -> None:
    with SocketHook(server.socket_path) as hook:
        hook.begin("restart", level=1, path="/p", size=1, node=0)
        target.refuse_end = True
        with pytest.raises(NotifyError, match="RuntimeError: cannot restore"):
            hook.end("restart", node=0, ok=True, seconds=0.0)
        target.refuse_end = False
        hook.end("restart", node=0, ok=True, seconds=0.0)  # the phase was still open
    assert server.open_phases() == {}


def test_end_without_begin_is_an_error(server: NotifyServer) -> None:
    with (
        SocketHook(server.socket_path) as hook,
        pytest.raises(NotifyError, match="refused the end checkpoint: no checkpoint phase is open"),
    ):
        hook.end("checkpoint", node=0, ok=True, seconds=0.0)


def test_close_ends_phases_left_open(target: FakeTarget, sock_dir: Path) -> None:
    server = NotifyServer(target, sock_dir / "rt.sock").start()
    with SocketHook(server.socket_path) as hook:
        for node in (0, 1):
            hook.begin("checkpoint", level=1, path="/p", size=1, node=node)
        hook.begin("restart", level=1, path="/p", size=1, node=0)
        hook.end("restart", node=0, ok=True, seconds=0.0)
    target.begin("flush", path="/q", size=1, level=4)  # begun in process, not through the socket
    server.close()
    assert target.calls[-2:] == [("end", "checkpoint", False), ("end", "checkpoint", False)]
    assert target.open == {"checkpoint": 0, "restart": 0, "flush": 1}


def test_close_warns_when_the_target_cannot_end(target: FakeTarget, sock_dir: Path) -> None:
    server = NotifyServer(target, sock_dir / "rt.sock").start()
    with SocketHook(server.socket_path) as hook:
        hook.begin("flush", level=4, path="/p", size=1, node=0)
    target.refuse_end = True
    with pytest.warns(RuntimeWarning, match="could not end the flush phase"):
        server.close()


# ------------------------------------------------------------------------------ malformed input


def test_bad_lines_get_error_replies_and_the_connection_stays(server: NotifyServer) -> None:
    client = RawClient(server.socket_path)
    try:
        for name in sorted(BAD_MESSAGES):
            line, message = BAD_MESSAGES[name]
            reply = client.ask(line + b"\n")
            assert reply["v"] == 1 and reply["ok"] is False, name
            assert message in reply["error"], (name, reply)
            pong = client.ask(b'{"v": 1, "event": "ping"}\n')
            assert pong["ok"] is True, name
    finally:
        client.close()


def test_wrong_version_reply_names_both_versions(server: NotifyServer) -> None:
    client = RawClient(server.socket_path)
    try:
        reply = client.ask(b'{"v": 3, "event": "begin", "kind": "checkpoint"}\n')
        assert reply == {
            "v": 1,
            "ok": False,
            "error": "notification protocol version 3 is not supported: this side speaks version 1",
        }
    finally:
        client.close()


def test_too_long_line_closes_the_connection(server: NotifyServer) -> None:
    client = RawClient(server.socket_path)
    try:
        reply = client.ask(b"x" * (MAX_LINE_BYTES + 10) + b"\n")
        assert reply["ok"] is False and "longer than" in reply["error"]
        assert client.reader.readline() == b""  # closed by the server
    finally:
        client.close()
    with SocketHook(server.socket_path) as hook:  # the server itself goes on
        assert hook.ping()


def test_client_refuses_a_reply_of_another_version(sock_dir: Path) -> None:
    path = str(sock_dir / "old.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def answer() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as reader:
            reader.readline()
            conn.sendall(b'{"v": 2, "ok": true}\n')

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        with SocketHook(path) as hook, pytest.raises(NotifyError) as info:
            hook.ping()
        text = str(info.value)
        assert path in text and "version 2" in text and "version 1" in text
    finally:
        thread.join(10)
        listener.close()


# ------------------------------------------------------------------------------ concurrency


def test_four_concurrent_clients(server: NotifyServer, target: FakeTarget) -> None:
    ranks = 4
    began = threading.Barrier(ranks)
    advice: list[PhaseAdvice | None] = [None] * ranks
    errors: list[BaseException] = []

    def rank(i: int) -> None:
        try:
            with SocketHook(server.socket_path) as hook:
                advice[i] = hook.begin("checkpoint", level=1, path="/c", size=100, node=i)
                began.wait(10)  # every rank is inside the phase
                hook.end("checkpoint", node=i, ok=True, seconds=0.5)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert all(a is not None and a.io_processes == 2 for a in advice)
    assert (
        target.calls
        == [("begin", "checkpoint", "/c", 100, 1)] * ranks + [("end", "checkpoint", True)] * ranks
    )  # every rank was inside before the first end
    assert target.max_inside == 1  # calls into the target never overlap
    assert server.open_phases() == {}


def test_concurrent_clients_are_serialised(server: NotifyServer, target: FakeTarget) -> None:
    kinds: tuple[Any, ...] = ("checkpoint", "flush", "restart", "checkpoint")
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            with SocketHook(server.socket_path) as hook:
                for _ in range(25):
                    hook.begin(kinds[i], level=1, path="/c", size=1, node=i)
                    hook.end(kinds[i], node=i, ok=True, seconds=0.0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert target.max_inside == 1  # calls into the target never overlap
    assert len(target.calls) == 4 * 25 * 2
    for kind in set(kinds):
        begins = [c for c in target.calls if c[:2] == ("begin", kind)]
        ends = [c for c in target.calls if c[:2] == ("end", kind)]
        assert len(begins) == len(ends) == 25 * kinds.count(kind)
    assert target.open == dict.fromkeys(set(kinds), 0)
    assert server.open_phases() == {}


# ------------------------------------------------------------------------------ other processes


def test_socket_hook_from_a_second_process(server: NotifyServer, target: FakeTarget) -> None:
    code = (
        "from greenckpt.ckpt.notify_client import hook_from_env\n"
        "hook = hook_from_env()\n"
        "a = hook.begin('restart', level=4, path='/pfs/run', size=2**30, node=0)\n"
        "hook.end('restart', node=0, ok=True, seconds=0.25)\n"
        "print(a.io_processes)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "2"
    assert target.calls == [("begin", "restart", "/pfs/run", GIB, 4), ("end", "restart", True)]


def test_cli_from_a_second_process(
    server: NotifyServer, target: FakeTarget, tmp_path: Path
) -> None:
    def notify(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "greenckpt", "notify", *args],
            env=_env(server),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    begin = notify("begin", "checkpoint", "--size", "1GiB")
    assert begin.returncode == 0, begin.stderr
    assert begin.stdout.startswith("checkpoint: 2 I/O processes; 1.40 GHz")
    assert begin.stdout.count("\n") == 1
    end = notify("end", "checkpoint", "--seconds", "3.5")
    assert end.returncode == 0, end.stderr
    assert end.stdout == "checkpoint: end acknowledged\n"
    assert target.calls == [
        ("begin", "checkpoint", str(tmp_path), GIB, None),
        ("end", "checkpoint", True),
    ]


def test_cli_json_and_ping(
    server: NotifyServer, target: FakeTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = ["--socket", server.socket_path]
    args = ["notify", "begin", "flush", "--level", "4", "--path", "/pfs", "--size", "4GiB"]
    assert main([*args, *sock, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["io_processes"] == 2
    assert doc["settings"]["io_processes"] == 2
    assert main(["notify", "end", "flush", "--failed", *sock]) == 0
    assert capsys.readouterr().out == "flush: end acknowledged (failed)\n"
    assert main(["notify", "ping", *sock]) == 0
    assert capsys.readouterr().out == f"greenckpt {__version__} at {server.socket_path}\n"
    assert target.calls == [("begin", "flush", "/pfs", 4 * GIB, 4), ("end", "flush", False)]


# ------------------------------------------------------------------------------ CLI errors


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    return captured.err


def test_cli_without_a_socket_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(SOCKET_ENV, raising=False)
    assert main(["notify", "ping"]) == 2
    err = _one_line_error(capsys)
    assert err.startswith("greenckpt notify: error: no runtime socket") and SOCKET_ENV in err


def test_cli_unreachable_runtime_exits_2(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(sock_dir / "missing.sock")
    monkeypatch.setenv(SOCKET_ENV, missing)
    assert main(["notify", "begin", "checkpoint", "--size", "1GiB"]) == 2
    assert missing in _one_line_error(capsys)


def test_cli_io_phase_without_size_exits_2(
    server: NotifyServer, target: FakeTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["notify", "begin", "restart", "--socket", server.socket_path]) == 2
    assert "needs --size" in _one_line_error(capsys)
    assert target.calls == []


def test_cli_refused_request_exits_2(
    server: NotifyServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["notify", "end", "restart", "--socket", server.socket_path]) == 2
    err = _one_line_error(capsys)
    assert server.socket_path in err and "no restart phase is open" in err


@pytest.mark.parametrize(
    "args",
    [
        ["begin", "nap"],
        ["begin", "checkpoint", "--size", "64"],
        ["begin", "checkpoint", "--level", "0"],
        ["end", "checkpoint", "--seconds", "-1"],
        ["shout"],
    ],
    ids=["unknown-kind", "size-without-unit", "level-zero", "negative-seconds", "bad-event"],
)
def test_cli_bad_arguments_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["notify", *args, "--socket", "/nonexistent.sock"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_subprocess_error_has_no_traceback(sock_dir: Path) -> None:
    env = dict(os.environ)
    env[SOCKET_ENV] = str(sock_dir / "gone.sock")
    proc = subprocess.run(
        [sys.executable, "-m", "greenckpt", "notify", "begin", "checkpoint", "--size", "1GiB"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "gone.sock" in proc.stderr


# ------------------------------------------------------------------------------ socket life


def test_server_closed_raises_notify_error_with_path(target: FakeTarget, sock_dir: Path) -> None:
    server = NotifyServer(target, sock_dir / "rt.sock").start()
    path = server.socket_path
    hook = SocketHook(path, timeout=5)
    assert hook.ping()
    server.close()
    assert not os.path.exists(path)
    with pytest.raises(NotifyError) as info:
        hook.begin("checkpoint", level=1, path="/p", size=1, node=0)
    assert path in str(info.value) and "\n" not in str(info.value)
    hook.close()


def test_hook_reconnects_to_a_restarted_runtime(target: FakeTarget, sock_dir: Path) -> None:
    path = sock_dir / "rt.sock"
    hook = SocketHook(str(path))
    with NotifyServer(target, path):
        hook.begin("checkpoint", level=1, path="/p", size=1, node=0)
    with NotifyServer(target, path):  # a new runtime on the same path
        assert hook.ping().startswith("greenckpt ")
    hook.close()


def test_socket_is_private(server: NotifyServer) -> None:
    mode = os.stat(server.socket_path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


def test_default_socket_lives_in_a_new_temp_dir(target: FakeTarget) -> None:
    with NotifyServer(target) as server:
        path = Path(server.socket_path)
        assert path.name == SOCKET_NAME
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert server.environ() == {SOCKET_ENV: str(path)}
    assert not path.parent.exists()


def test_stale_socket_is_replaced(target: FakeTarget, sock_dir: Path) -> None:
    path = sock_dir / "rt.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # a socket file nobody listens on any more
    dead.close()
    assert stat.S_ISSOCK(path.lstat().st_mode)
    with NotifyServer(target, path) as server, SocketHook(server.socket_path) as hook:
        assert hook.ping().startswith("greenckpt ")
    assert not path.exists()


def test_live_socket_is_refused(server: NotifyServer, sock_dir: Path) -> None:
    other = NotifyServer(FakeTarget(), server.socket_path)
    with pytest.raises(NotifyError) as info:
        other.start()
    text = str(info.value)
    assert server.socket_path in text and "another running greenckpt runtime" in text
    assert "\n" not in text
    with SocketHook(server.socket_path) as hook:  # the first server is untouched
        assert hook.ping().startswith("greenckpt ")


def test_a_file_that_is_no_socket_is_left_alone(target: FakeTarget, sock_dir: Path) -> None:
    path = sock_dir / "data"
    path.write_text("precious")
    with pytest.raises(NotifyError, match="is not a socket"):
        NotifyServer(target, path).start()
    assert path.read_text() == "precious"


def test_missing_directory_is_one_line(target: FakeTarget, sock_dir: Path) -> None:
    path = sock_dir / "no" / "such" / "rt.sock"
    with pytest.raises(NotifyError) as info:
        NotifyServer(target, path).start()
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_hook_from_env() -> None:
    assert hook_from_env({}) is None
    assert hook_from_env({SOCKET_ENV: "  "}) is None
    hook = hook_from_env({SOCKET_ENV: "/run/x.sock"})
    assert isinstance(hook, SocketHook) and hook.socket_path == "/run/x.sock"
