"""Block devices as sysfs describes them: from a mount's device down to the physical disks.

Why its own module: a disk filesystem's profile depends on the disks under it (NVMe or SATA,
SSD or spinning, local or network-backed, virtual), and reaching them means following
partitions to their disk and device-mapper/md stacks through ``slaves/`` — the job of this
module, read entirely through a :class:`~greenckpt.platform.root.SysRoot` so tests use fake
trees. The media words and the key they feed are in docs/design/measurement.md.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, replace

from greenckpt.platform.mounts import MountEntry, resolve_or_none
from greenckpt.platform.root import SysRoot

__all__ = [
    "NETWORK_DISK_MODELS",
    "NO_MODEL_MEDIA",
    "SECTOR",
    "VIRTUAL_MODEL_PREFIXES",
    "VIRTUAL_VENDORS",
    "BlockDevice",
    "describe_block_device",
    "disks_under",
    "find_device",
    "listdir_or_empty",
    "stack_layer",
    "with_layer",
]

VIRTUAL_VENDORS = frozenset({"QEMU", "VMware", "VMware,", "Msft", "VBOX"})
"""SCSI/ATA vendor strings that hypervisors give their emulated disks."""
VIRTUAL_MODEL_PREFIXES = ("QEMU ", "VBOX ", "Virtual disk", "Virtual Disk")
"""Model prefixes of emulated disks (VirtualBox reports vendor ``ATA``, model ``VBOX ...``)."""
NETWORK_DISK_MODELS = frozenset({"Amazon Elastic Block Store", "PersistentDisk", "nvme_card-pd"})
"""Models that cloud providers document for network-attached volumes (AWS EBS, GCP PD)."""

SECTOR = 512
"""sysfs ``size`` is always in 512-byte sectors, whatever the device's block size."""


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
    """The key's media word (see :mod:`greenckpt.platform.storage`); ``unknown`` when
    undeterminable."""
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


def _clean(text: str | None) -> str | None:
    """sysfs pads vendor/model with spaces; an empty string is no information."""
    if text is None:
        return None
    text = " ".join(text.split())
    return text or None


