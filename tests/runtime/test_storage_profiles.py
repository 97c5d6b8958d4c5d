"""One profile per storage target (issue 15 item 5): each phase is decided from the profile of
the storage its path is on, and the settings name the profile file used.

Every profile here is one of the shipped SYNTHETIC examples (its storage key set to a fake
storage tree's), and the storage is a fake tree (greenckpt.testing.storage): an NVMe ext4
scratch (node-local, L1) and an NFSv4 export (the global file system, L4) on one node.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from greenckpt.errors import InvalidValueError
from greenckpt.optimize import Profile, load_profile
from greenckpt.runtime import Node, PhaseRequest, Settings
from greenckpt.runtime.node import storage_key_of
from greenckpt.runtime.profiles import (
    NamedProfile,
    PerStoragePolicy,
    check_storage_profiles,
    make_storage_policy,
)
from greenckpt.testing.storage import FakeStorageTree, make_nvme_ext4
from tests.conftest import ROOT

PROFILES = ROOT / "examples" / "profiles"
GIB = 2**30
CPU = "AMD Opteron 6172 (synthetic)"  # the shipped synthetic profiles' CPU


def _two_storages(base: Path) -> tuple[FakeStorageTree, str, str]:
    """A node-local NVMe scratch (/scratch/ckpt) and an NFS export (/shared/run1)."""
    tree, local = make_nvme_ext4(base)
    tree.mount(
        "/shared",
        "nfs4",
        "fs1:/export/ckpt",
        "rw,vers=4.2,rsize=1048576,wsize=524288,namlen=255,hard,proto=tcp,timeo=600,"
        "retrans=2,sec=sys,clientaddr=10.0.0.2,local_lock=none,addr=10.0.0.1",
        dev="0:52",
    )
    tree.mount("/dev/shm", "tmpfs", "tmpfs", "rw,size=1g", dev="0:60")  # a third storage
    return tree, local, tree.mkdir("/shared/run1")


def _for_storage(name: str, key: str) -> Profile:
    """A shipped SYNTHETIC profile said to describe the storage ``key``."""
    profile = load_profile(PROFILES / name)
    return replace(profile, storage={**profile.storage, "key": key})


def _node(tree: FakeStorageTree, cpu: str = CPU) -> Node:
    return Node(
        hostname="node0",
        cpu_model=cpu,
        cpus=24,
        storage_lookup=lambda path: storage_key_of(path, tree.root),
    )


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Node, str, str, list[NamedProfile]]:
    tree, local, shared = _two_storages(tmp_path / "root")
    local_key, shared_key = storage_key_of(local, tree.root), storage_key_of(shared, tree.root)
    assert local_key != shared_key
    profiles = [
        NamedProfile("local.json", _for_storage("synthetic-pcie-flash.json", local_key)),
        NamedProfile("global.json", _for_storage("synthetic-nfs-1gbe.json", shared_key)),
    ]
    return _node(tree), local, shared, profiles


def _policy(node: Node, profiles: list[NamedProfile]) -> PerStoragePolicy:
    policy = make_storage_policy(
        "profile", profiles, node=node, app_power=471.1, mtbf=14 * 3600.0 / 8
    )
    assert isinstance(policy, PerStoragePolicy)
    return policy


def _has(settings: Settings, *fragments: str) -> bool:
    return any(all(f in note for f in fragments) for note in settings.notes)


def test_local_and_global_levels_are_decided_from_their_own_profiles(
    setup: tuple[Node, str, str, list[NamedProfile]],
) -> None:
    node, local, shared, profiles = setup
    policy = _policy(node, profiles)
    l1 = policy.decide(PhaseRequest("checkpoint", local, GIB, level=1))
    l4 = policy.decide(PhaseRequest("flush", f"{shared}/step1", GIB, level=4))
    assert l1.source == "profile lookup (local.json)"
    assert l4.source == "profile lookup (global.json)"
    assert _has(l1, "local.json", local) and _has(l4, "global.json", shared)
    # Each prediction is its own profile's: the same decision on that profile alone.
    alone_local = make_storage_policy("profile", profiles[:1], node=node, app_power=471.1,
                                      mtbf=14 * 3600.0 / 8).decide(
        PhaseRequest("checkpoint", local, GIB, level=1))  # fmt: skip
    alone_global = make_storage_policy("profile", profiles[1:], node=node, app_power=471.1,
                                       mtbf=14 * 3600.0 / 8).decide(
        PhaseRequest("flush", f"{shared}/step1", GIB, level=4))  # fmt: skip
    assert l1.predicted_seconds == alone_local.predicted_seconds
    assert l4.predicted_seconds == alone_global.predicted_seconds
    assert l1.predicted_seconds is not None and l4.predicted_seconds is not None
    assert l4.predicted_seconds > l1.predicted_seconds  # 1 GbE NFS is slower than PCIe flash
    # A restart of each level reads from its own storage, with its own profile too.
    r4 = policy.decide(PhaseRequest("restart", f"{shared}/step1", GIB, level=4))
    assert r4.source == "profile lookup (global.json)"


def test_a_storage_no_profile_describes_falls_back_naming_the_profiles(
    setup: tuple[Node, str, str, list[NamedProfile]],
) -> None:
    node, _local, _shared, profiles = setup
    s = _policy(node, profiles).decide(PhaseRequest("checkpoint", "/dev/shm/c", GIB, level=1))
    assert s.source == "defaults (profile not used)"
    assert _has(s, "no profile is for the storage of /dev/shm/c", "local.json", "global.json")
    assert s.predicted_seconds is None


def test_one_profile_keeps_its_own_storage_check_and_is_named(
    setup: tuple[Node, str, str, list[NamedProfile]],
) -> None:
    node, local, shared, profiles = setup
    policy = _policy(node, profiles[:1])
    assert policy.decide(PhaseRequest("checkpoint", local, GIB)).source == (
        "profile lookup (local.json)"
    )
    other = policy.decide(PhaseRequest("flush", shared, GIB, level=4))
    assert other.source == "defaults (profile not used)"
    assert _has(other, "another storage device") and _has(other, "local.json", "not used")


def test_each_node_uses_the_profile_of_its_own_cpu(tmp_path: Path) -> None:
    """Two profiles of the same storage for two CPU models: a node uses its own CPU's."""
    tree, local, _shared = _two_storages(tmp_path / "root")
    key = storage_key_of(local, tree.root)
    mine = _for_storage("synthetic-pcie-flash.json", key)
    other = replace(_for_storage("synthetic-nfs-1gbe.json", key), machine={"cpu_model": "X1"})
    profiles = [NamedProfile("x1.json", other), NamedProfile("opteron.json", mine)]
    s = _policy(_node(tree), profiles).decide(PhaseRequest("checkpoint", local, GIB, level=1))
    assert s.source == "profile lookup (opteron.json)"


def test_ambiguous_or_unlabelled_profiles_are_refused(
    setup: tuple[Node, str, str, list[NamedProfile]],
) -> None:
    profiles = setup[3]
    twice = [profiles[0], NamedProfile("again.json", profiles[0].profile)]
    with pytest.raises(InvalidValueError, match=r"local\.json and again\.json both describe"):
        check_storage_profiles(twice)
    bare = NamedProfile("bare.json", replace(profiles[1].profile, storage={}))
    with pytest.raises(InvalidValueError, match=r"bare\.json records no storage key"):
        check_storage_profiles([profiles[0], bare])
    check_storage_profiles([bare])  # one profile: its own checks apply at each phase
