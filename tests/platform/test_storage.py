"""Storage identification against SYNTHETIC fake trees (see fake_storage.py) and this machine.

Each scenario asserts every field a profile lookup or a report relies on, the notes that say
why a field is unknown, and the key; keys that must differ (NFS sync vs async) are compared.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from greenckpt.platform.root import ENV_VAR, PlatformError, SysRoot
from greenckpt.platform.storage import (
    BlockDevice,
    MountEntry,
    NfsInfo,
    StorageInfo,
    find_mount,
    identify_storage,
    parse_mountinfo,
    storage_key,
)
from tests.platform import fake_storage as fs

NVME_NOTE = "nvme0n1: NVMe exposes no vendor name in sysfs (the model names it)"
NFS_NOTE = (
    "NFS sync/async is the client mount mode; the server's export option is not visible "
    "from the client"
)


# --------------------------------------------------------------------------- scenarios


def test_ext4_on_nvme_partition(tmp_path: Path) -> None:
    tree, ckpt = fs.make_nvme_ext4(tmp_path)
    info = identify_storage(ckpt, tree.root)

    assert info.path == "/scratch/ckpt"
    assert info.mount_point == "/scratch"
    assert info.fstype == "ext4"
    assert info.source == "/dev/nvme0n1p2"
    assert info.mount_options == ("rw", "noatime")
    assert info.super_options == ("rw", "errors=remount-ro")
    assert info.mount.major_minor == "259:2"
    assert info.mount.root == "/"
    assert info.mount.optional_fields == ("shared:1",)
    assert info.kind == "block"
    assert info.is_network is False
    assert info.synchronous is False
    assert info.nfs is None

    dev = info.device
    assert dev is not None
    assert dev.name == "nvme0n1p2"
    assert dev.is_partition is True
    assert dev.disk == "nvme0n1"
    assert dev.major_minor == "259:2"
    assert dev.sysfs_path.endswith("/nvme/nvme0/nvme0n1/nvme0n1p2")
    assert dev.size_bytes == 1900000000 * 512
    assert dev.layer is None

    (disk,) = info.disks
    assert disk.name == "nvme0n1"
    assert disk.is_partition is False
    assert disk.bus == "nvme"
    assert disk.media == "nvme"
    assert disk.rotational is False
    assert disk.model == fs.NVME_MODEL
    assert disk.vendor is None
    assert disk.logical_block_size == 512
    assert disk.physical_block_size == 512
    assert disk.size_bytes == 1953525168 * 512
    assert disk.is_virtual is False
    assert disk.is_network is False

    assert info.layers == ()
    assert info.rotational is False
    assert info.model == fs.NVME_MODEL
    assert info.vendor is None
    assert info.logical_block_size == 512
    assert info.size_bytes == 1900000000 * 512
    assert info.is_virtual is False
    assert info.key == "ext4:nvme:Samsung_SSD_980_PRO_1TB"
    assert info.notes == (NVME_NOTE,)


def test_xfs_on_sata_hdd_mounted_by_uuid(tmp_path: Path) -> None:
    tree, ckpt = fs.make_xfs_hdd(tmp_path)
    info = identify_storage(ckpt, tree.root)

    assert info.mount_point == "/data"
    assert info.fstype == "xfs"
    assert info.source == "/dev/disk/by-uuid/0b1e2f4a-fake"
    assert info.super_options == (
        "rw",
        "attr2",
        "inode64",
        "logbufs=8",
        "logbsize=32k",
        "noquota",
    )
    assert info.mount.optional_fields == ("shared:7",)
    assert info.kind == "block"
    assert info.is_network is False
    assert info.device is not None
    assert info.device.name == "sdb1"
    assert info.device.disk == "sdb"
    (disk,) = info.disks
    assert disk.bus == "ata"
    assert disk.media == "hdd"
    assert disk.rotational is True
    assert disk.vendor == "ATA"
    assert disk.model == fs.HDD_MODEL
    assert disk.physical_block_size == 4096
    assert info.rotational is True
    assert info.vendor == "ATA"
    assert info.model == fs.HDD_MODEL
    assert info.logical_block_size == 512
    assert info.size_bytes == 7814035456 * 512
    assert info.is_virtual is False
    assert info.key == "xfs:hdd:ST4000NM0035-1V4107"
    assert info.notes == ()


def test_source_link_used_when_device_number_is_anonymous(tmp_path: Path) -> None:
    """btrfs reports 0:N in mountinfo: the /dev/disk/by-uuid link leads to the partition."""
    tree, _ = fs.make_xfs_hdd(tmp_path)
    tree.mount("/btr", "btrfs", "/dev/disk/by-uuid/0b1e2f4a-fake", "rw,ssd", dev="0:61")
    info = identify_storage("/btr", tree.root)
    assert info.device is not None
    assert info.device.name == "sdb1"
    assert info.key == "btrfs:hdd:ST4000NM0035-1V4107"
    assert info.notes == ("btrfs can span several devices; only the one in mountinfo is described",)


def test_mapper_name_found_without_dev_node(tmp_path: Path) -> None:
    """In a container /dev/mapper may be absent: the dm name in sysfs still finds dm-0."""
    tree, _ = fs.make_lvm_sata_ssd(tmp_path)
    (tree.path("dev/mapper/vg0-ckpt")).unlink()
    tree.mount("/b", "btrfs", "/dev/mapper/vg0-ckpt", dev="0:70")
    info = identify_storage("/b", tree.root)
    assert info.device is not None
    assert info.device.name == "dm-0"
    assert info.key == "btrfs:lvm:ssd:Samsung_SSD_860_EVO_500GB"


@pytest.mark.parametrize("sync", [True, False])
def test_nfs4(tmp_path: Path, sync: bool) -> None:
    tree, ckpt = fs.make_nfs4(tmp_path, sync=sync)
    info = identify_storage(ckpt, tree.root)

    assert info.mount_point == "/shared"
    assert info.fstype == "nfs4"
    assert info.source == "fs1:/export/ckpt"
    assert info.kind == "network"
    assert info.is_network is True
    assert info.synchronous is sync
    assert info.nfs == NfsInfo(
        server="fs1",
        export="/export/ckpt",
        sync=sync,
        version="4.2",
        proto="tcp",
        rsize=1048576,
        wsize=524288,
        addr="10.0.0.1",
    )
    assert info.nfs.mode == ("sync" if sync else "async")
    assert info.device is None
    assert info.disks == ()
    assert info.layers == ()
    assert (info.rotational, info.model, info.vendor) == (None, None, None)
    assert (info.logical_block_size, info.size_bytes, info.is_virtual) == (None, None, None)
    assert info.key == f"nfs4:fs1:/export/ckpt:{'sync' if sync else 'async'}:tcp"
    assert info.notes == (NFS_NOTE,)


def test_nfs_sync_and_async_keys_differ_and_other_exports_too(tmp_path: Path) -> None:
    keys = {
        identify_storage(c, t.root).key
        for t, c in (
            fs.make_nfs4(tmp_path / "s", sync=True),
            fs.make_nfs4(tmp_path / "a", sync=False),
            fs.make_nfs4(tmp_path / "r", sync=False, proto="rdma"),
        )
    }
    assert keys == {
        "nfs4:fs1:/export/ckpt:sync:tcp",
        "nfs4:fs1:/export/ckpt:async:tcp",
        "nfs4:fs1:/export/ckpt:async:rdma",
    }


def test_nfs3_ipv6_source_and_missing_options(tmp_path: Path) -> None:
    tree = fs.FakeStorageTree(tmp_path)
    tree.mount("/", "ext4", "/dev/sda1", dev="8:1", mount_id=1, parent=0)
    tree.mount("/n", "nfs", "[fd00::1]:/vol/ckpt", "rw,sync,hard", dev="0:55")
    info = identify_storage("/n", tree.root)
    assert info.nfs == NfsInfo(
        server="[fd00::1]",
        export="/vol/ckpt",
        sync=True,
        version=None,
        proto=None,
        rsize=None,
        wsize=None,
        addr=None,
    )
    assert info.key == "nfs:[fd00::1]:/vol/ckpt:sync"
    assert info.notes == (
        "NFS rsize is not in the mount options",
        "NFS wsize is not in the mount options",
        "NFS transport (proto=) is not in the mount options; key has no transport",
        "NFS version (vers=) is not in the mount options",
        NFS_NOTE,
    )


def test_tmpfs(tmp_path: Path) -> None:
    tree, ckpt = fs.make_tmpfs(tmp_path)
    info = identify_storage(ckpt, tree.root)
    assert info.mount_point == "/dev/shm"
    assert info.fstype == "tmpfs"
    assert info.source == "tmpfs"
    assert info.super_options == ("rw", "size=65536k")
    assert info.kind == "memory"
    assert info.is_network is False
    assert info.device is None
    assert info.disks == ()
    assert info.rotational is None
    assert info.is_virtual is None
    assert info.key == "tmpfs"
    assert info.notes == ("tmpfs keeps files in RAM: fast, but lost when the node fails",)


def test_overlay_root(tmp_path: Path) -> None:
    tree, ckpt = fs.make_overlay_root(tmp_path)
    info = identify_storage(ckpt, tree.root)
    assert info.path == "/ckpt"
    assert info.mount_point == "/"
    assert info.fstype == "overlay"
    assert info.source == "overlay"
    assert info.mount.optional_fields == ()
    assert info.mount.option("upperdir") == "/var/lib/docker/overlay2/123/diff"
    assert info.kind == "overlay"
    assert info.is_network is None
    assert info.device is None
    assert info.key == "overlay"
    assert info.notes == (
        "overlay: writes land in upperdir=/var/lib/docker/overlay2/123/diff, a path in the "
        "namespace that made the overlay; the disk under it is not resolved",
    )


def test_lvm_over_sata_ssd(tmp_path: Path) -> None:
    tree, ckpt = fs.make_lvm_sata_ssd(tmp_path)
    info = identify_storage(ckpt, tree.root)
    assert info.mount_point == "/ckpt"
    assert info.source == "/dev/mapper/vg0-ckpt"
    assert info.kind == "block"
    assert info.is_network is False
    dev = info.device
    assert dev is not None
    assert dev.name == "dm-0"
    assert dev.bus == "dm"
    assert dev.layer == "lvm"
    assert dev.is_partition is False
    assert dev.logical_block_size == 4096
    (disk,) = info.disks
    assert disk.name == "sda"
    assert disk.bus == "ata"
    assert disk.media == "ssd"
    assert disk.rotational is False
    assert info.layers == ("lvm",)
    assert info.rotational is False
    assert info.vendor == "ATA"
    assert info.model == fs.SATA_SSD_MODEL
    assert info.logical_block_size == 4096  # what the filesystem's device (dm-0) reports
    assert info.size_bytes == 419430400 * 512
    assert info.is_virtual is False
    assert info.key == "ext4:lvm:ssd:Samsung_SSD_860_EVO_500GB"
    assert info.notes == ()


def test_dm_crypt_over_lvm_lists_layers_top_down(tmp_path: Path) -> None:
    tree, _ = fs.make_lvm_sata_ssd(tmp_path)
    crypt = tree.block(
        "sys/devices/virtual/block/dm-1", "253:1", sectors=419426304, rotational=0, logical=4096
    )
    tree.attrs(crypt, **{"dm/name": "secure", "dm/uuid": "CRYPT-LUKS2-feedface-secure"})
    tree.slaves(crypt, "sys/devices/virtual/block/dm-0")
    tree.mount("/enc", "ext4", "/dev/mapper/secure", dev="253:1")
    info = identify_storage("/enc", tree.root)
    assert info.layers == ("crypt", "lvm")
    assert info.device is not None
    assert info.device.layer == "crypt"
    assert info.key == "ext4:crypt:lvm:ssd:Samsung_SSD_860_EVO_500GB"


def test_md_raid1_over_two_nvme(tmp_path: Path) -> None:
    tree = fs.FakeStorageTree(tmp_path)
    tree.mount("/", "ext4", "/dev/md0", dev="9:0", mount_id=1, parent=0)
    members = []
    for i in range(2):
        ctrl = f"{fs.PCI}/0000:00:1d.{i}/0000:3{i}:00.0/nvme/nvme{i}"
        disk = tree.block(
            f"{ctrl}/nvme{i}n1", f"259:{10 * i}", sectors=1000, rotational=0, device_dir=ctrl
        )
        tree.attrs(ctrl, model=fs.NVME_MODEL, transport="pcie")
        members.append(tree.partition(disk, f"nvme{i}n1p1", f"259:{10 * i + 1}", 1, 900))
    md = tree.block("sys/devices/virtual/block/md0", "9:0", sectors=900, rotational=0)
    tree.attrs(md, **{"md/level": "raid1"})
    tree.slaves(md, *members)
    info = identify_storage("/", tree.root)
    assert [d.name for d in info.disks] == ["nvme0n1", "nvme1n1"]
    assert info.layers == ("md-raid1",)
    assert info.model == fs.NVME_MODEL
    assert info.rotational is False
    assert info.key == "ext4:md-raid1:2xnvme:Samsung_SSD_980_PRO_1TB"
    assert info.notes == (
        "nvme0n1: NVMe exposes no vendor name in sysfs (the model names it)",
        "nvme1n1: NVMe exposes no vendor name in sysfs (the model names it)",
    )


def test_virtio_disk(tmp_path: Path) -> None:
    tree, ckpt = fs.make_virtio(tmp_path)
    info = identify_storage(ckpt, tree.root)
    assert info.mount_point == "/"
    assert info.fstype == "ext4"
    assert info.source == "/dev/vda"
    assert info.super_options == ("rw", "discard")
    assert info.kind == "block"
    dev = info.device
    assert dev is not None
    assert (dev.name, dev.disk, dev.is_partition) == ("vda", "vda", False)
    assert dev.bus == "virtio"
    assert dev.media == "virtio"
    assert dev.rotational is True  # what sysfs says...
    assert dev.vendor is None  # virtio's device/vendor is a numeric ID, not a name
    assert dev.model is None
    assert dev.is_virtual is True
    assert info.disks == (dev,)
    assert info.rotational is None  # ...but it is not the medium's
    assert info.is_network is None
    assert info.is_virtual is True
    assert info.logical_block_size == 512
    assert info.size_bytes == 536870912 * 512
    assert info.key == "ext4:virtio"
    assert info.notes == (
        "vda is a virtio disk of a virtual machine: sysfs gives it no model or vendor name; "
        "its rotational=1 is the hypervisor's, not the medium's (reported as unknown), and "
        "what backs it on the host is not visible",
    )


def test_mount_point_with_space_and_bind_mount(tmp_path: Path) -> None:
    tree, ckpt = fs.make_space_bind(tmp_path)
    assert "/mnt/ckpt\\040data" in tree.path("proc/self/mountinfo").read_text()
    info = identify_storage(ckpt, tree.root)
    assert info.path == "/mnt/ckpt data/run 1"
    assert info.mount_point == "/mnt/ckpt data"
    assert info.mount.root == "/exports/ckpt"
    assert info.mount.optional_fields == ("shared:5", "master:2")
    assert info.mount_options == ("rw", "nosuid", "nodev")
    assert info.device is not None
    assert info.device.name == "nvme0n1p1"
    assert info.key == "ext4:nvme:Samsung_SSD_980_PRO_1TB"
    assert info.notes == (NVME_NOTE,)


# --------------------------------------------------------------------------- more cases


def test_local_sync_mount_gets_its_own_key(tmp_path: Path) -> None:
    tree, _ = fs.make_nvme_ext4(tmp_path)
    tree.mount("/syncd", "ext4", "/dev/nvme0n1p2", "rw,sync", dev="259:2")
    info = identify_storage("/syncd", tree.root)
    assert info.synchronous is True
    assert info.key == "ext4:nvme:Samsung_SSD_980_PRO_1TB:sync"


def test_nvme_over_fabrics_is_network(tmp_path: Path) -> None:
    tree = fs.FakeStorageTree(tmp_path)
    fs.nvme_disk(tree, transport="tcp")
    tree.mount("/", "xfs", "/dev/nvme0n1", dev="259:0", mount_id=1, parent=0)
    info = identify_storage("/", tree.root)
    assert info.is_network is True
    assert info.disks[0].media == "nvme-tcp"
    assert info.key == "xfs:nvme-tcp:Samsung_SSD_980_PRO_1TB"


def test_nvme_without_transport_is_not_assumed_local(tmp_path: Path) -> None:
    tree = fs.FakeStorageTree(tmp_path)
    fs.nvme_disk(tree)
    tree.path(f"{fs.PCI}/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/transport").unlink()
    tree.mount("/", "xfs", "/dev/nvme0n1", dev="259:0", mount_id=1, parent=0)
    info = identify_storage("/", tree.root)
    assert info.is_network is None
    assert info.disks[0].is_network is None
    assert info.key == "xfs:nvme:Samsung_SSD_980_PRO_1TB"
    assert info.notes == (
        "nvme0n1: device/transport is not readable, so PCIe and NVMe over fabrics (network) "
        "cannot be told apart",
        NVME_NOTE,
    )


def test_unreadable_attributes_are_none_with_reasons(tmp_path: Path) -> None:
    tree = fs.FakeStorageTree(tmp_path)
    host = f"{fs.PCI}/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0"
    tree.block(
        f"{host}/block/sda",
        "8:0",
        sectors=100,
        rotational=None,
        logical=None,
        physical=None,
        device_dir=host,
    )
    tree.mount("/", "ext4", "/dev/sda", dev="8:0", mount_id=1, parent=0)
    info = identify_storage("/", tree.root)
    assert (info.rotational, info.model, info.vendor, info.logical_block_size) == (None,) * 4
    assert info.size_bytes == 100 * 512
    assert info.key == "ext4:unknown:unknown"
    assert info.notes == (
        "sda: queue/rotational is not readable",
        "sda: device/model is not readable",
        "sda: device/vendor is not readable",
    )


def test_no_sysfs_means_unknown_disk(tmp_path: Path) -> None:
    tree = fs.FakeStorageTree(tmp_path)
    tree.mount("/", "ext4", "/dev/root", dev="8:2", mount_id=1, parent=0)
    info = identify_storage("/", tree.root)
    assert info.device is None
    assert info.is_network is None
    assert info.key == "ext4:unknown"
    assert info.notes == (
        "sys/dev/block/8:2 is missing (no sysfs, or not a block device)",
        "source /dev/root matches no device in sys/class/block",
        "the disks under this filesystem are not known; key says 'unknown'",
    )


def test_zfs_dataset_has_no_device(tmp_path: Path) -> None:
    tree = fs.FakeStorageTree(tmp_path)
    tree.mount("/", "zfs", "tank/root", "rw,xattr,noacl", dev="0:25", mount_id=1, parent=0)
    info = identify_storage("/", tree.root)
    assert info.kind == "block"
    assert info.key == "zfs:unknown"
    assert info.notes[0].startswith("zfs has an anonymous device number (0:25)")


@pytest.mark.parametrize(
    ("fstype", "source", "kind", "network", "key"),
    [
        ("lustre", "10.0.0.1@o2ib:/scratch", "network", True, "lustre:10.0.0.1@o2ib:/scratch"),
        ("cifs", "//srv/share", "network", True, "cifs://srv/share"),
        ("fuse.sshfs", "u@h:/d", "fuse", True, "fuse.sshfs:u@h:/d"),
        ("fuse.mystery", "thing", "fuse", None, "fuse.mystery"),
        ("virtiofs", "hostshare", "share", None, "virtiofs:hostshare"),
        ("sysfs", "sysfs", "pseudo", False, "sysfs"),
        ("vboxsf", "hostdir", "unknown", None, "vboxsf"),
    ],
)
def test_other_filesystem_kinds(
    tmp_path: Path, fstype: str, source: str, kind: str, network: bool | None, key: str
) -> None:
    tree = fs.FakeStorageTree(tmp_path)
    tree.mount("/", "ext4", "/dev/sda1", dev="8:1", mount_id=1, parent=0)
    tree.mount("/x", fstype, source, dev="0:80")
    info = identify_storage("/x", tree.root)
    assert (info.kind, info.is_network, info.key, info.device) == (kind, network, key, None)


# --------------------------------------------------------------------------- paths


def test_longest_prefix_is_component_wise(tmp_path: Path) -> None:
    tree, _ = fs.make_tmpfs(tmp_path)
    tree.mount("/mnt/dat", "tmpfs", "a", dev="0:90")
    tree.mount("/mnt", "tmpfs", "b", dev="0:91")
    tree.mkdir("/mnt/data/x")
    assert identify_storage("/mnt/data/x", tree.root).source == "b"
    assert identify_storage("/mnt/dat", tree.root).source == "a"


def test_mount_stacked_on_the_same_point_the_top_one_wins(tmp_path: Path) -> None:
    tree = fs.FakeStorageTree(tmp_path)
    tree.mount("/", "ext4", "/dev/sda1", dev="8:1", mount_id=1, parent=0)
    # The top mount (parent 41) is listed first: order alone would pick the wrong one.
    tree.mount("/s", "tmpfs", "upper", dev="0:92", mount_id=42, parent=41)
    tree.mount("/s", "tmpfs", "lower", dev="0:93", mount_id=41, parent=1)
    assert identify_storage("/s", tree.root).source == "upper"


def test_symlinks_resolve_inside_the_root(tmp_path: Path) -> None:
    tree, _ = fs.make_nfs4(tmp_path, sync=False)
    tree.mkdir("/home/u")
    os.symlink("/shared/run1", tree.path("/home/u/ckpt"))  # absolute: re-rooted
    os.symlink("../../shared", tree.path("/home/u/rel"))
    assert identify_storage("/home/u/ckpt", tree.root).path == "/shared/run1"
    info = identify_storage("/home/u/rel/run1/../run1", tree.root)
    assert (info.path, info.fstype) == ("/shared/run1", "nfs4")


def test_symlink_loop_is_an_error(tmp_path: Path) -> None:
    tree, _ = fs.make_tmpfs(tmp_path)
    os.symlink("/loop", tree.path("/loop"))
    with pytest.raises(PlatformError, match="too many levels of symbolic links"):
        identify_storage("/loop", tree.root)


def test_relative_path_uses_real_cwd_and_fake_mountinfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "real-cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    tree, _ = fs.make_nfs4(tmp_path / "fake", sync=True)
    real_cwd = os.getcwd()
    tree.mount(real_cwd, "tmpfs", "cwdfs", dev="0:99")
    tree.mkdir(f"{real_cwd}/ckpt")
    info = identify_storage("ckpt", tree.root)
    assert info.path == f"{real_cwd}/ckpt"
    assert (info.mount_point, info.source) == (real_cwd, "cwdfs")


def test_missing_path_is_a_one_line_platform_error(tmp_path: Path) -> None:
    tree, _ = fs.make_tmpfs(tmp_path)
    with pytest.raises(PlatformError) as err:
        identify_storage("/dev/shm/nope/ckpt", tree.root)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("/dev/shm/nope/ckpt: no such file or directory under root")
    with pytest.raises(PlatformError, match="empty path"):
        identify_storage("", tree.root)


def test_missing_or_bad_mountinfo_is_a_platform_error(tmp_path: Path) -> None:
    tree, _ = fs.make_tmpfs(tmp_path)
    tree.path("proc/self/mountinfo").unlink()
    with pytest.raises(PlatformError, match=r"cannot read .*mountinfo"):
        identify_storage("/dev/shm", tree.root)
    tree.write("proc/self/mountinfo", "1 0 8:1 / / rw ext4 /dev/sda1 rw")
    with pytest.raises(PlatformError, match="mountinfo line 1 is malformed"):
        identify_storage("/dev/shm", tree.root)


def test_default_root_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, ckpt = fs.make_tmpfs(tmp_path)
    monkeypatch.setenv(ENV_VAR, str(tree.base))
    assert identify_storage(ckpt).key == "tmpfs"


# --------------------------------------------------------------------------- parser, key


def test_parse_mountinfo_fields() -> None:
    line = (
        "36 35 98:0 /mnt1 /mnt\\0402 rw,noatime master:1 shared:3 - ext3 /dev/root "
        "rw,errors=continue"
    )
    (entry,) = parse_mountinfo(line + "\n\n")
    assert entry == MountEntry(
        mount_id=36,
        parent_id=35,
        major=98,
        minor=0,
        root="/mnt1",
        mount_point="/mnt 2",
        mount_options=("rw", "noatime"),
        optional_fields=("master:1", "shared:3"),
        fstype="ext3",
        source="/dev/root",
        super_options=("rw", "errors=continue"),
    )
    assert entry.option("errors") == "continue"
    assert entry.has_flag("noatime")
    assert not entry.has_flag("sync")


def test_parse_mountinfo_empty_source_stays_a_field() -> None:
    (entry,) = parse_mountinfo("5 1 0:5 / /x rw - tmpfs  rw")
    assert (entry.fstype, entry.source, entry.super_options) == ("tmpfs", None, ("rw",))


NAME_CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="/\x00")


@given(st.lists(st.text(NAME_CHARS, min_size=1, max_size=8), min_size=1, max_size=4))
def test_escaped_mount_points_round_trip(parts: list[str]) -> None:
    mount_point = "/" + "/".join(parts)
    line = (
        f"40 1 0:40 / {fs.escape_mountinfo(mount_point)} rw - tmpfs "
        f"{fs.escape_mountinfo('src x')} rw"
    )
    entries = parse_mountinfo(line)
    assert entries[0].mount_point == mount_point
    assert entries[0].source == "src x"
    assert find_mount(entries, mount_point + "/ckpt") == entries[0]


def test_storage_key_distinguishes_what_matters() -> None:
    def disk(model: str, media: str = "ssd") -> BlockDevice:
        return BlockDevice(
            name="sda",
            major_minor="8:0",
            sysfs_path="/sys/x/sda",
            is_partition=False,
            disk="sda",
            bus="ata",
            media=media,
            rotational=False,
            vendor="ATA",
            model=model,
            logical_block_size=512,
            physical_block_size=512,
            size_bytes=1,
            is_virtual=False,
            is_network=False,
        )

    a, b = disk("A 1"), disk("B:2", media="hdd")
    assert storage_key("ext4", "block", disks=(a,)) == "ext4:ssd:A_1"
    assert storage_key("xfs", "block", disks=(a,)) == "xfs:ssd:A_1"
    assert storage_key("ext4", "block", disks=(a, b)) == "ext4:hdd:B_2+ssd:A_1"
    assert storage_key("ext4", "block", disks=()) == "ext4:unknown"
    assert storage_key("tmpfs", "memory") == "tmpfs"


# --------------------------------------------------------------------------- this machine


def _sensible(info: StorageInfo) -> None:
    assert info.fstype
    assert info.key
    assert info.key.split(":", 1)[0] == info.fstype
    assert info.mount_point.startswith("/")


def test_this_machine_tmp() -> None:
    info = identify_storage("/tmp", SysRoot())
    _sensible(info)
    assert info.path == os.path.realpath("/tmp")


def test_this_machine_tmp_path(tmp_path: Path) -> None:
    info = identify_storage(tmp_path, SysRoot())
    _sensible(info)
    assert info.path == os.path.realpath(tmp_path)
    # The same filesystem as the operating system sees it.
    assert os.stat(tmp_path).st_dev == os.stat(info.mount_point).st_dev or info.mount.root != "/"
