"""Node settings are always restored: on return, exception, signal, and — from the state file —
after SIGKILL. Every check compares a byte-for-byte snapshot of the SYNTHETIC tree."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import greenckpt.platform.nodelock as nodelock_mod
import greenckpt.platform.recovery as recovery_mod
import greenckpt.platform.restore as restore_mod
import greenckpt.platform.statefile as statefile_mod
from greenckpt.platform.restore import (
    NodeSettings,
    default_state_file,
    pending_state,
    restore_from_state_file,
)
from greenckpt.platform.root import PlatformError, SysRoot
from tests.conftest import ROOT
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, diff, snapshot
from tests.ready_child import spawn_ready

CPU = "sys/devices/system/cpu"
P0 = f"{CPU}/cpufreq/policy0"
P2 = f"{CPU}/cpufreq/policy2"


@pytest.fixture
def acpi(tmp_path: Path) -> FakeSysfsRoot:
    return FakeSysfsRoot(build_tree("intel-acpi-cpufreq", tmp_path / "tree"))


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "run" / "node-state.json"


@pytest.fixture(autouse=True)
def _handlers_untouched() -> Iterator[None]:
    """Every test leaves the process's signal handlers as it found them."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    after = {s: signal.getsignal(s) for s in before}
    assert after == before


def change_everything(node: NodeSettings) -> None:
    node.set_frequency(1.4e9)  # governor -> userspace, setspeed
    node.set_frequency(2.2e9, cpus=[2], method="clamp")  # limits on policy2
    node.disable_cstates(deeper_than_s=5e-6)  # C1E, C6 on every CPU


# --------------------------------------------------------------------------------------------
# Location
# --------------------------------------------------------------------------------------------


def test_default_state_file_locations() -> None:
    real = SysRoot(Path("/"))
    assert default_state_file(real, environ={}, euid=0) == Path("/run/greenckpt/node-state.json")
    assert default_state_file(real, environ={"XDG_RUNTIME_DIR": "/run/user/1000"}, euid=1000) == (
        Path("/run/user/1000/greenckpt/node-state.json")
    )
    host = socket.gethostname()
    cached = default_state_file(real, environ={"HOME": "/home/u"}, euid=1000)
    assert cached.parent == Path("/home/u/.cache/greenckpt")
    assert host.split(".")[0] in cached.name  # home directories are shared between nodes
    xdg = default_state_file(real, environ={"XDG_CACHE_HOME": "/c", "HOME": "/h"}, euid=1000)
    assert xdg.parent == Path("/c/greenckpt")
    fake = default_state_file(SysRoot(Path("/tmp/fake")), environ={}, euid=0)
    assert fake.parent == Path("/run/greenckpt") and fake.name != "node-state.json"


# --------------------------------------------------------------------------------------------
# In-process sessions
# --------------------------------------------------------------------------------------------


def test_restores_on_return_byte_for_byte(acpi: FakeSysfsRoot, state: Path) -> None:
    before = snapshot(acpi.path)
    with NodeSettings(acpi, state_file=state) as node:
        assert not state.exists()  # nothing changed yet: no record needed
        change_everything(node)
        assert state.exists()
        assert snapshot(acpi.path) != before
        doc = json.loads(state.read_text())
        assert doc["cpufreq"]["policy0"]["scaling_governor"] == "schedutil"
        assert doc["cpufreq"]["policy2"]["scaling_max_freq"] == "2601000"
        assert doc["cpuidle"][f"{CPU}/cpu3/cpuidle/state3/disable"] == "0"
        assert doc["pid"] == os.getpid()
    assert diff(before, snapshot(acpi.path)) == []
    assert not state.exists()


