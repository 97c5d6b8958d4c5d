"""The ctypes NVML binding against the fake library (tests/platform/fake_nvml.c, SYNTHETIC GPUs):
the values it reads, the errors it maps, and the reasons it gives when NVML is absent."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import pytest

from greenckpt.platform import nvml as nvml_mod
from greenckpt.platform.nvml import CLOCK_GRAPHICS, CLOCK_MEM, Nvml, NvmlError, NvmlUnavailableError
from tests.platform import fake_nvml


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake_nvml.build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: Path) -> fake_nvml.FakeNvml:
    return fake_nvml.install(tmp_path, monkeypatch, gpus=2, library=library)


def test_reads_what_the_gpus_report(fake: fake_nvml.FakeNvml) -> None:
    fake.update(1, app_gr=810, limit_mw=200_000, name="Other_GPU")
    with Nvml.open() as nvml:
        assert nvml.path == str(fake.library)
        assert nvml.count() == 2
        dev = nvml.handle(1)
        assert nvml.uuid(dev) == "GPU-fake-0001"
        assert nvml.name(dev) == "Other_GPU"
        assert nvml.applications_clock(dev, CLOCK_MEM) == 877
        assert nvml.applications_clock(dev, CLOCK_GRAPHICS) == 810
        assert nvml.default_applications_clock(dev, CLOCK_GRAPHICS) == 1230
        assert nvml.supported_memory_clocks(dev) == (877, 810)
        assert nvml.supported_graphics_clocks(dev, 810) == (810, 585, 135)
        assert nvml.power_limit_mw(dev) == 200_000
        assert nvml.power_limit_constraints_mw(dev) == (100_000, 300_000)
        assert nvml.default_power_limit_mw(dev) == 250_000


def test_sets_and_resets_through_the_library(fake: fake_nvml.FakeNvml) -> None:
    with Nvml.open() as nvml:
        dev = nvml.handle(0)
        nvml.set_applications_clocks(dev, 810, 585)
        nvml.set_power_limit_mw(dev, 150_000)
    gpu = fake.gpu(0)
    assert (gpu.app_mem, gpu.app_gr, gpu.limit_mw) == (810, 585, 150_000)
    assert fake.gpu(1).app_gr == 1230  # the other GPU untouched
    with Nvml.open() as nvml:
        nvml.reset_applications_clocks(nvml.handle(0))
    assert (fake.gpu(0).app_mem, fake.gpu(0).app_gr) == (877, 1230)


def test_a_list_longer_than_the_buffer_is_asked_again_at_its_size(
    fake: fake_nvml.FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nvml_mod, "_MAX_CLOCKS", 2)
    with Nvml.open() as nvml:
        assert nvml.supported_graphics_clocks(nvml.handle(0), 877) == fake_nvml.V100_CLOCKS[877]


def test_an_nvml_error_carries_its_code_and_nvml_s_text_on_one_line(
    fake: fake_nvml.FakeNvml,
) -> None:
    fake.fail("nvmlDeviceGetPowerManagementLimit", 15, index=1)
    with Nvml.open() as nvml:
        assert nvml.power_limit_mw(nvml.handle(0)) == 250_000
        with pytest.raises(NvmlError) as info:
            nvml.power_limit_mw(nvml.handle(1))
    assert info.value.code == 15
    assert str(info.value) == (
        "nvmlDeviceGetPowerManagementLimit failed: GPU is lost (NVML error 15)"
    )


def test_a_refused_write_says_which_permission_it_needs(fake: fake_nvml.FakeNvml) -> None:
    fake.fail("nvmlDeviceSetApplicationsClocks", 4)
    with Nvml.open() as nvml, pytest.raises(NvmlError) as info:
        nvml.set_applications_clocks(nvml.handle(0), 810, 585)
    message = str(info.value)
    assert info.value.code == 4
    assert "Insufficient Permissions" in message
    assert "nvidia-smi -acp UNRESTRICTED" in message
    assert "\n" not in message
    assert fake.gpu(0).app_gr == 1230


def test_invalid_arguments_come_back_as_nvml_errors(fake: fake_nvml.FakeNvml) -> None:
    with Nvml.open() as nvml:
        dev = nvml.handle(0)
        with pytest.raises(NvmlError, match=r"Not Found \(NVML error 6\)"):
            nvml.supported_graphics_clocks(dev, 999)
        with pytest.raises(NvmlError, match=r"Invalid Argument"):
            nvml.set_power_limit_mw(dev, 999_000)
        with pytest.raises(NvmlError, match=r"nvmlDeviceGetHandleByIndex_v2 failed"):
            nvml.handle(5)
    assert fake.gpu(0).limit_mw == 250_000


def test_a_missing_library_is_a_reason_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", str(tmp_path / "nowhere.so"))
    with pytest.raises(NvmlUnavailableError) as info:
        Nvml.open()
    message = str(info.value)
    assert message.startswith("no NVIDIA management library: cannot load ")
    assert "nowhere.so (from $GREENCKPT_NVML_LIBRARY)" in message


def test_the_default_library_is_the_driver_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GREENCKPT_NVML_LIBRARY", raising=False)
    assert nvml_mod.library_path() == "libnvidia-ml.so.1"
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", "")
    assert nvml_mod.library_path() == "libnvidia-ml.so.1"


def test_a_library_without_nvml_s_symbols_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc to load")
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", libc)
    with pytest.raises(NvmlUnavailableError, match=r"has no nvmlInit_v2"):
        Nvml.open()


def test_a_failed_init_is_a_reason(fake: fake_nvml.FakeNvml) -> None:
    state = fake.state()
    state.init_rc = 9
    fake.write(state)
    with pytest.raises(NvmlUnavailableError) as info:
        Nvml.open()
    assert str(info.value) == (
        "nvmlInit_v2 failed (no NVIDIA driver loaded?): Driver Not Loaded (NVML error 9)"
    )


def test_close_shuts_nvml_down_once(fake: fake_nvml.FakeNvml) -> None:
    outer = Nvml.open()
    with Nvml.open() as inner:  # NVML counts inits: the inner session may end first
        assert inner.count() == 2
    assert outer.count() == 2
    outer.close()
    outer.close()
    with pytest.raises(NvmlError, match=r"Uninitialized"):
        outer.count()
