"""``greenckpt config``: the flags to build a C, C++ or Fortran program with the phase API.

Why a command: a job's build line must find greenckpt.h and libgreenckpt wherever pip put
them (a venv, a user site, a container), as ``mpicc $(greenckpt config --cflags --libs)``
does, like ``pkg-config`` or ``python3-config``. Asking for the libraries builds them first
where the install could not (:mod:`greenckpt.native`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from greenckpt.cli.commands import command_help
from greenckpt.errors import InvalidValueError

_FLAGS = (
    ("cflags", "compiler flags: the folder of greenckpt.h and greenckpt_mpi.h"),
    ("libs", "linker flags for libgreenckpt (its folder on the run-time search path too)"),
    ("include-dir", "the folder of the headers"),
    ("lib-dir", "the folder of the libraries"),
    ("pkgconfig-dir", "the folder of greenckpt.pc, for PKG_CONFIG_PATH"),
    ("fortran-module", "the Fortran module's source, to compile with the application"),
    (
        "fortran-mpi-module",
        "the source of the Fortran collective helpers (module greenckpt_mpi, use mpi), to "
        "compile after --fortran-module with the application's mpifort",
    ),
    ("intercept-lib", "the interposition library greenckpt run --intercept preloads"),
    (
        "spank",
        "the Slurm plugin greenckpt_spank.so for plugstack.conf (built on first use where "
        "Slurm's spank.h is; docs/admin-guide.md)",
    ),
)


def register(sub: Any) -> None:
    """Add the ``config`` sub-command."""
    p = sub.add_parser(
        "config",
        help=command_help("config"),
        description="Print what a build needs to use greenckpt's C phase API, on one line, "
        "in the order asked: e.g. `mpicc $(greenckpt config --cflags --libs) app.c`. The "
        "libraries are built on first use where the install could not build them.",
    )
    for name, text in _FLAGS:
        p.add_argument(
            f"--{name}",
            dest="asked",
            action="append_const",
            const=name,
            help=text,
        )
    p.set_defaults(run=run, asked=None, restores_itself=True)


def _value(name: str) -> str:
    from greenckpt import native  # noqa: PLC0415 - builds on first use; only when asked

    values: dict[str, Callable[[], str]] = {
        "cflags": native.cflags,
        "libs": native.libs,
        "include-dir": lambda: str(native.include_dir()),
        "fortran-module": lambda: str(native.fortran_module()),
        "fortran-mpi-module": lambda: str(native.fortran_mpi_module()),
        "intercept-lib": lambda: str(native.intercept_library()),
        "spank": lambda: str(native.spank_plugin()),
    }
    if name in values:
        return values[name]()
    return str(native.library_dir())  # lib-dir, pkgconfig-dir: greenckpt.pc is beside it


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt config``."""
    if not ns.asked:
        raise InvalidValueError("say what to print, e.g. --cflags --libs (see greenckpt config -h)")
    from greenckpt.native import BuildError  # noqa: PLC0415 - see _value

    try:
        line = " ".join(_value(name) for name in ns.asked)
    except BuildError as exc:
        print(f"greenckpt config: error: {exc}", file=sys.stderr)
        return 2
    print(line)
    return 0