def test_state_file_is_written_before_the_first_change(tmp_path: Path, state: Path) -> None:
    seen: list[dict[str, Any]] = []

    def check(rel: str, value: str) -> None:
        assert state.exists(), f"write to {rel} before the state file"
        seen.append(json.loads(state.read_text()))

    root = FakeSysfsRoot(build_tree("intel-acpi-cpufreq", tmp_path / "t"), before_write=check)
    with NodeSettings(root, state_file=state) as node:
        node.set_frequency(2e9, cpus=[0])
        assert set(seen[0]["cpufreq"]) == {"policy0"}  # only what is about to change
        node.disable_cstates(names=["C6"])
        assert len(seen[-1]["cpuidle"]) == 4  # the file grew before the C-state writes
        assert not list(state.parent.glob(".*.tmp"))  # no temporary file left behind
        seen.clear()
    assert seen  # the restore wrote too (after which the file is removed)


def test_restores_on_exception(acpi: FakeSysfsRoot, state: Path) -> None:
    before = snapshot(acpi.path)
    with pytest.raises(ZeroDivisionError), NodeSettings(acpi, state_file=state) as node:
        change_everything(node)
        _ = 1 / 0
    assert diff(before, snapshot(acpi.path)) == []
    assert not state.exists()


def test_restore_order_is_safe(tmp_path: Path, state: Path) -> None:
    """Governor first, then limits in the order the current values require, setspeed last."""
    spec_root = build_tree("intel-acpi-cpufreq", tmp_path / "t")
    root = FakeSysfsRoot(spec_root)
    # Original: userspace at 1.8 GHz within [1.6, 2.0] GHz on policy0.
    root.write(f"{P0}/scaling_governor", "userspace")
    root.write(f"{P0}/scaling_max_freq", "2000000")
    root.write(f"{P0}/scaling_min_freq", "1600000")
    root.write(f"{P0}/scaling_setspeed", "1800000")
    before = snapshot(spec_root)
    with NodeSettings(root, state_file=state) as node:
        node.set_governor("performance", cpus=[0])
        node.set_frequency(2.6e9, cpus=[0], method="clamp")  # limits raised above the original
        root.log.clear()
    assert root.log == [
        (f"{P0}/scaling_governor", "userspace"),
        (f"{P0}/scaling_min_freq", "1600000"),  # lowering: min first
        (f"{P0}/scaling_max_freq", "2000000"),
        (f"{P0}/scaling_setspeed", "1800000"),
    ]
    assert diff(before, snapshot(spec_root)) == []
    root.log.clear()
    with NodeSettings(root, state_file=state) as node:
        node.set_frequency(1.2e9, cpus=[0], method="clamp")  # limits lowered below the original
        root.log.clear()
    assert root.log[:2] == [
        (f"{P0}/scaling_max_freq", "2000000"),  # raising: max first
        (f"{P0}/scaling_min_freq", "1600000"),
    ]
    assert diff(before, snapshot(spec_root)) == []


def test_hwp_epp_restored(tmp_path: Path, state: Path) -> None:
    root = FakeSysfsRoot(build_tree("intel-pstate-hwp", tmp_path / "t"))
    before = snapshot(root.path)
    with NodeSettings(root, state_file=state) as node:
        node.set_frequency(3e9)
        node.set_governor("performance")
        # Switching the governor can change EPP (intel_pstate forces 0 under performance).
        for cpu in range(4):
            p = root.path / f"{CPU}/cpufreq/policy{cpu}/energy_performance_preference"
            p.write_text("performance\n")
    assert diff(before, snapshot(root.path)) == []


def test_mid_session_restore_then_new_changes(acpi: FakeSysfsRoot, state: Path) -> None:
    before = snapshot(acpi.path)
    with NodeSettings(acpi, state_file=state) as node:
        node.set_frequency(1.2e9)
        report = node.restore()
        assert report.ok and report.written
        assert not state.exists() and diff(before, snapshot(acpi.path)) == []
        node.disable_cstates(names=["C6"])  # a later phase: saved again before writing
        assert json.loads(state.read_text())["cpufreq"] == {}
    assert diff(before, snapshot(acpi.path)) == []


def test_dma_latency_released_on_exit(acpi: FakeSysfsRoot, state: Path) -> None:
    with NodeSettings(acpi, state_file=state) as node:
        node.hold_dma_latency(0.0)
        dma = node._dma
        assert dma is not None and dma.active
        node.hold_dma_latency(50e-6)  # replaces the first
        assert not dma.active
        second = node._dma
    assert second is not None and not second.active
    assert not state.exists()  # nothing saved for it: closing is the restore


