"""Which storage a checkpoint directory lives on, and a stable key to find its I/O profile.

Why: a profile describes one kind of storage, so before the runtime applies one to a
checkpoint directory it must know what that directory is written to — an NVMe SSD, a SATA disk
behind LVM, a virtio disk, a tmpfs, an NFS export mounted ``sync`` or ``async`` (moran2018 5.4:
up to 25 % less checkpoint energy with ``async``) — and whether it is local or network storage
(mills2013 2.3–2.4: they respond differently to a lower frequency). Everything is read through a
:class:`~greenckpt.platform.root.SysRoot`, so the tests hand it fake trees; nothing is guessed:
what cannot be read is ``None`` and :attr:`StorageInfo.notes` says why.

The jobs are split: the mount table and paths in the root (:mod:`greenckpt.platform.mounts`),
filesystem kinds and NFS (:mod:`greenckpt.platform.fstypes`), block devices down to the disks
(:mod:`greenckpt.platform.blockdev`); this module puts them together and forms the key. The
procedure and the key scheme (``ext4:nvme:Samsung_SSD_980_PRO_1TB``,
``nfs4:fs1:/export/ckpt:async:tcp``, ``tmpfs``…) are in docs/design/measurement.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypeVar

from greenckpt.platform.blockdev import (
    NETWORK_DISK_MODELS,
    NO_MODEL_MEDIA,
    SECTOR,
    VIRTUAL_MODEL_PREFIXES,
    VIRTUAL_VENDORS,
    BlockDevice,
    describe_block_device,
    disks_under,
    find_device,
    with_layer,
)
from greenckpt.platform.fstypes import (
    DISK_TYPES,
    MEMORY_TYPES,
    NETWORK_FUSE_TYPES,
    NETWORK_TYPES,
    NFS_TYPES,
    OVERLAY_TYPES,
    PSEUDO_TYPES,
    SHARE_TYPES,
    NfsInfo,
    StorageKind,
    nfs_info,
    storage_kind,
)
from greenckpt.platform.mounts import (
    MAX_SYMLINKS,
    MOUNTINFO,
    MountEntry,
    PathNotFoundError,
    find_mount,
    parse_mountinfo,
    read_mountinfo,
    resolve_in_root,
)
from greenckpt.platform.root import PlatformError, SysRoot

__all__ = [
    # moved to mounts, fstypes and blockdev; still importable from here
    "DISK_TYPES",
    "MAX_SYMLINKS",
    "MEMORY_TYPES",
    "MOUNTINFO",
    "NETWORK_DISK_MODELS",
    "NETWORK_FUSE_TYPES",
    "NETWORK_TYPES",
    "NFS_TYPES",
    "OVERLAY_TYPES",
    "PSEUDO_TYPES",
    "SECTOR",
    "SHARE_TYPES",
    "VIRTUAL_MODEL_PREFIXES",
    "VIRTUAL_VENDORS",
    # this module's own
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

_T = TypeVar("_T")


@dataclass(frozen=True)
class StorageInfo:
    """What a checkpoint directory is stored on; ``key`` is in docs/design/measurement.md."""

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
    """Profile-lookup key (scheme in docs/design/measurement.md)."""
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
    if disk.media in NO_MODEL_MEDIA:
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
    """The profile-lookup key for a storage description (scheme: docs/design/measurement.md)."""
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
    resolved, mount = _locate(root, path)
    notes: list[str] = []
    kind = storage_kind(mount)
    synchronous = mount.has_flag("sync")
    device: BlockDevice | None = None
    disks: tuple[BlockDevice, ...] = ()
    layers: list[str] = []
    if kind == "block":
        device, disks = _block_storage(root, mount, layers, notes)
    nfs = nfs_info(mount, notes) if mount.fstype in NFS_TYPES else None
    is_network = None if kind == "block" else _non_block_network(mount, kind, notes)
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


def _locate(root: SysRoot, path: str | os.PathLike[str]) -> tuple[str, MountEntry]:
    """``path`` resolved inside the root, and the mount holding it; one-line errors."""
    absolute = _absolute(path)
    try:
        resolved = resolve_in_root(root, absolute)
    except PathNotFoundError as exc:
        where = "" if root.is_real else f" under root {root.path}"
        raise PlatformError(f"{absolute}: no such file or directory{where} ({exc})") from None
    mount = find_mount(read_mountinfo(root), resolved)
    if mount is None:
        raise PlatformError(f"no mount in {root / MOUNTINFO} holds {resolved}")
    return resolved, mount


def _non_block_network(mount: MountEntry, kind: StorageKind, notes: list[str]) -> bool | None:
    """Local or network for a filesystem on no block device, noting what stays unknown."""
    is_network: bool | None = None
    if kind == "network":
        is_network = True
    elif kind == "memory":
        is_network = False
        notes.append(f"{mount.fstype} keeps files in RAM: fast, but lost when the node fails")
    elif kind == "overlay":
        upper = mount.option("upperdir")
        notes.append(
            f"overlay: writes land in upperdir={upper or 'unknown'}, a path in the namespace "
            "that made the overlay; the disk under it is not resolved"
        )
    elif kind == "share":
        notes.append(f"{mount.fstype} is a hypervisor share; what the host stores it on is unknown")
    elif kind == "pseudo":
        is_network = False
        notes.append(f"{mount.fstype} is a kernel pseudo-filesystem, not storage for checkpoints")
    elif kind == "fuse":
        is_network = True if mount.fstype in NETWORK_FUSE_TYPES else None
        if is_network is None:
            notes.append(f"{mount.fstype}: a FUSE filesystem whose backing storage is unknown")
    else:
        notes.append(
            f"{mount.fstype} is not a filesystem type this module knows, and it names no block "
            "device; local or network is unknown"
        )
    return is_network


def _block_storage(
    root: SysRoot, mount: MountEntry, layers: list[str], notes: list[str]
) -> tuple[BlockDevice | None, tuple[BlockDevice, ...]]:
    """A disk filesystem's device and the disks under it (``layers`` filled top down)."""
    device: BlockDevice | None = None
    disks: tuple[BlockDevice, ...] = ()
    found = find_device(root, mount, notes)
    if found is not None:
        device = describe_block_device(root, found)
        disks = tuple(disks_under(root, device, layers, notes))
        device = with_layer(root, device)
    if mount.fstype == "btrfs" and device is not None:
        notes.append("btrfs can span several devices; only the one in mountinfo is described")
    if not disks:
        notes.append("the disks under this filesystem are not known; key says 'unknown'")
    return device, disks


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
        unknown_backing = _note_disk(root, d, notes) or unknown_backing
    if any(d.is_virtual for d in disks):
        rotational = None
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


