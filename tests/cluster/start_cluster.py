"""Start the test cluster of tests/cluster/slurm_cluster.py by hand, to try things on it.

    python -m tests.cluster.start_cluster --nodes 3 [--dir DIR] [--share PATH ...] [--detach]
    python -m tests.cluster.start_cluster stop [--dir DIR]

It prints the ``export SLURM_CONF=...`` line for the clients (``sinfo``, ``srun -N3 hostname``)
and stays up until Ctrl-C; with ``--detach`` it leaves the cluster running and ``stop`` (same
``--dir``) ends it. Needs root, like the fixture. Why the cluster is built the way it is: the
docstring of slurm_cluster.py and docs/design/cluster.md ("A test cluster on one machine").
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from tests.cluster.slurm_cluster import SlurmCluster, SlurmUnavailable, running, start_slurm

DEFAULT_DIR = Path("/var/tmp/greenckpt-cluster")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.cluster.start_cluster",
        description="A multi-node Slurm on this machine (each node its own /tmp, /run and "
        "host name) for trying greenckpt by hand.",
    )
    parser.add_argument("action", nargs="?", choices=("start", "stop"), default="start")
    parser.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIR,
        help=f"the cluster's directory (default {DEFAULT_DIR})",
    )
    parser.add_argument(
        "--share",
        type=Path,
        action="append",
        default=[],
        help="a directory under /tmp every node sees too (repeatable)",
    )
    parser.add_argument(
        "--detach",
        action="store_true",
        help="leave the cluster running and return; end it with 'stop'",
    )
    return parser


def _stop(directory: Path) -> int:
    if not running(directory):
        print(f"no cluster runs in {directory}", file=sys.stderr)
        return 1
    SlurmCluster.load(directory).stop()
    print(f"stopped the cluster in {directory} (its logs stay there)")
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    directory: Path = args.dir.resolve()
    if args.action == "stop":
        return _stop(directory)
    if args.nodes < 1:
        print("--nodes must be 1 or more", file=sys.stderr)
        return 2
    try:
        cluster = start_slurm(directory, args.nodes, shared=tuple(args.share))
    except SlurmUnavailable as exc:
        print(f"the cluster did not start: {exc}", file=sys.stderr)
        return 1
    print(f"{len(cluster.nodes)} nodes up ({','.join(cluster.nodes)}), in {directory}")
    print(f"export SLURM_CONF={cluster.env['SLURM_CONF']}")
    print(f"job user: {cluster.user} (uid {cluster.uid}), its directory {cluster.user_dir}")
    print(f"a node's /tmp on this host: {cluster.node_path(cluster.nodes[0], '/tmp')}")
    if args.detach:
        print(f"stop it with: python -m tests.cluster.start_cluster stop --dir {directory}")
        return 0
    print("stop it with Ctrl-C")
    sys.stdout.flush()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT: also when started
        signal.signal(sig, _interrupt)  # in the background, which ignores it
    try:
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
        print(f"stopped (the logs stay in {directory})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
