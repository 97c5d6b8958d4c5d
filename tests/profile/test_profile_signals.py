"""The profiler stopped from outside (issue 18, item 18): a batch system's SIGTERM to the job's
process group, and the profiler's main process killed alone. Nothing may be left behind: no
data files on the target, no worker holding them or the caller's pipes open.

The cell measured is made slow on purpose (zstd level 19 over compressible data), so the test
can catch its workers in the middle of a write.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from greenckpt.profile.measure import FILE_PREFIX

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

SLOW_CELL = ["--size", "256MiB", "--processes", "2", "--ops", "write", "--codecs", "zstd:19"]
SLOW_CELL += ["--data", "field", "--repeats", "1", "--warmup", "0", "--idle", "0", "--quiet"]
SLOW_CELL += ["--waiting-seconds", "0"]  # the signals must reach the cell, not the waiters


def _profile(target: Path, out: Path, **popen: object) -> subprocess.Popen[bytes]:
    main = "import sys; from greenckpt.cli.main import main; sys.exit(main())"
    command = [sys.executable, "-c", main, "profile", "run", str(target)]
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [*command, "-o", str(out), *SLOW_CELL], **popen
    )


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry.name))
    return found


def _workers(pid: int) -> list[int]:
    """The spawned I/O workers of ``pid`` (not its resource tracker)."""
    workers = []
    for child in _children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            workers.append(child)
    return workers


def _data_files(target: Path) -> list[Path]:
    return sorted(target.glob(f"{FILE_PREFIX}*"))


def _wait_for_writing_workers(proc: subprocess.Popen[bytes], target: Path) -> list[int]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the profiler ended before its workers were caught writing"
        workers = _workers(proc.pid)
        if len(workers) == 2 and _data_files(target):
            time.sleep(0.5)  # well inside a write that takes seconds
            return workers
        time.sleep(0.05)
    pytest.fail("the profiler's workers never started writing")


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _wait_gone(pids: list[int], seconds: float = 20.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if not _gone(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


def test_sigterm_to_the_process_group_removes_the_data_files(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    proc = _profile(target, tmp_path / "p.json", start_new_session=True)
    try:
        workers = _wait_for_writing_workers(proc, target)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert _wait_gone(workers) == []
    assert _data_files(target) == []


def test_workers_die_with_a_killed_profiler_and_release_its_pipes(tmp_path: Path) -> None:
    """SIGKILL of the main process alone: its workers end too, remove what they were writing,
    and the caller reading the profiler's output (``$(greenckpt profile ...)``) sees EOF."""
    target = tmp_path / "target"
    target.mkdir()
    proc = _profile(
        target,
        tmp_path / "p.json",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    workers: list[int] = []
    try:
        workers = _wait_for_writing_workers(proc, target)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)  # EOF once every holder of the pipes has gone
        assert _wait_gone(workers) == []
    finally:
        for pid in _workers(proc.pid) + workers:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    assert _data_files(target) == []
