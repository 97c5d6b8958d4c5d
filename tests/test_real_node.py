"""The real-node guard (tests/real_node.py) can fail: it sees a changed setting, tells this test
run's own sessions from another process tree's, and spares the passive holder CI starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import real_node


def test_a_changed_appeared_or_vanished_setting_is_named() -> None:
    before = {"/a/scaling_governor": "powersave", "/b/disable": "0"}
    after = {"/a/scaling_governor": "performance", "/c/disable": "1"}
    assert real_node.changed(before, after) == [
        "/a/scaling_governor: 'powersave' -> 'performance'",
        "/b/disable: '0' -> '<absent>'",
        "/c/disable: '<absent>' -> '1'",
    ]
    assert real_node.changed(before, dict(before)) == []


def test_settings_are_read_only_from_present_files() -> None:
    values = real_node.node_settings()
    assert all(path.startswith("/sys/") for path in values)
    assert all(os.path.exists(path) for path in values)


@pytest.fixture
def lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "node.lock"
    monkeypatch.setattr(real_node, "NODE_LOCK", path)
    monkeypatch.delenv(real_node.PASSIVE_HOLDER_ENV, raising=False)
    return path


def test_a_live_process_of_another_tree_is_a_foreign_holder(lock: Path) -> None:
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        lock.write_text(json.dumps({"pid": 1}))  # init: alive, never a descendant of a test
        assert real_node.foreign_holder() == 1
        lock.write_text(json.dumps({"pid": os.getpid()}))  # this test run itself
        assert real_node.foreign_holder() is None
        lock.write_text(json.dumps({"pid": other.pid}))  # a child (a test's own session)
        assert real_node.foreign_holder() is None
    finally:
        other.kill()
        other.wait()
    lock.write_text(json.dumps({"pid": other.pid}))  # reaped: no live holder
    assert real_node.foreign_holder() is None
    lock.write_text("")  # released (the record is cleared)
    assert real_node.foreign_holder() is None


def test_the_passive_holder_is_not_foreign(lock: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock.write_text(json.dumps({"pid": 1}))
    monkeypatch.setenv(real_node.PASSIVE_HOLDER_ENV, "1")
    assert real_node.foreign_holder() is None


def test_an_unmarked_test_that_takes_the_lock_fails(tmp_path: Path) -> None:
    """A test that writes the node lock (as a session does) without the mark fails in
    teardown; the same test marked passes. Run in a child pytest whose plugin points at a
    temporary lock file (the machine's lock is never touched)."""
    lock = tmp_path / "node.lock"
    (tmp_path / "conftest.py").write_text(
        "from pathlib import Path\n"
        "import tests.real_node as guard\n"
        f"guard.NODE_LOCK = Path({str(lock)!r})\n"
        "pytest_plugins = ['tests.real_node']\n"
    )
    (tmp_path / "test_take.py").write_text(
        "import json, os, pytest\n"
        "from pathlib import Path\n"
        f"LOCK = Path({str(lock)!r})\n"
        "def _take():\n"
        "    LOCK.write_text(json.dumps({'pid': os.getpid()}))\n"
        "    LOCK.write_text('')\n"
        "def test_unmarked():\n"
        "    _take()\n"
        "@pytest.mark.real_node\n"
        "def test_marked():\n"
        "    _take()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip
    # the unmarked test's call passes and its teardown errors; the marked one passes
    assert "2 passed" in proc.stdout and "1 error" in proc.stdout, proc.stdout
    assert "ERROR test_take.py::test_unmarked" in proc.stdout
    assert "took the real node lock" in proc.stdout
