"""The GPU levers through the runtime, on the fake NVML library (tests/platform/fake_nvml.py,
SYNTHETIC V100-like GPUs): a fixed run's phase gets the application clocks and the power limit
on every GPU and the GPUs end as found; a pair no GPU supports, or a limit outside their range,
is refused in one line before the run; a GPU call that fails mid-run is put back and the phase
goes on with the other settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.fixed_policy import FixedPolicy, FixedSettings, check_fixed_levers
from greenckpt.runtime.session import Runtime
from greenckpt.testing.cpu import diff, snapshot
from tests.platform import fake_nvml
from tests.platform import fake_power as fp
from tests.platform.fake_levers import FakeLeverRoot, build_node
from tests.runtime.lever_profile import lever_node

GPU = FixedSettings(io_processes=1, gpu_memory_mhz=877, gpu_clock_mhz=1380, gpu_power_limit_w=200)


@pytest.fixture
def nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> fake_nvml.FakeNvml:
    return fake_nvml.install(tmp_path, monkeypatch, gpus=2)


def _runtime(tmp_path: Path, fixed: FixedSettings) -> tuple[Runtime, FakeLeverRoot]:
    root = FakeLeverRoot(build_node(tmp_path / "tree"))
    policy = FixedPolicy(fixed, node=lever_node(), default_io=1)
    rt = Runtime(policy, root=root, meters=[fp.FakeMeter(name="rapl")],
                 state_file=tmp_path / "s.json", node=lever_node())  # fmt: skip
    return rt, root


def test_a_phase_gets_the_gpu_clocks_and_limit_and_the_gpus_end_as_found(
    tmp_path: Path, nvml: fake_nvml.FakeNvml
) -> None:
    found = [(g.app_mem, g.app_gr, g.limit_mw) for g in nvml.state().gpus]
    rt, root = _runtime(tmp_path, GPU)
    before = snapshot(root.path)
    with rt, rt.phase("checkpoint", path="/local/ckpt", size=1 << 20, level=1) as s:
        assert set(s.levers) == {"gpu clocks", "gpu power limit"}
        assert [(g.app_mem, g.app_gr, g.limit_mw) for g in nvml.state().gpus] == [
            (877, 1380, 200_000)
        ] * 2
    assert [(g.app_mem, g.app_gr, g.limit_mw) for g in nvml.state().gpus] == found
    assert diff(before, snapshot(root.path)) == [] and s.source.startswith("fixed (")


def test_gpu_values_the_gpus_refuse_are_one_line_before_the_run(
    tmp_path: Path, nvml: fake_nvml.FakeNvml
) -> None:
    root = FakeLeverRoot(build_node(tmp_path / "tree"))
    check_fixed_levers(GPU, root)  # supported: no refusal
    for bad, message in (
        (FixedSettings(gpu_memory_mhz=877, gpu_clock_mhz=999), "gpu clocks 877:999 MHz is not"),
        (FixedSettings(gpu_power_limit_w=400), "gpu power limit 400 W is outside"),
    ):
        with pytest.raises(InvalidValueError) as info:
            check_fixed_levers(bad, root)
        assert message in str(info.value) and "\n" not in str(info.value)


def test_a_gpu_call_that_fails_mid_run_is_put_back_and_the_phase_goes_on(
    tmp_path: Path, nvml: fake_nvml.FakeNvml
) -> None:
    nvml.fail("nvmlDeviceSetPowerManagementLimit", 999, index=1)  # the second GPU refuses
    rt, _ = _runtime(tmp_path, GPU)
    with rt, rt.phase("checkpoint", path="/local/ckpt", size=1 << 20, level=1) as s:
        assert set(s.levers) == {"gpu clocks"}  # the limit failed, the clocks apply
        assert [(g.app_gr, g.limit_mw) for g in nvml.state().gpus] == [(1380, 250_000)] * 2
        assert any(n.startswith("could not apply the gpu power limit") for n in s.notes)
    assert [(g.app_gr, g.limit_mw) for g in nvml.state().gpus] == [(1230, 250_000)] * 2