def test_refuses_to_start_over_an_existing_state_file(acpi: FakeSysfsRoot, state: Path) -> None:
    node = NodeSettings(acpi, state_file=state, signals=())
    node.__enter__()
    node.set_frequency(2e9)  # ... and the process "crashes" here, never exiting the session
    record = state.read_bytes()
    with pytest.raises(PlatformError) as err:
        NodeSettings(acpi, state_file=state).__enter__()
    msg = str(err.value)
    assert "never restored" in msg and str(state) in msg and "restore_from_state_file" in msg
    assert "\n" not in msg
    assert state.read_bytes() == record  # the only record of the originals is untouched


def test_two_sessions_race_to_the_first_change(acpi: FakeSysfsRoot, state: Path) -> None:
    before = snapshot(acpi.path)
    with (
        NodeSettings(acpi, state_file=state, signals=()) as a,
        NodeSettings(acpi, state_file=state, signals=()) as b,
    ):
        a.set_frequency(2e9)
        changed = snapshot(acpi.path)
        with pytest.raises(PlatformError, match="another greenckpt session"):
            b.set_frequency(1.2e9)
        assert snapshot(acpi.path) == changed  # b wrote nothing
        a.close()
    assert diff(before, snapshot(acpi.path)) == []


def test_invalid_request_in_session_changes_nothing(acpi: FakeSysfsRoot, state: Path) -> None:
    before = snapshot(acpi.path)
    with NodeSettings(acpi, state_file=state) as node:
        with pytest.raises(PlatformError, match=r"nearest 2\.00 GHz, 2\.10 GHz"):
            node.set_frequency(2.05e9)
        with pytest.raises(PlatformError, match="no C-state named"):
            node.disable_cstates(names=["C9"])
        assert not state.exists()
        assert snapshot(acpi.path) == before


def test_use_outside_with_is_refused(acpi: FakeSysfsRoot, state: Path) -> None:
    with pytest.raises(PlatformError, match="context manager"):
        NodeSettings(acpi, state_file=state).set_frequency(2e9)


def test_restore_failure_keeps_the_state_file(tmp_path: Path, state: Path) -> None:
    deny = {"on": False}

    def gate(rel: str, value: str) -> None:
        if deny["on"]:
            raise PermissionError(13, "Permission denied", rel)

    root = FakeSysfsRoot(build_tree("intel-acpi-cpufreq", tmp_path / "t"), before_write=gate)
    before = snapshot(root.path)
    with pytest.raises(PlatformError) as err, NodeSettings(root, state_file=state) as node:
        node.set_frequency(2e9)
        node.disable_cstates(names=["C6"])
        deny["on"] = True
    assert "could not restore every node setting" in str(err.value)
    assert "root (or write access" in str(err.value)
    assert state.exists()
    deny["on"] = False
    report = restore_from_state_file(root, state)  # the next start puts everything back
    assert report.ok and not state.exists()
    assert diff(before, snapshot(root.path)) == []


def test_a_refused_write_does_not_stop_the_rest_of_its_policy(tmp_path: Path, state: Path) -> None:
    """The governor of policy0 cannot be put back: its limits still are, in the safe order."""
    deny = {"on": False}

    def gate(rel: str, value: str) -> None:
        if deny["on"] and rel == f"{P0}/scaling_governor":
            raise OSError(errno.EIO, "Input/output error", rel)

    root = FakeSysfsRoot(build_tree("intel-acpi-cpufreq", tmp_path / "t"), before_write=gate)
    before = snapshot(root.path)
    with pytest.raises(PlatformError) as err, NodeSettings(root, state_file=state) as node:
        node.set_governor("performance", cpus=[0])
        node.set_frequency(2e9, cpus=[0], method="clamp")
        deny["on"] = True
        root.log.clear()
    assert root.log == [
        (f"{P0}/scaling_min_freq", "1200000"),  # lowering the minimum first
        (f"{P0}/scaling_max_freq", "2601000"),
    ]
    assert str(err.value).count("Input/output error") == 1 and state.exists()
    assert diff(before, snapshot(root.path)) == [
        f"{P0}/scaling_cur_freq: b'1200000\\n' -> b'2601000\\n'",
        f"{P0}/scaling_governor: b'schedutil\\n' -> b'performance\\n'",
    ]
    deny["on"] = False
    assert restore_from_state_file(root, state).ok
    assert diff(before, snapshot(root.path)) == [] and not state.exists()


