"""A user-supplied root (``--root``, ``$GREENCKPT_SYSROOT``) never makes greenckpt write outside
it (issue 18, item 23): root running greenckpt on a user's tree whose ``scaling_governor``
links to another file must not write into that file. Links that stay inside the tree (as
``cpuN/cpufreq -> ../cpufreq/policyN`` in real sysfs) are followed. Trees are SYNTHETIC,
written through the plain :class:`SysRoot` a user's ``--root`` gets.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from greenckpt.platform.cpuidle import CpuDmaLatency
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import PlatformError, SysRoot
from tests.platform.fake_cpu import build_tree

P0 = "sys/devices/system/cpu/cpufreq/policy0"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return build_tree("intel-acpi-cpufreq", tmp_path / "tree")


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "passwd"
    path.parent.mkdir()
    path.write_text("root:x:0:0\n")
    return path


def test_a_file_linking_out_of_the_tree_is_not_written(tree: Path, victim: Path) -> None:
    governor = tree / P0 / "scaling_governor"
    governor.unlink()
    governor.symlink_to(victim)
    with pytest.raises(PlatformError, match="symbolic link"):
        SysRoot(tree).write(f"{P0}/scaling_governor", "userspace\n")
    assert victim.read_text() == "root:x:0:0\n"


def test_a_directory_linking_out_of_the_tree_is_not_written(
    tree: Path, tmp_path: Path, victim: Path
) -> None:
    outside = tmp_path / "outside" / "policy0"
    (tree / P0).rename(outside)
    (tree / P0).symlink_to(outside)
    with pytest.raises(PlatformError, match="outside the tree"):
        SysRoot(tree).write(f"{P0}/scaling_governor", "userspace\n")
    assert (outside / "scaling_governor").read_text() != "userspace\n"


def test_a_hard_link_is_not_written(tree: Path, victim: Path) -> None:
    governor = tree / P0 / "scaling_governor"
    governor.unlink()
    os.link(victim, governor)
    with pytest.raises(PlatformError, match="hard link"):
        SysRoot(tree).write(f"{P0}/scaling_governor", "userspace\n")
    assert victim.read_text() == "root:x:0:0\n"


def test_links_inside_the_tree_are_followed(tree: Path) -> None:
    assert (tree / "sys/devices/system/cpu/cpu1/cpufreq").is_symlink()
    SysRoot(tree).write("sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "userspace\n")
    assert (tree / P0 / "scaling_governor").read_text() == "userspace\n"


def test_a_session_on_a_hostile_tree_changes_nothing_outside(tree: Path, victim: Path) -> None:
    governor = tree / P0 / "scaling_governor"
    original = governor.read_text()
    governor.unlink()
    governor.symlink_to(victim)
    victim.write_text(original)  # reads as a valid governor, so the session gets to the write
    with (
        NodeSettings(SysRoot(tree), state_file=tree.parent / "s.json", signals=()) as node,
        pytest.raises(PlatformError, match="symbolic link"),
    ):
        node.set_governor("userspace")
    assert victim.read_text() == original


def test_the_dma_latency_device_of_a_tree_is_not_followed_out(tree: Path, victim: Path) -> None:
    dev = tree / "dev/cpu_dma_latency"
    dev.unlink()
    dev.symlink_to(victim)
    with pytest.raises(PlatformError, match="symbolic link"):
        CpuDmaLatency(0.0, SysRoot(tree)).open()
    assert victim.read_text() == "root:x:0:0\n"
