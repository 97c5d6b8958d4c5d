"""The GPU lever inside a NodeSettings session (fake NVML, SYNTHETIC GPUs): saved in the state
file before the first write, restored on exit, and — after a SIGKILL — by
restore_from_state_file and by ``greenckpt restore``."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from greenckpt.cli.main import main
from greenckpt.errors import InvalidValueError
from greenckpt.platform.restore import NodeSettings, restore_from_state_file
from greenckpt.platform.root import PlatformError, SysRoot
from tests.platform import fake_nvml
from tests.platform.fake_cpu import build_tree
from tests.ready_child import spawn_ready

FOUND = [(877, 1230, 250_000), (877, 1230, 250_000)]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake_nvml.build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: Path) -> fake_nvml.FakeNvml:
    return fake_nvml.install(tmp_path, monkeypatch, gpus=2, library=library)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return build_tree("intel-acpi-cpufreq", tmp_path / "tree")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "run" / "node-state.json"


def _settings(fake: fake_nvml.FakeNvml) -> list[tuple[int, int, int]]:
    return [(g.app_mem, g.app_gr, g.limit_mw) for g in fake.state().gpus]


def test_a_session_saves_the_gpus_first_and_restores_them_on_exit(
    fake: fake_nvml.FakeNvml, tree: Path, state: Path
) -> None:
    with NodeSettings(SysRoot(tree), state_file=state) as node:
        assert node.set_gpu_clocks(810, 585).value == "810:585 MHz on 2 GPU(s)"
        saved = json.loads(state.read_text())["gpu"]
        assert saved["GPU-fake-0001"]["graphics_mhz"] == 1230
        assert saved["GPU-fake-0001"]["clocks_at_default"] is True
        node.set_gpu_power_limit(120)
        node.set_gpu_clocks(877, 135)  # a second change keeps the first originals
        assert json.loads(state.read_text())["gpu"] == saved
        assert _settings(fake) == [(877, 135, 120_000), (877, 135, 120_000)]
    assert _settings(fake) == FOUND
    assert not state.exists()


def test_a_refused_request_in_a_session_changes_nothing(
    fake: fake_nvml.FakeNvml, tree: Path, state: Path
) -> None:
    with NodeSettings(SysRoot(tree), state_file=state) as node:
        with pytest.raises(InvalidValueError, match=r"^gpu power limit 1000 W is outside"):
            node.set_gpu_power_limit(1000)
        with pytest.raises(InvalidValueError, match=r"^gpu clocks 1:2 MHz"):
            node.set_gpu_clocks(1, 2)
        assert not state.exists()
    assert _settings(fake) == FOUND


def test_a_session_on_a_node_without_nvml_is_refused_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tree: Path, state: Path
) -> None:
    monkeypatch.setenv("GREENCKPT_NVML_LIBRARY", str(tmp_path / "none.so"))
    with NodeSettings(SysRoot(tree), state_file=state) as node:
        with pytest.raises(PlatformError, match=r"^no NVIDIA management library: cannot load"):
            node.set_gpu_clocks(877, 1230)
        assert not state.exists()


CHILD = """
import sys, time
from pathlib import Path
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import SysRoot
with NodeSettings(SysRoot(Path(sys.argv[1])), state_file=sys.argv[2]) as node:
    node.set_frequency(1.4e9)
    node.set_gpu_clocks(810, 135)
    node.set_gpu_power_limit(100)
    print("ready", flush=True)
    time.sleep(60)
"""


def _killed_session(fake: fake_nvml.FakeNvml, tree: Path, state: Path) -> None:
    child = spawn_ready(CHILD, str(tree), str(state))
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.communicate()
    assert _settings(fake) == [(810, 135, 100_000), (810, 135, 100_000)]  # left changed
    assert set(json.loads(state.read_text())["gpu"]) == {"GPU-fake-0000", "GPU-fake-0001"}


def test_kill_9_then_restore_from_state_file_puts_the_gpus_back(
    fake: fake_nvml.FakeNvml, tree: Path, state: Path
) -> None:
    _killed_session(fake, tree, state)
    report = restore_from_state_file(SysRoot(tree), state)
    assert report.ok
    assert _settings(fake) == FOUND
    assert not state.exists()


def test_kill_9_then_greenckpt_restore_puts_the_gpus_back(
    fake: fake_nvml.FakeNvml, tree: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _killed_session(fake, tree, state)
    assert main(["restore", "--root", str(tree), "--state-file", str(state)]) == 0
    assert "restored" in capsys.readouterr().out
    assert _settings(fake) == FOUND
    assert not state.exists()


def test_a_gpu_that_cannot_be_restored_keeps_the_state_file(
    fake: fake_nvml.FakeNvml, tree: Path, state: Path
) -> None:
    _killed_session(fake, tree, state)
    fake.fail("nvmlDeviceSetPowerManagementLimit", 4, index=1)
    with pytest.raises(PlatformError) as info:
        restore_from_state_file(SysRoot(tree), state)
    message = str(info.value)
    assert "(kept for another try): GPU 1 (GPU-fake-0001) gpu power limit: " in message
    assert message.endswith("(setting the GPU power limit needs root)")
    assert _settings(fake)[0] == FOUND[0]  # the other GPU and the clocks were put back
    assert state.exists()  # never drop the only record of what to put back
    fake.write(fake_nvml.FakeState(fake.state().gpus))  # the permission is granted again
    assert restore_from_state_file(SysRoot(tree), state).ok
    assert _settings(fake) == FOUND
