"""``greenckpt profile run``'s lever axes: --uncore, --power-limit, --gpu-clocks and
--gpu-power-limit parsed, refused in one line with exit status 2 (a malformed value, a lever
the node lacks, a value outside the node's range) before anything is measured or changed, and
a real tiny sweep of them on a fake node.

The nodes are fake sysfs trees (``$GREENCKPT_SYSROOT``): an Intel node with uncore and RAPL
package control (:func:`tests.profile.test_lever_axes.add_levers`) and the same node without;
no NVML (``$GREENCKPT_NVML_LIBRARY`` names a missing file). The sweep's I/O is real and tiny
(1 MiB under ``tmp_path``), metered by the estimator over a SYNTHETIC /proc.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.cli.main import build_parser, main
from greenckpt.cli.profile_cmd import build_spec
from greenckpt.optimize.profile_data import load_profile
from greenckpt.platform.levers import node_levers
from greenckpt.profile.lever_cells import LeverAxes
from tests.platform import fake_power as fp
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, diff, snapshot
from tests.profile.test_lever_axes import UNCORE_MAX, UNCORE_MIN, add_levers

TINY = [
    "--frequencies",
    "asfound",
    "--size",
    "1MiB",
    "--block-size",
    "1MiB",
    "--processes",
    "1",
    "--repeats",
    "1",
    "--warmup",
    "0",
    "--idle",
    "0",
    "--waiting-seconds",
    "0",
    "--meters",
    "estimator",
    "--quiet",
]


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSysfsRoot:
    """A node with uncore and power-limit control (and a SYNTHETIC /proc for the estimator)."""
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    add_levers(tree)
    fp.proc_tree(tree)
    return _use(tree, tmp_path, monkeypatch)


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSysfsRoot:
    """The same node without uncore or powercap control."""
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "bare")
    fp.proc_tree(tree)
    return _use(tree, tmp_path, monkeypatch)


def _use(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSysfsRoot:
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(tree))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", str(tmp_path / "no-libnvidia-ml.so.1"))
    (tmp_path / "data").mkdir()
    return FakeSysfsRoot(tree)


def argv(tmp_path: Path, *extra: str) -> list[str]:
    return ["profile", "run", str(tmp_path / "data"), "-o", str(tmp_path / "p.json"), *TINY, *extra]


def refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``args``: exit status 2, one line on stderr and no traceback; return the line."""
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(args))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def nothing_done(tree: FakeSysfsRoot, before: dict[str, bytes], tmp_path: Path) -> None:
    assert diff(before, snapshot(tree.path)) == []
    assert not (tmp_path / "p.json").exists()
    assert list((tmp_path / "data").iterdir()) == []
    assert not list(tmp_path.glob("run/greenckpt/*"))  # no state file


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--uncore", "fast"], ("--uncore", "fast")),
        (["--uncore", "1.8GHz,,2GHz"], ("--uncore", "empty item")),
        (["--uncore", "0"], ("--uncore", "positive number of kHz")),
        (["--uncore", "1800000.5"], ("--uncore", "whole")),
        (["--uncore", "1.8GHz,1800000"], ("--uncore", "twice")),
        (["--power-limit", "-5"], ("--power-limit", "above 0")),
        (["--power-limit", "lots"], ("--power-limit", "lots")),
        (["--gpu-clocks", "877"], ("--gpu-clocks", "MEM:GR")),
        (["--gpu-clocks", "877:fast"], ("--gpu-clocks", "MEM:GR")),
        (["--gpu-power-limit", "0"], ("--gpu-power-limit", "above 0")),
    ],
)
def test_malformed_values_are_one_line_and_exit_2(
    node: FakeSysfsRoot,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    words: tuple[str, ...],
) -> None:
    before = snapshot(node.path)
    line = refused(argv(tmp_path, *flags), capsys)
    assert all(w in line for w in words), line
    nothing_done(node, before, tmp_path)


@pytest.mark.parametrize(
    ("flag", "value", "name"),
    [
        ("--uncore", "1.8GHz", "uncore frequency"),
        ("--uncore", "all", "uncore frequency"),
        ("--power-limit", "100", "power limit"),
        ("--gpu-clocks", "877:1410", "gpu clocks"),
        ("--gpu-power-limit", "200W", "gpu power limit"),
    ],
)
def test_a_lever_the_node_lacks_is_refused_naming_it_and_why(
    bare: FakeSysfsRoot,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    name: str,
) -> None:
    before = snapshot(bare.path)
    reason = {i.name: i.reason for i in node_levers(bare)}[name]
    line = refused(argv(tmp_path, flag, value), capsys)
    assert line.endswith(f"{flag}: this node has no {name} control ({reason})"), line
    nothing_done(bare, before, tmp_path)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--uncore", "1.2GHz,3GHz"], ("3",)),
        (["--uncore", "500MHz"], ("500",)),
        (["--power-limit", "100,250"], ("250", "intel-rapl:")),
    ],
)
def test_values_outside_the_range_are_refused_before_anything_runs(
    node: FakeSysfsRoot,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    words: tuple[str, ...],
) -> None:
    before = snapshot(node.path)
    line = refused(argv(tmp_path, *flags), capsys)
    assert all(w in line for w in words), line
    nothing_done(node, before, tmp_path)


def test_the_flags_become_the_sweeps_axes(node: FakeSysfsRoot, tmp_path: Path) -> None:
    ns = build_parser().parse_args(
        argv(
            tmp_path,
            "--uncore",
            "1200000,1.8GHz",
            "--power-limit",
            "100,150W",
            "--gpu-clocks",
            "877:1410,877MHz:1005",
            "--gpu-power-limit",
            "250",
        )
    )
    spec, _ = build_spec(ns)
    assert spec.levers == LeverAxes(
        uncore_khz=(1_200_000, 1_800_000),
        power_limits_w=(100.0, 150.0),
        gpu_clocks=((877, 1410), (877, 1005)),
        gpu_power_limits_w=(250.0,),
    )
    spec_all, _ = build_spec(build_parser().parse_args(argv(tmp_path, "--uncore", "all")))
    assert spec_all.levers.uncore_khz[0] == UNCORE_MIN
    assert spec_all.levers.uncore_khz[-1] == UNCORE_MAX
    plain, _ = build_spec(build_parser().parse_args(argv(tmp_path)))
    assert plain.levers == LeverAxes()


def test_help_names_the_lever_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["profile", "run", "--help"])
    text = capsys.readouterr().out
    for flag in ("--uncore KHZ,...|all", "--power-limit W,...", "--gpu-clocks MEM:GR,..."):
        assert flag in text
    assert "--gpu-power-limit W,..." in text and "as found" in text


def test_a_tiny_sweep_of_two_uncore_values_and_two_limits_on_the_command_line(
    node: FakeSysfsRoot, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(node.path)
    args = argv(tmp_path, "--uncore", "1.2GHz,1.8GHz", "--power-limit", "100,150")
    assert main(args) == 0, capsys.readouterr().err
    assert diff(before, snapshot(node.path)) == []
    prof = load_profile(tmp_path / "p.json")
    assert prof.status == "complete" and len(prof.points) == 2 * 9
    assert {(p.uncore_khz, p.power_limit_w) for p in prof.points} == {
        (u, w) for u in (None, 1_200_000, 1_800_000) for w in (None, 100.0, 150.0)
    }
    assert prof.levers["uncore frequency"] and prof.levers["power limit"]
    assert prof.sweep["spec"]["levers"]["uncore_khz"] == [1_200_000, 1_800_000]
