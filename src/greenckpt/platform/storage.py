"""Which storage a checkpoint directory lives on, and a stable key to find its I/O profile.

Why: a profile (throughput and power per CPU frequency and I/O processes) describes one kind of
storage. Before the runtime can apply a profile to a checkpoint directory it must know what
that directory is written to: an NVMe SSD, a SATA hard disk behind LVM, a virtio disk of a
VM, a RAM-backed tmpfs or an NFS export — and, for NFS, whether it is mounted ``sync`` or
``async``, because moran2018 (section 5.4) measured up to 25 % less checkpoint energy with
``async`` at the highest CPU frequency. mills2013 (sections 2.3–2.4) shows that local-SSD and
network (NFS over IPoIB or RDMA) checkpoints respond differently to lowering the frequency,
hence the local/network flag and the NFS transport.

How (everything is read through a :class:`~greenckpt.platform.root.SysRoot`, so the tests
hand it fake trees):

1. The path is made absolute against the process's real working directory (a relative path
   means "relative to where I am"), then its symbolic links are resolved *inside the root*
   (an absolute link target is re-rooted), and it must exist there: with a fake root the fake
   tree must contain the checkpoint directory. A missing path raises
   :class:`~greenckpt.platform.root.PlatformError`.
2. ``proc/self/mountinfo`` (read after step 1, so an automount the lookup triggered is seen)
   gives the mount whose mount point is the longest component-wise prefix of the path; when
   several mounts are stacked on that point, the one on top (not the parent of another) wins.
   Octal escapes (``\\040`` for a space) are decoded; the optional fields before ``-``
   (``shared:1``, ``master:2``) are kept; the ``root`` field shows bind mounts.
3. By filesystem type: NFS gives server, export, sync/async, version, transport, rsize/wsize;
   other network filesystems, tmpfs, overlay, FUSE and virtual shares are labelled as such.
   For disk filesystems the device is found from mountinfo's ``major:minor`` through
   ``sys/dev/block/MAJ:MIN`` (falling back to the source ``/dev/...`` name, e.g. for btrfs whose
   ``st_dev`` is anonymous), partitions lead to their disk, and device-mapper (LVM, dm-crypt,
   multipath) and md RAID are followed through ``slaves/`` down to the physical disks, whose
   ``queue/rotational``, ``device/model``, ``device/vendor``, block sizes and size are read.

Nothing is guessed: a value that cannot be read or derived is ``None`` and
:attr:`StorageInfo.notes` says why.

Key scheme (:attr:`StorageInfo.key`). The key names what determines a profile and nothing
that merely identifies one node, so the same kind of device with the same filesystem finds the
same profile on every node, and anything that changes the I/O path gets a different key:

- disk filesystems: ``<fstype>[:<layer>...]:<media>[:<model>][:sync]``, e.g.
  ``ext4:nvme:Samsung_SSD_980_PRO_1TB``, ``xfs:hdd:ST4000NM0035-1V4107``,
  ``ext4:lvm:ssd:Samsung_SSD_860_EVO_500GB``, ``ext4:virtio``. ``media`` is ``nvme`` (PCIe),
  ``nvme-tcp``/``nvme-rdma``/``nvme-fc`` (NVMe over fabrics), ``ssd``, ``hdd`` (SATA/SAS, from
  ``queue/rotational``), ``usb-ssd``, ``usb-hdd``, ``mmc``, ``iscsi``, ``virtual`` (an emulated
  SCSI/ATA disk: QEMU, VMware, Hyper-V, VirtualBox), ``virtio``, ``xen``, ``loop``, ``zram``,
  ``ram``, ``pmem``, ``nbd``, ``rbd`` or ``unknown``; several identical disks (RAID, striped
  LVM) give ``<n>x<media>``; different disks are joined with ``+``. Layers are ``lvm``,
  ``crypt`` (encryption costs CPU, hence energy), ``mpath``, ``md-raid1`` and so on. The model
  (whitespace and ``:`` replaced by ``_``) is kept because two SSDs differ as much as an SSD
  and a disk do; the serial number, size, partition and mount point are left out because
  they identify a node, not a kind of storage. virtio, Xen and software devices carry no
  model (sysfs has none). ``:sync`` is appended when a local filesystem is mounted ``sync``.
- NFS: ``<fstype>:<server>:<export>:<sync|async>[:<proto>]``, e.g.
  ``nfs4:fs1:/export/ckpt:async:tcp``. Another server or export is another backend, and
  sync/async and the transport (TCP over IPoIB vs RDMA, mills2013 2.4) change time and energy,
  so each gets its own key. ``rsize``/``wsize`` are reported but not keyed (they are
  negotiated with the server and would split profiles on noise). The fstype (``nfs`` = v2/v3,
  ``nfs4``) keeps protocol versions apart.
- other network filesystems and virtual shares: ``<fstype>:<source>`` (e.g.
  ``lustre:10.0.0.1@o2ib:/scratch``, ``fuse.sshfs:user@host:/data``).
- RAM, overlay, pseudo, unlabelled FUSE and unknown filesystems: the fstype alone (``tmpfs``,
  ``overlay``).

A part that cannot be determined appears as ``unknown`` in the key (and the notes say why):
the key never claims more than was read. Two storages unknown in the same part can share a
key; a caller that must not confuse them checks the notes.
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.platform.root import PlatformError, SysRoot

__all__ = [
    "BlockDevice",
    "MountEntry",
    "NfsInfo",
    "StorageInfo",
    "StorageKind",
    "find_mount",
    "identify_storage",
    "parse_mountinfo",
    "storage_key",
]

StorageKind = Literal["block", "network", "memory", "overlay", "fuse", "share", "pseudo", "unknown"]
"""What kind of storage a mount is: a disk filesystem, a network filesystem, RAM, an overlay
(container root), FUSE, a hypervisor share (virtiofs, 9p), a kernel pseudo-filesystem, or
something this module does not know."""

MOUNTINFO = "proc/self/mountinfo"
"""Where the mount table of the calling process's mount namespace lives, under the root."""

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

