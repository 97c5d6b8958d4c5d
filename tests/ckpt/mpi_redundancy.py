"""Run under ``mpiexec -n 4``: levels 2 and 3 — damage node-local storage, recover, rebuild.

Called by ``tests/ckpt/test_redundancy_mpi.py`` as
``python mpi_redundancy.py DIR LEVEL RANKS_PER_NODE PARITY CODEC DAMAGE [SECOND]``; rank 0
prints one JSON line with what happened. Iterations 1..3 checkpoint at LEVEL on odd iterations
and at level 4 on even ones, so checkpoint 3 is the newest at LEVEL and checkpoint 2 the newest
global one. Each rank's array has a different length and contents (rank-dependent), so a file
rebuilt from the wrong member or padded wrongly would be caught by the bit-for-bit comparison.

DAMAGE (applied by rank 0 to checkpoint 3 after the run): ``none``; ``erase:K[,L]`` (nodes'
local directories removed entirely, as when nodes are replaced); ``corrupt:R`` (a byte of rank
R's file flipped); ``corrupt-copy:R`` (rank R's file and its partner copy flipped);
``corrupt-parity:R`` (a byte of rank R's parity file flipped); ``corrupt-global:R`` (a byte
of rank R's file in the level-4 checkpoint 2 flipped); several joined by ``+``. ``block-redundancy``
is no damage but a 4th checkpoint whose partner copy / parity file cannot be created on node 1:
it must fail on every rank, leave nothing behind, and checkpoint 3 must still restore.
SECOND, if given, is a second damage applied after the first recovery, followed by another
recovery: it shows that the rebuild also restored the redundancy.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from greenckpt.ckpt.api import Checkpointer, CheckpointError, RecoveryError, RecoveryInfo
from greenckpt.ckpt.inject import flip_bits_in_file

MIXED = os.environ.get("MIXED") == "1"
"""Also level 1, with three level-1 checkpoints (4, 5, 6) after checkpoint 3: with keep = 3
they must not push the older level-LEVEL checkpoint 3 out (each level keeps its own)."""

SCALE = int(os.environ.get("SCALE", "1"))
"""Arrays SCALE times longer: with 30, every rank file is 9.6–14.6 MB, so partner copies and
parity pieces move in several segments, the last one short (the default keeps one segment)."""


def length(rank: int) -> int:
    return (40_000 + 7_000 * rank) * SCALE


def data(rank: int, it: int) -> np.ndarray:
    return np.arange(length(rank), dtype=np.float64) * (rank + 1) + it


def make(
    root: Path, level: int, rpn: int, parity: int, codec: str
) -> tuple[Checkpointer, np.ndarray]:
    settings: dict[str, object] = {"every": "2it", "codec": codec}
    extra: dict[str, object] = {"l1": {"enabled": True}} if MIXED else {}
    if level == 3:
        settings.update(group_size=4 // rpn, parity=parity)
    ck = Checkpointer(
        local_dir=str(root / "local"),
        global_dir=str(root / "global"),
        ranks_per_node=rpn,
        keep=3,
        l4={"every": "2it"},
        **{f"l{level}": settings},  # type: ignore[arg-type]
        **extra,  # type: ignore[arg-type]
    )
    u = np.zeros(length(ck.rank))
    ck.protect("u", u)
    return ck, u


def ckpt_dir(root: Path, node: int, level: int) -> Path:
    sub = "" if level == 1 else f"level{level}"
    return root / "local" / f"node{node}" / sub / "greenckpt" / "ckpt-00000003"


def damage(root: Path, specs: str, rpn: int, level: int) -> None:
    for spec in specs.split("+"):
        damage_one(root, spec, rpn, level)


def damage_one(root: Path, spec: str, rpn: int, level: int) -> None:
    if spec == "none":
        return
    kind, _, arg = spec.partition(":")
    targets = [int(x) for x in arg.split(",")]
    if kind == "erase":
        for node in targets:
            shutil.rmtree(root / "local" / f"node{node}")
        return
    (rank,) = targets
    node = rank // rpn
    name = f"rank-{rank:06d}.data"
    if kind == "corrupt":
        flip_bits_in_file(ckpt_dir(root, node, level) / name, positions=[4000 * 8 + 3])
    elif kind == "corrupt-copy":
        flip_bits_in_file(ckpt_dir(root, node, level) / name, positions=[4000 * 8 + 3])
        holder_node = (node + 1) % (4 // rpn)
        flip_bits_in_file(ckpt_dir(root, holder_node, level) / f"partner-{name}", positions=[5])
    elif kind == "corrupt-global":  # rank R's file of the level-4 checkpoint 2
        global_dir = root / "global" / "greenckpt" / "ckpt-00000002"
        flip_bits_in_file(global_dir / name, positions=[4000 * 8 + 3])
    elif kind == "corrupt-parity":
        flip_bits_in_file(ckpt_dir(root, node, level) / f"parity-{name}", positions=[17])
    else:
        raise SystemExit(f"unknown damage {spec!r}")


def recover(root: Path, args: tuple[int, int, int, str]) -> dict[str, object]:
    ck, u = make(root, *args)
    out: dict[str, object] = {}
    info: RecoveryInfo | None = None
    try:
        info = ck.recover()
    except RecoveryError as exc:
        out["error"] = str(exc)
    if info is not None:
        out.update(
            id=info.id,
            level=info.level,
            rebuilt=list(info.rebuilt),
            skipped=list(info.skipped),
        )
        ok = bool(np.array_equal(u, data(ck.rank, ck.state["it"])))
        out["all_ok"] = all(ck.comm.allgather(ok))
    ck.finalize()
    return out


def main() -> int:
    root = Path(sys.argv[1])
    level, rpn, parity = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    codec, first = sys.argv[5], sys.argv[6]
    second = sys.argv[7] if len(sys.argv) > 7 else None
    args = (level, rpn, parity, codec)
    ck, u = make(root, *args)
    levels = []
    for it in range(1, 4):
        u[:] = data(ck.rank, it)
        ck.state["it"] = it
        chosen = level if it % 2 else 4
        levels.append(ck.checkpoint(chosen, iteration=it).level)
    for it in range(4, 7) if MIXED else ():
        u[:] = data(ck.rank, it)
        ck.state["it"] = it
        levels.append(ck.checkpoint(1, iteration=it).level)
    out: dict[str, object] = {"levels": levels}
    if first == "block-redundancy":  # the 4th checkpoint cannot store its redundant file
        if ck.rank == 0:
            # a directory where node 1 must write the copy/parity: creating the file fails
            stage = ckpt_dir(root, 1, level).with_name(".ckpt-00000004.partial")
            stage.mkdir()
            (
                stage / ("partner-rank-000000.data" if level == 2 else "parity-rank-000001.data")
            ).mkdir()
        ck.comm.barrier()
        u[:] = data(ck.rank, 4)
        ck.state["it"] = 4
        try:
            ck.checkpoint(level, iteration=4)
            out["error"] = None
        except CheckpointError as exc:
            out["error"] = str(exc)
        first = "none"
    ck.finalize()
    ck.comm.barrier()
    if ck.rank == 0:
        damage(root, first, rpn, level)
    ck.comm.barrier()
    out["first"] = recover(root, args)
    if second is not None:
        ck.comm.barrier()
        if ck.rank == 0:
            damage(root, second, rpn, level)
        ck.comm.barrier()
        out["second"] = recover(root, args)
    out["leftovers"] = sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.name.startswith(".")
    )
    if ck.rank == 0:
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
