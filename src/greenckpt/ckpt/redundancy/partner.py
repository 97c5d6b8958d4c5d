"""Level 2: every rank's checkpoint file also stored on a partner rank of another node.

Why a fixed shift: FTI's L2 and SCR's PARTNER scheme keep a full copy of each rank's data on
another node, so that losing any one node loses no data (its ranks' files survive as copies on
the next node, and the copies it held are re-made from the originals). The partner map here
lists all ranks node by node and pairs position p with position p + s (mod n), where s is the
largest number of ranks on a node. Three properties make it the right map:

* it is a permutation, so the copy can be a single paired send/receive per segment on every
  rank at once (:func:`greenckpt.ckpt.transfer.shift_file`), with no rank receiving two copies;
* with equally sized nodes it is the usual "same local rank on the next node" ring;
* a shift of at least a node's size never lands on the same node as long as no node holds more
  than half of the ranks, and :func:`partner_holders` checks the result rather than assuming it.

Storage cost: one extra copy of everything (against about t / (G − t) for level 3); the copies
are the stored bytes, compressed if the level has a codec, so a copy is byte-identical to the
original and is checked against the original's digest.
"""

from __future__ import annotations

from typing import Final

from greenckpt.ckpt.topology import Topology
from greenckpt.errors import GreenckptError

__all__ = ["PartnerError", "copy_name", "inverse", "partner_holders"]

COPY_PREFIX: Final = "partner-"


class PartnerError(GreenckptError, ValueError):
    """The job's layout cannot give every rank a partner on another node."""


def copy_name(rank_file: str) -> str:
    """File name of the partner copy of a rank file (in the partner's checkpoint directory)."""
    return COPY_PREFIX + rank_file


def partner_holders(topology: Topology) -> tuple[int, ...]:
    """``holders[r]``: the rank that stores rank r's copy, always on another node."""
    if len(topology.nodes) < 2:
        raise PartnerError(
            "level 2 (partner copy) needs at least 2 nodes, this job has 1; run on more nodes, "
            "emulate nodes on one host with ranks_per_node, or use levels 1 or 4"
        )
    order = [rank for ranks in topology.nodes for rank in ranks]
    n = len(order)
    shift = max(len(ranks) for ranks in topology.nodes)
    holders = [0] * n
    for p, rank in enumerate(order):
        holders[rank] = order[(p + shift) % n]
    for rank, holder in enumerate(holders):
        if topology.node_of(rank) == topology.node_of(holder):
            sizes = [len(r) for r in topology.nodes]
            raise PartnerError(
                f"level 2 (partner copy) cannot place every copy on another node with ranks per "
                f"node {sizes}: one node holds more than half of the ranks; balance the ranks "
                "over the nodes"
            )
    return tuple(holders)


def inverse(holders: tuple[int, ...]) -> tuple[int, ...]:
    """``owner[h]``: whose copy rank h holds (the inverse permutation)."""
    owner = [0] * len(holders)
    for rank, holder in enumerate(holders):
        owner[holder] = rank
    return tuple(owner)
