"""Free page reporting under faults (issue 18, item 17; items 20/21/24 for its state file).

A holder killed by SIGKILL or SIGHUP used to leave ``min_free_ms`` raised while ``greenckpt
restore`` said "nothing to restore". Now it is restored by ``greenckpt restore`` and at the
start of every command, like the node's other settings, and a record names its holder by pid
and start time, so a reused pid is not taken for a live holder. The knob lives in SYNTHETIC
sysfs trees; the holder's record is at its default place inside the tree.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.platform.pagereport import (
    PARAMS_DIR,
    PageReportingHold,
    default_state_file,
    pending_page_reporting,
    restore_page_reporting,
)
from greenckpt.platform.root import ENV_VAR, PlatformError, SysRoot
from tests.conftest import ROOT
from tests.ready_child import spawn_ready

HOLDER = """
import sys, time
from pathlib import Path
from greenckpt.platform.pagereport import PageReportingHold
from greenckpt.platform.root import SysRoot

hold = PageReportingHold(60000, root=SysRoot(Path(sys.argv[1])))
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def root(tmp_path: Path) -> SysRoot:
    params = tmp_path / "tree" / PARAMS_DIR
    params.mkdir(parents=True)
    (params / "page_reporting_order").write_text("9\n")
    (params / "min_free_ms").write_text("0\n")
    return SysRoot(tmp_path / "tree")


def knob(root: SysRoot) -> int:
    return int(root.read(f"{PARAMS_DIR}/min_free_ms"))


def killed_holder(root: SysRoot, sig: signal.Signals = signal.SIGKILL) -> int:
    child = spawn_ready(HOLDER, str(root.path))
    assert knob(root) == 60_000
    child.send_signal(sig)
    child.wait(timeout=10)
    child.communicate()
    return child.pid


def test_restore_command_puts_back_what_a_killed_holder_left(
    root: SysRoot, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = killed_holder(root)
    assert knob(root) == 60_000 and default_state_file(root).exists()
    assert main(["restore", "--root", str(root.path)]) == 0
    out = capsys.readouterr().out
    assert "restored free page reporting: min_free_ms 0" in out and f"process {pid}" in out
    assert "nothing to restore" not in out
    assert knob(root) == 0 and not default_state_file(root).exists()
    assert main(["restore", "--root", str(root.path)]) == 0
    assert "nothing to restore" in capsys.readouterr().out


def test_every_command_start_puts_it_back(
    root: SysRoot, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    killed_holder(root)
    monkeypatch.setenv(ENV_VAR, str(root.path))
    main(["levels", "--config", "/nonexistent.toml"])  # any command, even one that fails
    assert "restored free page reporting (min_free_ms 0)" in capsys.readouterr().err
    assert knob(root) == 0 and not default_state_file(root).exists()


def test_sighup_restores_like_sigterm(root: SysRoot) -> None:
    killed_holder(root, signal.SIGHUP)
    assert knob(root) == 0 and not default_state_file(root).exists()


def test_a_live_holder_is_left_alone_at_start_and_by_restore(
    root: SysRoot, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A running holder restores the knob itself; ``greenckpt restore`` says so and goes on
    to the node's own record (a live holder must not block restoring a killed session's
    frequencies and C-states)."""
    child = spawn_ready(HOLDER, str(root.path))
    try:
        monkeypatch.setenv(ENV_VAR, str(root.path))
        main(["levels", "--config", "/nonexistent.toml"])
        assert "free page reporting" not in capsys.readouterr().err  # nothing to say
        assert knob(root) == 60_000
        monkeypatch.delenv(ENV_VAR)
        assert main(["restore", "--root", str(root.path)]) == 0
        out = capsys.readouterr().out
        assert out.startswith("nothing to restore")  # the node's record was looked at
        assert f"left alone: process {child.pid} holds it off and still runs" in out
        assert knob(root) == 60_000
        assert main(["restore", "--root", str(root.path), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["page_reporting"] == "held by a running process"
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=10)
        child.communicate()
    assert knob(root) == 0


def test_a_reused_pid_is_not_a_live_holder(root: SysRoot) -> None:
    """The pid in the record now belongs to an unrelated process (started at another time)."""
    state = default_state_file(root)
    state.parent.mkdir(parents=True)
    (root / f"{PARAMS_DIR}/min_free_ms").write_text("60000\n")
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as other:
        try:
            doc = {"pid": other.pid, "process_start": 1, "min_free_ms": 0, "held_ms": 60000}
            state.write_text(json.dumps(doc))
            record = pending_page_reporting(root)
            assert record is not None and not record.alive
            with PageReportingHold(30_000, root=root) as hold:  # not "already held by"
                assert hold.before.min_free_ms == 0 and knob(root) == 30_000
            assert knob(root) == 0
        finally:
            other.kill()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"pid": 1e999, "min_free_ms": 0}', "'pid' missing or out of range"),
        ('{"pid": 123, "min_free_ms": 99999999999999999999}', "'min_free_ms' missing or out"),
    ],
)
def test_a_malformed_record_is_one_clear_error(root: SysRoot, text: str, match: str) -> None:
    state = default_state_file(root)
    state.parent.mkdir(parents=True)
    state.write_text(text)
    with pytest.raises(PlatformError, match=match):
        restore_page_reporting(root)
    with pytest.raises(PlatformError, match=match):
        PageReportingHold(root=root)
    assert state.exists() and knob(root) == 0


def test_a_fifo_record_is_refused_not_waited_on(root: SysRoot) -> None:
    state = default_state_file(root)
    state.parent.mkdir(parents=True)
    os.mkfifo(state)
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    cmd = [sys.executable, "-m", "greenckpt", "restore", "--root", str(root.path)]
    done = subprocess.run(
        cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "not a regular file" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_a_killed_writers_temporary_file_is_removed(root: SysRoot) -> None:
    state = default_state_file(root)
    state.parent.mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    tmp = state.with_name(f".{state.name}.{int(dead.stdout)}.tmp")
    tmp.write_text('{"pid"')
    assert pending_page_reporting(root) is None
    assert not tmp.exists()


def test_the_record_is_not_written_through_a_link_out_of_the_tree(
    root: SysRoot, tmp_path: Path
) -> None:
    outside = tmp_path / "etc"
    outside.mkdir()
    (root.path / "run").symlink_to(outside)  # a user's tree, used by root
    with pytest.raises(PlatformError, match="outside the tree"):
        PageReportingHold(root=root)
    assert list(outside.iterdir()) == [] and knob(root) == 0
