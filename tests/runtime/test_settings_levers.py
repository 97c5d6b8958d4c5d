"""The lever fields of :class:`Settings`: bad values are one-line refusals, the per-core split
needs the I/O processes' frequency, GPU clocks come as a pair, and a report round-trips them
(an older report without them loads with every lever as found)."""

from __future__ import annotations

from typing import Any

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.records import settings_from_dict, settings_to_dict
from greenckpt.runtime.settings import Settings


def settings(**kw: Any) -> Settings:
    return Settings(io_processes=2, source="fixed (test)", **kw)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"uncore_khz": 0}, "uncore_khz must be an integer >= 1, got 0"),
        ({"uncore_khz": 1.5e6}, "uncore_khz must be an integer >= 1"),
        ({"power_limit_w": -5.0}, "power_limit_w must be a finite number of watts > 0"),
        ({"power_limit_w": float("nan")}, "power_limit_w must be a finite number"),
        ({"gpu_power_limit_w": True}, "gpu_power_limit_w must be a finite number"),
        ({"waiting_frequency_hz": 1_200_000_000}, "waiting_frequency_hz (the waiting ranks'"),
        ({"gpu_clock_mhz": 1380}, "give gpu_memory_mhz and gpu_clock_mhz together"),
        ({"writer_cpus": (0, -1)}, "writer_cpus must be CPU numbers >= 0, got [0, -1]"),
    ],
)
def test_bad_lever_values_are_one_line(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        settings(**kw)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_levers_are_named_labelled_dropped_and_round_tripped() -> None:
    s = settings(
        frequency_hz=2_000_000_000,
        waiting_frequency_hz=1_200_000_000,
        uncore_khz=1_800_000,
        power_limit_w=95.5,
        gpu_memory_mhz=877,
        gpu_clock_mhz=1380,
        gpu_power_limit_w=200.0,
        writer_cpus=(0, 1),  # the runtime's, once the split is applied
    )
    assert s.levers == {
        "per-core split": "I/O cores 2.00 GHz, waiting cores 1.20 GHz",
        "uncore frequency": "1.80 GHz",
        "power limit": "package 95.5 W",
        "gpu clocks": "memory 877 MHz, graphics 1380 MHz",
        "gpu power limit": "200 W",
    }
    assert s.controls_node and "uncore frequency 1.80 GHz" in s.label
    assert s.without_lever("gpu clocks").gpu_memory_mhz is None
    assert s.without_lever("per-core split").writer_cpus == ()  # no split: no writer cores
    assert s.without_levers().writer_cpus == ()
    assert s.without_levers().levers == {} and s.without_levers().frequency_hz == 2_000_000_000
    doc = settings_to_dict(s)
    assert doc["levers"] == s.levers and settings_from_dict(doc) == s
    lever_keys = ("waiting_frequency_hz", "uncore_khz", "power_limit_w", "gpu_memory_mhz",
                  "gpu_clock_mhz", "gpu_power_limit_w", "writer_cpus", "levers")  # fmt: skip
    old = {k: v for k, v in doc.items() if k not in lever_keys}
    assert settings_from_dict(old).levers == {}  # a report saved before the levers existed
