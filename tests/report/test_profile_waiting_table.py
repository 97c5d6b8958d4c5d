"""``greenckpt profile show`` lists the profile's waiting entries (what one waiting rank adds
to a phase's power, its spread, CPU share and source) when it has them, and nothing when not.

The profiles are hand-made: their figures are labelled *estimated* (or SYNTHETIC) and describe
no machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from greenckpt.cli.main import main
from greenckpt.optimize.profile_data import load_profile


def _doc(waiting: list[dict[str, Any]] | None) -> dict[str, Any]:
    point = {"frequency_hz": 2e9, "governor": None, "processes": 1, "power_source": "estimated"}
    doc: dict[str, Any] = {
        "format": "greenckpt-profile",
        "format_version": 2,
        "synthetic": False,
        "machine": {"cores": 4},
        "storage": {"key": "test"},
        "points": [
            {**point, "op": "write", "throughput_Bps": 2e8, "power_W": 40.0},
            {**point, "op": "read", "throughput_Bps": 4e8, "power_W": 35.0},
        ],
    }
    if waiting is not None:
        doc["waiting"] = waiting
    return doc


def _entry(mode: str, watts: float, **more: Any) -> dict[str, Any]:
    entry = {"frequency_hz": 2e9, "governor": None, "cstates": None, "mode": mode, "ranks": 4}
    return {**entry, "power_per_rank_W": watts, "power_source": "estimated", **more}


ENTRIES = [
    _entry("polite", -0.031, power_spread_W=0.12, cpu_fraction=0.034),
    _entry("spin", 6.5, power_spread_W=0.4, cpu_fraction=0.991, cstates=False, reliable=False),
]


def _show(path: Path, capsys: pytest.CaptureFixture[str], *more: str) -> str:
    assert main(["profile", "show", str(path), *more]) == 0
    return capsys.readouterr().out


def test_show_lists_every_waiting_entry_with_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_doc(ENTRIES)))
    text = _show(path, capsys)
    assert "Waiting ranks: power each adds to a phase" in text
    rows = [line.split() for line in text.splitlines() if "polite" in line or "spin" in line]
    assert rows == [
        [
            "2.00",
            "GHz",
            "as",
            "found",
            "polite",
            "4",
            "-31.0",
            "mW",
            "120.0",
            "mW",
            "3.4%",
            "estimated",
        ],
        ["2.00", "GHz", "off", "spin", "4", "6.50", "W", "400.0", "mW", "99.1%", "estimated", "!"],
    ]
    assert "power: estimated (a model of the node, not a meter). per rank" in " ".join(text.split())
    doc = json.loads(_show(path, capsys, "--json"))
    assert [w["mode"] for w in doc["waiting"]] == ["polite", "spin"]
    assert doc["waiting"][1]["reliable"] is False


def test_a_synthetic_entry_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc([_entry("spin", 9.0, power_source="synthetic")])
    doc["synthetic"] = True
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    text = " ".join(_show(path, capsys).split())
    assert "9.00 W - SYNTHETIC" in text and "power: SYNTHETIC — not a measurement. per rank" in text


def test_show_prints_no_waiting_table_without_entries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_doc(None)))
    text = _show(path, capsys)
    assert "Profile points" in text and "Waiting ranks" not in text and "per rank" not in text
    assert "waiting" not in json.loads(_show(path, capsys, "--json"))
    assert load_profile(path).waiting == ()
