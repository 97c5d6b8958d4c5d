"""Filesystem types by kind, and what an NFS mount says about itself.

Why its own module: whether a checkpoint directory is on a network filesystem, in RAM, in an
overlay or on a disk decides everything else storage identification does (only disk
filesystems lead to block devices), and for NFS the sync/async mode and the transport change
checkpoint time and energy (moran2018 5.4, mills2013 2.4). See docs/design/measurement.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from greenckpt.platform.mounts import MountEntry

__all__ = [
    "DISK_TYPES",
    "MEMORY_TYPES",
    "NETWORK_FUSE_TYPES",
    "NETWORK_TYPES",
    "NFS_TYPES",
    "OVERLAY_TYPES",
    "PSEUDO_TYPES",
    "SHARE_TYPES",
    "NfsInfo",
    "StorageKind",
    "nfs_info",
    "storage_kind",
]

StorageKind = Literal["block", "network", "memory", "overlay", "fuse", "share", "pseudo", "unknown"]
"""What kind of storage a mount is: a disk filesystem, a network filesystem, RAM, an overlay
(container root), FUSE, a hypervisor share (virtiofs, 9p), a kernel pseudo-filesystem, or
something this module does not know."""


NFS_TYPES = frozenset({"nfs", "nfs4"})
NETWORK_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ceph",
        "lustre",
        "gpfs",
        "beegfs",
        "glusterfs",
        "afs",
        "orangefs",
        "pvfs2",
        "panfs",
        "wekafs",
    }
)
"""Filesystem types whose data always travel over a network to a server."""

NETWORK_FUSE_TYPES = frozenset(
    {
        "fuse.sshfs",
        "fuse.glusterfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "fuse.ceph-fuse",
        "fuse.beegfs",
    }
)
"""FUSE filesystems known to be network clients (the others are not labelled either way)."""

DISK_TYPES = frozenset(
    {
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "f2fs",
        "zfs",
        "bcachefs",
        "jfs",
        "reiserfs",
        "nilfs2",
        "vfat",
        "exfat",
        "ntfs",
        "ntfs3",
        "fuseblk",
        "hfsplus",
        "udf",
        "iso9660",
        "squashfs",
        "erofs",
        "gfs2",
        "ocfs2",
    }
)
"""Filesystems that live on block devices (some, like btrfs and zfs, with an anonymous
``st_dev``). Another type counts as a disk filesystem only when mountinfo gives it a real
device number or a ``/dev`` source."""

MEMORY_TYPES = frozenset({"tmpfs", "ramfs", "hugetlbfs", "devtmpfs"})
OVERLAY_TYPES = frozenset({"overlay", "overlayfs", "aufs"})
SHARE_TYPES = frozenset({"virtiofs", "9p"})
PSEUDO_TYPES = frozenset(
    {
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "devpts",
        "debugfs",
        "securityfs",
        "bpf",
        "tracefs",
        "mqueue",
        "configfs",
        "pstore",
        "efivarfs",
        "autofs",
        "binfmt_misc",
        "fusectl",
        "nsfs",
        "selinuxfs",
        "rpc_pipefs",
        "nfsd",
    }
)


@dataclass(frozen=True)
class NfsInfo:
    """An NFS mount as the client sees it.

    ``sync`` is the client's mount mode: with ``sync`` every ``write()`` waits for the server,
    with ``async`` (the default) the client buffers and flushes on ``close()``/``fsync()``. The
    kernel prints ``sync`` among the superblock options whenever the mount is synchronous, so its
    absence from a kernel-written mountinfo *means* ``async``. The server's own export option
    (``sync``/``async`` in its exports file) cannot be seen from the client.
    """

    server: str | None
    """As written in the mount source (a host name, an IPv4 address, or ``[IPv6]``)."""
    export: str | None
    sync: bool
    version: str | None
    """``vers=`` (e.g. ``4.2``, ``3``)."""
    proto: str | None
    """Transport: ``tcp``, ``udp``, ``rdma`` (``tcp6``/``rdma6`` over IPv6)."""
    rsize: int | None
    wsize: int | None
    addr: str | None
    """``addr=``: the address the kernel actually talks to."""

    @property
    def mode(self) -> Literal["sync", "async"]:
        """``"sync"`` or ``"async"``."""
        return "sync" if self.sync else "async"


_KIND_BY_TYPE: tuple[tuple[frozenset[str], StorageKind], ...] = (
    (NETWORK_TYPES, "network"),
    (MEMORY_TYPES, "memory"),
    (OVERLAY_TYPES, "overlay"),
    (SHARE_TYPES, "share"),
    (PSEUDO_TYPES, "pseudo"),
)
"""Filesystem types whose kind the type alone decides, in the order they are tried."""


def storage_kind(mount: MountEntry) -> StorageKind:
    """The kind of storage a mount is, from its filesystem type (and device number/source)."""
    fstype = mount.fstype
    for types, kind in _KIND_BY_TYPE:
        if fstype in types:
            return kind
    if fstype == "fuse" or fstype.startswith("fuse."):
        return "fuse"
    if fstype in DISK_TYPES or mount.major != 0 or (mount.source or "").startswith("/dev/"):
        return "block"
    return "unknown"


def nfs_info(mount: MountEntry, notes: list[str]) -> NfsInfo:
    """What the NFS mount's source and options say; a missing option is noted, not guessed."""
    source = mount.source or ""
    server: str | None
    export: str | None
    if source.startswith("["):
        host, sep, rest = source.partition("]:")
        server, export = (host + "]", rest) if sep else (None, None)
    else:
        host, sep, rest = source.partition(":")
        server, export = (host, rest) if sep and host else (None, None)
    if server is None:
        notes.append(f"NFS source {mount.source!r} is not server:/export")
    sizes: dict[str, int | None] = {}
    for name in ("rsize", "wsize"):
        value = mount.option(name)
        sizes[name] = int(value) if value is not None and value.isdigit() else None
        if sizes[name] is None:
            notes.append(f"NFS {name} is not in the mount options")
    proto = mount.option("proto")
    if proto is None:
        notes.append("NFS transport (proto=) is not in the mount options; key has no transport")
    version = mount.option("vers")
    if version is None:
        notes.append("NFS version (vers=) is not in the mount options")
    notes.append(
        "NFS sync/async is the client mount mode; the server's export option is not visible "
        "from the client"
    )
    return NfsInfo(
        server=server,
        export=export or None,
        sync=mount.has_flag("sync"),
        version=version,
        proto=proto,
        rsize=sizes["rsize"],
        wsize=sizes["wsize"],
        addr=mount.option("addr"),
    )
