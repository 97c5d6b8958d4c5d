"""What starting the command line imports, and that the lazily built parser is the full one.

A job script calls ``greenckpt notify`` at every checkpoint, so the notify path, ``--help`` and
``import greenckpt.ckpt`` must not load NumPy, SciPy, matplotlib, rich or mpi4py. These tests
assert which modules a fresh interpreter has loaded, never how long it took (the timings are
benchmarks/bench_start.py's). And since :func:`greenckpt.cli.main.main` registers only the
named command (the others by name and help line), its help and usage errors are compared with
those of the full :func:`~greenckpt.cli.main.build_parser`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from greenckpt.ckpt.notify_client import SOCKET_ENV
from greenckpt.cli.commands import COMMANDS
from greenckpt.cli.main import build_parser, main
from greenckpt.phases import WireKind
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.settings import Settings
from tests.conftest import ROOT

HEAVY = ("numpy", "scipy", "matplotlib", "rich", "mpi4py")

# Runs ``python -m greenckpt ARGS`` (or code) and prints, at exit, the heavy top-level packages
# the interpreter has loaded, on stderr's last line.
_PROBE = """
import atexit, json, runpy, sys
heavy = set(json.loads(sys.argv[1]))
def _report():
    loaded = sorted({name.split(".")[0] for name in sys.modules} & heavy)
    sys.stderr.write("\\nLOADED " + json.dumps(loaded) + "\\n")
atexit.register(_report)
if sys.argv[2] == "-c":
    exec(sys.argv[3])
else:
    sys.argv = ["greenckpt", *sys.argv[2:]]
    runpy.run_module("greenckpt", run_name="__main__", alter_sys=True)
"""


def _loaded(args: Sequence[str], env: dict[str, str] | None = None) -> tuple[int, str, list[str]]:
    """Exit status, standard output and the heavy packages loaded by a fresh interpreter."""
    environ = dict(os.environ if env is None else env)
    environ["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + environ.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(HEAVY), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    last = proc.stderr.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("LOADED "), proc.stderr
    return proc.returncode, proc.stdout, json.loads(last.removeprefix("LOADED "))


class _Target:
    """A runtime that advises nothing and accepts every end (the wire is what is tested)."""

    def begin(self, kind: WireKind, **_: object) -> Settings | None:
        return None

    def end(self, kind: WireKind, **_: object) -> object:
        return None


@pytest.fixture
def server() -> Iterator[NotifyServer]:
    short = Path(tempfile.mkdtemp(prefix="gcs-", dir="/tmp" if os.path.isdir("/tmp") else None))
    try:
        with NotifyServer(_Target(), short / "rt.sock") as srv:
            yield srv
    finally:
        shutil.rmtree(short)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--help"], 0),
        (["notify", "--help"], 0),
        (["notify", "begin", "--help"], 0),
        (["notify", "ping", "--socket", "/nonexistent/greenckpt.sock"], 2),
    ],
)
def test_help_and_notify_load_nothing_heavy(args: list[str], expected: int) -> None:
    status, _, loaded = _loaded(args)
    assert (status, loaded) == (expected, [])


def test_notify_round_trip_loads_nothing_heavy(server: NotifyServer) -> None:
    env = {**os.environ, **server.environ()}
    status, out, loaded = _loaded(["notify", "begin", "checkpoint", "--size", "1GiB"], env)
    assert status == 0 and out.startswith("checkpoint: no I/O parallelism advised")
    assert loaded == []
    status, out, loaded = _loaded(["notify", "end", "checkpoint", "--seconds", "2"], env)
    assert (status, out, loaded) == (0, "checkpoint: end acknowledged\n", [])
    assert SOCKET_ENV in server.environ()


def test_import_checkpoint_library_loads_nothing_heavy() -> None:
    status, _, loaded = _loaded(["-c", "import greenckpt.ckpt, greenckpt"])
    assert (status, loaded) == (0, [])


def test_a_command_that_needs_scipy_still_gets_it() -> None:
    """The probe sees a heavy import when there is one (the test above is not vacuous)."""
    status, _, loaded = _loaded(["plan", "--help"])
    assert status == 0 and "scipy" in loaded


def _outcome(parse: object, argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    with pytest.raises(SystemExit) as stop:
        parse(argv)  # type: ignore[operator]
    captured = capsys.readouterr()
    return stop.value.code, captured.out, captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        [],
        ["bogus"],
        ["--", "notify", "--help"],
        ["-1h", "plan"],
        ["notify"],
        ["notify", "begin", "--help"],
        ["notify", "begin", "nonsense"],
        ["profile", "run", "--help"],
        ["plan", "--no-such-flag"],
        *([command.name, "--help"] for command in COMMANDS),
    ],
)
def test_main_parses_as_the_full_parser(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    full = _outcome(build_parser().parse_args, argv, capsys)
    assert _outcome(main, argv, capsys) == full


def test_every_command_help_line_comes_from_the_table() -> None:
    listed = build_parser().format_help()
    for command in COMMANDS:
        assert command.name in listed
        assert " ".join(command.help.split()[:4]) in " ".join(listed.split())