RESTORE_CHILD = """
import sys
from pathlib import Path
from greenckpt.platform.restore import restore_from_state_file
from tests.platform.fake_cpu import FakeSysfsRoot

report = restore_from_state_file(FakeSysfsRoot(Path(sys.argv[1])), sys.argv[2])
print(len(report.written), flush=True)
"""


def restore_in_child(tree: Path, state: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "GREENCKPT_SYSROOT"}
    return subprocess.Popen(
        [sys.executable, "-c", RESTORE_CHILD, str(tree), str(state)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_failed_close_leaves_a_file_restore_takes_without_force(
    tmp_path: Path, state: Path
) -> None:
    """After a failed close the process lives on outside any session: its file must not pass
    for a live session's, or `greenckpt restore` would say "wait for it to end" forever."""
    deny = {"on": False}

    def gate(rel: str, value: str) -> None:
        if deny["on"]:
            raise PermissionError(errno.EACCES, "Permission denied", rel)

    tree = build_tree("intel-acpi-cpufreq", tmp_path / "t")
    root = FakeSysfsRoot(tree, before_write=gate)
    before = snapshot(tree)
    with pytest.raises(PlatformError) as err, NodeSettings(root, state_file=state) as node:
        node.set_frequency(2e9)
        deny["on"] = True
    assert "`greenckpt restore`" in str(err.value) and "--force" not in str(err.value)
    pending = pending_state(root, state)
    assert pending is not None and pending.pid == os.getpid()
    assert pending.ended and not pending.alive  # this process runs, but no session does
    assert "could not all be restored when it ended" in pending.describe()
    deny["on"] = False
    child = restore_in_child(tree, state)  # another process: no force needed
    out, errs = child.communicate(timeout=30)
    assert child.returncode == 0, errs
    assert int(out) > 0
    assert diff(before, snapshot(tree)) == [] and not state.exists()


def test_failed_close_that_cannot_mark_the_file_says_force(
    acpi: FakeSysfsRoot, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = statefile_mod.write_state_file

    def no_rewrite(path: Path, doc: Any, *, exclusive: bool) -> None:
        if doc.get("ended"):
            raise PlatformError("disk full")
        original(path, doc, exclusive=exclusive)

    monkeypatch.setattr(restore_mod, "write_state_file", no_rewrite)
    monkeypatch.setattr(
        restore_mod, "restore_saved", lambda *a: restore_mod.RestoreReport((), ("refused",))
    )
    with pytest.raises(PlatformError) as err, NodeSettings(acpi, state_file=state) as node:
        node.set_frequency(2e9)
    assert "retry with `greenckpt restore --force` (force=True from Python)" in str(err.value)


# --------------------------------------------------------------------------------------------
# Crash recovery from the state file
# --------------------------------------------------------------------------------------------


def test_restore_from_state_file_in_process(acpi: FakeSysfsRoot, state: Path) -> None:
    before = snapshot(acpi.path)
    assert pending_state(acpi, state) is None
    assert restore_from_state_file(acpi, state).written == ()  # nothing to do
    node = NodeSettings(acpi, state_file=state, signals=())
    node.__enter__()
    change_everything(node)  # then "crash"
    pending = pending_state(acpi, state)
    assert pending is not None
    assert pending.pid == os.getpid() and pending.same_boot
    assert pending.policies == ("policy0", "policy2") and pending.cstates == 8
    report = restore_from_state_file(acpi, state)
    assert report.ok and report.written and not report.stale
    assert diff(before, snapshot(acpi.path)) == []
    assert not state.exists() and pending_state(acpi, state) is None


def _crash_doc(acpi: FakeSysfsRoot, state: Path) -> dict[str, Any]:
    node = NodeSettings(acpi, state_file=state, signals=())
    node.__enter__()
    node.set_frequency(2e9)
    doc: dict[str, Any] = json.loads(state.read_text())
    return doc


def test_stale_state_from_an_earlier_boot_is_discarded(acpi: FakeSysfsRoot, state: Path) -> None:
    _crash_doc(acpi, state)
    changed = snapshot(acpi.path)
    boot = acpi.path / "proc/sys/kernel/random/boot_id"
    boot.write_text("11111111-2222-4333-8444-555555555555\n")  # the node rebooted
    pending = pending_state(acpi, state)
    assert pending is not None and not pending.same_boot and not pending.alive
    assert "predates the last reboot" in pending.describe()
    report = restore_from_state_file(acpi, state)
    assert report.stale and report.written == () and not state.exists()
    after = snapshot(acpi.path)
    del changed["proc/sys/kernel/random/boot_id"], after["proc/sys/kernel/random/boot_id"]
    assert after == changed  # nothing written


def test_live_session_is_not_restored_under_its_feet(acpi: FakeSysfsRoot, state: Path) -> None:
    doc = _crash_doc(acpi, state)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        doc["pid"], doc["process_start"] = sleeper.pid, None
        state.write_text(json.dumps(doc))
        pending = pending_state(acpi, state)
        assert pending is not None and pending.alive
        with pytest.raises(PlatformError, match="another greenckpt session pid") as err:
            restore_from_state_file(acpi, state)
        assert str(err.value).endswith("use `greenckpt restore --force` (force=True from Python)")
        with pytest.raises(PlatformError, match="wait for it to end"):
            NodeSettings(acpi, state_file=state).__enter__()
        assert restore_from_state_file(acpi, state, force=True).ok
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.update(format="other"), "not a valid greenckpt node state"),
        (lambda d: d["cpuidle"].update({"etc/passwd": "1"}), "bad cpuidle entry"),
        (lambda d: d["cpufreq"].update({"../x": {}}), "bad cpufreq entry"),
        (lambda d: d["cpufreq"]["policy0"].update(scaling_governor="a b"), "bad scaling_gov"),
        (lambda d: d["cpufreq"]["policy0"].update(scaling_min_freq="9999999"), "bad limits"),
        (lambda d: d.update(root="/elsewhere"), "records root /elsewhere"),
        (lambda d: d.update(host="other-node"), "written on host other-node"),
    ],
)
def test_bad_state_files_are_refused(
    acpi: FakeSysfsRoot, state: Path, mutate: Any, match: str
) -> None:
    doc = _crash_doc(acpi, state)
    mutate(doc)
    state.write_text(json.dumps(doc))
    changed = snapshot(acpi.path)
    with pytest.raises(PlatformError, match=match):
        restore_from_state_file(acpi, state)
    assert snapshot(acpi.path) == changed and state.exists()


