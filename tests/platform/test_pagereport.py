"""Free page reporting: reading the knobs and holding reporting off, on fake sysfs trees."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.platform import pagereport
from greenckpt.platform.pagereport import (
    PARAMS_DIR,
    PageReportingHold,
    read_page_reporting,
)
from greenckpt.platform.root import PlatformError, SysRoot


def tree(tmp_path: Path, **params: int) -> SysRoot:
    d = tmp_path / PARAMS_DIR
    d.mkdir(parents=True)
    for name, value in params.items():
        (d / name).write_text(f"{value}\n")
    return SysRoot(tmp_path)


def knob(root: SysRoot) -> int:
    return int(root.read(f"{PARAMS_DIR}/min_free_ms"))


def test_read_firecracker_style_kernel(tmp_path: Path) -> None:
    info = read_page_reporting(tree(tmp_path, page_reporting_order=9, min_free_ms=0))
    assert (info.present, info.order, info.min_free_ms) == (True, 9, 0)
    assert "as soon as it is freed" in info.describe()


def test_read_upstream_and_absent(tmp_path: Path) -> None:
    upstream = read_page_reporting(tree(tmp_path / "a", page_reporting_order=9))
    assert upstream.present and upstream.min_free_ms is None
    assert "2 s after" in upstream.describe()
    (tmp_path / "b").mkdir()
    absent = read_page_reporting(SysRoot(tmp_path / "b"))
    assert not absent.present and "no free page reporting" in absent.describe()


def test_hold_raises_then_restores(tmp_path: Path) -> None:
    root = tree(tmp_path, page_reporting_order=9, min_free_ms=0)
    state = tmp_path / "state.json"
    with PageReportingHold(60_000, root=root, state_file=state) as hold:
        assert hold.held and knob(root) == 60_000
        assert json.loads(state.read_text())["min_free_ms"] == 0
        assert "0 -> 60000" in hold.note
    assert knob(root) == 0 and not state.exists()
    hold.close()  # idempotent
    assert knob(root) == 0


def test_hold_restores_on_exception(tmp_path: Path) -> None:
    root = tree(tmp_path, min_free_ms=5)
    with pytest.raises(RuntimeError), PageReportingHold(1000, root=root, state_file=tmp_path / "s"):
        raise RuntimeError("benchmark failed")
    assert knob(root) == 5


def test_nothing_changed_where_there_is_nothing_to_hold(tmp_path: Path) -> None:
    upstream = tree(tmp_path / "u", page_reporting_order=9)
    hold = PageReportingHold(root=upstream, state_file=tmp_path / "s1")
    assert not hold.held and "nothing to change" in hold.note
    already = tree(tmp_path / "a", min_free_ms=120_000)
    hold = PageReportingHold(60_000, root=already, state_file=tmp_path / "s2")
    assert not hold.held and knob(already) == 120_000 and "left as it is" in hold.note
    assert not (tmp_path / "s1").exists() and not (tmp_path / "s2").exists()


def test_a_dead_holders_change_is_undone_by_the_next(tmp_path: Path) -> None:
    root = tree(tmp_path, min_free_ms=60_000)  # left raised by a holder that was killed
    state = tmp_path / "state.json"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    state.write_text(json.dumps({"pid": int(dead.stdout), "min_free_ms": 0, "held_ms": 60_000}))
    with PageReportingHold(30_000, root=root, state_file=state) as hold:
        assert hold.before.min_free_ms == 0  # the original, restored first
        assert knob(root) == 30_000
    assert knob(root) == 0 and not state.exists()


def test_a_live_holder_is_not_overridden(tmp_path: Path) -> None:
    root = tree(tmp_path, min_free_ms=60_000)
    state = tmp_path / "state.json"
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as other:
        try:
            state.write_text(json.dumps({"pid": other.pid, "min_free_ms": 0}))
            with pytest.raises(PlatformError, match=f"already held by process {other.pid}"):
                PageReportingHold(root=root, state_file=state)
            assert knob(root) == 60_000 and state.exists()
        finally:
            other.kill()


def test_unwritable_knob_is_refused_before_any_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path, min_free_ms=0)
    monkeypatch.setattr(pagereport.os, "access", lambda *a, **k: False)  # not root
    with pytest.raises(PlatformError, match="not writable: run as root"):
        PageReportingHold(root=root, state_file=tmp_path / "s")
    assert knob(root) == 0 and not (tmp_path / "s").exists()


def test_a_refused_write_leaves_nothing_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path, min_free_ms=0)
    real = SysRoot.write

    def refuse(self: SysRoot, rel: str, value: str) -> None:
        if value != "0":
            raise PermissionError(13, "Permission denied")
        real(self, rel, value)

    monkeypatch.setattr(SysRoot, "write", refuse)
    with pytest.raises(PlatformError, match=r"cannot write .*Permission denied"):
        PageReportingHold(root=root, state_file=tmp_path / "s")
    assert knob(root) == 0 and not (tmp_path / "s").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_bad_hold_time_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be > 0 ms"):
        PageReportingHold(0, root=tree(tmp_path, min_free_ms=0), state_file=tmp_path / "s")


def test_sigterm_restores(tmp_path: Path) -> None:
    """A process holding reporting off and killed with SIGTERM puts the knob back."""
    root = tree(tmp_path, min_free_ms=0)
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from greenckpt.platform.pagereport import PageReportingHold\n"
        "from greenckpt.platform.root import SysRoot\n"
        f"h = PageReportingHold(60000, root=SysRoot(Path({str(tmp_path)!r})),"
        f" state_file=Path({str(tmp_path / 's')!r}))\n"
        "print('held', flush=True)\n"
        "time.sleep(30)\n"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        assert knob(root) == 60_000
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 128 + signal.SIGTERM
    assert knob(root) == 0 and not (tmp_path / "s").exists()
