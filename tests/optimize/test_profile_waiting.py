"""The profile's optional ``waiting`` list: loaded, validated with its JSON path, saved back.

Every profile here is SYNTHETIC (``tests.conftest.small_profile_doc`` plus made-up entries).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from greenckpt.optimize import ProfileError, load_profile, profile_from_json, save_profile
from greenckpt.optimize.profile_data import profile_to_json
from greenckpt.optimize.waiting import WaitingPower
from tests.conftest import small_profile_doc


def entry(**changes: Any) -> dict[str, Any]:
    """A SYNTHETIC waiting entry (spin waiters at 2 GHz)."""
    doc: dict[str, Any] = {
        "frequency_hz": 2e9,
        "governor": None,
        "cstates": None,
        "mode": "spin",
        "ranks": 4,
        "power_per_rank_W": 9.5,
        "power_source": "synthetic",
        "power_spread_W": 0.4,
        "cpu_fraction": 0.98,
        "seconds": 2.0,
        "idle_power_W": 120.0,
    }
    doc.update(changes)
    return doc


def doc_with(*entries: dict[str, Any], version: int = 2) -> dict[str, Any]:
    doc = copy.deepcopy(small_profile_doc())
    doc["format_version"] = version
    doc["waiting"] = list(entries)
    return doc


def test_a_profile_without_waiting_loads_as_before_and_saves_no_waiting_key(
    tmp_path: Path,
) -> None:
    prof = profile_from_json(small_profile_doc())
    assert prof.waiting == ()
    assert "waiting" not in profile_to_json(prof)
    save_profile(prof, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json") == prof


def test_entries_load_with_every_field_and_round_trip(tmp_path: Path) -> None:
    polite = entry(mode="polite", power_per_rank_W=-0.02, cpu_fraction=0.03, reliable=False)
    governed = entry(frequency_hz=None, governor="ondemand", cstates=False)
    prof = profile_from_json(doc_with(entry(), polite, governed))
    spin, pol, gov = prof.waiting
    assert spin == WaitingPower(
        mode="spin",
        ranks=4,
        power_per_rank=9.5,
        power_source="synthetic",
        frequency=2e9,
        power_spread=0.4,
        cpu_fraction=0.98,
        seconds=2.0,
        idle_power=120.0,
    )
    assert spin.setting_label == "2.00 GHz"
    assert pol.power_per_rank == -0.02 and not pol.reliable  # noise around idle is kept as is
    assert gov.setting_key == "governor:ondemand" and gov.cstates is False
    save_profile(prof, tmp_path / "p.json")
    again = load_profile(tmp_path / "p.json")
    assert again == prof
    assert json.loads((tmp_path / "p.json").read_text())["waiting"][1]["reliable"] is False


def test_optional_fields_may_be_left_out() -> None:
    bare = {k: entry()[k] for k in ("mode", "ranks", "power_per_rank_W", "power_source")}
    (w,) = profile_from_json(doc_with(bare)).waiting
    assert w.setting.kind == "uncontrolled" and w.cpu_fraction is None and w.seconds is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mode": "busy"}, "profile.waiting[0].mode: expected one of polite, spin, got 'busy'"),
        ({"ranks": 0}, "profile.waiting[0].ranks: expected an integer >= 1"),
        ({"ranks": 2.5}, "profile.waiting[0].ranks: expected an integer >= 1"),
        ({"ranks": True}, "profile.waiting[0].ranks: expected an integer >= 1"),
        ({"power_per_rank_W": None}, "profile.waiting[0].power_per_rank_W: expected a finite"),
        ({"power_per_rank_W": "9 W"}, "profile.waiting[0].power_per_rank_W: expected a finite"),
        ({"power_source": "guessed"}, "profile.waiting[0].power_source: expected one of"),
        ({"frequency_hz": -1}, "profile.waiting[0].frequency_hz: must be a finite number > 0"),
        ({"governor": "turbo", "frequency_hz": None}, "profile.waiting[0].governor: expected"),
        ({"governor": "ondemand"}, "profile.waiting[0]: give at most one of frequency_hz"),
        ({"cstates": "on"}, "profile.waiting[0].cstates: expected true, false or null"),
        ({"power_spread_W": -1}, "profile.waiting[0].power_spread_W: must be a finite number >="),
        ({"cpu_fraction": -0.1}, "profile.waiting[0].cpu_fraction: must be a finite number >="),
        ({"seconds": 0}, "profile.waiting[0].seconds: must be a finite number > 0"),
        ({"idle_power_W": 0}, "profile.waiting[0].idle_power_W: must be a finite number > 0"),
        ({"reliable": "yes"}, "profile.waiting[0].reliable: expected true or false"),
    ],
)
def test_a_bad_field_is_named_by_its_json_path(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError) as info:
        profile_from_json(doc_with(entry(**changes)))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_list_and_its_entries_must_be_what_they_say() -> None:
    doc = doc_with()
    doc["waiting"] = {"spin": 9.5}
    with pytest.raises(ProfileError, match=r"^profile.waiting: expected a list"):
        profile_from_json(doc)
    with pytest.raises(ProfileError, match=r"^profile.waiting\[1\]: expected an object"):
        profile_from_json(doc_with(entry(), [9.5]))  # type: ignore[arg-type]


def test_the_same_setting_and_mode_twice_is_refused_naming_both() -> None:
    doc = doc_with(entry(), entry(mode="polite"), entry(power_per_rank_W=3.0))
    with pytest.raises(ProfileError) as info:
        profile_from_json(doc)
    message = str(info.value)
    assert "profile.waiting[0] and profile.waiting[2]" in message
    assert "spin waiting power at 2.00 GHz" in message
    # the same setting with other C-states is another entry
    assert len(profile_from_json(doc_with(entry(), entry(cstates=False))).waiting) == 2


def test_a_synthetic_entry_needs_a_synthetic_profile() -> None:
    doc = doc_with(entry())
    doc["synthetic"] = False
    for p in doc["points"]:
        p["power_source"] = "measured"
    with pytest.raises(ProfileError, match=r"profile.waiting\[0\].power_source: 'synthetic'"):
        profile_from_json(doc)
    measured = doc_with(entry(power_source="measured"))
    measured["synthetic"] = False
    for p in measured["points"]:
        p["power_source"] = "measured"
    assert profile_from_json(measured).waiting[0].power_source == "measured"


def test_a_version_1_file_may_carry_the_list_too() -> None:
    """Readers of version 2 take what they know from a version 1 file; the list is optional
    in both, so FORMAT_VERSION stays 2."""
    assert len(profile_from_json(doc_with(entry(), version=1)).waiting) == 1


def test_the_file_path_prefixes_the_message(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc_with(entry(ranks=-3))))
    with pytest.raises(ProfileError, match=rf"^{path}: profile.waiting\[0\].ranks"):
        load_profile(path)
