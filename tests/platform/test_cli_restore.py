"""``greenckpt restore`` and the restoration every command runs at start, after a SIGKILL."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.platform.root import ENV_VAR
from tests.platform.fake_cpu import build_tree, diff, snapshot
from tests.platform.test_restore import run_child


def _killed_session(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    state = tmp_path / "run" / "node-state.json"
    before = snapshot(tree)
    child = run_child(tree, state, 2.0e9)
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.communicate()
    assert diff(before, snapshot(tree)) != []
    return tree, state, before


def _settings_changed(before: dict[str, bytes], tree: Path) -> list[str]:
    """Differences in settings. The command restores through a plain-file root, which does not
    recompute what the kernel derives (scaling_cur_freq; scaling_setspeed reads <unsupported>
    unless the governor is userspace), so those two are left out; the byte-for-byte restore
    through a sysfs-like fake is tests/platform/test_restore.py's kill -9 test."""
    derived = ("/scaling_cur_freq:", "/scaling_setspeed:")
    return [d for d in diff(before, snapshot(tree)) if not any(x in d for x in derived)]


def test_restore_command_after_kill_9(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree, state, before = _killed_session(tmp_path)
    assert main(["restore", "--root", str(tree), "--state-file", str(state)]) == 0
    out = capsys.readouterr().out
    assert "restored" in out and "scaling_governor" in out
    assert not state.exists()
    assert _settings_changed(before, tree) == []
    assert main(["restore", "--root", str(tree), "--state-file", str(state)]) == 0
    assert "nothing to restore" in capsys.readouterr().out


def test_any_command_restores_a_dead_sessions_settings_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tree, state, before = _killed_session(tmp_path)
    monkeypatch.setenv(ENV_VAR, str(tree))
    monkeypatch.setattr("greenckpt.platform.recovery.default_state_file", lambda root: state)
    main(["levels", "--config", "/nonexistent.toml"])  # any command, even one that fails
    assert "restored" in capsys.readouterr().err
    assert not state.exists()
    assert _settings_changed(before, tree) == []


def test_restore_refuses_a_corrupt_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    state = tmp_path / "node-state.json"
    state.write_text("{not json")
    assert main(["restore", "--root", str(tree), "--state-file", str(state)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert state.exists()  # never delete the only record
