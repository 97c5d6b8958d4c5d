"""A batch system's SIGTERM that arrives while the runtime's notification thread is writing a
CPU setting for a phase (found in review of issue 18, item 18).

The node-settings session holds such a signal back until its write is complete, then sends it
again. Sent from the notification thread, it used to reach that thread only: the main thread,
blocked waiting for the application, ran no handler, so the signal was neither forwarded nor
the node restored until the application ended by itself — under a batch time limit, a SIGKILL
and no report. Everything here is SYNTHETIC (a fake cpufreq tree and fake meters).
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from greenckpt.runtime.command import run_with_runtime
from greenckpt.runtime.policy import Node
from greenckpt.runtime.session import Runtime
from greenckpt.runtime.settings import PhaseRequest, Settings
from tests.platform import fake_power
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, load_spec

CHILD = textwrap.dedent(
    """
    import time
    from greenckpt.ckpt.notify_client import hook_from_env
    hook = hook_from_env()
    hook.begin("checkpoint", level=1, path="/tmp", size=1, node=0)
    hook.end("checkpoint", node=0, ok=True, seconds=0.1)
    time.sleep(10)  # the application computes on until the batch system stops it
    """
)


class Powersave:
    """A SYNTHETIC policy that sets the powersave governor for every phase."""

    name = "powersave-test"

    def decide(self, request: PhaseRequest) -> Settings:
        return Settings(io_processes=1, source="test", governor="powersave")


def test_a_sigterm_during_a_settings_write_is_still_forwarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = build_tree(load_spec("intel-acpi-cpufreq"), tmp_path / "tree")
    fake_power.intel_tree(tree)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    root = FakeSysfsRoot(tree)
    writing = threading.Event()
    real_write = type(root).write

    def slow_write(self: FakeSysfsRoot, rel: str, value: str) -> None:
        on_main = threading.current_thread() is threading.main_thread()
        if "scaling_governor" in rel and not on_main and not writing.is_set():
            writing.set()
            time.sleep(1.0)  # the signal lands in here
        real_write(self, rel, value)

    monkeypatch.setattr(type(root), "write", slow_write)
    node = Node(cpus=2, frequency_control=True)
    runtime = Runtime(Powersave(), root=root, state_file=tmp_path / "state.json", node=node)

    def batch_system() -> None:
        if writing.wait(30):
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=batch_system, daemon=True).start()
    env_path = os.environ.get("PYTHONPATH", "")
    src = str(Path(__file__).resolve().parents[2] / "src")
    monkeypatch.setenv("PYTHONPATH", src + (os.pathsep + env_path if env_path else ""))
    outcome, report = run_with_runtime([sys.executable, "-c", CHILD], runtime)
    assert writing.is_set()
    assert outcome.signal == signal.SIGTERM
    assert outcome.forwarded
    assert outcome.status == 128 + signal.SIGTERM  # the command died of the forwarded signal
    governors = [r.settings.governor for r in report.records if r.kind == "checkpoint"]
    assert governors == ["powersave"]
