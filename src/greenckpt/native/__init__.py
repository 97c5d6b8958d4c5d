"""Where the C phase API is: headers, the built libraries, the Fortran module.

Why: ``mpicc $(greenckpt config --cflags --libs) app.c`` must work right after ``pip install``.
The wheel build compiles the libraries into ``native/lib`` (``hatch_build.py``); where that did
not happen (no compiler at install time) or no longer matches the sources (an editable
checkout), they are built once into a per-user cache keyed by the sources' digest. Details:
docs/native.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from greenckpt.native.build import (
    DIGEST_FILE,
    LIBRARIES,
    NATIVE_DIR,
    SPANK_PLUGIN,
    BuildError,
    build_libraries,
    build_spank,
    sources_digest,
    spank_digest,
)

__all__ = [
    "BuildError",
    "built_library_dir",
    "cflags",
    "fortran_module",
    "fortran_mpi_module",
    "include_dir",
    "intercept_library",
    "library_dir",
    "libs",
    "spank_plugin",
]

PACKAGED_LIB_DIR = NATIVE_DIR / "lib"


def include_dir() -> Path:
    """The folder holding ``greenckpt.h`` and ``greenckpt_mpi.h``."""
    return NATIVE_DIR / "include"


def fortran_module() -> Path:
    """The Fortran module's source (``greenckpt_mod.f90``): compiled with the application,
    since a ``.mod`` file belongs to one Fortran compiler."""
    return NATIVE_DIR / "fortran" / "greenckpt_mod.f90"


def fortran_mpi_module() -> Path:
    """The source of the Fortran collective helpers (module ``greenckpt_mpi``, ``use mpi``):
    compiled after :func:`fortran_module`, with the application's MPI Fortran compiler."""
    return NATIVE_DIR / "fortran" / "greenckpt_mpi_mod.f90"


def _complete(folder: Path, digest: str) -> bool:
    try:
        found = (folder / DIGEST_FILE).read_text().strip()
    except OSError:
        return False
    return found == digest and all((folder / name).is_file() for name in LIBRARIES)


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "greenckpt" / "native"


def built_library_dir() -> Path | None:
    """The folder with libraries built from these sources (at install, or by ``greenckpt
    config``), or None: never runs a compiler. For what a rank loads (level 3's parity
    encoder): a job's every rank compiling at its first checkpoint is what this avoids."""
    digest = sources_digest()
    for folder in (PACKAGED_LIB_DIR, _cache_root() / digest):
        if _complete(folder, digest):
            return folder
    return None


def library_dir() -> Path:
    """The folder with the built libraries and ``greenckpt.pc``, building them first where the
    install did not (:class:`BuildError`, one line with the compiler's reason, if it cannot)."""
    digest = sources_digest()
    if _complete(PACKAGED_LIB_DIR, digest):
        return PACKAGED_LIB_DIR
    folder = _cache_root() / digest
    if not _complete(folder, digest):
        try:
            build_libraries(folder)
        except OSError as exc:
            raise BuildError(f"cannot build libgreenckpt into {folder}: {exc}") from None
    return folder


def intercept_library() -> Path:
    """The interposition library ``greenckpt run --intercept`` preloads."""
    return library_dir() / "libgreenckpt_intercept.so"


def cflags() -> str:
    """Compiler flags for a program that includes ``greenckpt.h``."""
    return f"-I{include_dir()}"


def libs() -> str:
    """Linker flags for libgreenckpt, with its folder on the run-time search path.

    ``--no-as-needed`` around the library because these flags usually come *before* the
    sources (``mpicc $(greenckpt config --libs) app.c``), where a linker that drops libraries
    not yet needed would drop it."""
    folder = library_dir()
    return (
        f"-L{folder} -Wl,-rpath,{folder} "
        "-Wl,--push-state,--no-as-needed -lgreenckpt -Wl,--pop-state"
    )


def spank_plugin() -> Path:
    """The Slurm plugin ``greenckpt_spank.so`` (docs/admin-guide.md): the one built at install
    when it matches the source, else built now into the package's ``lib`` folder (where it
    can be written) or the per-user cache; :class:`BuildError` (one line: which package gives
    ``spank.h``, or the compiler's reason) when it cannot be built."""
    digest = spank_digest()
    for folder in (PACKAGED_LIB_DIR, _cache_root() / f"spank-{digest}"):
        try:
            found = (folder / f"{SPANK_PLUGIN}.digest").read_text().strip()
        except OSError:
            continue
        if found == digest and (folder / SPANK_PLUGIN).is_file():
            return folder / SPANK_PLUGIN
    for folder in (PACKAGED_LIB_DIR, _cache_root() / f"spank-{digest}"):
        if folder == PACKAGED_LIB_DIR and not os.access(folder, os.W_OK):
            continue
        try:
            return build_spank(folder)
        except OSError as exc:
            last = exc
            continue
    raise BuildError(f"cannot build {SPANK_PLUGIN}: {last}")
