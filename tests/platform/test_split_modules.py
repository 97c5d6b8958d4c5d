"""The names storage.py and sampler.py held before the issue-17 split still import from there.

Why a test: callers (and users' code) import ``greenckpt.platform.storage`` and
``greenckpt.platform.sampler``; the split into modules with one job each must not change what
those imports find — the very same objects, not copies.
"""

from __future__ import annotations

import pytest

from greenckpt.platform import blockdev, fstypes, mounts, sampler, series, storage


@pytest.mark.parametrize(
    ("home", "name"),
    [
        (mounts, "MountEntry"),
        (mounts, "find_mount"),
        (mounts, "parse_mountinfo"),
        (mounts, "MOUNTINFO"),
        (mounts, "MAX_SYMLINKS"),
        (fstypes, "NfsInfo"),
        (fstypes, "StorageKind"),
        (fstypes, "NFS_TYPES"),
        (fstypes, "NETWORK_TYPES"),
        (fstypes, "DISK_TYPES"),
        (blockdev, "BlockDevice"),
        (blockdev, "SECTOR"),
        (blockdev, "VIRTUAL_VENDORS"),
    ],
)
def test_storage_re_exports_what_moved(home: object, name: str) -> None:
    assert getattr(storage, name) is getattr(home, name)
    assert name in storage.__all__


@pytest.mark.parametrize("name", ["PhaseEnergy", "Mark", "Series", "FloatArray"])
def test_sampler_re_exports_its_figures(name: str) -> None:
    assert getattr(sampler, name) is getattr(series, name)


@pytest.mark.parametrize(
    ("fstype", "device", "source", "kind"),
    [
        ("nfs4", "0:52", "fs1:/export", "network"),
        ("tmpfs", "0:40", "tmpfs", "memory"),
        ("overlay", "0:41", "overlay", "overlay"),
        ("virtiofs", "0:42", "share", "share"),
        ("proc", "0:22", "proc", "pseudo"),
        ("fuse.sshfs", "0:43", "u@h:/d", "fuse"),
        ("btrfs", "0:44", "/dev/sda2", "block"),  # anonymous st_dev, a disk filesystem
        ("foofs", "8:1", "whatever", "block"),  # unknown type with a real device number
        ("foofs", "0:45", "whatever", "unknown"),
    ],
)
def test_storage_kind_by_type_then_device(fstype: str, device: str, source: str, kind: str) -> None:
    line = f"30 1 {device} / /data rw - {fstype} {source} rw\n"
    assert fstypes.storage_kind(mounts.parse_mountinfo(line)[0]) == kind
