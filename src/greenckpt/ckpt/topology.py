"""Which ranks share a node, where each node's local storage is, and who writes when.

Why: node-local checkpoints are only as safe as the node, partner copies and erasure groups
must span *different* nodes, and the number of ranks writing at once per node (like SCR's
flush width) is a setting the energy-aware runtime chooses from the profile. A "node" is a
host (ranks with the same MPI processor name) unless ``ranks_per_node`` emulates nodes of N
consecutive ranks — how tests and single-host runs exercise multi-node recovery, each emulated
node getting its own subdirectory ``node<k>`` of the local directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from greenckpt.ckpt.comm import Comm
from greenckpt.errors import InvalidValueError

__all__ = ["Topology", "write_waves"]


@dataclass(frozen=True)
class Topology:
    """``nodes[k]`` are the ranks of node k (ascending); ``emulated`` when not real hosts."""

    nodes: tuple[tuple[int, ...], ...]
    emulated: bool

    @classmethod
    def discover(cls, comm: Comm, ranks_per_node: int | None) -> Topology:
        """Group ranks by host (collective), or in blocks of ``ranks_per_node``."""
        if ranks_per_node is not None:
            n = comm.size
            return cls(
                tuple(
                    tuple(range(s, min(s + ranks_per_node, n))) for s in range(0, n, ranks_per_node)
                ),
                emulated=True,
            )
        hosts = comm.allgather(comm.host())
        order: dict[str, list[int]] = {}
        for rank, host in enumerate(hosts):
            order.setdefault(host, []).append(rank)
        return cls(tuple(tuple(r) for r in order.values()), emulated=False)

    @property
    def nranks(self) -> int:
        """Ranks in the job."""
        return sum(len(n) for n in self.nodes)

    def node_of(self, rank: int) -> int:
        """The node index of ``rank``."""
        for k, ranks in enumerate(self.nodes):
            if rank in ranks:
                return k
        raise InvalidValueError(f"rank {rank} is on no node of this job ({self.nranks} ranks)")

    def leader(self, node: int) -> int:
        """The lowest rank of a node: it commits and cleans that node's local storage."""
        return self.nodes[node][0]

    def local_base(self, local_dir: str, node: int) -> Path:
        """The node-local base directory of ``node`` (a subdirectory when emulated)."""
        base = Path(os.path.expanduser(local_dir))
        return base / f"node{node}" if self.emulated else base


def write_waves(
    topology: Topology, per_node: int | None, total: int | None
) -> list[tuple[int, ...]]:
    """Ranks grouped into waves that write one after the other.

    Each wave holds at most ``per_node`` ranks of any node and ``total`` ranks overall
    (``None``: no limit), filling nodes round-robin so every node keeps its storage busy.
    """
    queues = [list(ranks) for ranks in topology.nodes]
    waves: list[tuple[int, ...]] = []
    while any(queues):
        wave: list[int] = []
        taken = [0] * len(queues)
        progress = True
        while progress:
            progress = False
            for k, q in enumerate(queues):
                if not q or (per_node is not None and taken[k] >= per_node):
                    continue
                if total is not None and len(wave) >= total:
                    break
                wave.append(q.pop(0))
                taken[k] += 1
                progress = True
        waves.append(tuple(sorted(wave)))
    return waves
