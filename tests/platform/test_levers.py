"""Which levers a SYNTHETIC node has (node_levers), and the per-core split's CPU sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.platform.levers import (
    LEVER_NAMES,
    node_levers,
    per_core_split_available,
    split_cpus,
)
from greenckpt.platform.restore import NodeSettings
from greenckpt.platform.root import SysRoot
from greenckpt.testing.cpu import build_tree, diff, snapshot
from tests.platform.fake_levers import FakeLeverRoot, build_node

POLICY = "sys/devices/system/cpu/cpufreq/policy{}/scaling_setspeed"


def test_every_lever_present_on_a_full_node(tmp_path: Path) -> None:
    levers = {i.name: i for i in node_levers(SysRoot(build_node(tmp_path)))}
    assert tuple(levers) == LEVER_NAMES
    for name in ("cpu frequency", "uncore frequency", "per-core split", "power limit"):
        assert levers[name].present and levers[name].reason == "", levers[name]
    assert levers["uncore frequency"].values == ("800000..2400000 kHz on 2 domains",)
    assert levers["power limit"].values == (
        "package: above 0 up to 250 W on 2 zone(s)",
        "dram: above 0 up to 60 W on 2 zone(s)",
    )


def test_a_vm_has_none_and_says_why(tmp_path: Path) -> None:
    levers = node_levers(SysRoot(build_tree("vm-no-cpufreq", tmp_path)))
    assert [i.name for i in levers] == list(LEVER_NAMES)
    for info in levers:
        assert not info.present and info.reason, info
    assert "intel_uncore_frequency" in levers[1].reason
    assert "intel-rapl" in levers[3].reason


def test_shared_policies_mean_no_per_core_split(tmp_path: Path) -> None:
    root = SysRoot(build_node(tmp_path, cpus_per_policy=2))
    split = next(i for i in node_levers(root) if i.name == "per-core split")
    assert not split.present and "policy0 covers CPUs 0-1" in split.reason
    assert per_core_split_available(root, [0, 1], [2, 3]) == (True, "")  # whole policies
    ok, why = per_core_split_available(root, [0], [1, 2, 3])
    assert not ok and "policy0 covers writer CPUs 0 and waiting CPUs 1" in why
    assert per_core_split_available(root, [0, 1, 2, 3], [])[0] is False


def test_split_cpus_takes_the_first_cpus_of_the_affinity() -> None:
    assert split_cpus(2, [5, 3, 9, 1]) == ((1, 3), (5, 9))
    assert split_cpus(9, [0, 1]) == ((0, 1), ())
    writers, waiters = split_cpus(1)
    assert len(writers) == 1 and writers[0] not in waiters
    with pytest.raises(InvalidValueError, match="whole number >= 1"):
        split_cpus(0)


def test_per_core_split_in_one_session_restores_both_sets(tmp_path: Path) -> None:
    tree = build_node(tmp_path / "tree")
    root = FakeLeverRoot(tree)
    before = snapshot(tree)
    writers, waiters = split_cpus(1, range(4))
    with NodeSettings(root, state_file=tmp_path / "s.json", signals=()) as node:
        node.set_frequency(2.4e9, cpus=writers)
        node.set_frequency(1.2e9, cpus=waiters)
        assert (tree / POLICY.format(0)).read_text() == "2400000\n"
        assert {(tree / POLICY.format(c)).read_text() for c in waiters} == {"1200000\n"}
        assert sorted(node._saved_cpufreq) == ["policy0", "policy1", "policy2", "policy3"]
        node.restore()
        assert diff(before, snapshot(tree)) == []
        node.set_frequency(1.2e9, cpus=waiters)
    assert diff(before, snapshot(tree)) == []
