"""The profile file format: loading, validation messages, round trip."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from greenckpt.optimize import ProfileError, load_profile, profile_from_json, profile_to_json
from tests.conftest import EXAMPLE_PROFILE


def test_example_profile_loads_and_is_labelled_synthetic() -> None:
    prof = load_profile(EXAMPLE_PROFILE)
    assert prof.synthetic
    assert prof.power_sources == {"synthetic"}
    assert "SYNTHETIC" in prof.note
    assert len(prof.frequencies) == 5 and len(prof.process_counts) == 8
    assert {p.op for p in prof.points} == {"write", "read"}


def test_round_trip(small_doc: dict[str, Any]) -> None:
    prof = profile_from_json(small_doc)
    again = profile_from_json(json.loads(json.dumps(profile_to_json(prof))))
    assert again == prof


def _broken(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["format"], "something-else", "profile.format: expected 'greenckpt-profile'"),
        (["format_version"], 99, "format_version: this greenckpt reads versions 1, 2"),
        (["points"], [], "non-empty list"),
        (
            ["points", 0, "throughput_Bps"],
            -5,
            r"points\[0\].throughput_Bps: must be a finite number > 0",
        ),
        (["points", 1, "power_W"], "300W", r"points\[1\].power_W: expected a number"),
        (["points", 2, "op"], "append", r"points\[2\].op: expected one of write, read"),
        (["points", 3, "processes"], 0, r"points\[3\].processes: expected an integer >= 1"),
        (["points", 0, "governor"], "ondemand", "at most one of frequency_hz"),
        (
            ["points", 0, "power_source"],
            "guessed",
            "expected one of measured, estimated, synthetic",
        ),
        (["points", 0, "power_W"], float("nan"), "finite number"),
        (["synthetic"], False, "must say synthetic: true"),
        (["points", 0, "throughput_Bps"], KeyError, "expected a number, got None"),
    ],
)
def test_malformed_profiles_name_the_field(
    small_doc: dict[str, Any], path: list[Any], value: Any, message: str
) -> None:
    with pytest.raises(ProfileError, match=message) as info:
        profile_from_json(_broken(small_doc, path, value))
    assert "\n" not in str(info.value)


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileError, match=r"bad.json: not valid JSON \(line 1"):
        load_profile(bad)
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ProfileError, match="top level"):
        load_profile(arr)


def _v2(doc: dict[str, Any]) -> dict[str, Any]:
    doc["format_version"] = 2
    return doc


def test_version_2_allows_an_uncontrolled_frequency_and_version_1_does_not(
    small_doc: dict[str, Any],
) -> None:
    # One frequency's points only: without their frequencies the others would be duplicates.
    small_doc["points"] = [p for p in small_doc["points"] if p["frequency_hz"] == 1e9]
    for p in small_doc["points"]:
        p["frequency_hz"] = None
    with pytest.raises(ProfileError, match="version 1 profile cannot say the frequency"):
        profile_from_json(copy.deepcopy(small_doc))
    prof = profile_from_json(_v2(small_doc))
    assert all(p.uncontrolled and p.setting_label == "as found" for p in prof.points)
    assert {p.setting_key for p in prof.points} == {"uncontrolled"}


def test_version_2_fields_round_trip(small_doc: dict[str, Any]) -> None:
    doc = _v2(small_doc)
    doc.update(
        status="partial",
        created="2026-11-22T15:00:00+00:00",
        tool="greenckpt 0.1.0",
        power_domains=["rapl/package-0"],
        sweep={"mode": "full", "done": []},
        idle_power={"value_W": 40.0, "source": "synthetic", "spread_W": 0.5},
    )
    doc["points"][0].update(
        size_bytes=1 << 30,
        block_size_bytes=1 << 20,
        layout="file_per_process",
        read_method="o_direct",
        reliable=False,
        runs=[{"throughput_Bps": 2e8, "power_W": 200.0, "seconds": 5.0}],
    )
    prof = profile_from_json(doc)
    p0 = prof.points[0]
    assert (p0.size, p0.block_size, p0.layout, p0.read_method) == (
        1 << 30,
        1 << 20,
        "file_per_process",
        "o_direct",
    )
    assert not p0.reliable and p0.runs[0].seconds == 5.0
    assert prof.status == "partial" and prof.idle_power_spread == 0.5
    again = profile_from_json(profile_to_json(prof))
    assert again == prof


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["status"], "done", "status: expected 'complete' or 'partial'"),
        (["points", 0, "size_bytes"], 0, r"points\[0\].size_bytes: expected an integer >= 1"),
        (["points", 0, "reliable"], "yes", r"points\[0\].reliable: expected true or false"),
        (["points", 0, "runs"], [{"power_W": 1.0}], r"runs\[0\].throughput_Bps"),
        (["power_domains"], "rapl", "power_domains: expected a list of names"),
    ],
)
def test_version_2_fields_are_validated(
    small_doc: dict[str, Any], path: list[Any], value: Any, message: str
) -> None:
    with pytest.raises(ProfileError, match=message):
        profile_from_json(_broken(_v2(small_doc), path, value))


def test_a_plan_uses_the_measured_size_nearest_the_checkpoint(small_doc: dict[str, Any]) -> None:
    doc = _v2(small_doc)
    small = copy.deepcopy(doc["points"])
    for p in doc["points"]:
        p["size_bytes"] = 1 << 30
    for p in small:
        p["size_bytes"] = 1 << 20
        p["throughput_Bps"] /= 10  # small writes are slow
    doc["points"] += small
    prof = profile_from_json(doc)
    assert prof.sizes == (1 << 20, 1 << 30)
    assert {p.size for p in prof.at_size(64 << 30).points} == {1 << 30}
    assert {p.size for p in prof.at_size(2 << 20).points} == {1 << 20}
