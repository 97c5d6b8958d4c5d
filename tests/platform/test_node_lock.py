"""One session per node, whatever its state file (issue 18, item 16).

Two sessions whose state files differ (another user, another ``XDG_RUNTIME_DIR``, another
``--state-file``) used to both change the node: the second saved the first's changes as its
"originals" and put them back after the first had restored, leaving the node changed with no
record. The node lock (:func:`greenckpt.platform.restore.node_lock_file`) refuses the second.
All trees are SYNTHETIC (tests/platform/fake_cpu.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import greenckpt.platform.nodelock as nodelock_mod
import greenckpt.platform.restore as restore_mod
from greenckpt.platform.restore import (
    NodeSettings,
    node_lock_file,
    pending_state,
    restore_from_state_file,
)
from greenckpt.platform.root import PlatformError, SysRoot
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, diff, snapshot
from tests.platform.test_restore import run_child

pytestmark = pytest.mark.usefixtures("refused_at_once")  # even under xdist (tests/conftest.py)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return build_tree("intel-acpi-cpufreq", tmp_path / "tree")


def test_lock_location_is_node_wide_and_per_fake_tree(tmp_path: Path) -> None:
    assert node_lock_file(SysRoot(Path("/"))) == Path("/run/greenckpt-node.lock")
    a, b = tmp_path / "a", tmp_path / "b"
    assert node_lock_file(SysRoot(a)) == tmp_path / ".a.greenckpt-node.lock"  # beside the tree
    assert node_lock_file(SysRoot(a)) != node_lock_file(SysRoot(b))


def test_a_second_session_with_another_state_file_is_refused(tree: Path, tmp_path: Path) -> None:
    child = run_child(tree, tmp_path / "user-a" / "node-state.json", 2.0e9)
    try:
        changed = snapshot(tree)
        other = tmp_path / "user-b" / "node-state.json"
        with pytest.raises(PlatformError) as err:
            NodeSettings(FakeSysfsRoot(tree), state_file=other).__enter__()
        msg = str(err.value)
        assert f"pid {child.pid}" in msg and "of user " in msg and "started " in msg
        assert "session" in msg and "\n" not in msg
        assert snapshot(tree) == changed and not other.exists()  # nothing changed, no record
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=10)
        child.communicate()


def test_a_restorer_does_not_undo_a_live_session_of_another_state_file(
    tree: Path, tmp_path: Path
) -> None:
    # A record left by a dead session in user B's directory, while user A's session runs.
    root = FakeSysfsRoot(tree)
    left = tmp_path / "user-b" / "node-state.json"
    with NodeSettings(root, state_file=left, signals=()) as node:
        node.set_frequency(1.4e9)
        record = left.read_text()
    left.parent.mkdir(parents=True, exist_ok=True)
    left.write_text(record)  # as if that session had been killed
    child = run_child(tree, tmp_path / "user-a" / "node-state.json", 2.0e9)
    try:
        changed = snapshot(tree)
        with pytest.raises(PlatformError, match=f"session pid {child.pid}"):
            restore_from_state_file(root, left, force=True)  # not even with force
        assert snapshot(tree) == changed and left.exists()
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=10)
        child.communicate()


def test_sessions_in_one_process_nest_and_release_at_the_end(tree: Path, tmp_path: Path) -> None:
    root = FakeSysfsRoot(tree)
    before = snapshot(tree)
    with NodeSettings(root, state_file=tmp_path / "a.json", signals=()) as a:
        a.set_frequency(2.0e9)
        with NodeSettings(root, state_file=tmp_path / "b.json", signals=()) as b:
            b.disable_cstates(deeper_than_s=5e-6)
        lock = node_lock_file(root)
        assert json.loads(lock.read_text())["state_file"] == str(tmp_path / "a.json")
    assert diff(before, snapshot(tree)) == []
    assert lock.read_text() == ""  # a clean end clears the record...
    child = run_child(tree, tmp_path / "c.json", 1.4e9)  # ...and another process may start
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=10)
    child.communicate()
    assert diff(before, snapshot(tree)) == []


def test_the_lock_of_a_killed_session_is_released_and_points_to_its_record(
    tree: Path, tmp_path: Path
) -> None:
    before = snapshot(tree)
    left = tmp_path / "user-a" / "node-state.json"
    child = run_child(tree, left, 2.0e9)
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.communicate()
    root = FakeSysfsRoot(tree)
    mine = tmp_path / "user-b" / "node-state.json"
    # The kernel released the lock, but the killed session's record must be restored first,
    # or this session would save the killed one's changes as the node's originals.
    with pytest.raises(PlatformError, match=f"state file {left}") as err:
        NodeSettings(root, state_file=mine).__enter__()
    assert f"pid {child.pid}" in str(err.value) and "greenckpt restore" in str(err.value)
    assert not mine.exists()
    pending = pending_state(root, left)
    assert pending is not None and not pending.alive
    assert restore_from_state_file(root, left).ok
    assert diff(before, snapshot(tree)) == []
    with NodeSettings(root, state_file=mine, signals=()) as node:  # now it may start
        node.set_frequency(1.4e9)
    assert diff(before, snapshot(tree)) == []


def test_a_user_who_cannot_change_the_node_needs_no_lock(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    monkeypatch.setattr(nodelock_mod, "node_lock_file", lambda root=None: blocked / "node.lock")
    monkeypatch.setattr(nodelock_mod, "_may_change_node", lambda root: False)
    root = FakeSysfsRoot(tree, deny_writes=True)
    with (
        NodeSettings(root, state_file=tmp_path / "s.json", signals=()) as node,
        pytest.raises(PlatformError, match="permission denied"),
    ):
        node.set_frequency(2.0e9)
    monkeypatch.setattr(nodelock_mod, "_may_change_node", lambda root: True)
    with pytest.raises(PlatformError, match=r"cannot create the node lock .* have root create"):
        NodeSettings(FakeSysfsRoot(tree), state_file=tmp_path / "s.json").__enter__()


def test_a_fifo_at_the_lock_is_refused_not_waited_on(tree: Path, tmp_path: Path) -> None:
    lock = node_lock_file(SysRoot(tree))
    os.mkfifo(lock)
    with pytest.raises(PlatformError, match="not a plain file"):
        NodeSettings(FakeSysfsRoot(tree), state_file=tmp_path / "s.json").__enter__()


def test_a_session_that_could_not_restore_leaves_its_record_for_the_next(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: the session's state file was kept (marked ended), but releasing the
    lock cleared the lock's record, so a session of another state file started at once and
    saved the unrestored governor as the node's original."""
    root = FakeSysfsRoot(tree)
    left = tmp_path / "user-a" / "node-state.json"
    session = NodeSettings(root, state_file=left, signals=())
    session.__enter__()
    session.set_governor("powersave")
    failed = restore_mod.RestoreReport((), ("write refused (simulated EBUSY)",), False, None)
    with monkeypatch.context() as m:
        m.setattr(restore_mod, "restore_saved", lambda *a, **k: failed)
        with pytest.raises(PlatformError):
            session.close()
    assert left.exists()
    mine = tmp_path / "user-b" / "node-state.json"
    with pytest.raises(PlatformError, match=f"state file {left}"):
        NodeSettings(root, state_file=mine, signals=()).__enter__()
    assert not mine.exists()
    assert restore_from_state_file(root, left).ok
    with NodeSettings(root, state_file=mine, signals=()) as node:  # now it may start
        node.set_governor("performance")


