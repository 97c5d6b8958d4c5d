"""``greenckpt levels``: multilevel evaluation and optimisation from a TOML file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.model import expected_multilevel, fti_schedule
from greenckpt.optimize.levels_file import load_levels
from tests.conftest import ROOT

CONFIG = ROOT / "examples" / "levels" / "fti-4-levels.toml"


def test_given_ckp_3_5_7_11_matches_the_model_and_the_optimum_is_better(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "levels",
        "--config",
        str(CONFIG),
        "--intervals",
        "3min,5min,7min,11min",
        "--quantum",
        "1min",
        "--json",
    ]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    levels, app_power, source = load_levels(str(CONFIG))
    assert source == "synthetic" and doc["power_source"] == "synthetic"
    want = expected_multilevel(levels, fti_schedule([180, 300, 420, 660], quantum=60), app_power)
    given = doc["results"]["given"]
    assert given["epe_W"] == pytest.approx(want.epe)
    assert given["time_factor"] == pytest.approx(want.time_factor)
    best = doc["results"]["optimised"]
    assert best["epe_W"] < given["epe_W"]
    assert best["intervals_s"] == sorted(best["intervals_s"])
    assert "modelled" in doc["energy_figures"]


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["levels", "--config", str(CONFIG)]) == 0
    out = capsys.readouterr().out
    assert "optimised for energy" in out and "synthetic powers" in out and "L4 PFS" in out


@pytest.mark.parametrize(
    ("text", "extra", "message"),
    [
        ('app_power = "300W"\npower_source = "measured"\n', [], "at least one [[level]]"),
        ('app_power = "300"\n[[level]]\n', [], "app_power: '300' has no unit"),
        (
            'app_power = "300W"\npower_source = "measured"\n[[level]]\nckpt_time = "5s"\n'
            'restart_time = "5s"\nmtbf = "6"\nckpt_power = "1W"\nrestart_power = "1W"\n',
            [],
            "level[0].mtbf",
        ),
        ("app_power = [\n", [], "not valid TOML"),
        ('app_power = "300W"\n[[level]]\n', [], "power_source: say where the powers come from"),
        (
            'app_power = "300W"\npower_source = "measured"\n[[level]]\nckpt_time = "5min"\n'
            'restart_time = "5s"\nmtbf = "1s"\nckpt_power = "1W"\nrestart_power = "1W"\n',
            [],
            "no schedule makes progress",
        ),
    ],
)
def test_bad_config(
    tmp_path: Path, text: str, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "levels.toml"
    cfg.write_text(text)
    assert main(["levels", "--config", str(cfg), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--intervals", "3min,5min"], "give 4 intervals"),
        (["--intervals", "3,5,7,11"], "has no unit"),
        (["--intervals", "90s,5min,7min,11min", "--quantum", "1min"], "multiple of the quantum"),
        (["--quantum", "0s"], "--quantum"),
    ],
)
def test_bad_flags(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["levels", "--config", str(CONFIG), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_missing_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["levels", "--config", "/nonexistent.toml"]) == 2
    assert "cannot read levels file" in capsys.readouterr().err


def test_a_top_level_that_never_fails_is_never_checkpointed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "never.toml"
    cfg.write_text(CONFIG.read_text().replace('mtbf = "1w"', 'mtbf = "never"'))
    assert main(["levels", "--config", str(cfg), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["results"]["optimised"]["intervals_s"][3] is None  # infinite: strict JSON null
    assert doc["results"]["optimised"]["per_useful_second"]["checkpoint"]["L4 PFS"] == 0.0
