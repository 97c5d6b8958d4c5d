"""SYNTHETIC storage trees for tests: a fake ``proc/self/mountinfo``, ``sys`` and ``dev``.

Why: storage identification reads mountinfo, sysfs and udev's ``/dev`` links. Building those
trees the way the kernel lays them out (relative symlinks from ``sys/dev/block``,
``sys/class/block``, ``slaves/`` and ``device``; attributes on the disk, not the partition)
lets the tests check every branch — NVMe, SATA, LVM, md, virtio, NFS, tmpfs, overlay — on any
machine, without root. Every model name, size and address here is made up for the tests; none
is a measurement or a description of a real node.

:class:`FakeStorageTree` is the builder; the ``make_*`` functions build the scenarios the
tests use and return the tree and the checkpoint directory inside it (reusable by other
tests that need a storage target).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from greenckpt.platform.root import SysRoot

__all__ = [
    "HDD_MODEL",
    "NVME_MODEL",
    "PCI",
    "SATA_SSD_MODEL",
    "FakeStorageTree",
    "escape_mountinfo",
    "make_lvm_sata_ssd",
    "make_nfs4",
    "make_nvme_ext4",
    "make_overlay_root",
    "make_space_bind",
    "make_tmpfs",
    "make_virtio",
    "make_xfs_hdd",
    "nvme_disk",
    "sata_disk",
]

NVME_MODEL = "Samsung SSD 980 PRO 1TB"
HDD_MODEL = "ST4000NM0035-1V4107"
SATA_SSD_MODEL = "Samsung SSD 860 EVO 500GB"


def escape_mountinfo(text: str) -> str:
    """Escape a field the way the kernel's ``seq_escape`` does for mountinfo."""
    out = []
    for ch in text:
        out.append(f"\\{ord(ch):03o}" if ch in " \t\n\\" else ch)
    return "".join(out)


