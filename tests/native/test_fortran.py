"""The Fortran module on libgreenckpt (issue 16 item 1): a Fortran program compiled with the
module's source and ``greenckpt config --libs`` announces its phases to the runtime, gets the
advice, and sees a misuse refused with the C API's status and message.

gfortran is installed by the test (Debian's package) where it is missing and this process may
install packages; otherwise the test is skipped with the reason.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from greenckpt.runtime.notify import NotifyServer
from tests.conftest import debian_tool
from tests.native.test_phase_api import bare_env, config
from tests.runtime.test_notify import FakeTarget

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
  s = greenckpt_end(GREENCKPT_CHECKPOINT, .false.)
  print '(a,i0,a,l1)', 'end ', s, ' attached ', greenckpt_attached()
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
        "end 0 attached T",
    ]
    assert done.stderr.count("\n") == 1
    assert target.calls == [
        ("begin", "checkpoint", "/tmp/fortran ckpt", 123456789012, 4),
        ("end", "checkpoint", False),
    ]
    assert target.nodes == [2]