def _note_disk(root: SysRoot, d: BlockDevice, notes: list[str]) -> bool:
    """Note what is unknown about one disk; True when what backs it is not visible."""
    unknown_backing = False
    if d.is_virtual:
        rot = "unknown" if d.rotational is None else int(d.rotational)
        what = f"a {d.bus} disk" if d.bus in ("virtio", "xen") else f"an emulated {d.model}"
        bare = " sysfs gives it no model or vendor name;" if d.media in NO_MODEL_MEDIA else ""
        notes.append(
            f"{d.name} is {what} of a virtual machine:{bare} its rotational={rot} is the"
            " hypervisor's, not the medium's (reported as unknown), and what backs it on the"
            " host is not visible"
        )
        unknown_backing = not d.is_network
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
    if d.media not in NO_MODEL_MEDIA:
        _note_names(d, notes)
    return unknown_backing


def _note_names(d: BlockDevice, notes: list[str]) -> None:
    """Note a disk's unreadable model and vendor (NVMe has no vendor file at all)."""
    if d.model is None:
        notes.append(f"{d.name}: device/model is not readable")
    if d.vendor is None and d.bus == "nvme":
        notes.append(f"{d.name}: NVMe exposes no vendor name in sysfs (the model names it)")
    elif d.vendor is None:
        notes.append(f"{d.name}: device/vendor is not readable")