@dataclass
class FakeStorageTree:
    """A fake root being built under ``base`` (SYNTHETIC)."""

    base: Path
    lines: list[str] = field(default_factory=list)
    next_id: int = 30

    def __post_init__(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self._write_mountinfo()

    @property
    def root(self) -> SysRoot:
        return SysRoot(self.base)

    def path(self, rel: str) -> Path:
        """The real path of ``rel`` (absolute inside the fake root)."""
        return self.base / rel.lstrip("/")

    def mkdir(self, rel: str) -> str:
        self.path(rel).mkdir(parents=True, exist_ok=True)
        return "/" + rel.strip("/")

    def write(self, rel: str, text: str) -> None:
        p = self.path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")

    def link(self, rel: str, target_rel: str) -> None:
        """A relative symlink at ``rel`` pointing at ``target_rel`` (both root-absolute)."""
        p = self.path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(os.path.relpath(self.path(target_rel), p.parent))

    # ------------------------------------------------------------------ mountinfo

    def _write_mountinfo(self) -> None:
        self.write("proc/self/mountinfo", "\n".join(self.lines))

    def raw_line(self, line: str) -> None:
        self.lines.append(line)
        self._write_mountinfo()

    def mount(
        self,
        mount_point: str,
        fstype: str,
        source: str,
        super_options: str = "rw",
        *,
        dev: str = "0:40",
        mount_options: str = "rw,relatime",
        optional: str = "shared:1",
        fs_root: str = "/",
        parent: int = 1,
        mount_id: int | None = None,
    ) -> int:
        """Append a mountinfo line (escaping fields) and create the mount point directory."""
        mid = mount_id if mount_id is not None else self.next_id
        self.next_id = max(self.next_id, mid) + 1
        fields = [
            str(mid),
            str(parent),
            dev,
            escape_mountinfo(fs_root),
            escape_mountinfo(mount_point),
            mount_options,
            *optional.split(),
            "-",
            escape_mountinfo(fstype),
            escape_mountinfo(source),
            super_options,
        ]
        self.raw_line(" ".join(fields))
        self.mkdir(mount_point)
        return mid

    # ------------------------------------------------------------------ sysfs

    def block(
        self,
        sysdir: str,
        dev: str,
        *,
        sectors: int,
        rotational: int | None = None,
        logical: int | None = 512,
        physical: int | None = 512,
        device_dir: str | None = None,
        disk: bool = True,
    ) -> str:
        """A block device directory with ``dev``, ``size`` and (for disks) ``queue``.

        ``device_dir`` (root-absolute) becomes the target of the ``device`` link, where the
        model and vendor live. The ``sys/dev/block`` and ``sys/class/block`` links are made,
        and ``sys/block`` for whole disks.
        """
        name = sysdir.rstrip("/").rsplit("/", 1)[-1]
        self.mkdir(sysdir)
        self.write(f"{sysdir}/dev", dev)
        self.write(f"{sysdir}/size", str(sectors))
        if disk:
            self.mkdir(f"{sysdir}/queue")
            if rotational is not None:
                self.write(f"{sysdir}/queue/rotational", str(rotational))
            if logical is not None:
                self.write(f"{sysdir}/queue/logical_block_size", str(logical))
            if physical is not None:
                self.write(f"{sysdir}/queue/physical_block_size", str(physical))
            self.mkdir(f"{sysdir}/slaves")
            self.mkdir(f"{sysdir}/holders")
            self.link(f"sys/block/{name}", sysdir)
        if device_dir is not None:
            self.mkdir(device_dir)
            self.link(f"{sysdir}/device", device_dir)
        self.link(f"sys/dev/block/{dev}", sysdir)
        self.link(f"sys/class/block/{name}", sysdir)
        return "/" + sysdir.strip("/")

    def partition(self, disk_dir: str, name: str, dev: str, number: int, sectors: int) -> str:
        """A partition directory inside its disk's directory, as the kernel lays it out."""
        sysdir = f"{disk_dir}/{name}"
        self.block(sysdir, dev, sectors=sectors, disk=False)
        self.write(f"{sysdir}/partition", str(number))
        return sysdir

    def attrs(self, sysdir: str, **values: str) -> None:
        for key, value in values.items():
            self.write(f"{sysdir}/{key}", value)

    def slaves(self, sysdir: str, *targets: str) -> None:
        for target in targets:
            name = target.rsplit("/", 1)[-1]
            self.link(f"{sysdir}/slaves/{name}", target)

    def dev_node(self, rel: str, target: str | None = None) -> None:
        """A fake ``/dev`` entry: a plain file (no mknod without root) or a udev symlink."""
        if target is None:
            self.write(rel, "")
        else:
            self.link(rel, target)


# ---------------------------------------------------------------------- scenarios

PCI = "sys/devices/pci0000:00"


def nvme_disk(tree: FakeStorageTree, transport: str = "pcie") -> str:
    """nvme0n1 (259:0) on a PCIe controller nvme0; 1 TB; model in the controller."""
    ctrl = f"{PCI}/0000:00:1d.0/0000:3d:00.0/nvme/nvme0"
    disk = tree.block(
        f"{ctrl}/nvme0n1",
        "259:0",
        sectors=1953525168,
        rotational=0,
        logical=512,
        physical=512,
        device_dir=ctrl,
    )
    tree.attrs(ctrl, model=NVME_MODEL + "                ", transport=transport, serial="S0FAKE")
    return disk


def make_nvme_ext4(base: Path) -> tuple[FakeStorageTree, str]:
    """ext4 on the NVMe partition nvme0n1p2 mounted at /scratch; udev's /dev links exist."""
    tree = FakeStorageTree(base)
    tree.mount("/", "ext4", "/dev/nvme0n1p1", "rw", dev="259:1", mount_id=1, parent=0)
    disk = nvme_disk(tree)
    tree.partition(disk, "nvme0n1p1", "259:1", 1, 2097152)
    tree.partition(disk, "nvme0n1p2", "259:2", 2, 1900000000)
    tree.dev_node("dev/nvme0n1p2")
    tree.mount(
        "/scratch",
        "ext4",
        "/dev/nvme0n1p2",
        "rw,errors=remount-ro",
        dev="259:2",
        mount_options="rw,noatime",
    )
    return tree, tree.mkdir("/scratch/ckpt")


def sata_disk(
    tree: FakeStorageTree, name: str, dev: str, port: int, model: str, rotational: int
) -> str:
    """A SATA disk behind libata (ataN/hostN/target...), vendor ``ATA`` as the kernel says."""
    host = f"{PCI}/0000:00:17.0/ata{port + 1}/host{port}/target{port}:0:0/{port}:0:0:0"
    disk = tree.block(
        f"{host}/block/{name}",
        dev,
        sectors=7814037168,
        rotational=rotational,
        logical=512,
        physical=4096,
        device_dir=host,
    )
    tree.attrs(host, model=model, vendor="ATA     ")
    return disk


def make_xfs_hdd(base: Path) -> tuple[FakeStorageTree, str]:
    """xfs on sdb1 of a SATA hard disk, mounted by UUID (source is a /dev/disk/by-uuid link)."""
    tree = FakeStorageTree(base)
    tree.mount("/", "ext4", "/dev/sda1", dev="8:1", mount_id=1, parent=0)
    disk = sata_disk(tree, "sdb", "8:16", 1, HDD_MODEL, rotational=1)
    tree.partition(disk, "sdb1", "8:17", 1, 7814035456)
    tree.dev_node("dev/sdb1")
    tree.dev_node("dev/disk/by-uuid/0b1e2f4a-fake", "dev/sdb1")
    tree.mount(
        "/data",
        "xfs",
        "/dev/disk/by-uuid/0b1e2f4a-fake",
        "rw,attr2,inode64,logbufs=8,logbsize=32k,noquota",
        dev="8:17",
        optional="shared:7",
    )
    return tree, tree.mkdir("/data/ckpt")


def make_nfs4(base: Path, sync: bool, proto: str = "tcp") -> tuple[FakeStorageTree, str]:
    """An NFSv4.2 export fs1:/export/ckpt at /shared, mounted sync or async (the default)."""
    tree = FakeStorageTree(base)
    tree.mount("/", "ext4", "/dev/sda1", dev="8:1", mount_id=1, parent=0)
    flag = "sync," if sync else ""
    tree.mount(
        "/shared",
        "nfs4",
        "fs1:/export/ckpt",
        f"rw,{flag}vers=4.2,rsize=1048576,wsize=524288,namlen=255,hard,proto={proto},"
        "timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.2,local_lock=none,addr=10.0.0.1",
        dev="0:52",
    )
    return tree, tree.mkdir("/shared/run1")


def make_tmpfs(base: Path) -> tuple[FakeStorageTree, str]:
    """tmpfs at /dev/shm."""
    tree = FakeStorageTree(base)
    tree.mount("/", "ext4", "/dev/sda1", dev="8:1", mount_id=1, parent=0)
    tree.mount("/dev", "devtmpfs", "devtmpfs", "rw,size=4096k,mode=755", dev="0:6")
    tree.mount("/dev/shm", "tmpfs", "tmpfs", "rw,size=65536k", dev="0:23", parent=31)
    return tree, tree.mkdir("/dev/shm/ckpt")


def make_overlay_root(base: Path) -> tuple[FakeStorageTree, str]:
    """A container: / is an overlay whose upper directory is on the host."""
    tree = FakeStorageTree(base)
    tree.mount(
        "/",
        "overlay",
        "overlay",
        "rw,lowerdir=/var/lib/docker/overlay2/l/ABC:/var/lib/docker/overlay2/l/DEF,"
        "upperdir=/var/lib/docker/overlay2/123/diff,workdir=/var/lib/docker/overlay2/123/work",
        dev="0:44",
        optional="",
        mount_id=500,
        parent=400,
    )
    tree.mount("/proc", "proc", "proc", dev="0:45", parent=500, optional="")
    return tree, tree.mkdir("/ckpt")


def make_lvm_sata_ssd(base: Path) -> tuple[FakeStorageTree, str]:
    """ext4 on an LVM volume (dm-0, /dev/mapper/vg0-ckpt) whose PV is sda2 on a SATA SSD."""
    tree = FakeStorageTree(base)
    tree.mount("/", "ext4", "/dev/sda1", dev="8:1", mount_id=1, parent=0)
    disk = sata_disk(tree, "sda", "8:0", 0, SATA_SSD_MODEL, rotational=0)
    tree.partition(disk, "sda1", "8:1", 1, 1048576)
    sda2 = tree.partition(disk, "sda2", "8:2", 2, 976000000)
    dm = tree.block(
        "sys/devices/virtual/block/dm-0",
        "253:0",
        sectors=419430400,
        rotational=0,
        logical=4096,
        physical=4096,
    )
    tree.attrs(dm, **{"dm/name": "vg0-ckpt", "dm/uuid": "LVM-abcdefFAKEuuid"})
    tree.slaves(dm, sda2)
    tree.link(f"{sda2}/holders/dm-0", dm)
    tree.dev_node("dev/dm-0")
    tree.dev_node("dev/mapper/vg0-ckpt", "dev/dm-0")
    tree.mount("/ckpt", "ext4", "/dev/mapper/vg0-ckpt", "rw", dev="253:0")
    return tree, "/ckpt"


def make_virtio(base: Path) -> tuple[FakeStorageTree, str]:
    """A VM: ext4 directly on the virtio disk vda (rotational=1, virtio-blk's default)."""
    tree = FakeStorageTree(base)
    virtio = f"{PCI}/0000:00:02.0/virtio1"
    vda = tree.block(
        f"{virtio}/block/vda",
        "254:0",
        sectors=536870912,
        rotational=1,
        logical=512,
        physical=4096,
        device_dir=virtio,
    )
    tree.attrs(virtio, vendor="0x1af4", device="0x0002")
    tree.attrs(vda, serial="fakeserial")
    tree.mount("/", "ext4", "/dev/vda", "rw,discard", dev="254:0", mount_id=27, parent=1)
    return tree, tree.mkdir("/var/ckpt")


def make_space_bind(base: Path) -> tuple[FakeStorageTree, str]:
    """A bind mount of /exports/ckpt on the NVMe at the mount point '/mnt/ckpt data'."""
    tree = FakeStorageTree(base)
    tree.mount("/", "ext4", "/dev/nvme0n1p1", dev="259:1", mount_id=1, parent=0)
    disk = nvme_disk(tree)
    tree.partition(disk, "nvme0n1p1", "259:1", 1, 1953523120)
    tree.mount(
        "/mnt/ckpt data",
        "ext4",
        "/dev/nvme0n1p1",
        "rw",
        dev="259:1",
        fs_root="/exports/ckpt",
        optional="shared:5 master:2",
        mount_options="rw,nosuid,nodev",
    )
    return tree, tree.mkdir("/mnt/ckpt data/run 1")
