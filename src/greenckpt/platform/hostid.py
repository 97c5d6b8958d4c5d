"""Which machine a node is: its machine id and boot id, never its host name.

Why: a job's "nodes" may be one machine — emulated nodes, or several Slurm daemons on one host
each in its own UTS namespace (so each has its own host name). Their meters then all read the
same machine, and a job total that summed them would count its energy once per node. The
machine id (``/etc/machine-id``) and the kernel's boot id are the same in every namespace of
one running machine and differ between machines, so the job report groups nodes by them. Only
the real root says anything: a fake tree (tests, an emulated node with its own sysfs root)
has meters of its own, so it has no host id.
"""

from __future__ import annotations

import hashlib

from greenckpt.platform.root import SysRoot
from greenckpt.platform.statefile import boot_id

__all__ = ["MACHINE_ID", "host_id"]

MACHINE_ID = "etc/machine-id"


def host_id(root: SysRoot) -> str | None:
    """A short digest of this machine's machine id and boot id, or None when ``root`` is not
    the real machine or neither can be read (the caller then treats the node as its own)."""
    if not root.is_real:
        return None
    parts = [root.read_or_none(MACHINE_ID), boot_id(root)]
    if not any(parts):
        return None
    text = "\n".join(p.strip() if p else "" for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