VIRTUAL_VENDORS = frozenset({"QEMU", "VMware", "VMware,", "Msft", "VBOX"})
"""SCSI/ATA vendor strings that hypervisors give their emulated disks."""
VIRTUAL_MODEL_PREFIXES = ("QEMU ", "VBOX ", "Virtual disk", "Virtual Disk")
"""Model prefixes of emulated disks (VirtualBox reports vendor ``ATA``, model ``VBOX ...``)."""
NETWORK_DISK_MODELS = frozenset({"Amazon Elastic Block Store", "PersistentDisk", "nvme_card-pd"})
"""Models that cloud providers document for network-attached volumes (AWS EBS, GCP PD)."""

SECTOR = 512
"""sysfs ``size`` is always in 512-byte sectors, whatever the device's block size."""
MAX_SYMLINKS = 40
"""Like the kernel's limit: a longer chain of links is a loop."""

_T = TypeVar("_T")
_OCTAL = re.compile(r"\\([0-7]{3})")


class _NotFoundError(GreenckptError):
    """A path component does not exist under the root (internal to path resolution)."""


@dataclass(frozen=True)
class MountEntry:
    """One line of ``/proc/<pid>/mountinfo``, escapes decoded (see proc(5))."""

    mount_id: int
    parent_id: int
    major: int
    minor: int
    root: str
    """The directory of the filesystem mounted here: ``/`` normally, a subdirectory for a
    bind mount of part of a filesystem."""
    mount_point: str
    mount_options: tuple[str, ...]
    """Per-mount options (``rw``, ``noatime``, ``nosuid``)."""
    optional_fields: tuple[str, ...]
    """Propagation tags before the ``-`` separator (``shared:1``, ``master:2``)."""
    fstype: str
    source: str | None
    """The mount source (``/dev/sda1``, ``server:/export``, ``tmpfs``); ``None`` when empty."""
    super_options: tuple[str, ...]
    """Per-superblock options: ``rw``/``ro``, ``sync`` when mounted synchronous, then the
    filesystem's own options (``vers=4.2,rsize=...``, ``upperdir=...``)."""

    @property
    def major_minor(self) -> str:
        """``"MAJ:MIN"`` as in ``sys/dev/block``."""
        return f"{self.major}:{self.minor}"

    def option(self, name: str) -> str | None:
        """The value of ``name=value`` in the super options, else in the mount options."""
        prefix = name + "="
        for opt in (*self.super_options, *self.mount_options):
            if opt.startswith(prefix):
                return opt[len(prefix) :]
        return None

    def has_flag(self, name: str) -> bool:
        """Whether the bare option ``name`` (e.g. ``sync``) is in either option list."""
        return name in self.super_options or name in self.mount_options


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


