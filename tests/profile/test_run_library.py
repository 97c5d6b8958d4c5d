"""A profile run from Python (:mod:`greenckpt.profile.run`), and a CLI that only calls it.

The sweeps are real and tiny — the I/O engine writes and reads 2 MiB under ``tmp_path`` — and
metered by the utilisation estimator reading a SYNTHETIC ``/proc`` (``fake_power.proc_tree``),
so every power figure is an estimate of a made-up CPU; the tests check what is measured,
recorded, kept and refused, not wattages. The frequency is left as found, so the node's
settings are never changed.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from greenckpt.cli import demo_cmd, profile_cmd
from greenckpt.cli.main import build_parser
from greenckpt.optimize.profile_data import load_profile
from greenckpt.platform.cpufreq import CpufreqController
from greenckpt.profile import (
    CpuSetting,
    MeterRequest,
    SweepError,
    SweepSpec,
    cpu_settings,
    run_profile,
)
from greenckpt.profile.grid import Cell
from greenckpt.profile.progress import Eta
from greenckpt.profile.run import cells_kept, with_recorded
from tests.platform import fake_power as fp
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, load_spec

SRC = Path(__file__).resolve().parents[2] / "src" / "greenckpt"
MiB = 1 << 20


@pytest.fixture
def meters(tmp_path: Path) -> MeterRequest:
    """The estimator over a SYNTHETIC /proc (a CPU of the shipped TDP table)."""
    root = tmp_path / "root"
    fp.proc_tree(root)
    return MeterRequest("estimator", root=str(root))


def tiny(data: Path) -> SweepSpec:
    data.mkdir(exist_ok=True)
    return SweepSpec(
        path=str(data),
        settings=(CpuSetting.uncontrolled(),),
        processes=(1, 2),
        sizes=(2 * MiB,),
        repetitions=1,
        warmup=0,
        idle_seconds=0.0,
    )


@dataclass
class Recorder:
    """A progress sink that remembers what it heard; Ctrl-C after ``stop_after`` cells."""

    stop_after: int | None = None
    starts: list[tuple[int, int]] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)
    ends: int = 0

    def started(self, cells: int, skipped: int, eta: Eta) -> None:
        self.starts.append((cells, skipped))

    def cell_done(self, index: int, cell: Cell, summary: str, eta: Eta) -> None:
        self.cells.append(cell.label)
        if self.stop_after is not None and len(self.cells) >= self.stop_after:
            raise KeyboardInterrupt

    def finished(self, eta: Eta) -> None:
        self.ends += 1


# ------------------------------------------------------------------ the library call


def test_run_profile_measures_records_its_meters_and_leaves_no_data(
    tmp_path: Path, meters: MeterRequest
) -> None:
    data, out = tmp_path / "data", tmp_path / "node.json"
    rec = Recorder()
    profile = run_profile(tiny(data), out, meters=meters, progress=rec)
    assert profile == load_profile(out)
    assert profile.status == "complete"
    assert {(p.op, p.processes) for p in profile.points} == {
        (op, n) for op in ("write", "read") for n in (1, 2)
    }
    assert all(p.power_source == "estimated" and p.size == 2 * MiB for p in profile.points)
    assert profile.meters == ("estimator",)
    extra = profile.sweep["spec"]["extra"]
    assert extra == {"meters": "estimator", "rate_hz": meters.rate_hz}  # root is not recorded
    assert rec.starts == [(2, 0)] and len(rec.cells) == 2 and rec.ends == 1
    assert list(data.iterdir()) == []


def test_an_interrupted_run_is_resumed_measuring_only_what_it_lacks(
    tmp_path: Path, meters: MeterRequest
) -> None:
    data, out = tmp_path / "data", tmp_path / "node.json"
    spec = tiny(data)
    with pytest.raises(KeyboardInterrupt):
        run_profile(spec, out, meters=meters, progress=Recorder(stop_after=1))
    partial = load_profile(out)
    assert partial.status == "partial" and len(partial.points) == 2
    assert cells_kept(out, None, resumed=False) == 1
    assert list(data.iterdir()) == []
    kept = json.loads(out.read_text())["points"]

    rec = Recorder()
    profile = run_profile(spec, out, meters=meters, resume=True, progress=rec)
    assert rec.starts == [(2, 1)] and rec.cells == ["as found, 2 proc, 2 MiB"]
    assert profile.status == "complete" and len(profile.points) == 4
    assert json.loads(out.read_text())["points"][:2] == kept  # the finished cell as it was

    before = out.read_text()
    again = Recorder()
    assert run_profile(spec, out, meters=meters, resume=True, progress=again) == profile
    assert again.starts == [] and out.read_text() == before  # complete: nothing measured


def test_an_existing_file_is_refused_unless_the_same_sweep_is_resumed(
    tmp_path: Path, meters: MeterRequest
) -> None:
    data, out = tmp_path / "data", tmp_path / "node.json"
    spec = tiny(data)
    run_profile(spec, out, meters=meters)
    doc = json.loads(out.read_text())
    doc["status"] = "partial"
    out.write_text(json.dumps(doc))
    before = out.read_text()
    with pytest.raises(ValueError, match="exists: resume=True to continue it or force=True"):
        run_profile(spec, out, meters=meters)
    with pytest.raises(SweepError, match=r"different sweep \(differs in processes\)"):
        run_profile(replace(spec, processes=(2, 1)), out, meters=meters, resume=True)
    slower = replace(meters, rate_hz=5.0)
    with pytest.raises(SweepError, match=r"differs in extra\.rate_hz"):
        run_profile(spec, out, meters=slower, resume=True)
    assert out.read_text() == before  # a refusal writes nothing
    assert run_profile(spec, out, meters=slower, force=True).sweep["spec"]["extra"]["rate_hz"] == 5


# ------------------------------------------------------------------ the CLI only calls it


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _called(path: Path) -> set[str]:
    """The names of every function or method ``path`` calls (``x.y()`` counts as ``y``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def test_nothing_below_the_cli_imports_it() -> None:
    """The library never reaches the command line (only ``python -m greenckpt`` starts it)."""
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if "cli" not in path.relative_to(SRC).parts[:1] and path.name != "__main__.py"
        if any(n == "greenckpt.cli" or n.startswith("greenckpt.cli.") for n in _imports(path))
    ]
    assert offenders == []


