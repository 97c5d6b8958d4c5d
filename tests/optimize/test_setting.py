"""One CPU-setting type for the whole package (issue 17 item 5): the sweep's cells, a profile
point and a runtime decision all answer with :class:`greenckpt.optimize.setting.CpuSetting`,
so a decision's key is the key of the point behind it."""

from __future__ import annotations

import pytest

from greenckpt.optimize.profile_data import ProfilePoint
from greenckpt.optimize.setting import CpuSetting, CpuSettingError
from greenckpt.profile import grid
from greenckpt.runtime.settings import Settings


def _point(frequency: float | None = None, governor: str | None = None) -> ProfilePoint:
    return ProfilePoint(
        op="write",
        processes=2,
        throughput=1e8,
        power=50.0,
        power_source="measured",
        frequency=frequency,
        governor=governor,
    )


def test_the_sweep_uses_the_same_type() -> None:
    assert grid.CpuSetting is CpuSetting


@pytest.mark.parametrize(
    ("frequency", "governor", "setting", "key", "label"),
    [
        (2.1e9, None, CpuSetting.frequency(2.1e9), "2100000000", "2.10 GHz"),
        (None, "ondemand", CpuSetting.of_governor("ondemand"), "governor:ondemand", "ondemand"),
        (None, None, CpuSetting.uncontrolled(), "uncontrolled", "as found"),
    ],
)
def test_a_point_and_a_decision_answer_with_the_one_type(
    frequency: float | None, governor: str | None, setting: CpuSetting, key: str, label: str
) -> None:
    point = _point(frequency, governor)
    decided = Settings(
        io_processes=2,
        source="test",
        frequency_hz=None if frequency is None else round(frequency),
        governor=governor,
    )
    assert point.setting == decided.cpu_setting == setting
    assert (point.setting_key, point.setting_label) == (key, label)
    assert CpuSetting.from_key(key) == setting
    assert point.uncontrolled is (setting.kind == "uncontrolled")


def test_a_float_frequency_keys_as_whole_hertz() -> None:
    assert _point(frequency=1_999_999_999.6).setting_key == "2000000000"


def test_both_kinds_at_once_or_an_unknown_governor_is_refused() -> None:
    with pytest.raises(CpuSettingError, match="at most one"):
        CpuSetting.of(2.1e9, "ondemand")
    with pytest.raises(CpuSettingError, match="unknown governor 'turbo'"):
        CpuSetting.of(None, "turbo")
    with pytest.raises(CpuSettingError, match="not a CPU setting"):
        CpuSetting.from_key("fast")


def test_a_point_with_an_impossible_setting_is_refused_when_built() -> None:
    """Not later, inside a table or the runtime's decision (the review of issue 17 found
    the label raising there)."""
    with pytest.raises(CpuSettingError, match="at most one"):
        _point(frequency=2.1e9, governor="performance")
    with pytest.raises(CpuSettingError, match="unknown governor 'turbo'"):
        _point(governor="turbo")