@dataclass(frozen=True)
class BlockDevice:
    """A block device as sysfs describes it: the one under a filesystem, or a physical disk.

    ``rotational``, ``vendor`` and ``model`` are what the kernel reports (for a virtual disk that
    is the hypervisor's claim, not the medium's; :class:`StorageInfo` says so in its notes).
    """

    name: str
    """Kernel name: ``nvme0n1p2``, ``sda``, ``dm-0``, ``md0``, ``vda``."""
    major_minor: str | None
    sysfs_path: str
    """Resolved sysfs directory, absolute within the root (``/sys/devices/...``)."""
    is_partition: bool
    disk: str
    """The whole disk this device is (itself) or is a partition of."""
    bus: str | None
    """How it is attached: ``nvme``, ``ata``, ``scsi``, ``usb``, ``mmc``, ``virtio``, ``xen``,
    ``iscsi``, or the driver for virtual devices (``dm``, ``md``, ``loop``, ``zram``, ...)."""
    media: str
    """The key's media word (see the module docstring); ``unknown`` when undeterminable."""
    rotational: bool | None
    vendor: str | None
    model: str | None
    logical_block_size: int | None
    physical_block_size: int | None
    size_bytes: int | None
    is_virtual: bool
    """An emulated disk of a virtual machine (virtio, Xen, QEMU/VMware/Hyper-V/VirtualBox)."""
    is_network: bool | None
    """Backed over a network (iSCSI, NBD, Ceph RBD, NVMe over fabrics, documented cloud
    network volumes); None for an NVMe disk whose transport sysfs does not give."""
    layer: str | None = None
    """For stacked devices: ``lvm``, ``crypt``, ``mpath``, ``md-raid1``...; else ``None``."""


@dataclass(frozen=True)
class StorageInfo:
    """What a checkpoint directory is stored on; see the module docstring for ``key``."""

    path: str
    """The resolved absolute path that was looked up."""
    mount: MountEntry
    kind: StorageKind
    is_network: bool | None
    """True for network filesystems and network-backed disks, False for local disks and RAM,
    None when it cannot be told (overlay, FUSE without a known type, virtual disks, loop
    devices, unresolved devices, unknown filesystem types)."""
    synchronous: bool
    """Mounted ``sync`` (every write waits for the storage); ``False`` means the default."""
    nfs: NfsInfo | None
    device: BlockDevice | None
    """The block device holding the filesystem (a partition, an LVM volume, a whole disk)."""
    disks: tuple[BlockDevice, ...]
    """The physical (or virtual) disks underneath ``device``, after partitions and slaves."""
    layers: tuple[str, ...]
    """Stacking between ``device`` and ``disks``, top down: ``("crypt", "lvm")``."""
    rotational: bool | None
    """Spinning disk(s) vs solid state; None when unknown, mixed, or a virtual disk."""
    vendor: str | None
    """``device/vendor`` of the disks when they agree (``ATA`` for SATA disks, as the kernel's
    SCSI layer says); None for NVMe and virtio, which expose no vendor name."""
    model: str | None
    """``device/model`` of the disks when they agree."""
    logical_block_size: int | None
    """As the filesystem's device sees it (alignment for direct I/O)."""
    size_bytes: int | None
    """Of ``device`` (the partition or volume), in bytes."""
    is_virtual: bool | None
    """A virtual machine's disk; None when no disk was identified."""
    key: str
    """Profile-lookup key (scheme in the module docstring)."""
    notes: tuple[str, ...]
    """Why each unknown field is unknown, and caveats a reader of the result needs."""

    @property
    def mount_point(self) -> str:
        """Where the filesystem holding the path is mounted."""
        return self.mount.mount_point

    @property
    def fstype(self) -> str:
        """Filesystem type from mountinfo (``ext4``, ``nfs4``, ``tmpfs``, ``fuse.sshfs``)."""
        return self.mount.fstype

    @property
    def source(self) -> str | None:
        """Mount source (``/dev/nvme0n1p2``, ``server:/export``)."""
        return self.mount.source

    @property
    def mount_options(self) -> tuple[str, ...]:
        """Per-mount options."""
        return self.mount.mount_options

    @property
    def super_options(self) -> tuple[str, ...]:
        """Per-superblock options."""
        return self.mount.super_options


# --------------------------------------------------------------------------- mountinfo