def test_corrupt_json_is_refused(acpi: FakeSysfsRoot, state: Path) -> None:
    state.parent.mkdir(parents=True)
    state.write_text('{"format": ')
    with pytest.raises(PlatformError, match="not valid JSON"):
        pending_state(acpi, state)
    with pytest.raises(PlatformError, match="not valid JSON"):
        NodeSettings(acpi, state_file=state).__enter__()


def test_concurrent_restorers_never_undo_a_new_session(
    acpi: FakeSysfsRoot, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rank of an MPI job restores at start. Restorer B has read the record and is slow
    to write it back; meanwhile restorer A and then a new session N try. Without the lock A
    restores and removes the file, N changes the node and publishes its own record, then B
    undoes N's change from its outdated record and deletes N's file."""
    before = snapshot(acpi.path)
    _crash_doc(acpi, state)
    monkeypatch.setattr(nodelock_mod, "LOCK_WAIT_S", 0.2)
    original = recovery_mod.restore_saved
    seen: list[str] = []

    def b_is_slow(root: SysRoot, cpufreq: Any, cpuidle: Any) -> restore_mod.RestoreReport:
        if not seen:  # B, after reading the record; A and N act before it writes
            seen.append("B paused")
            try:
                seen.append(f"A wrote {len(restore_from_state_file(acpi, state).written)}")
            except PlatformError as exc:
                seen.append(f"A: {exc}")
            try:
                n = NodeSettings(acpi, state_file=state, signals=())
                n.__enter__()
                n.set_frequency(1.2e9)
                seen.append("N changed the node")
            except PlatformError as exc:
                seen.append(f"N: {exc}")
        return original(root, cpufreq, cpuidle)

    monkeypatch.setattr(recovery_mod, "restore_saved", b_is_slow)
    report = restore_from_state_file(acpi, state)  # B
    holder = f"another greenckpt process (pid {os.getpid()}, restoring the node's settings)"
    assert seen[0] == "B paused"
    assert seen[1].startswith(f"A: {holder} has held the lock of the state file {state}")
    assert seen[2].startswith(f"N: {holder}")
    assert report.ok and report.written
    assert diff(before, snapshot(acpi.path)) == [] and not state.exists()
    # Once B is done, A finds nothing left and a new session starts normally.
    assert restore_from_state_file(acpi, state).written == ()
    with NodeSettings(acpi, state_file=state) as node:
        node.set_frequency(1.2e9)
        assert state.exists()
    assert diff(before, snapshot(acpi.path)) == []


def test_restorers_in_many_processes_restore_once(tmp_path: Path) -> None:
    """The same from real processes started together after a kill -9: one restores, the others
    find nothing, every one succeeds, and the node and the file end as they should."""
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    state = tmp_path / "run" / "node-state.json"
    before = snapshot(tree)
    child = run_child(tree, state, 1.4e9)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    child.communicate()
    ranks = [restore_in_child(tree, state) for _ in range(4)]
    results = [r.communicate(timeout=60) for r in ranks]
    assert [r.returncode for r in ranks] == [0] * 4, results
    written = sorted(int(out) for out, _ in results)
    assert written[:3] == [0, 0, 0] and written[3] > 0
    assert diff(before, snapshot(tree)) == [] and not state.exists()


# --------------------------------------------------------------------------------------------
# Signals
# --------------------------------------------------------------------------------------------


class StopError(Exception):
    pass


def test_sigterm_in_process_runs_previous_handler_after_restoring(
    acpi: FakeSysfsRoot, state: Path
) -> None:
    before = snapshot(acpi.path)
    calls: list[tuple[int, list[str]]] = []

    def previous(signum: int, frame: FrameType | None) -> None:
        calls.append((signum, diff(before, snapshot(acpi.path))))
        raise StopError

    old = signal.signal(signal.SIGTERM, previous)
    try:
        with pytest.raises(StopError), NodeSettings(acpi, state_file=state) as node:
            change_everything(node)
            assert signal.getsignal(signal.SIGTERM) == node._on_signal
            signal.raise_signal(signal.SIGTERM)
        assert calls == [(signal.SIGTERM, [])]  # already restored when the old handler ran
        assert signal.getsignal(signal.SIGTERM) is previous  # and it was put back first
        assert not state.exists()
    finally:
        signal.signal(signal.SIGTERM, old)


def test_session_closed_after_signal_refuses_changes(acpi: FakeSysfsRoot, state: Path) -> None:
    old = signal.signal(signal.SIGTERM, lambda s, f: None)  # a handler that returns
    before = snapshot(acpi.path)
    try:
        with NodeSettings(acpi, state_file=state) as node:
            node.set_frequency(2e9)
            signal.raise_signal(signal.SIGTERM)
            with pytest.raises(PlatformError, match="restored \\(after SIGTERM\\)"):
                node.set_frequency(1.2e9)
        assert diff(before, snapshot(acpi.path)) == []
    finally:
        signal.signal(signal.SIGTERM, old)


def test_signal_during_restore_is_delivered_afterwards(tmp_path: Path, state: Path) -> None:
    got: list[int] = []
    fire = {"armed": False}

    def during_restore(rel: str, value: str) -> None:
        if fire["armed"]:
            fire["armed"] = False
            signal.raise_signal(signal.SIGTERM)

    def previous(signum: int, frame: FrameType | None) -> None:
        got.append(signum)

    root = FakeSysfsRoot(
        build_tree("intel-acpi-cpufreq", tmp_path / "t"), before_write=during_restore
    )
    before = snapshot(root.path)
    old = signal.signal(signal.SIGTERM, previous)
    try:
        with NodeSettings(root, state_file=state) as node:
            change_everything(node)
            fire["armed"] = True  # the first restore write raises SIGTERM
        assert diff(before, snapshot(root.path)) == []  # the restore was not cut short
        assert got == [signal.SIGTERM]  # ... and the signal was not lost
    finally:
        signal.signal(signal.SIGTERM, old)


@pytest.mark.parametrize(
    ("target", "change"),
    [
        (f"{P0}/scaling_governor", lambda n: n.set_frequency(1.5e9)),
        (f"{P0}/scaling_setspeed", lambda n: n.set_frequency(1.5e9)),
        (f"{CPU}/cpu0/cpuidle/state3/disable", lambda n: n.disable_cstates(names=["C6"])),
    ],
)
def test_signal_between_check_and_write_leaves_nothing_changed(
    tmp_path: Path, state: Path, target: str, change: Any
) -> None:
    """SIGTERM lands after the session checked it may write and before the write reaches the
    kernel (here: as the fake kernel receives it). The application's own handler returns.
    The interrupted write must not land after the restoration, with the state file gone."""
    fired: list[str] = []
    restored_at: list[int] = []

    def signal_at_write(rel: str, value: str) -> None:
        if rel == target and not fired:
            fired.append(rel)
            signal.raise_signal(signal.SIGTERM)

    root = FakeSysfsRoot(
        build_tree("intel-acpi-cpufreq", tmp_path / "t"), before_write=signal_at_write
    )
    before = snapshot(root.path)

    def app_handler(signum: int, frame: FrameType | None) -> None:  # sets a flag, returns
        restored_at.append(len(root.log))

    old = signal.signal(signal.SIGTERM, app_handler)
    try:
        with NodeSettings(root, state_file=state) as node:
            with pytest.raises(PlatformError, match=r"restored \(after SIGTERM\)"):
                change(node)
            assert not state.exists()
        assert fired == [target] and len(restored_at) == 1
        assert len(root.log) == restored_at[0]  # no write after the restoration
        assert diff(before, snapshot(root.path)) == [] and not state.exists()
    finally:
        signal.signal(signal.SIGTERM, old)


def test_signal_during_mid_session_restore_is_not_held_back(tmp_path: Path, state: Path) -> None:
    armed = {"on": False}

    def during_restore(rel: str, value: str) -> None:
        if armed["on"]:
            armed["on"] = False
            signal.raise_signal(signal.SIGTERM)

    root = FakeSysfsRoot(
        build_tree("intel-acpi-cpufreq", tmp_path / "t"), before_write=during_restore
    )
    before = snapshot(root.path)
    got: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    try:
        with NodeSettings(root, state_file=state) as node:
            change_everything(node)
            armed["on"] = True  # the first restoring write raises SIGTERM
            report = node.restore()
            assert got == [signal.SIGTERM]  # handled when restore() returned, not at exit
            assert report.ok and diff(before, snapshot(root.path)) == []
            with pytest.raises(PlatformError, match=r"restored \(after SIGTERM\)"):
                node.set_frequency(2e9)
        assert got == [signal.SIGTERM] and not state.exists()
    finally:
        signal.signal(signal.SIGTERM, old)


def test_signal_while_saving_is_handled_before_any_write(
    acpi: FakeSysfsRoot, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal landing between publishing the state file and recording it in memory waits
    until both agree, then restores: the change it interrupted writes nothing."""
    original = statefile_mod.write_state_file

    def write_then_signal(path: Path, doc: Any, *, exclusive: bool) -> None:
        original(path, doc, exclusive=exclusive)
        signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(restore_mod, "write_state_file", write_then_signal)
    got: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    before = snapshot(acpi.path)
    try:
        with NodeSettings(acpi, state_file=state) as node:
            with pytest.raises(PlatformError, match=r"restored \(after SIGTERM\)"):
                node.set_frequency(2e9)
            assert got == [signal.SIGTERM]
        assert snapshot(acpi.path) == before and acpi.log == []
        assert not state.exists()
    finally:
        signal.signal(signal.SIGTERM, old)


def test_unwritable_state_file_changes_nothing(acpi: FakeSysfsRoot, tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("")
    before = snapshot(acpi.path)
    with (
        NodeSettings(acpi, state_file=tmp_path / "not-a-dir" / "s.json") as node,
        pytest.raises(PlatformError, match="cannot create the state file directory"),
    ):
        node.set_frequency(2e9)
    assert snapshot(acpi.path) == before and acpi.log == []


def test_session_in_a_worker_thread_restores_without_handlers(
    acpi: FakeSysfsRoot, state: Path
) -> None:
    """Signal handlers belong to the main thread; elsewhere exit and exceptions still restore."""
    before = snapshot(acpi.path)
    seen: list[object] = []

    def work() -> None:
        with NodeSettings(acpi, state_file=state) as node:
            seen.append(signal.getsignal(signal.SIGTERM))
            change_everything(node)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == [signal.getsignal(signal.SIGTERM)]  # nothing installed from the worker
    assert diff(before, snapshot(acpi.path)) == [] and not state.exists()


def test_ignored_signals_stay_ignored(acpi: FakeSysfsRoot, state: Path) -> None:
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with NodeSettings(acpi, state_file=state):
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


CHILD = """
import sys, time
from pathlib import Path
from greenckpt.platform.restore import NodeSettings
from tests.platform.fake_cpu import FakeSysfsRoot

root = FakeSysfsRoot(Path(sys.argv[1]))
with NodeSettings(root, state_file=sys.argv[2]) as node:
    node.set_frequency(float(sys.argv[3]))
    node.disable_cstates(deeper_than_s=5e-6)
    print("ready", flush=True)
    time.sleep(60)
"""


def run_child(tree: Path, state: Path, hz: float) -> subprocess.Popen[str]:
    return spawn_ready(CHILD, str(tree), str(state), str(hz))


@pytest.mark.parametrize(
    ("tree", "hz"),
    [("intel-acpi-cpufreq", 1.4e9), ("intel-pstate-hwp", 2.05e9), ("amd-pstate-passive", 3.3e9)],
)
def test_kill_9_then_restore_from_state_file(tmp_path: Path, tree: str, hz: float) -> None:
    path = build_tree(tree, tmp_path / "tree")
    state = tmp_path / "run" / "node-state.json"
    before = snapshot(path)
    child = run_child(path, state, hz)
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.communicate()
    assert diff(before, snapshot(path)) != []  # the child did change the node...
    pending = pending_state(SysRoot(path), state)
    assert pending is not None and not pending.alive and pending.pid == child.pid
    report = restore_from_state_file(FakeSysfsRoot(path), state)
    assert report.ok and report.written
    assert diff(before, snapshot(path)) == []  # ...and it is back, byte for byte
    assert not state.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_in_subprocess_restores_and_exits_conventionally(
    tmp_path: Path, sig: signal.Signals
) -> None:
    path = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    state = tmp_path / "run" / "node-state.json"
    before = snapshot(path)
    child = run_child(path, state, 2.0e9)
    assert diff(before, snapshot(path)) != []
    child.send_signal(sig)
    rc = child.wait(timeout=10)
    _, err = child.communicate()
    assert rc == -sig, err  # died by the signal (shell status 128 + n), after restoring
    assert diff(before, snapshot(path)) == []
    assert not state.exists()
