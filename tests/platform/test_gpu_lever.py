"""The GPU lever (greenckpt.platform.gpu) on the fake NVML library (SYNTHETIC GPUs): detection,
absent reasons, set / read back / restore, one-line refusals that change nothing, a failure on
one GPU undone on the others, and restore after a SIGKILLed process changed the GPUs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.platform.gpu import (
    gpu_levers,
    gpu_originals,
    restore_gpu,
    set_gpu_clocks,
    set_gpu_power_limit,
)
from greenckpt.platform.levers import node_levers
from greenckpt.platform.root import PlatformError, SysRoot
from tests.platform import fake_nvml

ROOT = SysRoot()
RESET = "nvmlDeviceResetApplicationsClocks"
SET_CLOCKS = "nvmlDeviceSetApplicationsClocks"
SET_LIMIT = "nvmlDeviceSetPowerManagementLimit"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake_nvml.build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: Path) -> fake_nvml.FakeNvml:
    return fake_nvml.install(tmp_path, monkeypatch, gpus=2, library=library)


def _settings(fake: fake_nvml.FakeNvml) -> list[tuple[int, int, int]]:
    return [(g.app_mem, g.app_gr, g.limit_mw) for g in fake.state().gpus]


FOUND = [(877, 1230, 250_000), (877, 1230, 250_000)]


def test_detects_both_levers_with_their_ranges(fake: fake_nvml.FakeNvml) -> None:
    clocks, power = gpu_levers(ROOT)
    assert clocks.name == "gpu clocks"
    assert clocks.present
    assert clocks.reason == ""
    assert clocks.values == (
        "memory 877 MHz: graphics 135-1530 MHz (7 clocks)",
        "memory 810 MHz: graphics 135-810 MHz (3 clocks)",
        "2 GPUs",
    )
    assert power.name == "gpu power limit"
    assert power.present
    assert power.values == ("100 W to 300 W", "2 GPUs")


def test_only_what_every_gpu_accepts_is_offered(fake: fake_nvml.FakeNvml) -> None:
    fake.update(1, clocks={877: (1230, 135)}, min_mw=150_000, max_mw=280_000)
    clocks, power = gpu_levers(ROOT)
    assert clocks.values == ("memory 877 MHz: graphics 135-1230 MHz (2 clocks)", "2 GPUs")
    assert power.values == ("150 W to 280 W", "2 GPUs")
    with pytest.raises(InvalidValueError, match=r"^gpu clocks 877:1530 MHz is not a"):
        set_gpu_clocks(877, 1530)
    with pytest.raises(InvalidValueError, match=r"outside 150 W to 280 W"):
        set_gpu_power_limit(120)
    assert _settings(fake) == FOUND


def test_the_node_s_lever_list_carries_the_gpu_levers(
    fake: fake_nvml.FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    levers = {lv.name: lv for lv in node_levers(SysRoot(tmp_path))}
    assert levers["gpu clocks"] == gpu_levers(ROOT)[0]
    assert levers["gpu power limit"].values == ("100 W to 300 W", "2 GPUs")
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", str(tmp_path / "absent.so"))
    levers = {lv.name: lv for lv in node_levers(SysRoot(tmp_path))}
    assert not levers["gpu clocks"].present
    assert "absent.so" in levers["gpu power limit"].reason


def test_no_library_makes_both_levers_absent_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", str(tmp_path / "libnvidia-ml.so.1"))
    levers = gpu_levers(ROOT)
    assert [(lv.name, lv.present) for lv in levers] == [
        ("gpu clocks", False),
        ("gpu power limit", False),
    ]
    for lever in levers:
        assert lever.reason.startswith("no NVIDIA management library: cannot load ")
        assert lever.values == ()
    with pytest.raises(PlatformError, match=r"^no NVIDIA management library"):
        set_gpu_clocks(877, 1230)


def test_no_gpu_makes_both_levers_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: Path
) -> None:
    fake_nvml.install(tmp_path, monkeypatch, gpus=0, library=library)
    assert [(lv.present, lv.reason) for lv in gpu_levers(ROOT)] == [
        (False, "NVML sees no GPU"),
        (False, "NVML sees no GPU"),
    ]


def test_a_gpu_without_application_clocks_leaves_only_the_power_limit(
    fake: fake_nvml.FakeNvml,
) -> None:
    fake.fail("nvmlDeviceGetSupportedMemoryClocks", 3, index=1)
    clocks, power = gpu_levers(ROOT)
    assert not clocks.present
    assert clocks.reason == (
        "GPU 1 (GPU-fake-0001): nvmlDeviceGetSupportedMemoryClocks failed: Not Supported "
        "(NVML error 3)"
    )
    assert power.present
    with pytest.raises(PlatformError, match=r"^no GPU clocks control: GPU 1"):
        set_gpu_clocks(877, 1005)
    assert set_gpu_power_limit(200).value == "200 W on 2 GPU(s)"
    assert _settings(fake) == [(877, 1230, 200_000), (877, 1230, 200_000)]


def test_set_reads_back_and_saves_the_originals_before_the_first_write(
    fake: fake_nvml.FakeNvml,
) -> None:
    saved: list[tuple[dict[str, Any], list[tuple[int, int, int]]]] = []
    result = set_gpu_clocks(810, 585, save=lambda doc: saved.append((doc, _settings(fake))))
    assert result.lever == "gpu clocks"
    assert result.value == "810:585 MHz on 2 GPU(s)"
    assert result.notes == ()
    [(doc, at_save)] = saved
    assert at_save == FOUND  # nothing written yet when the originals were handed over
    assert doc["GPU-fake-0000"] == {
        "index": 0,
        "name": "Fake_V100",
        "memory_mhz": 877,
        "graphics_mhz": 1230,
        "clocks_at_default": True,
        "power_limit_mw": 250_000,
    }
    assert json.loads(json.dumps(doc)) == doc
    result = set_gpu_power_limit(150.5)
    assert result.value == "150.5 W on 2 GPU(s)"
    assert _settings(fake) == [(810, 585, 150_500), (810, 585, 150_500)]
    assert restore_gpu(doc) == []
    assert _settings(fake) == FOUND


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda save: set_gpu_clocks(877, 1000, save),
            "gpu clocks 877:1000 MHz is not a (memory:graphics) pair every GPU supports; "
            "supported: memory 877 MHz: graphics 135-1530 MHz (7 clocks); "
            "memory 810 MHz: graphics 135-810 MHz (3 clocks)",
        ),
        (
            lambda save: set_gpu_clocks(900, 810, save),
            "gpu clocks 900:810 MHz is not a (memory:graphics) pair",
        ),
        (
            lambda save: set_gpu_power_limit(301, save),
            "gpu power limit 301 W is outside 100 W to 300 W, the range every GPU accepts",
        ),
        (
            lambda save: set_gpu_power_limit(0, save),
            "gpu power limit 0 W is outside 100 W to 300 W",
        ),
        (lambda save: set_gpu_power_limit(float("nan"), save), "gpu power limit nan W is outside"),
        (
            lambda save: set_gpu_clocks(877.0, 1230, save),
            "gpu clocks: the memory clock must be whole MHz, got 877.0",
        ),
        (
            lambda save: set_gpu_clocks(877, True, save),
            "gpu clocks: the graphics clock must be whole MHz, got True",
        ),
        (
            lambda save: set_gpu_power_limit("200", save),
            "gpu power limit must be a number of watts, got '200'",
        ),
    ],
)
def test_a_value_outside_what_the_gpus_report_is_refused_and_nothing_is_applied(
    fake: fake_nvml.FakeNvml, call: Any, message: str
) -> None:
    saved: list[object] = []
    with pytest.raises(InvalidValueError) as info:
        call(saved.append)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)
    assert saved == []
    assert _settings(fake) == FOUND


def test_a_write_refused_on_one_gpu_puts_the_others_back(fake: fake_nvml.FakeNvml) -> None:
    fake.fail(SET_CLOCKS, 4, index=1)
    with pytest.raises(PlatformError) as info:
        set_gpu_clocks(810, 585)
    message = str(info.value)
    assert message.startswith(
        "gpu clocks 810:585 MHz: GPU 1 (GPU-fake-0001): nvmlDeviceSetApplicationsClocks "
        "failed: Insufficient Permissions (NVML error 4)"
    )
    assert "nvidia-smi -acp UNRESTRICTED" in message
    assert message.endswith("; the GPUs already changed were put back")
    assert _settings(fake) == FOUND


def test_clocks_found_at_default_are_reset_others_set_back(fake: fake_nvml.FakeNvml) -> None:
    fake.update(1, app_mem=810, app_gr=135)  # GPU 1 not at its defaults
    doc = gpu_originals()
    assert doc["GPU-fake-0000"]["clocks_at_default"] is True
    assert doc["GPU-fake-0001"]["clocks_at_default"] is False
    set_gpu_clocks(877, 585)
    fake.update(0, def_mem=810, def_gr=810)  # a reset now lands elsewhere than the saved value
    assert restore_gpu(doc) == []
    assert [(g.app_mem, g.app_gr) for g in fake.state().gpus] == [(810, 810), (810, 135)]


def test_restore_writes_only_what_differs(fake: fake_nvml.FakeNvml) -> None:
    doc = gpu_originals()
    for fn in (SET_CLOCKS, RESET, SET_LIMIT):
        fake.fail(fn, 4)
    assert restore_gpu(doc) == []  # a session whose change was refused restores cleanly


def test_restore_reports_each_failure_and_goes_on(fake: fake_nvml.FakeNvml) -> None:
    doc = gpu_originals()
    set_gpu_clocks(810, 585)
    set_gpu_power_limit(120)
    fake.fail(RESET, 15, index=0)
    assert restore_gpu(doc) == [
        "GPU 0 (GPU-fake-0000) gpu clocks: nvmlDeviceResetApplicationsClocks failed: "
        "GPU is lost (NVML error 15)"
    ]
    assert _settings(fake) == [(810, 585, 250_000), (877, 1230, 250_000)]


def test_saved_originals_are_untrusted(fake: fake_nvml.FakeNvml) -> None:
    set_gpu_power_limit(120)
    assert restore_gpu({}) == []
    assert restore_gpu(None) == []
    assert restore_gpu(["x"]) == ["GPU originals: expected a mapping by GPU UUID, got list"]
    assert restore_gpu(
        {
            "GPU-elsewhere": {"power_limit_mw": 1},
            "GPU-fake-0000": "x",
            "GPU-fake-0001": {"power_limit_mw": -5, "memory_mhz": 877},
        }
    ) == [
        "GPU GPU-elsewhere: not found on this node, not restored",
        "GPU GPU-fake-0000: saved originals are not a mapping",
        "GPU 1 (GPU-fake-0001): saved originals unreadable: power_limit_mw is -5, "
        "not a non-negative integer",
    ]
    assert _settings(fake) == [(877, 1230, 120_000), (877, 1230, 120_000)]


def test_restore_without_nvml_reports_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", str(tmp_path / "gone.so"))
    [failure] = restore_gpu({"GPU-x": {"power_limit_mw": 250_000}})
    assert failure.startswith("GPUs not restored: no NVIDIA management library")


CHILD = textwrap.dedent(
    """
    import json, sys, time
    from greenckpt.platform.gpu import gpu_originals, set_gpu_clocks, set_gpu_power_limit
    with open(sys.argv[1], "w") as f:
        json.dump(gpu_originals(), f)
    set_gpu_clocks(810, 135)
    set_gpu_power_limit(100)
    print("changed", flush=True)
    time.sleep(60)
    """
)


def test_a_sigkilled_process_s_gpu_changes_are_restored_from_its_originals(
    fake: fake_nvml.FakeNvml, tmp_path: Path
) -> None:
    saved = tmp_path / "gpu-originals.json"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(saved)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "changed\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert _settings(fake) == [(810, 135, 100_000), (810, 135, 100_000)]  # left changed
    assert restore_gpu(json.loads(saved.read_text())) == []
    assert _settings(fake) == FOUND
