"""Waiting for a child process in a way that a signal always interrupts.

Why: ``greenckpt run`` and the job leader pass SIGTERM, SIGHUP and SIGINT on to the command
they wait for. CPython runs a Python signal handler only in the main thread, when that thread
next runs bytecode; ``Popen.wait()`` blocks it in ``waitpid``, which only a signal handed to
the main thread itself interrupts. The kernel may hand a process's signal to any thread that
does not block it (a meter's sampling thread, say) — then the handler would wait until the
command ends on its own, and the command is waiting for the signal: a hang. The helper
threads block those signals (:mod:`greenckpt.platform.threads`), but threads that start
programs cannot (their children would inherit the mask), so the wait is made robust too: the
main thread sleeps in ``poll`` on a pidfd of the child and on Python's signal wake-up fd, to
which the C-level handler writes whichever thread the kernel picked. No timer, no polling: the
thread wakes only when the child ends or a signal arrives.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
from typing import Any

__all__ = ["wait_child"]


def wait_child(proc: subprocess.Popen[Any]) -> int:
    """``proc.wait()``, woken by every signal this process receives (see the module
    docstring); signal handlers run during the wait, as with ``proc.wait()``. Falls back to
    ``proc.wait()`` outside the main thread, where Python has set a wake-up fd already, or
    where pidfds are not available (Linux < 5.3)."""
    if threading.current_thread() is not threading.main_thread():
        return proc.wait()
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd_open, or the child is already reaped
        return proc.wait()
    try:
        return _wait_pidfd(proc, pidfd)
    finally:
        os.close(pidfd)


def _wait_pidfd(proc: subprocess.Popen[Any], pidfd: int) -> int:
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        if previous != -1:  # someone else's (an event loop): leave it, wait the plain way
            signal.set_wakeup_fd(previous)
            return proc.wait()
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            poller.register(read_end, select.POLLIN)
            while True:
                code = proc.poll()
                if code is not None:
                    return code
                poller.poll()  # a handler that raises ends the wait, as in proc.wait()
                with contextlib.suppress(BlockingIOError):
                    while os.read(read_end, 512):
                        pass
        finally:
            signal.set_wakeup_fd(-1)
    finally:
        os.close(read_end)
        os.close(write_end)
