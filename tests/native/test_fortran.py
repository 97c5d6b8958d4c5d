"""The Fortran module on libgreenckpt (issue 16 item 1): a Fortran program compiled with the
module's source and ``greenckpt config --libs`` announces its phases to the runtime, gets the
advice, and sees a misuse refused with the C API's status and message; C's ``const char *``
results come back as Fortran strings (issue 30 item 4). The collective helpers
(greenckpt_mpi_mod.f90) do under ``mpiexec`` what greenckpt_mpi.h does (test_mpi_helpers.py).

gfortran, and for MPI ``mpifort`` (Debian's ``libmpich-dev``: the MPICH and Open MPI wheels
have no Fortran bindings), are installed by the tests where missing and this process may
install packages; otherwise the test is skipped with the reason.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.runtime.notify import NotifyServer
from tests.conftest import debian_tool
from tests.native.test_phase_api import bare_env, config
from tests.runtime.test_notify import FakeTarget

MPI_DRIVER = Path(__file__).resolve().parent / "drivers" / "mpi_driver.f90"
PROGRAM = """\
program app
  use greenckpt
  implicit none
  integer :: s, io
  s = greenckpt_set_node(2)
  s = greenckpt_begin(GREENCKPT_CHECKPOINT, 4, '/tmp/fortran ckpt   ', &
       123456789012_greenckpt_size_kind, io)
  print '(a,i0,a,i0,a,i0)', 'begin ', s, ' io ', io, ' q ', &
       greenckpt_io_processes(GREENCKPT_CHECKPOINT)
  s = greenckpt_end(GREENCKPT_RESTART, .true.)
  print '(a,i0,a,a)', 'misuse ', s, ': ', greenckpt_last_error()
  print '(4a)', greenckpt_strerror(s), '|', greenckpt_strerror(GREENCKPT_NO_RUNTIME), '|'
  s = greenckpt_end(GREENCKPT_CHECKPOINT, .false.)
  print '(a,i0,a,l1)', 'end ', s, ' attached ', greenckpt_attached()
  print '(5a)', greenckpt_kind_name(GREENCKPT_FLUSH), '|', greenckpt_kind_name(GREENCKPT_COMPUTE), &
       '|', greenckpt_kind_name(7)
end program app
"""


def gfortran() -> str:
    return debian_tool("gfortran", "gfortran")


def test_a_fortran_program_announces_through_the_module(
    tmp_path: Path,
    server: NotifyServer,
    target: FakeTarget,
) -> None:
    compiler = gfortran()
    source = tmp_path / "app.f90"
    source.write_text(PROGRAM)
    exe = tmp_path / "app"
    subprocess.run(
        [compiler, "-std=f2008", "-Wall", "-Werror", f"-J{tmp_path}",
         *config("--fortran-module"), str(source), *config("--libs"), "-o", str(exe)],
        check=True,
    )  # fmt: skip
    done = subprocess.run(
        [str(exe)], capture_output=True, text=True, env={**bare_env(), **server.environ()},
        check=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.splitlines() == [
        "begin 0 io 2 q 2",
        "misuse -2: greenckpt_end(restart): the innermost phase open in this thread is a "
        "checkpoint; end it first (phases nest)",
        "phase begun or ended out of order|no runtime listening (nothing sent)|",
        "end 0 attached T",
        "flush|compute|",  # an unknown kind: C's NULL, an empty string
    ]
    assert done.stderr.count("\n") == 1
    assert target.calls == [
        ("begin", "checkpoint", "/tmp/fortran ckpt", 123456789012, 4),
        ("end", "checkpoint", False),
    ]
    assert target.nodes == [2]


# ------------------------------------------------------------------------------ MPI


def mpifort() -> str:
    """An MPI Fortran compiler: the one on the PATH, else Debian's MPICH (``libmpich-dev``
    brings ``mpifort`` with gfortran; docs/native.md)."""
    return debian_tool("mpifort", "libmpich-dev")


@pytest.fixture(scope="module")
def fortran_mpi_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = mpifort()
    out = tmp_path_factory.mktemp("fortran_mpi")
    modules = config("--fortran-module", "--fortran-mpi-module")
    subprocess.run(
        [compiler, "-std=f2008", "-Wall", "-Wextra", "-Werror", f"-J{out}", *modules,
         str(MPI_DRIVER), *config("--libs"), "-o", str(out / "driver")],
        check=True,
    )  # fmt: skip
    return out / "driver"


def run_mpi(driver: Path, env: dict[str, str], *args: str) -> tuple[list[str], list[str]]:
    mpiexec = find_mpiexec() or shutil.which("mpiexec.mpich")
    if mpiexec is None:
        pytest.skip("no mpiexec on this machine")
    done = subprocess.run(
        [mpiexec, "-n", "4", str(driver), *args],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    return sorted(done.stdout.splitlines()), done.stderr.splitlines()


def test_fortran_node_leaders_announce_once_with_their_nodes_bytes(
    fortran_mpi_driver: Path, server: NotifyServer, target: FakeTarget
) -> None:
    lines, err = run_mpi(fortran_mpi_driver, {**bare_env(), **server.environ()}, "2", "3")
    assert lines == [
        f"rank {r} node {r // 2} leader {1 - r % 2} begin 0 io 2 end 0: ok (checkpoint)"
        for r in range(4)
    ]
    assert err == []
    assert sorted(c for c in target.calls if c[0] == "begin") == [
        ("begin", "checkpoint", "/tmp", 1000 + 2000, 2),  # node 0: ranks 0 and 1
        ("begin", "checkpoint", "/tmp", 3000 + 4000, 2),  # node 1: ranks 2 and 3
    ]
    assert sorted(target.nodes) == [0, 1]
    assert sorted(c[2] for c in target.calls if c[0] == "end") == [False, True]  # rank 3 failed
    assert sorted(node for node, _ in target.ends) == [0, 1]


def test_fortran_collectives_without_a_runtime_and_with_a_negative_size(
    fortran_mpi_driver: Path, server: NotifyServer, target: FakeTarget
) -> None:
    lines, err = run_mpi(fortran_mpi_driver, bare_env(), "0", "-1")  # one node: the host
    assert lines == [
        f"rank {r} node 0 leader {int(r == 0)} begin 1 io 0 end 1: no runtime listening "
        "(nothing sent) (checkpoint)"
        for r in range(4)
    ]
    lines, err = run_mpi(fortran_mpi_driver, {**bare_env(), **server.environ()}, "2", "-1", "1")
    assert lines == [
        "rank 0 node 0 leader 1 begin -1 io 0 end -2: invalid argument (checkpoint)",
        "rank 1 node 0 leader 0 begin -1 io 0 end -2: invalid argument (checkpoint)",
        "rank 2 node 1 leader 1 begin 0 io 0 end 0: ok (checkpoint)",
        "rank 3 node 1 leader 0 begin 0 io 0 end 0: ok (checkpoint)",
    ]
    assert err == [
        "greenckpt: greenckpt_mpi_begin(checkpoint): 1 rank(s) of node 0 gave a negative size; "
        "give each rank's bytes (>= 0)"
    ]
    assert target.calls == [("begin", "checkpoint", "/tmp", 7000, 2), ("end", "checkpoint", True)]
