"""One answer to "can this node's CPU frequency be controlled", used by every caller.

Against the fake sysfs trees: a VM without cpufreq, an acpi-cpufreq node, a tableless
intel_pstate node, a read-only tree (a user without root) and a malformed one. The probe, the
runtime's node description, the policies and the runtime's notes must all agree with
:func:`frequency_control`, and none of them decides by matching note text.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from greenckpt.platform.capability import READ_ONLY, FrequencyControl, frequency_control
from greenckpt.platform.probe import probe
from greenckpt.platform.root import SysRoot
from greenckpt.runtime import NO_FREQUENCY_CONTROL, DefaultPolicy, Node, PhaseRequest
from greenckpt.runtime.baselines import decided_frequency
from greenckpt.runtime.control import effective_settings
from greenckpt.runtime.node import frequency_note
from greenckpt.runtime.settings import Settings
from tests.platform.fake_cpu import build_tree

CPUFREQ = "sys/devices/system/cpu/cpufreq"


def _tree(name: str, tmp_path: Path) -> SysRoot:
    tree = build_tree(name, tmp_path / name)
    (tree / "proc").mkdir(exist_ok=True)
    (tree / "proc/cpuinfo").write_text("processor\t: 0\nmodel name\t: Fake CPU (synthetic)\n\n")
    return SysRoot(tree)


def _deny(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """As a user without root sees sysfs: ``suffix`` files are not writable."""
    real_access = os.access

    def access(path: Any, mode: int) -> bool:
        if str(path).endswith(suffix) and mode & os.W_OK:
            return False
        return real_access(path, mode)

    monkeypatch.setattr(os, "access", access)


def test_a_vm_without_cpufreq_has_no_control_and_says_why(tmp_path: Path) -> None:
    control = frequency_control(_tree("vm-no-cpufreq", tmp_path))
    assert not control.available and not control.present
    assert "cpufreq not available" in control.reason
    assert control.governors == () and control.frequencies_hz == ()
    assert control.unwritable is None


def test_an_acpi_cpufreq_node_has_control_with_its_governors_and_table(tmp_path: Path) -> None:
    control = frequency_control(_tree("intel-acpi-cpufreq", tmp_path))
    assert control.available and control.present and control.reason == ""
    assert {"userspace", "performance", "ondemand"} <= set(control.governors)
    assert control.frequencies_hz and list(control.frequencies_hz) == sorted(control.frequencies_hz)
    assert control.cpufreq is not None and control.unwritable is None


def test_a_driver_without_a_frequency_table_still_has_control(tmp_path: Path) -> None:
    control = frequency_control(_tree("intel-pstate-hwp", tmp_path))
    assert control.available and control.frequencies_hz == ()
    assert control.governors


@pytest.mark.parametrize("attribute", ["scaling_governor", "scaling_max_freq", "scaling_min_freq"])
def test_read_only_cpufreq_is_no_control_and_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attribute: str
) -> None:
    root = _tree("intel-acpi-cpufreq", tmp_path)
    _deny(monkeypatch, attribute)
    control = frequency_control(root)
    assert not control.available and control.present
    assert control.reason == READ_ONLY
    assert control.unwritable is not None and control.unwritable.endswith(attribute)
    assert control.governors  # still what cpufreq offers: only the writing is refused


def test_a_malformed_tree_is_no_control_not_an_exception(tmp_path: Path) -> None:
    root = _tree("intel-acpi-cpufreq", tmp_path)
    (root.path / CPUFREQ / "policy0/affected_cpus").write_text("zz\n")
    control = frequency_control(root)
    assert not control.available and not control.present
    assert "affected_cpus" in control.reason


@pytest.mark.parametrize("name", ["vm-no-cpufreq", "intel-acpi-cpufreq", "amd-pstate-passive"])
def test_the_probe_and_the_node_give_the_same_answer(tmp_path: Path, name: str) -> None:
    root = _tree(name, tmp_path)
    control = frequency_control(root)
    node = Node.detect(root)
    assert node.frequency == FrequencyControl(
        available=control.available, reason=control.reason, governors=control.governors
    )
    cpufreq = next(c for c in probe((), root, meters=False).capabilities if c.name == "cpufreq")
    assert cpufreq.available == control.present
    assert cpufreq.details.get("writable", False) == control.available


def test_the_probe_and_the_node_see_a_read_only_tree_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree("intel-acpi-cpufreq", tmp_path)
    _deny(monkeypatch, "scaling_governor")
    node = Node.detect(root)
    assert not node.frequency_control and node.frequency_reason == READ_ONLY
    cpufreq = next(c for c in probe((), root, meters=False).capabilities if c.name == "cpufreq")
    assert cpufreq.available and cpufreq.details["writable"] is False


def test_a_policy_decides_under_the_node_answer_or_the_callers() -> None:
    node = Node(cpus=2, frequency_control=True, governors=("performance",))
    assert decided_frequency(node, None) == node.frequency
    assert decided_frequency(node, True).available
    off = decided_frequency(node, False)
    assert not off.available and frequency_note(off) == (
        f"{NO_FREQUENCY_CONTROL}; frequency control turned off"
    )


def _ckpt() -> PhaseRequest:
    return PhaseRequest("checkpoint", "/ckpt", 1 << 20)


def test_the_runtime_note_comes_from_the_node_answer_once() -> None:
    node = Node(cpus=2, frequency_control=False, frequency_reason="cpufreq not available (test)")
    asked = Settings(io_processes=2, source="test", frequency_hz=1_400_000_000)
    applied = effective_settings(asked, node, control=True, background=False)
    assert applied.frequency_hz is None
    assert applied.notes == (frequency_note(node.frequency),)
    # A policy deciding for the same node already said it: the note is not repeated.
    said = DefaultPolicy(node=node).decide(_ckpt())
    said = Settings(
        io_processes=2,
        source="test",
        frequency_hz=1_400_000_000,
        notes=(*said.notes, frequency_note(node.frequency)),
    )
    again = effective_settings(said, node, control=True, background=False)
    assert again.notes.count(frequency_note(node.frequency)) == 1
