"""Start a Python child that says "ready" before the test acts on it (tests of crashes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


_HANGUP_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def python_with_hangup(*args: str) -> list[str]:
    """``python args...`` started with SIGHUP's default disposition, for children a test sends
    SIGHUP. Why: under ``nohup`` the suite itself ignores SIGHUP and every child inherits that,
    and the code keeps an ignored SIGHUP ignored (as nohup means), so a hangup test would hang.
    A small interpreter resets it and execs the real one (same pid; no ``preexec_fn``, which is
    unsafe in a process with threads)."""
    return [sys.executable, "-c", _HANGUP_DEFAULT, *args]


def spawn_ready(code: str, *args: str) -> subprocess.Popen[str]:
    """Run ``python -c code args...`` from the repository root (without a fake-sysfs override
    in its environment) and wait for its first line to be ``ready``; fail the test otherwise."""
    env = {k: v for k, v in os.environ.items() if k != "GREENCKPT_SYSROOT"}
    child = subprocess.Popen(
        python_with_hangup("-c", code, *args),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        _, err = child.communicate(timeout=10)
        pytest.fail(f"child did not get ready: {line!r} {err}")
    return child
