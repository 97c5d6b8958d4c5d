"""One command under the runtime: its start, the signals passed on to it, how it ended.

Why a module of the runtime: running a command under the energy-aware runtime is one library
call (:func:`greenckpt.runtime.job_run.run`) that ``greenckpt run``, the demo, studies and a
user's own scripts share; what it takes to run the command itself lives here, below any front
end. :func:`run_with_runtime` starts a node's :class:`~greenckpt.runtime.session.Runtime`,
serves the notification socket and runs the command with ``GREENCKPT_RUNTIME_SOCKET`` set; the
node is restored and the socket removed whatever happens.

Why the signal forwarding: a batch system ends a job at its time limit with SIGTERM (then
SIGKILL after a grace period). Dying by it would leave the command running without its
runtime, the socket directory behind and no report; so SIGTERM and SIGHUP received here are
passed on to the command (:class:`Forwarder`), the command is waited for, and the node is
restored, the report written and the socket removed as after any other end. SIGINT is
forwarded the same way, except when this process runs in the foreground of a terminal: Ctrl-C
there reaches the command itself, and a second copy could interrupt the command's own clean-up.

Why the report directory is checked first (:func:`prepare_report_dir`): a job of hours must
not run to the end only to find that its report cannot be written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import IO, Any

from greenckpt.errors import InvalidValueError
from greenckpt.platform.waitchild import wait_child
from greenckpt.runtime.app_env import greenckpt_on_path
from greenckpt.runtime.intercept import intercept_environ, missing_library_note
from greenckpt.runtime.launch_slurm import cpu_freq_request
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.policy import Node
from greenckpt.runtime.run_report import BaselineRun, RunReport
from greenckpt.runtime.session import Runtime

__all__ = [
    "FORWARDED_SIGNALS",
    "Forwarder",
    "Output",
    "RunOutcome",
    "Say",
    "check_program",
    "exit_status",
    "intercept_env",
    "prepare_report_dir",
    "remove_created",
    "run_forwarded",
    "run_with_runtime",
    "say_on_stderr",
    "shared_line",
    "signal_note",
    "slurm_frequency",
]

FORWARDED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
"""Signals passed on to the command (see the module docstring)."""

Say = Callable[[str], None]
"""Where the one-line messages of a run go (who said it is the caller's prefix)."""

Output = int | IO[Any] | None
"""Where the command's standard output or error goes: a file descriptor, an open file, or
None (inherited)."""


def say_on_stderr(line: str) -> None:
    """The default :data:`Say`: ``greenckpt run: LINE`` on stderr, as ``greenckpt run`` prints."""
    print(f"greenckpt run: {line}", file=sys.stderr, flush=True)


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: 128 + N when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode


class Forwarder:
    """Passes the signals it catches on to the command (see the module docstring).

    Installed before the runtime starts, so a node-settings session (which restores the node
    on SIGTERM and then calls the handler it found) chains to it. ``received`` is the last
    signal caught; one caught before the command exists is sent when it is attached.
    """

    def __init__(self, signals: Sequence[int] = FORWARDED_SIGNALS) -> None:
        self._signals = tuple(signals)
        self._previous: dict[int, Any] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self.received: int | None = None
        self.forwarded = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # Python delivers signals to the main thread only
        for sig in self._signals:
            previous = signal.getsignal(sig)
            if previous == signal.SIG_IGN:  # meant to be ignored (nohup): keep it so
                continue
            self._previous[sig] = previous
            signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        previous, self._previous = self._previous, {}
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        if self.received is not None:
            self._send(self.received)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        if signum == signal.SIGINT and _terminal_foreground():
            return  # the terminal sent it to the command as well
        self._send(signum)

    def _send(self, signum: int) -> None:
        """Signal the command; ``forwarded`` only when a running command was signalled."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return  # not started, or already over: nothing was forwarded
        try:
            proc.send_signal(signum)
        except OSError:
            return
        self.forwarded = True


def _terminal_foreground() -> bool:
    """True when this process group is the foreground of its controlling terminal (a
    Ctrl-C there is sent to every process of the group, the command included)."""
    try:
        with open("/dev/tty", "rb", buffering=0) as tty:
            return os.tcgetpgrp(tty.fileno()) == os.getpgrp()
    except OSError:
        return False


@dataclass(frozen=True)
class RunOutcome:
    """How the command ended: its status as a shell reports it, the signal this process
    received (None: none), whether the command was started and whether the signal was
    forwarded to it (not when a terminal's Ctrl-C reached it directly)."""

    status: int
    signal: int | None = None
    started: bool = True
    forwarded: bool = False

    @property
    def signal_name(self) -> str | None:
        return None if self.signal is None else signal.Signals(self.signal).name


def run_with_runtime(
    command: list[str],
    runtime: Runtime,
    baselines: Sequence[BaselineRun] = (),
    *,
    stdout: Output = None,
    stderr: Output = None,
    forward: Sequence[int] = FORWARDED_SIGNALS,
    environ: Mapping[str, str] | None = None,
    say: Say = say_on_stderr,
) -> tuple[RunOutcome, RunReport]:
    """Run ``command`` with ``runtime`` serving the notification socket; how it ended and the
    run's report. The runtime is closed (the node restored) and the socket removed whatever
    happens; the signals in ``forward`` are passed on to the command while it runs (from the
    main thread only). ``stdout``/``stderr``: where the command's output goes (inherited when
    None); ``environ``: variables added to the command's environment."""
    forwarder = Forwarder(forward)
    forwarder.install()
    try:
        with runtime, NotifyServer(runtime) as server, greenckpt_on_path() as own:
            if runtime.shared_with is not None:
                say(shared_line(runtime.shared_with))
            env = {**os.environ, **own, **(environ or {}), **server.environ()}
            if forwarder.received is not None:  # stopped while the runtime started
                outcome = RunOutcome(128 + forwarder.received, forwarder.received, False)
            else:
                outcome = run_forwarded(command, env, stdout, forwarder, stderr)
        return outcome, runtime.report(baselines=baselines)
    finally:
        forwarder.uninstall()


def shared_line(holder: str) -> str:
    """The one line a run on a node another session controls prints."""
    return (
        f"shared node: another {holder} controls this node's settings; this run decides and "
        "accounts with control off"
    )


def run_forwarded(
    command: list[str],
    env: Mapping[str, str],
    stdout: Output,
    forwarder: Forwarder,
    stderr: Output = None,
) -> RunOutcome:
    """Start ``command``, pass it the signals ``forwarder`` catches, wait for it; how it
    ended (a command that cannot start: one line)."""
    try:
        proc = subprocess.Popen(command, env=dict(env), stdout=stdout, stderr=stderr)
    except OSError as exc:
        raise InvalidValueError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    forwarder.attach(proc)
    try:
        code = wait_child(proc)  # woken by a signal whichever thread the kernel gives it to
    except KeyboardInterrupt:  # a SIGINT that no handler here caught
        proc.send_signal(signal.SIGINT)
        code = proc.wait()
    return RunOutcome(exit_status(code), forwarder.received, forwarded=forwarder.forwarded)


def prepare_report_dir(directory: Path) -> list[Path]:
    """Make sure the report can be written before the command starts: create ``directory``
    (returning the folders created, for :func:`remove_created`) and write and remove a probe
    file in it. ``ValueError`` (one line) when it cannot be written."""
    if directory.exists() and not directory.is_dir():
        raise InvalidValueError(
            f"--output {directory} exists and is not a directory; give a directory"
        )
    created = [p for p in (directory, *directory.parents) if not p.exists()]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".greenckpt-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        remove_created(created)
        raise InvalidValueError(
            f"--output {directory}: cannot write the report there ({exc.strerror or exc}); "
            "give a directory you can write to"
        ) from None
    return created


def remove_created(created: Sequence[Path]) -> None:
    """Remove the folders :func:`prepare_report_dir` created (deepest first; only what is
    still empty)."""
    for path in created:
        with contextlib.suppress(OSError):
            path.rmdir()


def check_program(command: Sequence[str]) -> None:
    """Refuse a program that does not exist before anything starts (nothing changed)."""
    if shutil.which(command[0]) is None:
        what = "no such file or not executable" if os.sep in command[0] else "not found on PATH"
        raise InvalidValueError(f"cannot run {command[0]!r}: {what}")


def intercept_env(family: str | None, command: Sequence[str], say: Say) -> dict[str, str]:
    """``--intercept``: the environment that preloads the interposition library, after one
    line when no program in the command links the library (the run goes on)."""
    if family is None:
        return {}
    environ = intercept_environ(family, os.environ)
    note = missing_library_note(family, command)
    if note is not None:
        say(note)
    return environ


def slurm_frequency(node: Node, command: Sequence[str], say: Say) -> tuple[Node, str | None]:
    """Slurm was asked to set the CPU frequency (``srun --cpu-freq``, ``$SLURM_CPU_FREQ_REQ``):
    Slurm's setting wins, as with ``--launcher slurm``; the runtime leaves the frequency alone
    (one line now, a note in the report)."""
    asked = cpu_freq_request(os.environ, command)
    if asked is None:
        return node, None
    text = (
        f"Slurm was asked to set the CPU frequency (--cpu-freq={asked}): Slurm's setting wins; "
        "the runtime leaves the frequency alone and decides and accounts without frequency "
        "control (C-states stay greenckpt's)"
    )
    say(text)
    return replace(node, frequency_control=False), text


def signal_note(outcome: RunOutcome) -> str:
    """What a run a signal ended says (a line, and a note in its report)."""
    if not outcome.started:
        return f"{outcome.signal_name} received before the command started: it was not run"
    how = (
        "received and forwarded to the command, which ended"
        if outcome.forwarded
        else "received (the terminal sent it to the command as well); the command ended"
    )
    return (
        f"{outcome.signal_name} {how} with status {outcome.status}; the node was restored "
        "and the report covers what ran"
    )