def test_no_command_builds_an_argv_for_another() -> None:
    """Only an entry point parses a command line: no command (the demo used to run the
    profiler this way; the Slurm plugin's agent once parsed ``greenckpt agent`` flags)
    registers another command's parser or parses an argv list. Entry points are main.py and
    a module run with ``python -m`` (it ends in ``if __name__ == "__main__"``), which parse
    their own argv only."""
    for path in sorted((SRC / "cli").glob("*.py")):
        if path.name == "main.py":
            continue
        entry = 'if __name__ == "__main__":' in path.read_text()
        own = {"parse_args", "parse_known_args", "main"} if entry else set()
        calls = _called(path)
        assert not calls & ({"parse_args", "parse_known_args", "build_parser", "main"} - own), path
        registered = {
            node.func.value.id
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "register"
            and isinstance(node.func.value, ast.Name)
        }
        assert not {r for r in registered if r.endswith("_cmd")}, path


def test_the_demos_sweep_is_the_one_its_flags_would_ask_for(tmp_path: Path) -> None:
    """The demo passes typed values (bytes, Hz); they are the sweep its former argv
    (``--size 32MiB --processes 1,2,4 --repeats 2 --warmup 0 --idle 0`` and the CPU flags)
    asked ``greenckpt profile run`` for, meters and all, with the waiting power measured over
    a short window (``--waiting-seconds 0.5s``)."""
    io_dir = tmp_path / "io"
    argv = ["profile", "run", str(io_dir), "-o", str(tmp_path / "p.json"), "--size", "32MiB"]
    argv += ["--processes", "1,2,4", "--repeats", "2", "--warmup", "0", "--idle", "0"]
    argv += ["--waiting-seconds", "0.5s"]
    cli_spec, chooser = profile_cmd.build_spec(build_parser().parse_args(argv))
    demo = replace(demo_cmd.PROFILE_SWEEP, path=str(io_dir), settings=cpu_settings())
    assert with_recorded(demo, MeterRequest()) == cli_spec and chooser is None

    root = FakeSysfsRoot(build_tree(load_spec("intel-acpi-cpufreq"), tmp_path / "t"))
    policy = CpufreqController(root).detect().policies[0]
    flags = build_parser().parse_args([*argv, *demo_cmd.cpu_sweep_args(policy)])
    settings = demo_cmd._cpu_settings(policy)
    assert settings == profile_cmd.build_spec(flags)[0].settings
    choice = demo_cmd.cpu_choice(policy)
    assert choice is not None and [s.hz for s in settings if s.kind == "frequency"] == choice[0]


def test_the_demo_profiles_again_over_a_kept_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``greenckpt demo --reprofile`` measures again over the kept profile (it used to stop
    with "exists: --resume to continue it or --force", flags the demo does not have)."""
    small = replace(demo_cmd.PROFILE_SWEEP, sizes=(MiB,), processes=(1,))
    monkeypatch.setattr(demo_cmd, "PROFILE_SWEEP", small)
    first = demo_cmd._profile(tmp_path, again=False)
    assert "status: complete" in capsys.readouterr().out  # the table of points, on stdout
    assert demo_cmd._profile(tmp_path, again=False) == first
    assert "reusing" in capsys.readouterr().out
    second = demo_cmd._profile(tmp_path, again=True)
    assert second.status == "complete" and load_profile(tmp_path / "profile.json") == second
    assert second.created != first.created or second.points != first.points
