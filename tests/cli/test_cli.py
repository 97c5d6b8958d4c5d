"""The command line: output, JSON, and one-line errors with exit status 2 for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from tests.conftest import EXAMPLE_PROFILE

BASE = [
    "plan",
    "--profile",
    str(EXAMPLE_PROFILE),
    "--ckpt-size",
    "64GiB",
    "--mtbf",
    "14h",
    "--app-power",
    "471.1W",
]


def test_plan_table_says_synthetic(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(BASE) == 0
    out = capsys.readouterr().out
    assert "SYNTHETIC profile" in out
    assert "EPE (modelled, synthetic power)" in out
    for governor in ("performance", "powersave", "ondemand"):
        assert governor in out
    assert "2.10 GHz" in out


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--json", "--pareto", "--work", "7d", "--nodes", "4"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile_synthetic"] is True
    assert doc["power_source"] == "synthetic"
    assert doc["inputs"]["mtbf_s"] == pytest.approx(14 * 3600 / 4)
    assert doc["plan"]["checkpoint"]["processes"] <= 2
    assert doc["plan"]["expected_energy_J_job"] == pytest.approx(
        4 * doc["plan"]["expected_energy_J_per_node"]
    )
    assert [b["name"] for b in doc["baselines"]] == ["performance", "powersave", "ondemand"]
    assert all(b["savings"]["epe"] > 0 for b in doc["baselines"])
    assert len(doc["pareto_front"]) > 1


def test_job_mtbf_and_constraints(capsys: pytest.CaptureFixture[str]) -> None:
    args = [a if a != "--mtbf" else "--job-mtbf" for a in BASE]
    assert main([*args, "--max-slowdown", "0%", "--power-cap", "400W", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["plan"]["time_factor"] == pytest.approx(doc["fastest_time_factor"], rel=1e-9)
    assert doc["plan"]["checkpoint"]["power_W"] <= 400


def _replace(flag: str, value: str) -> list[str]:
    args = list(BASE)
    args[args.index(flag) + 1] = value
    return args


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (_replace("--ckpt-size", "64"), "'64' has no unit"),
        (_replace("--ckpt-size", "64GiBs"), "unknown size unit"),
        ([*BASE, "--mtbf=-3h"], "negative"),
        (_replace("--mtbf", "0h"), "zero"),
        (_replace("--app-power", "nan W"), "not a finite number"),
        (_replace("--app-power", "471.1"), "has no unit"),
        (_replace("--profile", "/nonexistent/p.json"), "does not exist"),
        (_replace("--mtbf", "1min"), "not longer than the fastest checkpoint"),
        ([*BASE, "--form", "vaidya"], "invalid choice"),
        ([*BASE, "--nodes", "0"], "must be an integer from 1"),
        (BASE[:-2], "--app-power"),
        ([*BASE, "--nodes", "1" + "0" * 400], "must be an integer from 1"),
        (_replace("--mtbf", "1e308s"), "beyond the model's range"),
        ([*BASE[:-4], "--job-mtbf", "1e-320s", *BASE[-2:]], "too short to be a failure rate"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        code = main(argv)
        raise SystemExit(code)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err


def test_corrupt_profile_and_missing_operation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"format": "greenckpt-profile", "format_version": 1, "points": [{"op": "write"}]}'
    )
    assert main(_replace("--profile", str(bad))) == 2
    err = capsys.readouterr().err
    assert "points[0]" in err and err.count("\n") == 1
    doc = json.loads(EXAMPLE_PROFILE.read_text())
    doc["points"] = [p for p in doc["points"] if p["op"] == "write"]
    writes_only = tmp_path / "w.json"
    writes_only.write_text(json.dumps(doc))
    assert main(_replace("--profile", str(writes_only))) == 2
    assert "no 'read' points" in capsys.readouterr().err


def test_python_dash_m_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "greenckpt", *BASE, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["plan"]["epe_W"] > 0


def test_odd_profile_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for path, message in (
        (deep, "nested too deeply"),
        (binary, "not a UTF-8"),
        (tmp_path, "cannot read profile file"),
    ):
        assert main(_replace("--profile", str(path))) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_governor_only_profile_explains_missing_baselines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(EXAMPLE_PROFILE.read_text())
    doc["points"] = [p for p in doc["points"] if p["governor"] == "ondemand"]
    prof = tmp_path / "ondemand.json"
    prof.write_text(json.dumps(doc))
    assert main([*_replace("--profile", str(prof)), "--json"]) == 0
    baselines = {b["name"]: b for b in json.loads(capsys.readouterr().out)["baselines"]}
    assert baselines["ondemand"]["evaluable"]
    assert not baselines["performance"]["evaluable"]
    assert "or at fixed frequencies" in baselines["performance"]["how"]