def _unescape(field: str) -> str:
    """Undo the kernel's octal escapes (``\\040`` space, ``\\011`` tab, ``\\012``, ``\\134``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def _split_options(field: str) -> tuple[str, ...]:
    return tuple(_unescape(opt) for opt in field.split(",") if opt)


def _parse_line(line: str) -> MountEntry:
    fields = line.split(" ")
    try:
        sep = fields.index("-", 6)
    except ValueError:
        raise InvalidValueError("no ' - ' separator") from None
    if len(fields) < sep + 3:
        raise InvalidValueError("missing fields after the separator")
    major, _, minor = fields[2].partition(":")
    source = _unescape(fields[sep + 2])
    return MountEntry(
        mount_id=int(fields[0]),
        parent_id=int(fields[1]),
        major=int(major),
        minor=int(minor),
        root=_unescape(fields[3]),
        mount_point=_unescape(fields[4]),
        mount_options=_split_options(fields[5]),
        optional_fields=tuple(f for f in fields[6:sep] if f),
        fstype=_unescape(fields[sep + 1]),
        source=source if source and source != "none" else None,
        super_options=_split_options(fields[sep + 3]) if len(fields) > sep + 3 else (),
    )


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse the text of a mountinfo file (proc(5)).

    Why a parser of its own: ``/proc/mounts`` lacks ``major:minor`` (needed to find the block
    device without trusting ``/dev`` names) and the bind-mount ``root``. Fields are separated
    by single spaces (the kernel escapes spaces inside them), so an empty source stays a field.
    A malformed line raises :class:`PlatformError` naming the line.
    """
    entries: list[MountEntry] = []
    # Only "\n" ends a line: the kernel escapes it in names, but not "\r", "\x85" or "\u2028",
    # which str.splitlines() would also split on.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip(" "):
            continue
        try:
            entries.append(_parse_line(line))
        except (ValueError, IndexError) as exc:
            raise PlatformError(f"mountinfo line {number} is malformed ({exc}): {line!r}") from None
    return entries


def _components(path: str) -> list[str]:
    return [c for c in path.split("/") if c]


