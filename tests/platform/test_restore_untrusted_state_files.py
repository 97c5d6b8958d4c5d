"""State files under faults (issue 18: items 20 and 21, restore part; item 24, node state).

A state file is untrusted input read by root at the start of every command: whatever is found
at its name must end in one clear error, never a hang (a FIFO) or a crash (JSON nested past
the parser's recursion limit, a number too long for ``int()``), and a temporary file left by a
writer that was killed mid-write must not stay forever. Trees are SYNTHETIC.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from greenckpt.cli.main import main
from greenckpt.platform.restore import NodeSettings, pending_state, restore_from_state_file
from greenckpt.platform.root import ENV_VAR, PlatformError, SysRoot
from tests.conftest import ROOT
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return build_tree("intel-acpi-cpufreq", tmp_path / "tree")


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def _record(tree: Path, tmp_path: Path) -> dict[str, Any]:
    """A valid record, as a killed session would have left it."""
    state = tmp_path / "rec" / "node-state.json"
    with NodeSettings(FakeSysfsRoot(tree), state_file=state, signals=()) as node:
        node.set_frequency(1.4e9)
        doc: dict[str, Any] = json.loads(state.read_text())
    doc["pid"], doc["process_start"] = _dead_pid(), None
    return doc


def test_restore_of_a_fifo_state_file_is_refused_not_waited_on(tree: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "node-state.json"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    cmd = [sys.executable, "-m", "greenckpt", "restore", "--root", str(tree)]
    cmd += ["--state-file", str(fifo)]
    done = subprocess.run(
        cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "not a regular file" in done.stderr and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert fifo.exists()  # refused, not removed


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a":' * 50_000 + "1" + "}" * 50_000, "nested too deeply"),
        (b"\xff\xfe".decode("latin-1"), "not UTF-8|not valid JSON"),
    ],
)
def test_pathological_json_is_one_clear_error(
    tree: Path, tmp_path: Path, text: str, match: str
) -> None:
    state = tmp_path / "node-state.json"
    state.write_bytes(text.encode("latin-1"))
    with pytest.raises(PlatformError, match=match):
        pending_state(SysRoot(tree), state)
    with pytest.raises(PlatformError, match=match):
        restore_from_state_file(SysRoot(tree), state)
    assert state.exists()


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d["cpufreq"]["policy0"].update(scaling_max_freq="9" * 5000), "bad limits"),
        (lambda d: d["cpufreq"].update({"policy" + "1" * 5000: {}}), "bad cpufreq entry"),
        (lambda d: d.update(pid=2**70), "'pid' out of range"),
        (lambda d: d.update(pid=-1), "'pid' out of range"),
    ],
)
def test_numbers_no_parser_can_take_are_one_clear_error(
    tree: Path, tmp_path: Path, mutate: Any, match: str
) -> None:
    doc = _record(tree, tmp_path)
    mutate(doc)
    state = tmp_path / "node-state.json"
    state.write_text(json.dumps(doc))
    with pytest.raises(PlatformError, match=match):
        restore_from_state_file(SysRoot(tree), state)
    assert state.exists()


def test_every_command_starts_despite_a_nested_state_file(
    tree: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = tmp_path / "node-state.json"
    state.write_text("[" * 100_000 + "]" * 100_000)
    monkeypatch.setenv(ENV_VAR, str(tree))
    monkeypatch.setattr("greenckpt.platform.recovery.default_state_file", lambda root: state)
    main(["levels", "--config", "/nonexistent.toml"])  # any command: it runs, after a warning
    err = capsys.readouterr().err
    assert "greenckpt: warning:" in err and "nested too deeply" in err
    assert "Traceback" not in err and state.exists()


def test_temporary_files_of_killed_writers_are_removed_at_start(tree: Path, tmp_path: Path) -> None:
    state = tmp_path / "run" / "node-state.json"
    state.parent.mkdir(parents=True)
    dead = state.parent / f".node-state.json.{_dead_pid()}.tmp"
    dead.write_text("{")  # a writer killed between creating and renaming it
    live = state.parent / f".node-state.json.{os.getppid()}.tmp"
    live.write_text("{")  # a writer that still runs: its file is in use
    other = state.parent / f".other.json.{_dead_pid()}.tmp"
    other.write_text("{")  # not ours
    assert pending_state(SysRoot(tree), state) is None
    assert not dead.exists() and live.exists() and other.exists()


def test_a_link_planted_at_the_temporary_name_is_not_followed(tree: Path, tmp_path: Path) -> None:
    state = tmp_path / "run" / "node-state.json"
    state.parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (state.parent / f".node-state.json.{os.getpid()}.tmp").symlink_to(victim)
    with NodeSettings(FakeSysfsRoot(tree), state_file=state, signals=()) as node:
        node.set_frequency(1.4e9)
        assert json.loads(state.read_text())["pid"] == os.getpid()
    assert victim.read_text() == "precious\n"
