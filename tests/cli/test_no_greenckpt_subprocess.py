"""``greenckpt study`` and ``greenckpt demo`` start no ``greenckpt`` subprocess (issue 28, item
1): both run their commands through the runtime's library call in their own process. The MPI
launcher and the application are processes, of course; a job's per-node agents (``greenckpt
agent``) may be too — they are the nodes' runtime — but never ``greenckpt run``.

Every process started is recorded (``subprocess.Popen``, which ``subprocess.run`` uses, and the
``os.exec*`` family) and no argv may run greenckpt itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from greenckpt.cli.main import main
from tests.ckpt.test_mpi import mpiexec
from tests.conftest import small_profile_doc
from tests.platform import fake_power
from tests.platform.fake_cpu import build_tree, load_spec

STUDY = """\
[study]
name = "tiny"
repeats = 2
seed = 1
baseline = { checkpoint = "none" }

[app]
command = ["{python}", "-c", "import sys; print(sys.argv[1:])", "{checkpoint_args}", "{size}"]

[run]
no_control = true

[factors]
checkpoint = ["none", "app"]
"""


def runs_greenckpt(argv: list[str]) -> bool:
    """Whether ``argv`` runs greenckpt's own command line (``greenckpt ...`` or ``python -m
    greenckpt ...``) other than a node's agent."""
    words = [str(a) for a in argv]
    for i, word in enumerate(words):
        own = os.path.basename(word) == "greenckpt" or (
            word == "greenckpt" and i > 0 and words[i - 1] == "-m"
        )
        if own:
            return words[i + 1 : i + 2] != ["agent"]
    return False


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """Every argv started in this process from now on."""
    argvs: list[list[str]] = []

    class Recording(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, args: Any, *more: Any, **kw: Any) -> None:
            one = isinstance(args, str | bytes | os.PathLike)
            argvs.append([os.fsdecode(args)] if one else [os.fsdecode(a) for a in args])
            super().__init__(args, *more, **kw)

    monkeypatch.setattr(subprocess, "Popen", Recording)
    for name in ("execv", "execve", "execvp", "execvpe", "execl", "execlp", "execle"):

        def refuse(*args: Any, _name: str = name) -> None:
            argvs.append([str(a) for a in args])
            raise AssertionError(f"os.{_name} called: {args}")

        monkeypatch.setattr(os, name, refuse)
    yield argvs


def test_the_recorder_tells_greenckpt_from_the_rest() -> None:
    assert runs_greenckpt([sys.executable, "-m", "greenckpt", "run", "--", "true"])
    assert runs_greenckpt(["/venv/bin/greenckpt", "study", "s.toml"])
    assert not runs_greenckpt([sys.executable, "-m", "greenckpt", "agent", "--node", "0"])
    assert not runs_greenckpt(["mpiexec", "-n", "2", sys.executable, "-m", "greenckpt.apps.heat2d"])


def test_a_study_runs_its_runs_in_process(
    tmp_path: Path, started: list[list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = tmp_path / "s.toml", tmp_path / "out"
    spec.write_text(STUDY)
    assert main(["study", str(spec), "-o", str(out)]) == 0
    capsys.readouterr()
    assert [a for a in started if runs_greenckpt(a)] == []
    assert sum(1 for a in started if a[:2] == [sys.executable, "-c"]) == 4  # the application
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 4 and all(r["ok"] for r in runs)
    log = (out / "runs" / "r0001" / "output.log").read_text()
    assert "report: " in log and "report.json" in log  # the run's table and files, as before


@pytest.mark.skipif(mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")
def test_the_demo_runs_heat_in_process(
    tmp_path: Path,
    started: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tree = build_tree(load_spec("intel-acpi-cpufreq"), tmp_path / "tree")
    fake_power.intel_tree(tree)  # a fake node: the demo's runtime controls it, not this one
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(tree))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    work = tmp_path / "demo"
    work.mkdir()
    (work / "profile.json").write_text(json.dumps({**small_profile_doc(), "status": "complete"}))
    assert main(["demo", "-o", str(work)]) == 0  # the kept profile: no profiling
    out = capsys.readouterr().out
    assert "bit-identical to the failure-free run" in out
    assert [a for a in started if runs_greenckpt(a)] == []
    heat = [a for a in started if "greenckpt.apps.heat2d" in a]
    assert len(heat) == 3  # reference, killed, restarted: mpiexec runs the application
