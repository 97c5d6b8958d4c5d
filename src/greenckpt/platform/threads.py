"""Starting greenckpt's helper threads so that they never take a process's signals.

Why: a signal sent to a process (``kill``, Slurm's SIGTERM, a terminal's SIGINT) is handed by
the kernel to any one of its threads that does not block it. CPython runs the Python handler
in the main thread only, and only when the main thread next runs bytecode; when the kernel
picks a helper thread, a main thread blocked in a system call (``waitpid`` on the command
that ``greenckpt run`` forwards signals to, a sleep, an MPI wait) is not woken, so the handler
waits until that call returns on its own — for a command that sleeps, never. Threads started
here block the asynchronous signals for their whole life (a new thread inherits the mask of
the thread that creates it), so the main thread is always the one woken. Faults raised by a
thread's own instructions (SIGSEGV, SIGBUS, SIGFPE, SIGILL) and SIGPIPE are never blocked.
The native front does the same for its own thread (``front.c``).

A process started from such a thread inherits its mask (exec keeps it): start long-lived
programs from other threads. docs/design/runtime.md ("Signals and threads") says which
threads are quiet and why.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

__all__ = ["ASYNC_SIGNALS", "quiet_thread", "start_quiet"]

#: Signals sent from outside that a helper thread must leave to the main thread.
ASYNC_SIGNALS: frozenset[signal.Signals] = frozenset(
    {
        signal.SIGHUP,
        signal.SIGINT,
        signal.SIGQUIT,
        signal.SIGTERM,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGALRM,
        signal.SIGCHLD,
        signal.SIGWINCH,
        signal.SIGXCPU,
        signal.SIGCONT,
        signal.SIGTSTP,
    }
)


def start_quiet(thread: threading.Thread) -> threading.Thread:
    """Start ``thread`` with :data:`ASYNC_SIGNALS` blocked in it (see the module docstring);
    the calling thread's mask is as before on return. A signal that arrives in the few
    microseconds the caller's mask is widened stays pending and is delivered on return."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return thread


def quiet_thread(target: Callable[[], object], name: str) -> threading.Thread:
    """A started daemon thread running ``target()`` that never takes async signals."""
    return start_quiet(threading.Thread(target=target, name=name, daemon=True))
