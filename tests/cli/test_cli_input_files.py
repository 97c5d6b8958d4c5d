"""The input files of ``greenckpt levels`` and ``greenckpt simulate`` are read by the library
(``optimize.levels_file``, ``sim.Trace.from_text``) through ``greenckpt.files``: a FIFO or a
directory named by mistake is refused in one line, never waited on (issue 17 item 3 moved the
readers out of the CLI; they used ``Path.read_text``, which blocks on a FIFO forever)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.optimize.levels_file import load_levels
from greenckpt.sim import Trace
from tests.cli.test_cli_simulate import BASE as SIMULATE


def _greenckpt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greenckpt", *args],
        capture_output=True,
        text=True,
        timeout=120,  # a reader that waits on the FIFO would hang here
        check=False,
    )


@pytest.mark.parametrize("command", ["levels", "simulate"])
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "input"
    os.mkfifo(fifo)
    if command == "levels":
        args = ["levels", "--config", str(fifo)]
    else:
        args = [*SIMULATE, "--trace", str(fifo)]
    proc = _greenckpt(*args)
    assert proc.returncode == 2, proc.stderr
    assert "not a regular file (it is a FIFO (named pipe))" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_levels_reader_is_library_and_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidValueError, match="not a regular file"):
        load_levels(str(tmp_path))


def test_a_trace_parses_from_text_without_a_file() -> None:
    trace = Trace.from_text("100\n5000\n 5200\n", "mine.txt")
    assert trace.horizon == 5200.0
    with pytest.raises(InvalidValueError, match="holds no failure times"):
        Trace.from_text("  \n", "mine.txt")
    with pytest.raises(InvalidValueError, match="every line must be a failure time"):
        Trace.from_text("12:00\n", "mine.txt")
