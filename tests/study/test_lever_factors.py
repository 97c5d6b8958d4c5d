"""The levers beyond the core clock as study factors (issue 33): examples/studies/
powercheck2015.toml parses into its design on a node that has the levers, a node without them
refuses the factor in one line before anything runs, and each level becomes the ``--policy
fixed`` option it names. The nodes are SYNTHETIC sysfs trees (tests/platform/fake_levers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.study import design
from greenckpt.study.design import Run
from greenckpt.study.runner import runtime_options
from greenckpt.study.spec import StudyError, load_study
from greenckpt.testing.cpu import build_tree
from tests.conftest import ROOT
from tests.platform.fake_levers import build_node

POWERCHECK = ROOT / "examples" / "studies" / "powercheck2015.toml"


@pytest.fixture
def lever_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tree = build_node(tmp_path / "node")
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(tree))
    return tree


@pytest.fixture
def bare_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tree = build_tree("vm-no-cpufreq", tmp_path / "vm")  # as this VM: no cpufreq, no RAPL
    monkeypatch.setenv("GREENCKPT_SYSROOT", str(tree))
    return tree


def test_powercheck2015_parses_into_its_design_where_the_levers_exist(lever_node: Path) -> None:
    study = load_study(POWERCHECK)
    assert len(design.cells(study)) == 8 and len(design.runs(study)) == 24
    assert "powercheck2015" in study.mirrors.lower()
    assert study.baseline == {
        "io_processes": 4,
        "waiting_frequency": "as found",
        "power_limit": "as found",
    }
    assert "**powercheck2015.toml**" in (POWERCHECK.parent / "README.md").read_text()


def test_a_node_without_the_levers_refuses_the_study_in_one_line(
    bare_node: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(StudyError, match=r"powercheck2015.toml:\d+: impossible level: this node "
                       r"has no power limit control \(no intel-rapl zone"):  # fmt: skip
        load_study(POWERCHECK)
    assert main(["study", str(POWERCHECK), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no power limit control" in err and "Traceback" not in err


def test_each_lever_level_becomes_the_fixed_option_it_names(lever_node: Path) -> None:
    study = load_study(POWERCHECK)
    levels: dict[str, object] = {"io_processes": 1, "frequency": "2.4GHz"}
    capped = Run(
        "r0001", "c", {**levels, "waiting_frequency": "1.2GHz", "power_limit": "80W"}, 0, 0
    )
    options, nodes = runtime_options(study, capped)
    assert options.policy == "fixed" and nodes is None
    assert (options.io_processes, options.frequency_hz) == (1, 2_400_000_000)
    assert (options.waiting_frequency_hz, options.power_limit_w) == (1_200_000_000, 80.0)
    found = {"waiting_frequency": "as found", "power_limit": "as found"}
    stock = Run("r0002", "c", {**levels, "io_processes": 4, **found}, 0, 0)
    options, _ = runtime_options(study, stock)
    assert options.waiting_frequency_hz is None and options.power_limit_w is None
    fixed = options.fixed
    assert fixed.levers == {}  # every lever as found


def _study(tmp_path: Path, factors: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(
        '[study]\nname = "s"\n[app]\ncommand = ["true"]\n[factors]\n' + factors, encoding="utf-8"
    )
    return path


@pytest.mark.parametrize(
    ("factors", "message"),
    [
        ('power_limit = ["lots"]', "power_limit level 'lots' is not a power such as \"80W\""),
        ('uncore = ["1.8"]', "uncore level '1.8' is not a frequency such as \"1.8GHz\""),
        ('gpu_clocks = ["877-1380"]', "gpu_clocks level '877-1380' is not memory:graphics"),
        (
            'waiting_frequency = ["1.2GHz"]',
            "waiting_frequency is the per-core split's waiting cores: it needs a frequency",
        ),
        (
            'policy = ["profile"]\nuncore = ["1.8GHz"]',
            "uncore is applied with greenckpt run --policy fixed: it cannot vary beside policy",
        ),
    ],
)
def test_a_bad_lever_level_is_one_line(
    lever_node: Path, tmp_path: Path, factors: str, message: str
) -> None:
    with pytest.raises(StudyError) as info:
        load_study(_study(tmp_path, factors))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_uncore_and_gpu_levels_parse(lever_node: Path, tmp_path: Path) -> None:
    study = load_study(_study(tmp_path, 'uncore = ["as found", "1.8GHz", "2000000kHz"]'))
    options, _ = runtime_options(study, Run("r", "c", {"uncore": "2000000kHz"}, 0, 0))
    assert options.uncore_khz == 2_000_000 and options.policy == "fixed"
