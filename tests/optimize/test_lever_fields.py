"""The levers beyond the core clock in the profile format (issue 33): the point fields and the
profile's ``levers`` metadata are read, checked, written, keyed and described."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from greenckpt.optimize.profile_data import (
    ProfileError,
    cell_key,
    check_unique_cells,
    describe_cell,
    load_profile,
    profile_from_json,
    profile_to_json,
)

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "examples" / "profiles"
LEVERS = PROFILES / "synthetic-levers.json"


def _doc(**point_extra: Any) -> dict[str, Any]:
    point = {
        "op": "write",
        "frequency_hz": 2.0e9,
        "processes": 2,
        "throughput_Bps": 1e9,
        "power_W": 100.0,
        "power_source": "measured",
        **point_extra,
    }
    return {
        "format": "greenckpt-profile",
        "format_version": 2,
        "points": [point, {**point, "op": "read"}],
    }


def test_lever_fields_round_trip() -> None:
    doc = _doc(
        uncore_khz=1_800_000,
        power_limit_W=95.5,
        gpu_clock_MHz=1410,
        gpu_memory_MHz=1215,
        gpu_power_limit_W=250.0,
    )
    doc["levers"] = {"uncore frequency": True, "per-core split": False, "gpu clocks": True}
    prof = profile_from_json(doc)
    p = prof.points[0]
    assert (p.uncore_khz, p.power_limit_w, p.gpu_clock_mhz, p.gpu_memory_mhz) == (
        1_800_000,
        95.5,
        1410,
        1215,
    )
    assert p.gpu_power_limit_w == 250.0
    assert not p.levers_as_found
    assert prof.levers == {"uncore frequency": True, "per-core split": False, "gpu clocks": True}
    out = profile_to_json(prof)
    assert out["points"][0]["uncore_khz"] == 1_800_000
    assert out["points"][0]["power_limit_W"] == 95.5
    assert out["levers"]["per-core split"] is False
    assert profile_from_json(json.loads(json.dumps(out))) == prof


def test_points_without_levers_are_written_as_before() -> None:
    prof = profile_from_json(_doc())
    assert prof.points[0].levers_as_found
    assert prof.levers == {}
    out = profile_to_json(prof)
    assert "levers" not in out
    for key in ("uncore_khz", "power_limit_W", "gpu_clock_MHz", "gpu_memory_MHz"):
        assert key not in out["points"][0]


@pytest.mark.parametrize("path", sorted(PROFILES.glob("*.json")), ids=lambda p: p.name)
def test_example_profiles_load_and_round_trip(path: Path) -> None:
    prof = load_profile(path)
    assert profile_from_json(profile_to_json(prof)) == prof
    if path != LEVERS:
        assert all(p.levers_as_found for p in prof.points)
        assert prof.levers == {}


def test_the_synthetic_levers_profile_is_labelled_synthetic() -> None:
    raw = json.loads(LEVERS.read_text())
    assert raw["synthetic"] is True
    assert "SYNTHETIC" in raw["note"]
    assert {p["power_source"] for p in raw["points"]} == {"synthetic"}
    assert {w["power_source"] for w in raw["waiting"]} == {"synthetic"}
    prof = load_profile(LEVERS)
    assert prof.levers["per-core split"] is True
    assert prof.levers["gpu clocks"] is False


def test_the_synthetic_levers_profile_is_its_generator_output() -> None:
    spec = importlib.util.spec_from_file_location(
        "generate_synthetic_levers", PROFILES / "generate_synthetic_levers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.profile() == json.loads(LEVERS.read_text())


def test_uncore_is_part_of_the_cell_key() -> None:
    base = profile_from_json(_doc()).points[0]
    other = profile_from_json(_doc(uncore_khz=1_200_000)).points[0]
    assert cell_key(base) != cell_key(other)
    check_unique_cells([base, other])  # two cells, not a duplicate
    assert "uncore 1.20 GHz" in describe_cell(other)
    limited = profile_from_json(_doc(power_limit_W=80)).points[0]
    assert "package limit 80 W" in describe_cell(limited)
    with pytest.raises(ProfileError, match="same cell"):
        check_unique_cells([other, other])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"uncore_khz": 0}, r"points\[0\]\.uncore_khz: expected an integer >= 1"),
        ({"uncore_khz": 1.5e6}, r"points\[0\]\.uncore_khz: expected an integer >= 1"),
        ({"uncore_khz": True}, r"points\[0\]\.uncore_khz"),
        ({"power_limit_W": -5}, r"points\[0\]\.power_limit_W: must be a finite number > 0"),
        ({"power_limit_W": "90"}, r"points\[0\]\.power_limit_W: expected a number"),
        ({"gpu_power_limit_W": 0}, r"points\[0\]\.gpu_power_limit_W: must be"),
        ({"gpu_clock_MHz": 1410}, r"points\[0\]: give both gpu_clock_MHz and gpu_memory_MHz"),
        ({"gpu_memory_MHz": 1215}, r"points\[0\]: give both gpu_clock_MHz and gpu_memory_MHz"),
    ],
)
def test_bad_lever_fields_are_refused_naming_the_path(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message) as info:
        profile_from_json(_doc(**extra))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("levers", "message"),
    [
        ([], r"profile\.levers: expected an object"),
        ({"per core split": True}, r"profile\.levers: unknown lever 'per core split'"),
        ({"uncore frequency": "yes"}, r"profile\.levers\.uncore frequency: expected true or"),
    ],
)
def test_bad_levers_metadata_is_refused(levers: Any, message: str) -> None:
    doc = _doc()
    doc["levers"] = levers
    with pytest.raises(ProfileError, match=message):
        profile_from_json(doc)


def test_a_bad_lever_in_a_file_names_the_file(tmp_path: Path) -> None:
    doc = copy.deepcopy(json.loads(LEVERS.read_text()))
    doc["points"][3]["uncore_khz"] = -1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ProfileError, match=r"bad\.json: profile\.points\[3\]\.uncore_khz"):
        load_profile(bad)