def find_mount(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The mount holding absolute, resolved ``path``: longest component-wise mount-point prefix.

    ``/mnt/data`` is under ``/mnt`` but not under ``/mnt/dat``. When several mounts sit on the
    same point (mounted over each other), the visible one is the one that is not the parent of
    another mount on that point; if that is ambiguous, the last listed (mountinfo lists mounts
    in the order they were mounted).
    """
    target = _components(path)
    best: list[MountEntry] = []
    best_len = -1
    for entry in entries:
        mp = _components(entry.mount_point)
        if len(mp) <= len(target) and target[: len(mp)] == mp:
            if len(mp) > best_len:
                best, best_len = [entry], len(mp)
            elif len(mp) == best_len:
                best.append(entry)
    if not best:
        return None
    same_point = [e for e in best if e.mount_point == best[-1].mount_point]
    parents = {e.parent_id for e in same_point}
    on_top = [e for e in same_point if e.mount_id not in parents]
    return on_top[-1] if on_top else same_point[-1]


def _read_mountinfo(root: SysRoot) -> list[MountEntry]:
    try:
        raw = (root / MOUNTINFO).read_bytes()
    except OSError as exc:
        raise PlatformError(
            f"cannot read {root / MOUNTINFO}: {exc.strerror or exc}; "
            "storage cannot be identified without the mount table"
        ) from None
    # Names are bytes to the kernel: keep undecodable ones round-trippable, as os does.
    return parse_mountinfo(raw.decode("utf-8", "surrogateescape"))


# --------------------------------------------------------------------------- paths in the root


def _resolve(root: SysRoot, path: str) -> str:
    """Resolve symbolic links of absolute ``path`` inside ``root`` (``realpath`` in a chroot).

    Absolute link targets are taken relative to the root, ``..`` applies to the already
    resolved prefix (physical semantics, as the kernel does). Raises :class:`_NotFoundError`
    when a component is missing and :class:`PlatformError` for loops or unreadable components.
    """
    pending = deque(_components(path))
    done: list[str] = []
    hops = 0
    while pending:
        part = pending.popleft()
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        rel = "/".join([*done, part])
        try:
            st = os.lstat(root / rel)
        except (FileNotFoundError, NotADirectoryError):
            raise _NotFoundError("/" + rel) from None
        except OSError as exc:
            raise PlatformError(f"cannot look at /{rel}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_SYMLINKS:
                raise PlatformError(f"too many levels of symbolic links resolving {path}")
            target = os.readlink(root / rel)
            if target.startswith("/"):
                done = []
            pending.extendleft(reversed(_components(target)))
        else:
            done.append(part)
    return "/" + "/".join(done)


def _resolve_or_none(root: SysRoot, path: str) -> str | None:
    try:
        return _resolve(root, path)
    except (_NotFoundError, PlatformError):
        return None


# --------------------------------------------------------------------------- block devices


def _clean(text: str | None) -> str | None:
    """sysfs pads vendor/model with spaces; an empty string is no information."""
    if text is None:
        return None
    text = " ".join(text.split())
    return text or None


def _bus(name: str, sysfs_path: str) -> str | None:
    """How a disk is attached, from its kernel name and its place in the device tree."""
    prefixes = (
        ("nvme", "nvme"),
        ("vd", "virtio"),
        ("xvd", "xen"),
        ("loop", "loop"),
        ("zram", "zram"),
        ("ram", "ram"),
        ("nbd", "nbd"),
        ("rbd", "rbd"),
        ("pmem", "pmem"),
        ("dm-", "dm"),
        ("md", "md"),
        ("mmcblk", "mmc"),
    )
    for prefix, bus in prefixes:
        if name.startswith(prefix):
            return bus
    parts = sysfs_path.split("/")
    if any(p.startswith("virtio") for p in parts):
        return "virtio"
    if any(p.startswith("vbd-") for p in parts):
        return "xen"
    if any(p.startswith("usb") for p in parts):
        return "usb"
    if any(p.startswith("session") for p in parts) and any(p.startswith("host") for p in parts):
        return "iscsi"
    if any(re.fullmatch(r"ata\d+", p) for p in parts):
        return "ata"
    if any(p.startswith("target") for p in parts):
        return "scsi"
    return None


_NO_MODEL_MEDIA = frozenset({"virtio", "xen", "loop", "zram", "ram", "pmem", "nbd", "rbd"})
"""Media whose key carries no model: virtual or software devices have none that matters."""


def _media(bus: str | None, rotational: bool | None, transport: str | None, virtual: bool) -> str:
    """The key's media word for a disk (see the module docstring)."""
    if bus == "nvme":
        # NVMe over fabrics (tcp, rdma, fc) is a network disk with a local-looking name; an
        # unreadable transport keeps the plain word (it is NVMe either way) and is noted.
        return "nvme" if transport in (None, "pcie") else f"nvme-{transport}"
    if bus is not None and (bus in _NO_MODEL_MEDIA or bus in ("mmc", "iscsi", "dm", "md")):
        return bus
    if virtual:
        return "virtual"
    if rotational is None:
        return "unknown"
    kind = "hdd" if rotational else "ssd"
    return f"usb-{kind}" if bus == "usb" else kind


def _layer(root: SysRoot, sysfs_path: str, name: str) -> str | None:
    """What a stacked device (one with ``slaves/``) does: LVM, dm-crypt, multipath, md RAID."""
    if name.startswith("dm-"):
        uuid = root.read_or_none(f"{sysfs_path}/dm/uuid")
        if not uuid:
            return "dm"
        prefix = uuid.split("-", 1)[0]
        if re.fullmatch(r"part\d+", prefix):
            return None  # a partition table on a dm device (kpartx): no change to the I/O path
        return {"LVM": "lvm", "CRYPT": "crypt", "mpath": "mpath"}.get(prefix, prefix.lower())
    if name.startswith("md"):
        level = root.read_or_none(f"{sysfs_path}/md/level")
        return f"md-{level}" if level else "md"
    return re.sub(r"\d+$", "", name) or name


def _describe(root: SysRoot, sysfs_path: str) -> BlockDevice:
    """Read one block device's attributes; a partition's queue and device live on its disk."""
    name = sysfs_path.rsplit("/", 1)[-1]
    is_partition = (root / f"{sysfs_path}/partition").exists()
    disk_path = sysfs_path.rsplit("/", 1)[0] if is_partition else sysfs_path
    disk = disk_path.rsplit("/", 1)[-1]
    queue = (
        f"{sysfs_path}/queue" if (root / f"{sysfs_path}/queue").is_dir() else f"{disk_path}/queue"
    )
    rot = root.read_int_or_none(f"{queue}/rotational")
    rotational = None if rot is None else bool(rot)
    bus = _bus(disk, disk_path)
    # virtio's device/vendor is a numeric virtio vendor ID (0x1af4), not a maker's name.
    vendor = None if bus == "virtio" else _clean(root.read_or_none(f"{disk_path}/device/vendor"))
    model = _clean(root.read_or_none(f"{disk_path}/device/model"))
    if model is None and bus == "mmc":
        model = _clean(root.read_or_none(f"{disk_path}/device/name"))
    sectors = root.read_int_or_none(f"{sysfs_path}/size")
    transport = root.read_or_none(f"{disk_path}/device/transport") if bus == "nvme" else None
    is_virtual = (
        bus in ("virtio", "xen")
        or (vendor is not None and vendor in VIRTUAL_VENDORS)
        or (model is not None and model.startswith(VIRTUAL_MODEL_PREFIXES))
    )
    is_network: bool | None = (
        bus in ("iscsi", "nbd", "rbd")
        or transport in ("tcp", "rdma", "fc")
        or (model is not None and model in NETWORK_DISK_MODELS)
    )
    if not is_network and bus == "nvme" and transport is None:
        is_network = None  # PCIe or a fabric: device/transport would have said
    return BlockDevice(
        name=name,
        major_minor=root.read_or_none(f"{sysfs_path}/dev"),
        sysfs_path=sysfs_path,
        is_partition=is_partition,
        disk=disk,
        bus=bus,
        media=_media(bus, rotational, transport, is_virtual),
        rotational=rotational,
        vendor=vendor,
        model=model,
        logical_block_size=root.read_int_or_none(f"{queue}/logical_block_size"),
        physical_block_size=root.read_int_or_none(f"{queue}/physical_block_size"),
        size_bytes=None if sectors is None else sectors * SECTOR,
        is_virtual=is_virtual,
        is_network=is_network,
    )


def _block_dir(root: SysRoot, name: str) -> str | None:
    """The resolved sysfs directory of the block device with kernel name ``name``."""
    return _resolve_or_none(root, f"/sys/class/block/{name}")


def _find_device(root: SysRoot, mount: MountEntry, notes: list[str]) -> str | None:
    """The sysfs directory of the filesystem's block device, from ``major:minor`` or source."""
    if mount.major != 0:
        found = _resolve_or_none(root, f"/sys/dev/block/{mount.major_minor}")
        if found is not None:
            return found
        notes.append(
            f"sys/dev/block/{mount.major_minor} is missing (no sysfs, or not a block device)"
        )
    source = mount.source
    if source is None or not source.startswith("/dev/"):
        if mount.major == 0:
            notes.append(
                f"{mount.fstype} has an anonymous device number (0:{mount.minor}) and its "
                f"source {source!r} names no /dev node, so its disks are not known"
            )
        return None
    # The /dev node (udev links such as /dev/disk/by-uuid/... and /dev/mapper/... are symlinks
    # to the kernel name). A real block node gives its device number; otherwise the name.
    node = _resolve_or_none(root, source)
    if node is not None:
        try:
            st = os.stat(root / node)
        except OSError:
            st = None
        if st is not None and stat.S_ISBLK(st.st_mode):
            found = _resolve_or_none(
                root, f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            )
            if found is not None:
                return found
        found = _block_dir(root, node.rsplit("/", 1)[-1])
        if found is not None:
            return found
    name = source.rsplit("/", 1)[-1]
    if source.startswith("/dev/mapper/"):
        for dm in sorted(_listdir(root, "/sys/block")):
            if dm.startswith("dm-") and root.read_or_none(f"sys/block/{dm}/dm/name") == name:
                return _block_dir(root, dm)
    found = _block_dir(root, name)
    if found is None:
        notes.append(f"source {source} matches no device in sys/class/block")
    return found


def _listdir(root: SysRoot, rel: str) -> list[str]:
    try:
        return os.listdir(root / rel)
    except OSError:
        return []


def _leaves(
    root: SysRoot, device: BlockDevice, layers: list[str], notes: list[str], depth: int = 0
) -> list[BlockDevice]:
    """The disks under ``device``: its disk for a partition, the slaves' disks for dm/md."""
    if depth > 16:
        notes.append(f"device stack under {device.name} is deeper than 16; stopped there")
        return []
    disk_path = device.sysfs_path.rsplit("/", 1)[0] if device.is_partition else device.sysfs_path
    disk = _describe(root, disk_path) if device.is_partition else device
    slaves = sorted(_listdir(root, f"{disk_path}/slaves"))
    if not slaves:
        if disk.bus in ("dm", "md"):
            notes.append(f"{disk.name} lists no slaves in sysfs, so its disks are not known")
            return []
        return [disk]
    layer = _layer(root, disk_path, disk.name)
    if layer is not None and layer not in layers:
        layers.append(layer)
    found: list[BlockDevice] = []
    for slave in slaves:
        path = _resolve_or_none(root, f"{disk_path}/slaves/{slave}")
        if path is None:
            notes.append(f"slave {slave} of {disk.name} cannot be resolved in sysfs")
            continue
        for leaf in _leaves(root, _describe(root, path), layers, notes, depth + 1):
            if leaf.sysfs_path not in {f.sysfs_path for f in found}:
                found.append(leaf)
    return found


def _common(values: list[_T | None]) -> _T | None:
    """The value all disks agree on, else None."""
    distinct = set(values)
    if len(distinct) == 1:
        return values[0]
    return None


# --------------------------------------------------------------------------- key


def _key_part(text: str) -> str:
    """A key component: whitespace and ``:`` (the key separator) become ``_``."""
    return "_".join(text.replace(":", " ").split()) or "unknown"


def _disk_word(disk: BlockDevice) -> str:
    if disk.media in _NO_MODEL_MEDIA:
        return disk.media
    return f"{disk.media}:{_key_part(disk.model) if disk.model else 'unknown'}"


def storage_key(
    fstype: str,
    kind: StorageKind,
    *,
    source: str | None = None,
    nfs: NfsInfo | None = None,
    layers: tuple[str, ...] = (),
    disks: tuple[BlockDevice, ...] = (),
    synchronous: bool = False,
) -> str:
    """The profile-lookup key for a storage description (scheme in the module docstring)."""
    if nfs is not None:
        parts = [
            fstype,
            nfs.server or "unknown",
            nfs.export or "unknown",
            nfs.mode,
        ]
        if nfs.proto:
            parts.append(nfs.proto)
        return ":".join(parts)
    if kind in ("network", "share") or fstype in NETWORK_FUSE_TYPES:
        return f"{fstype}:{source or 'unknown'}"
    if kind != "block":
        return fstype
    words = [_disk_word(d) for d in disks]
    if not words:
        body = "unknown"
    elif len(set(words)) == 1:
        body = words[0] if len(words) == 1 else f"{len(words)}x{words[0]}"
    else:
        body = "+".join(sorted(set(words)))
    key = ":".join([fstype, *layers, body])
    return f"{key}:sync" if synchronous else key


# --------------------------------------------------------------------------- identify


def _kind(mount: MountEntry) -> StorageKind:
    fstype = mount.fstype
    if fstype in NETWORK_TYPES:
        return "network"
    if fstype in MEMORY_TYPES:
        return "memory"
    if fstype in OVERLAY_TYPES:
        return "overlay"
    if fstype in SHARE_TYPES:
        return "share"
    if fstype in PSEUDO_TYPES:
        return "pseudo"
    if fstype == "fuse" or fstype.startswith("fuse."):
        return "fuse"
    if fstype in DISK_TYPES or mount.major != 0 or (mount.source or "").startswith("/dev/"):
        return "block"
    return "unknown"


def _nfs_info(mount: MountEntry, notes: list[str]) -> NfsInfo:
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


def _absolute(path: str | os.PathLike[str]) -> str:
    """Absolute without touching links: relative paths join the process's real cwd."""
    text = os.fspath(path)
    if not text:
        raise PlatformError("empty path: name the checkpoint directory")
    if text.startswith("/"):
        return text
    try:
        return os.path.join(os.getcwd(), text)
    except OSError as exc:
        raise PlatformError(
            f"{text}: relative, and the working directory is gone ({exc})"
        ) from None


def identify_storage(path: str | os.PathLike[str], root: SysRoot | None = None) -> StorageInfo:
    """Identify the storage holding ``path`` (a checkpoint directory, or a file in one).

    ``root`` defaults to :meth:`SysRoot.default` (``/`` or ``$GREENCKPT_SYSROOT``). A relative
    path is made absolute against the process's real working directory and then resolved and
    looked up inside the root (with a fake root, the fake tree must contain it). Raises
    :class:`PlatformError` (one line) when the path does not exist under the root, when the
    mount table cannot be read, or when no mount holds the path. Everything else that cannot be
    determined is ``None`` in the result with a reason in ``notes``.
    """
    root = root if root is not None else SysRoot.default()
    absolute = _absolute(path)
    try:
        resolved = _resolve(root, absolute)
    except _NotFoundError as exc:
        where = "" if root.is_real else f" under root {root.path}"
        raise PlatformError(f"{absolute}: no such file or directory{where} ({exc})") from None
    entries = _read_mountinfo(root)
    mount = find_mount(entries, resolved)
    if mount is None:
        raise PlatformError(f"no mount in {root / MOUNTINFO} holds {resolved}")
    notes: list[str] = []
    kind = _kind(mount)
    synchronous = mount.has_flag("sync")
    nfs: NfsInfo | None = None
    device: BlockDevice | None = None
    disks: tuple[BlockDevice, ...] = ()
    layers: list[str] = []
    is_network: bool | None
    if mount.fstype in NFS_TYPES:
        nfs = _nfs_info(mount, notes)
        is_network = True
    elif kind == "network":
        is_network = True
    elif kind == "memory":
        is_network = False
        notes.append(f"{mount.fstype} keeps files in RAM: fast, but lost when the node fails")
    elif kind == "overlay":
        is_network = None
        upper = mount.option("upperdir")
        notes.append(
            f"overlay: writes land in upperdir={upper or 'unknown'}, a path in the namespace "
            "that made the overlay; the disk under it is not resolved"
        )
    elif kind == "share":
        is_network = None
        notes.append(f"{mount.fstype} is a hypervisor share; what the host stores it on is unknown")
    elif kind == "pseudo":
        is_network = False
        notes.append(f"{mount.fstype} is a kernel pseudo-filesystem, not storage for checkpoints")
    elif kind == "fuse":
        is_network = True if mount.fstype in NETWORK_FUSE_TYPES else None
        if is_network is None:
            notes.append(f"{mount.fstype}: a FUSE filesystem whose backing storage is unknown")
    elif kind == "unknown":
        is_network = None
        notes.append(
            f"{mount.fstype} is not a filesystem type this module knows, and it names no block "
            "device; local or network is unknown"
        )
    else:
        found = _find_device(root, mount, notes)
        if found is not None:
            device = _describe(root, found)
            disks = tuple(_leaves(root, device, layers, notes))
            device = _with_layer(root, device)
        if mount.fstype == "btrfs" and device is not None:
            notes.append("btrfs can span several devices; only the one in mountinfo is described")
        if not disks:
            notes.append("the disks under this filesystem are not known; key says 'unknown'")
    rotational, vendor, model, is_virtual, disk_network = _summarise(root, disks, notes)
    if kind == "block":
        is_network = disk_network
    key = storage_key(
        mount.fstype,
        kind,
        source=mount.source,
        nfs=nfs,
        layers=tuple(layers),
        disks=disks,
        synchronous=synchronous and nfs is None,
    )
    return StorageInfo(
        path=resolved,
        mount=mount,
        kind=kind,
        is_network=is_network,
        synchronous=synchronous,
        nfs=nfs,
        device=device,
        disks=disks,
        layers=tuple(layers),
        rotational=rotational,
        vendor=vendor,
        model=model,
        logical_block_size=device.logical_block_size if device else None,
        size_bytes=device.size_bytes if device else None,
        is_virtual=is_virtual,
        key=key,
        notes=tuple(notes),
    )


def _with_layer(root: SysRoot, device: BlockDevice) -> BlockDevice:
    """Label the filesystem's device with what it does when it is a dm or md device."""
    if device.bus not in ("dm", "md"):
        return device
    disk_path = device.sysfs_path.rsplit("/", 1)[0] if device.is_partition else device.sysfs_path
    return replace(device, layer=_layer(root, disk_path, device.disk))


def _summarise(
    root: SysRoot, disks: tuple[BlockDevice, ...], notes: list[str]
) -> tuple[bool | None, str | None, str | None, bool | None, bool | None]:
    """rotational, vendor, model, is_virtual and is_network over the disks, with reasons.

    A virtual disk's ``rotational`` is the hypervisor's setting (virtio-blk says 1 by default),
    and what backs it on the host — a local disk or a network volume — is invisible inside the
    guest, so both are reported as unknown rather than taken at face value.
    """
    if not disks:
        return None, None, None, None, None
    rotational = _common([d.rotational for d in disks])
    vendor = _common([d.vendor for d in disks])
    model = _common([d.model for d in disks])
    unknown_backing = False
    for d in disks:
        if d.is_virtual:
            rot = "unknown" if d.rotational is None else int(d.rotational)
            what = f"a {d.bus} disk" if d.bus in ("virtio", "xen") else f"an emulated {d.model}"
            bare = " sysfs gives it no model or vendor name;" if d.media in _NO_MODEL_MEDIA else ""
            notes.append(
                f"{d.name} is {what} of a virtual machine:{bare} its rotational={rot} is the"
                " hypervisor's, not the medium's (reported as unknown), and what backs it on the"
                " host is not visible"
            )
            rotational = None
            unknown_backing = unknown_backing or not d.is_network
        elif d.bus == "loop":
            backing = root.read_or_none(f"{d.sysfs_path}/loop/backing_file")
            notes.append(
                f"{d.name} is a loop device over the file {backing or 'unknown'}, whose storage"
                " is not resolved"
            )
            unknown_backing = True
        elif d.rotational is None:
            notes.append(f"{d.name}: queue/rotational is not readable")
        if d.bus == "nvme" and d.is_network is None:
            notes.append(
                f"{d.name}: device/transport is not readable, so PCIe and NVMe over fabrics "
                "(network) cannot be told apart"
            )
        if d.media in _NO_MODEL_MEDIA:
            continue
        if d.model is None:
            notes.append(f"{d.name}: device/model is not readable")
        if d.vendor is None and d.bus == "nvme":
            notes.append(f"{d.name}: NVMe exposes no vendor name in sysfs (the model names it)")
        elif d.vendor is None:
            notes.append(f"{d.name}: device/vendor is not readable")
    if len({d.rotational for d in disks}) > 1:
        notes.append("the disks differ in rotational; reported as unknown")
    if len({d.model for d in disks}) > 1:
        notes.append("the disks differ in model; model reported as unknown")
    if len({d.vendor for d in disks}) > 1:
        notes.append("the disks differ in vendor; vendor reported as unknown")
    is_network: bool | None = any(d.is_network for d in disks)
    if not is_network and (unknown_backing or any(d.is_network is None for d in disks)):
        is_network = None
    return rotational, vendor, model, any(d.is_virtual for d in disks), is_network
