"""The profile file format: loading, validation messages, round trip."""

from __future__ import annotations

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
