"""greenckpt_mpi.h (issue 16 item 1: "node leaders announce for their node, as the Python
library does"): under ``mpiexec -n 4`` over 2 emulated nodes, each node's lowest rank announces
once with the sum of its ranks' bytes and its node index, every rank gets rank 0's advice and
its leader's status, and a phase failed on any rank of a node ends failed for that node.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.runtime.notify import NotifyServer
from tests.native.test_phase_api import bare_env, config
from tests.runtime.test_notify import FakeTarget

DRIVER = Path(__file__).resolve().parent / "drivers" / "mpi_driver.c"


@pytest.fixture(scope="module")
def mpi_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    mpiexec = find_mpiexec()
    mpicc = Path(mpiexec).with_name("mpicc") if mpiexec else None
    if mpicc is None or not mpicc.exists() or shutil.which("cc") is None:
        pytest.skip("no mpicc beside mpiexec, or no C compiler, on this machine")
    out = tmp_path_factory.mktemp("mpi") / "mpi_driver"
    cmd = [str(mpicc), "-std=c99", "-Wall", "-Wextra", "-Werror", *config("--cflags", "--libs")]
    subprocess.run([*cmd, str(DRIVER), "-o", str(out)], check=True)
    return out


def run(driver: Path, env: dict[str, str], *args: str, err: list[str] | None = None) -> list[str]:
    mpiexec = find_mpiexec()
    assert mpiexec is not None
    done = subprocess.run(
        [mpiexec, "-n", "4", str(driver), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    if err is not None:
        err.extend(done.stderr.splitlines())
    return sorted(done.stdout.splitlines())


def test_node_leaders_announce_once_with_their_nodes_bytes(
    mpi_driver: Path,
    server: NotifyServer,
    target: FakeTarget,
) -> None:
    lines = run(mpi_driver, {**bare_env(), **server.environ()}, "2", "3")
    assert lines == [
        "rank 0 node 0 leader 1 begin 0 io 2 end 0",
        "rank 1 node 0 leader 0 begin 0 io 2 end 0",
        "rank 2 node 1 leader 1 begin 0 io 2 end 0",
        "rank 3 node 1 leader 0 begin 0 io 2 end 0",
    ]
    assert sorted(c for c in target.calls if c[0] == "begin") == [
        ("begin", "checkpoint", "/tmp", 1000 + 2000, 2),  # node 0: ranks 0 and 1
        ("begin", "checkpoint", "/tmp", 3000 + 4000, 2),  # node 1: ranks 2 and 3
    ]
    assert sorted(target.nodes) == [0, 1]  # each begin names its node
    # rank 3 failed: node 1's end says so, node 0's does not
    ends = sorted(c[2] for c in target.calls if c[0] == "end")
    assert ends == [False, True]
    assert sorted(node for node, _ in target.ends) == [0, 1]


def test_without_a_runtime_every_rank_goes_on(mpi_driver: Path) -> None:
    lines = run(mpi_driver, bare_env(), "0", "-1")  # nodes are hosts: one node here
    assert lines == [
        "rank 0 node 0 leader 1 begin 1 io 0 end 1",
        "rank 1 node 0 leader 0 begin 1 io 0 end 1",
        "rank 2 node 0 leader 0 begin 1 io 0 end 1",
        "rank 3 node 0 leader 0 begin 1 io 0 end 1",
    ]


def test_a_negative_size_on_one_rank_refuses_its_nodes_phase_in_one_line(
    mpi_driver: Path,
    server: NotifyServer,
    target: FakeTarget,
) -> None:
    err: list[str] = []
    lines = run(mpi_driver, {**bare_env(), **server.environ()}, "2", "-1", "1", err=err)
    assert lines == [
        "rank 0 node 0 leader 1 begin -1 io 0 end -2",  # node 0 refused: rank 0 has no advice,
        "rank 1 node 0 leader 0 begin -1 io 0 end -2",  # so no rank has (all write at once)
        "rank 2 node 1 leader 1 begin 0 io 0 end 0",
        "rank 3 node 1 leader 0 begin 0 io 0 end 0",
    ]
    assert err == [
        "greenckpt: greenckpt_mpi_begin(checkpoint): 1 rank(s) of node 0 gave a negative size; "
        "give each rank's bytes (>= 0)"
    ]
    assert target.calls == [("begin", "checkpoint", "/tmp", 7000, 2), ("end", "checkpoint", True)]
