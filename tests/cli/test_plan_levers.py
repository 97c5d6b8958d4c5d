"""``greenckpt plan`` with the levers beyond the core clock (issue 33): the chosen uncore
frequency, power limit, waiters' frequency (per-core split) and GPU levers are printed, a lever
the node lacks is said absent, and the savings over the frequency-only plan and over the
governors are shown — on the SYNTHETIC profile examples/profiles/synthetic-levers.json, whose
figures docs/model.md derives ("Levers beyond the core clock")."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from greenckpt.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
LEVERS = ROOT / "examples" / "profiles" / "synthetic-levers.json"
OLD = ROOT / "examples" / "profiles" / "synthetic-pcie-flash.json"

BASE = [
    "plan",
    "--profile",
    str(LEVERS),
    "--ckpt-size",
    "64GB",
    "--node-mtbf",
    "24h",
    "--app-power",
    "250W",
    "--waiting",
    "spin",
]

WANT_WRITE_SAVED = 1 - (141.25 / 2.0e9) / (154.0 / 1.8e9)
"""SYNTHETIC: the plan's 141.25 W at 2 GB/s against the frequency-only plan's 154 W at
1.8 GB/s (tests/optimize/test_planner_levers.py derives both)."""


def _row(out: str, first: str) -> list[str]:
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no table row {first!r} in:\n{out}")


def test_plan_prints_the_chosen_levers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(BASE) == 0
    out = capsys.readouterr().out
    assert "SYNTHETIC profile" in out
    assert _row(out, "uncore frequency") == ["uncore frequency", "swept", "1.80 GHz", "1.80 GHz"]
    assert _row(out, "power limit") == ["power limit", "swept", "as found", "as found"]
    assert _row(out, "per-core split") == [
        "per-core split",
        "swept",
        "waiting ranks at 1.20 GHz",
        "waiting ranks at 1.20 GHz",
    ]
    for gpu in ("gpu clocks", "gpu power limit"):
        assert _row(out, gpu) == [gpu, "absent", "absent on the node", "absent on the node"]
    assert _row(out, "checkpoint")[1:3] == ["1.80 GHz", "4"]


def test_plan_prints_the_savings_over_the_frequency_only_plan_and_the_governors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(BASE) == 0
    out = capsys.readouterr().out
    assert "Against the frequency-only plan" in out
    table = out[out.index("Against the frequency-only plan") :].splitlines()
    fo = next(line for line in table if line.strip().startswith("frequency-only "))
    epe_saved, write_saved, read_saved = (float(x) for x in re.findall(r"(-?[\d.]+) %", fo))
    assert epe_saved > 0
    assert write_saved == pytest.approx(WANT_WRITE_SAVED * 100, abs=0.05)
    assert read_saved == pytest.approx(WANT_WRITE_SAVED * 100, abs=0.05)  # same shape
    assert "frequency-only: checkpoint 1.20 GHz, 16 I/O processes" in out
    for governor in ("performance", "powersave", "ondemand"):
        line = next(x for x in out.splitlines() if x.strip().startswith(governor + " "))
        saved = re.findall(r"(-?[\d.]+) %", line)
        assert len(saved) == 3 and all(float(s) > 0 for s in saved), line


def test_plan_json_has_the_levers_and_the_frequency_only_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BASE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["profile_synthetic"] is True and doc["power_source"] == "synthetic"
    levers = doc["levers"]
    assert levers["uncore frequency"]["checkpoint"] == 1_800_000
    assert levers["uncore frequency"]["node_has_it"] is True
    assert levers["power limit"]["checkpoint"] is None
    assert levers["per-core split"]["checkpoint"] == {
        "key": "1200000000",
        "frequency_hz": 1200000000,
    }
    assert levers["gpu clocks"]["in_profile"] == "absent"
    assert levers["gpu clocks"]["node_has_it"] is False
    ckpt = doc["plan"]["checkpoint"]
    assert ckpt["uncore_khz"] == 1_800_000
    assert ckpt["waiting_setting"] == {
        "setting": "1200000000",
        "label": "1.20 GHz",
        "per_core_split": True,
    }
    assert ckpt["phase_power_W"] == pytest.approx(141.25)
    fo = doc["frequency_only_plan"]
    assert fo["evaluable"] and fo["name"] == "frequency-only"
    assert "uncore_khz" not in fo["checkpoint"]
    assert fo["checkpoint"]["waiting_setting"]["per_core_split"] is False
    assert fo["savings"]["write_energy_per_GB"] == pytest.approx(WANT_WRITE_SAVED)
    assert [b["name"] for b in doc["baselines"]] == ["performance", "powersave", "ondemand"]
    assert all(b["savings"]["epe"] > 0 for b in doc["baselines"])


def test_a_profile_without_levers_says_so_and_prints_as_before(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", "--profile", str(OLD), "--ckpt-size", "64GiB", "--mtbf", "14h"]
    assert main([*args, "--app-power", "471.1W"]) == 0
    out = capsys.readouterr().out
    assert "Levers beyond the core clock" not in out
    assert "frequency-only" not in out
    assert main([*args, "--app-power", "471.1W", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["frequency_only_plan"] is None
    for entry in doc["levers"].values():
        assert entry["in_profile"] == "not recorded" and entry["node_has_it"] is None
        assert entry["checkpoint_text"] == "not in the profile"


def test_a_bad_lever_field_exits_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(LEVERS.read_text())
    doc["points"][0]["power_limit_W"] = -1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    args = [*BASE]
    args[args.index(str(LEVERS))] = str(bad)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "profile.points[0].power_limit_W" in err and "\n" not in err


def test_pareto_front_names_the_levers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*BASE, "--pareto", "--json"]) == 0
    front = json.loads(capsys.readouterr().out)["pareto_front"]
    last = front[-1]["checkpoint"]  # the least EPE: the plan's own choice
    assert last == {
        "setting": "1.80 GHz",
        "processes": 4,
        "uncore_khz": 1_800_000,
        "waiting_setting": "1.20 GHz",
    }
    assert main([*BASE, "--pareto"]) == 0
    assert "uncore 1.80 GHz, waiters 1.20 GHz" in capsys.readouterr().out