def test_a_record_this_user_cannot_see_counts_as_left(tmp_path: Path) -> None:
    """Another user's killed session left its state file in a private directory: this
    process cannot look there, so it must not take the node as clean."""
    private = tmp_path / "private"
    private.mkdir()
    doc = {"state_file": str(private / "node-state.json"), "pid": 1, "user": "a"}
    assert nodelock_mod._left_unrestored(doc, tmp_path / "mine.json") is None  # certainly gone
    (private / "node-state.json").write_text("{}")
    assert nodelock_mod._left_unrestored(doc, tmp_path / "mine.json") is not None
    real_lstat = os.lstat

    def denied(path: str | os.PathLike[str]) -> os.stat_result:
        if str(path).startswith(str(private)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_lstat(path)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(os, "lstat", denied)
        assert nodelock_mod._left_unrestored(doc, tmp_path / "mine.json") is not None


def test_a_second_session_told_to_wait_starts_when_the_first_ends(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GREENCKPT_NODE_LOCK_WAIT``: a session started while another holds the node waits for
    it (here the first ends 0.5 s later, restoring the node) instead of being refused."""
    before = snapshot(tree)
    child = run_child(tree, tmp_path / "user-a" / "node-state.json", 2.0e9)
    monkeypatch.setenv(nodelock_mod.SESSION_WAIT_ENV, "30s")
    ender = threading.Timer(0.5, child.send_signal, args=(signal.SIGTERM,))
    ender.start()
    try:
        start = time.monotonic()
        with NodeSettings(FakeSysfsRoot(tree), state_file=tmp_path / "b" / "state.json"):
            waited = time.monotonic() - start
            assert diff(before, snapshot(tree)) == []  # the first one restored before we began
    finally:
        ender.join()
        child.wait(timeout=10)
        child.communicate()
    assert waited >= 0.4


def test_a_session_that_waited_in_vain_says_how_long(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = run_child(tree, tmp_path / "user-a" / "node-state.json", 2.0e9)
    try:
        monkeypatch.setenv(nodelock_mod.SESSION_WAIT_ENV, "300ms")
        start = time.monotonic()
        with pytest.raises(PlatformError, match=r"after 0\.3 s \(GREENCKPT_NODE_LOCK_WAIT\)"):
            NodeSettings(FakeSysfsRoot(tree), state_file=tmp_path / "b" / "state.json").__enter__()
        assert time.monotonic() - start >= 0.3
        monkeypatch.setenv(nodelock_mod.SESSION_WAIT_ENV, "soon")
        with pytest.raises(PlatformError, match="GREENCKPT_NODE_LOCK_WAIT must be a duration"):
            NodeSettings(FakeSysfsRoot(tree), state_file=tmp_path / "b" / "state.json").__enter__()
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=10)
        child.communicate()


_SESSION_THEN_RESTORER = """
import sys, time
from pathlib import Path
import greenckpt.platform.nodelock as nl
from greenckpt.platform.root import SysRoot
lock = nl.acquire_node_lock(SysRoot(Path(sys.argv[1])), nl.SESSION, Path(sys.argv[2]))
print("ready", flush=True)
time.sleep(float(sys.argv[3]))
# still holding the lock, the holder becomes a restorer (as a session's own restore does)
nl._record_holder(nl._held_node_locks[lock].fd, "restoring the node's settings", Path(sys.argv[2]))
time.sleep(float(sys.argv[4]))
nl.release_node_lock(lock)
"""


def _session_then_restorer(
    tree: Path, state: Path, session_s: float, restore_s: float
) -> subprocess.Popen[str]:
    """A child holding the node lock as a session, then as a restorer; started and holding."""
    child = subprocess.Popen(
        [sys.executable, "-c", _SESSION_THEN_RESTORER, str(tree), str(state), str(session_s),
         str(restore_s)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def test_a_waiting_session_gives_a_restorer_its_own_time(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: a session waiting (``GREENCKPT_NODE_LOCK_WAIT``) longer than
    ``LOCK_WAIT_S`` for another session gave up at once when a restorer then held the lock,
    because the restorer's allowance counted from the start of the wait (and the message
    named the session's patience). Here the session holds 0.6 s, then restores for 0.3 s;
    a restorer is allowed 0.4 s from when it appears."""
    monkeypatch.setattr(nodelock_mod, "LOCK_WAIT_S", 0.4)
    monkeypatch.setenv(nodelock_mod.SESSION_WAIT_ENV, "20s")
    child = _session_then_restorer(tree, tmp_path / "a.json", 0.6, 0.3)
    try:
        start = time.monotonic()
        lock = nodelock_mod.acquire_node_lock(
            SysRoot(tree), nodelock_mod.SESSION, tmp_path / "b.json"
        )
        waited = time.monotonic() - start
        nodelock_mod.release_node_lock(lock)
    finally:
        child.wait(timeout=10)
        child.communicate()
    assert child.returncode == 0
    assert waited >= 0.8  # through the session's 0.6 s and into the restorer's 0.3 s


def test_a_restorer_that_stays_too_long_is_named_with_its_own_allowance(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodelock_mod, "LOCK_WAIT_S", 0.3)
    monkeypatch.setenv(nodelock_mod.SESSION_WAIT_ENV, "20s")
    child = _session_then_restorer(tree, tmp_path / "a.json", 0.2, 5)
    try:
        with pytest.raises(PlatformError, match=r"restoring the node's settings.*after 0\.3 s;"):
            nodelock_mod.acquire_node_lock(SysRoot(tree), nodelock_mod.SESSION, tmp_path / "b")
    finally:
        child.kill()
        child.wait(timeout=10)
        child.communicate()
