"""The native front never loses a line silently (issue 28 item 5).

When libgreenckpt_front cannot queue a line for the runtime (out of memory: forced here by its
test-only hook ``gcf_fail_alloc``), the client is answered at once with an error, not left to
wait out its timeout (120 s in libgreenckpt) for an answer that cannot come; the runtime is
told nothing of the refused line, sends no answer of it, and later lines are served as before.
A client with an earlier request still waiting sees its connection closed at once instead (an
answer now would overtake the one owed).
"""

from __future__ import annotations

import ctypes
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenckpt.ckpt.notify_client import (
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
    BeginRequest,
    EndRequest,
    encode,
    error_reply,
)
from greenckpt.errors import GreenckptError
from greenckpt.phases import WIRE_KINDS
from greenckpt.runtime import front as native
from tests.runtime.test_notify import RawClient

BEGIN = encode(BeginRequest("checkpoint", level=1, path="/ckpt", size=64, node=0, pid=7).to_wire())
END = encode(EndRequest("checkpoint", node=0, ok=True, seconds=0.5).to_wire())
ADVICE = encode({"v": PROTOCOL_VERSION, "ok": True, "io_processes": 2})
END_OK = encode({"v": PROTOCOL_VERSION, "ok": True})
ONE_CHECKPOINT = [1 if kind == "checkpoint" else 0 for kind in WIRE_KINDS]


@pytest.fixture
def front() -> Iterator[tuple[native.NativeFront, str]]:
    try:
        native._library()
    except (OSError, GreenckptError) as exc:
        pytest.skip(f"libgreenckpt_front cannot be built here: {exc}")
    folder = Path(tempfile.mkdtemp(prefix="gcf-", dir="/tmp"))  # Unix socket paths are short
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "f.sock"))
    listener.listen(16)
    served = native.NativeFront(
        listener.fileno(),
        kinds=WIRE_KINDS,
        end_reply=END_OK,
        long_reply=encode(error_reply("too long")),
        max_line=MAX_LINE_BYTES,
        fast=True,
    )
    try:
        yield served, str(folder / "f.sock")
    finally:
        served.free()
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


def fail_allocation(served: native.NativeFront, nth: int) -> None:
    lib = served._lib
    lib.gcf_fail_alloc.argtypes = (ctypes.c_void_p, ctypes.c_int)
    lib.gcf_fail_alloc.restype = None
    lib.gcf_fail_alloc(served._handle, nth)


def ask_refused(client: RawClient, line: bytes) -> None:
    started = time.monotonic()
    reply = client.ask(line)  # RawClient gives up after 10 s: a lost line fails here
    assert time.monotonic() - started < 5
    assert reply["ok"] is False and reply["v"] == PROTOCOL_VERSION
    assert "out of memory" in reply["error"] and "not passed to the runtime" in reply["error"]


def test_a_line_that_cannot_wait_for_the_runtime_is_refused_at_once(
    front: tuple[native.NativeFront, str],
) -> None:
    served, path = front
    client = RawClient(path)
    try:
        for failing in (1, 2):  # its wait record, or its queued event, cannot be allocated
            fail_allocation(served, failing)
            ask_refused(client, BEGIN)
            assert served.next(200) is None  # the runtime never hears of it
        client.sock.sendall(BEGIN)  # the next line waits for the runtime, as ever
        event = served.next(5000)
        assert isinstance(event, native.FrontEvent)
        assert (event.type, event.line) == (native.PENDING, BEGIN)
        assert served.reply(event.conn, ADVICE, True, ONE_CHECKPOINT)
        assert client.reader.readline() == ADVICE
        assert served.counts() == (0, 1, 1)  # answered here, waited, queued
    finally:
        client.close()


def test_an_answer_the_runtime_could_not_be_told_of_is_not_sent(
    front: tuple[native.NativeFront, str],
) -> None:
    served, path = front
    served.cache_put(BEGIN, ADVICE)
    client = RawClient(path)
    try:
        fail_allocation(served, 1)
        ask_refused(client, BEGIN)  # not the cached advice: no phase was opened
        assert served.next(200) is None
        assert client.ask(BEGIN)["io_processes"] == 2  # the cached answer, now queued
        fail_allocation(served, 1)
        ask_refused(client, END)  # the phase stays open: the end is refused, not lost
        assert client.ask(END) == {"v": PROTOCOL_VERSION, "ok": True}
        events = [served.next(1000) for _ in range(2)]
        assert [(e.type, e.line, e.sent) for e in events if isinstance(e, native.FrontEvent)] == [
            (native.ANSWERED, BEGIN, ADVICE),
            (native.ANSWERED, END, END_OK),
        ]
        assert served.next(200) is None
    finally:
        client.close()


def test_a_client_with_a_request_still_waiting_sees_its_connection_close(
    front: tuple[native.NativeFront, str],
) -> None:
    served, path = front
    client = RawClient(path)
    try:
        client.sock.sendall(BEGIN)
        first = served.next(5000)
        assert isinstance(first, native.FrontEvent) and first.type == native.PENDING
        fail_allocation(served, 1)
        client.sock.sendall(BEGIN)  # sent before the first is answered, and refused
        started = time.monotonic()
        assert client.reader.readline() == b""  # closed at once, not after a timeout
        assert time.monotonic() - started < 5
        closed = served.next(5000)
        assert isinstance(closed, native.FrontEvent)
        assert (closed.type, closed.conn) == (native.CLOSED_PENDING, first.conn)
        assert served.reply(first.conn, ADVICE, True, ONE_CHECKPOINT)  # still the oldest
        assert served.reply(first.conn, b"", False, [0] * len(WIRE_KINDS))
    finally:
        client.close()
