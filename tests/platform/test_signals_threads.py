"""Signals reach the main thread's handlers however the kernel routes them.

A process-directed signal may be handed to any thread that does not block it; CPython runs
the handler only when the main thread next runs bytecode. These tests route a signal to a
helper thread on purpose (``pthread_kill``) and check that the main thread's wait for a child
still wakes, and that greenckpt's own helper threads (Python and the native front's) block
the asynchronous signals so that they are never picked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from greenckpt.platform.threads import ASYNC_SIGNALS, quiet_thread
from greenckpt.platform.waitchild import wait_child
from greenckpt.runtime.notify import NotifyServer


def _blocked_in(tid: int) -> set[int]:
    """The signals thread ``tid`` of this process blocks (from /proc)."""
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    raise AssertionError(f"no SigBlk line for thread {tid}")


def _threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signal handlers can be installed from the main thread only",
)
def test_wait_child_wakes_when_a_helper_thread_takes_the_signal() -> None:
    """The handler (which ends the child) runs although the signal went to another thread;
    a plain ``proc.wait()`` would sit in waitpid for the child's 60 s."""
    proc = subprocess.Popen(["sleep", "60"])
    ran_in: list[str] = []

    def handler(signum: int, frame: object) -> None:
        ran_in.append(threading.current_thread().name)
        proc.terminate()

    previous = signal.signal(signal.SIGUSR1, handler)
    try:

        def send_to_myself() -> None:
            time.sleep(0.3)  # the main thread is in wait_child by then
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

        helper = threading.Thread(target=send_to_myself, name="helper")
        helper.start()
        started = time.monotonic()
        code = wait_child(proc)
        elapsed = time.monotonic() - started
        helper.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == -signal.SIGTERM
    assert ran_in == ["MainThread"]
    assert elapsed < 20.0, f"the wait woke only after {elapsed:.1f} s"


def test_wait_child_returns_the_status_of_a_child_that_ends_by_itself() -> None:
    proc = subprocess.Popen(["sh", "-c", "exit 7"])
    assert wait_child(proc) == 7
    assert proc.returncode == 7
    assert wait_child(proc) == 7  # already reaped: the status again


def test_a_quiet_thread_blocks_the_async_signals_and_leaves_the_caller_as_it_was() -> None:
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    seen: list[set[signal.Signals]] = []
    quiet_thread(lambda: seen.append(signal.pthread_sigmask(signal.SIG_BLOCK, [])), "q").join()
    assert seen and seen[0] >= ASYNC_SIGNALS
    assert signal.SIGSEGV not in seen[0]  # faults stay deliverable
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before


@pytest.mark.parametrize("front", ["native", "python"])
def test_the_notification_servers_threads_never_take_a_signal(front: str, tmp_path: Path) -> None:
    """Every thread a NotifyServer starts (the native front's own pthread included) blocks
    SIGTERM, SIGINT and SIGHUP."""

    class Target:
        def note(self, text: str) -> None:
            pass

    old = _threads()
    server = NotifyServer(Target(), tmp_path / "s.sock", front=front)  # type: ignore[arg-type]
    with server:
        new = _threads() - old
        assert server.front.startswith(front)
        assert len(new) == (2 if front == "native" else 1)  # front + drainer, or acceptor
        for tid in new:
            blocked = _blocked_in(tid)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                assert sig.value in blocked, f"thread {tid} takes {sig.name}"
