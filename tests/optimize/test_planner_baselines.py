"""Governor baselines take the governor's frequency from the CPU's recorded facts (issue 18,
item 13): never "the lowest frequency that happens to be measured at this process count".

Every profile here is SYNTHETIC.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from greenckpt.optimize import Scenario, load_profile, plan, profile_from_json
from greenckpt.optimize.planner import baseline_point, governor_frequency
from tests.conftest import EXAMPLE_PROFILE

GIB = 2**30
SCN = Scenario(ckpt_size=8 * GIB, rate=1 / 7200, app_power=250.0)
GHZ = 1e9


def pt(op: str, f: float, n: int, thr: float, pw: float) -> dict[str, Any]:
    return {
        "op": op,
        "frequency_hz": f,
        "governor": None,
        "processes": n,
        "codec": None,
        "cstates": None,
        "throughput_Bps": thr,
        "power_W": pw,
        "power_source": "synthetic",
    }


def l_shaped(machine: dict[str, Any]) -> dict[str, Any]:
    """Every frequency at 1 process, only the top one at the application's 4 processes."""
    points = []
    for op, base in (("write", 200e6), ("read", 400e6)):
        for f in (0.8, 1.4, 2.1):
            points.append(pt(op, f * GHZ, 1, base * f, 200.0 + 30 * f))
        points.append(pt(op, 2.1 * GHZ, 4, base * 1.5, 300.0))
    return {
        "format": "greenckpt-profile",
        "format_version": 2,
        "synthetic": True,
        "note": "SYNTHETIC test fixture",
        "machine": {"cores": 4, **machine},
        "storage": {"key": "test"},
        "points": points,
    }


FREQS = {"frequencies_hz": [0.8 * GHZ, 1.4 * GHZ, 2.1 * GHZ]}


def cpufreq_facts(*ranges: tuple[float, float], driver: str = "acpi-cpufreq") -> dict[str, Any]:
    """``machine`` facts shaped as the profiler records them (``greenckpt probe``'s details)."""
    return {
        "cpufreq": {
            "available": True,
            "summary": "synthetic",
            "driver": driver,
            "mode": "active" if driver in ("intel_pstate", "amd-pstate-epp") else None,
            "hwp_active": driver == "intel_pstate",
            "policies": [
                {
                    "name": f"policy{i}",
                    "cpus": [i],
                    "governor": "performance",
                    "governors": ["performance", "powersave"],
                    "frequencies_hz": [],
                    "range_hz": [lo, hi],
                }
                for i, (lo, hi) in enumerate(ranges)
            ],
        }
    }


def baselines(doc: dict[str, Any], **scn: Any) -> dict[str, Any]:
    result = plan(profile_from_json(doc), Scenario(8 * GIB, 1 / 7200, 250.0, **scn))
    return {b.name: b for b in result.baselines}


def test_powersave_on_an_l_shaped_profile_is_not_evaluable_rather_than_performance() -> None:
    """The bug: the lowest frequency measured at 4 processes is 2.1 GHz, so powersave became
    performance. Powersave runs the CPU at its minimum, 0.8 GHz, which was not measured there."""
    by = baselines(l_shaped(FREQS))
    perf, save = by["performance"], by["powersave"]
    assert perf.choice is not None and perf.choice.write.frequency == 2.1 * GHZ
    assert save.choice is None
    assert "0.80 GHz" in save.how and "not measured" in save.how and "4 I/O processes" in save.how
    assert "2.10 GHz" in save.how  # what was measured there


def test_performance_is_not_evaluable_when_the_cpus_maximum_was_not_measured() -> None:
    doc = l_shaped({"frequencies_hz": [0.8 * GHZ, 2.1 * GHZ, 2.6 * GHZ]})
    by = baselines(doc)
    assert by["performance"].choice is None and "2.60 GHz" in by["performance"].how
    # ... and with the application at 1 process, where everything was measured, both evaluate:
    by = baselines(doc, app_processes=1)
    assert by["powersave"].choice is not None
    assert by["powersave"].choice.write.frequency == 0.8 * GHZ
    assert by["performance"].choice is None  # 2.6 GHz is not in the profile at all


def test_governor_frequencies_come_from_the_recorded_cpufreq_range() -> None:
    doc = l_shaped(cpufreq_facts((0.8 * GHZ, 2.1 * GHZ), (0.8 * GHZ, 2.1 * GHZ)))
    by = baselines(doc, app_processes=1)
    assert by["performance"].choice is not None and by["powersave"].choice is not None
    assert by["performance"].choice.read.frequency == 2.1 * GHZ
    assert by["powersave"].choice.read.frequency == 0.8 * GHZ
    assert "maximum" in by["performance"].how and "minimum" in by["powersave"].how
    f, how = governor_frequency(profile_from_json(doc), "powersave")
    assert f == 0.8 * GHZ and "machine.cpufreq" in how


def test_a_profile_without_frequency_facts_says_not_evaluable() -> None:
    by = baselines(l_shaped({}), app_processes=1)
    for name in ("performance", "powersave"):
        assert by[name].choice is None
        assert "does not record the CPU's frequency range" in by[name].how


def test_malformed_frequency_facts_are_not_evaluable_and_named() -> None:
    by = baselines(l_shaped({"frequencies_hz": ["fast", 2]}), app_processes=1)
    assert by["powersave"].choice is None and "machine.frequencies_hz" in by["powersave"].how


def test_policies_with_different_ranges_are_not_one_node_frequency() -> None:
    doc = l_shaped(cpufreq_facts((0.8 * GHZ, 2.1 * GHZ), (1.4 * GHZ, 2.1 * GHZ)))
    by = baselines(doc, app_processes=1)
    assert by["powersave"].choice is None and "differ" in by["powersave"].how
    assert by["performance"].choice is not None  # every policy's maximum is 2.1 GHz


@pytest.mark.parametrize("driver", ["intel_pstate", "amd-pstate-epp"])
def test_powersave_under_an_active_pstate_driver_is_not_the_minimum(driver: str) -> None:
    """In active mode powersave is the driver's own selection, not a fixed minimum."""
    by = baselines(l_shaped(cpufreq_facts((0.8 * GHZ, 2.1 * GHZ), driver=driver)), app_processes=1)
    assert by["powersave"].choice is None and driver in by["powersave"].how
    assert by["performance"].choice is not None


def test_measured_governor_points_still_win_over_node_facts() -> None:
    doc = l_shaped({})
    doc["points"] += [
        {**pt(op, 1.0, 4, 123e6, 222.0), "frequency_hz": None, "governor": "powersave"}
        for op in ("write", "read")
    ]
    save = baselines(doc)["powersave"]
    assert save.choice is not None and save.choice.write.governor == "powersave"


def test_the_runtime_lookup_agrees_with_the_planner() -> None:
    profile = profile_from_json(l_shaped(FREQS))
    point, how = baseline_point(profile, "write", "powersave", 4)
    assert point is None and "0.80 GHz" in how
    point, _ = baseline_point(profile, "write", "performance", 4)
    assert point is not None and point.frequency == 2.1 * GHZ


def test_example_profile_still_compares_against_every_governor() -> None:
    by = {b.name: b for b in plan(load_profile(EXAMPLE_PROFILE), copy.copy(SCN)).baselines}
    assert by["powersave"].choice is not None and by["powersave"].choice.write.frequency == 0.8e9
    assert by["performance"].choice is not None
    assert by["performance"].choice.write.frequency == 2.1e9