_NAME_BUSES = (
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
"""Kernel-name prefixes that say how a disk is attached, tried in this order."""


def _bus(name: str, sysfs_path: str) -> str | None:
    """How a disk is attached, from its kernel name and its place in the device tree."""
    for prefix, bus in _NAME_BUSES:
        if name.startswith(prefix):
            return bus
    return _bus_from_path(sysfs_path.split("/"))


def _bus_from_path(parts: list[str]) -> str | None:
    """The bus of a disk whose name does not say: the first matching device-tree ancestor."""

    def has(prefix: str) -> bool:
        return any(p.startswith(prefix) for p in parts)

    checks = (
        (has("virtio"), "virtio"),
        (has("vbd-"), "xen"),
        (has("usb"), "usb"),
        (has("session") and has("host"), "iscsi"),
        (any(re.fullmatch(r"ata\d+", p) for p in parts), "ata"),
        (has("target"), "scsi"),
    )
    return next((bus for hit, bus in checks if hit), None)


NO_MODEL_MEDIA = frozenset({"virtio", "xen", "loop", "zram", "ram", "pmem", "nbd", "rbd"})
"""Media whose key carries no model: virtual or software devices have none that matters."""


def _media(bus: str | None, rotational: bool | None, transport: str | None, virtual: bool) -> str:
    """The key's media word for a disk (the list is in :mod:`greenckpt.platform.storage`)."""
    if bus == "nvme":
        # NVMe over fabrics (tcp, rdma, fc) is a network disk with a local-looking name; an
        # unreadable transport keeps the plain word (it is NVMe either way) and is noted.
        return "nvme" if transport in (None, "pcie") else f"nvme-{transport}"
    if bus is not None and (bus in NO_MODEL_MEDIA or bus in ("mmc", "iscsi", "dm", "md")):
        return bus
    if virtual:
        return "virtual"
    if rotational is None:
        return "unknown"
    kind = "hdd" if rotational else "ssd"
    return f"usb-{kind}" if bus == "usb" else kind


def stack_layer(root: SysRoot, sysfs_path: str, name: str) -> str | None:
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


def describe_block_device(root: SysRoot, sysfs_path: str) -> BlockDevice:
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
    return resolve_or_none(root, f"/sys/class/block/{name}")


def find_device(root: SysRoot, mount: MountEntry, notes: list[str]) -> str | None:
    """The sysfs directory of the filesystem's block device, from ``major:minor`` or source."""
    if mount.major != 0:
        found = resolve_or_none(root, f"/sys/dev/block/{mount.major_minor}")
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
    return _device_from_source(root, source, notes)


def _device_from_node(root: SysRoot, source: str) -> str | None:
    """Through the ``/dev`` node: a real block node gives its device number, else its name.

    udev links such as ``/dev/disk/by-uuid/...`` and ``/dev/mapper/...`` are symlinks to the
    kernel name, so the resolved node names the device even in a fake tree of plain files.
    """
    node = resolve_or_none(root, source)
    if node is None:
        return None
    try:
        st = os.stat(root / node)
    except OSError:
        st = None
    if st is not None and stat.S_ISBLK(st.st_mode):
        found = resolve_or_none(
            root, f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        )
        if found is not None:
            return found
    return _block_dir(root, node.rsplit("/", 1)[-1])


def _device_from_source(root: SysRoot, source: str, notes: list[str]) -> str | None:
    """The device a ``/dev/...`` mount source names: node, then dm name, then kernel name."""
    found = _device_from_node(root, source)
    if found is not None:
        return found
    name = source.rsplit("/", 1)[-1]
    if source.startswith("/dev/mapper/"):
        for dm in sorted(listdir_or_empty(root, "/sys/block")):
            if dm.startswith("dm-") and root.read_or_none(f"sys/block/{dm}/dm/name") == name:
                return _block_dir(root, dm)
    found = _block_dir(root, name)
    if found is None:
        notes.append(f"source {source} matches no device in sys/class/block")
    return found


def listdir_or_empty(root: SysRoot, rel: str) -> list[str]:
    """The names in directory ``rel`` under the root; none when it is absent or unreadable."""
    try:
        return os.listdir(root / rel)
    except OSError:
        return []


def disks_under(
    root: SysRoot, device: BlockDevice, layers: list[str], notes: list[str], depth: int = 0
) -> list[BlockDevice]:
    """The disks under ``device``: its disk for a partition, the slaves' disks for dm/md."""
    if depth > 16:
        notes.append(f"device stack under {device.name} is deeper than 16; stopped there")
        return []
    disk_path = device.sysfs_path.rsplit("/", 1)[0] if device.is_partition else device.sysfs_path
    disk = describe_block_device(root, disk_path) if device.is_partition else device
    slaves = sorted(listdir_or_empty(root, f"{disk_path}/slaves"))
    if not slaves:
        if disk.bus in ("dm", "md"):
            notes.append(f"{disk.name} lists no slaves in sysfs, so its disks are not known")
            return []
        return [disk]
    layer = stack_layer(root, disk_path, disk.name)
    if layer is not None and layer not in layers:
        layers.append(layer)
    found: list[BlockDevice] = []
    for slave in slaves:
        path = resolve_or_none(root, f"{disk_path}/slaves/{slave}")
        if path is None:
            notes.append(f"slave {slave} of {disk.name} cannot be resolved in sysfs")
            continue
        for leaf in disks_under(root, describe_block_device(root, path), layers, notes, depth + 1):
            if leaf.sysfs_path not in {f.sysfs_path for f in found}:
                found.append(leaf)
    return found


def with_layer(root: SysRoot, device: BlockDevice) -> BlockDevice:
    """Label the filesystem's device with what it does when it is a dm or md device."""
    if device.bus not in ("dm", "md"):
        return device
    disk_path = device.sysfs_path.rsplit("/", 1)[0] if device.is_partition else device.sysfs_path
    return replace(device, layer=stack_layer(root, disk_path, device.disk))
