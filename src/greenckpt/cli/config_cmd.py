"""``greenckpt config``: the flags to build a C, C++ or Fortran program with the phase API.

Why a command: a job's build line must find greenckpt.h and libgreenckpt wherever pip put
them (a venv, a user site, a container), as ``mpicc $(greenckpt config --cflags --libs)``
does, like ``pkg-config`` or ``python3-config``. Asking for the libraries builds them first
where the install could not (:mod:`greenckpt.native`).
"""

from __future__ import annotations

import argparse
import sys
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
    ("intercept-lib", "the interposition library greenckpt run --intercept preloads"),
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

    if name == "cflags":
        return native.cflags()
    if name == "libs":
        return native.libs()
    if name == "include-dir":
        return str(native.include_dir())
    if name == "fortran-module":
        return str(native.fortran_module())
    if name == "intercept-lib":
        return str(native.intercept_library())
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
