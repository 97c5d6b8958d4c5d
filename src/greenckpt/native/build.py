"""Compile libgreenckpt (the C phase API) and the interposition library from their sources.

Why one module that needs only the standard library and greenckpt's leaf of errors: the same
code builds the libraries when the wheel is built (``hatch_build.py`` imports it from the
source tree, before greenckpt or its dependencies are installed) and, where
that could not happen (no C compiler at install time, an editable checkout whose sources
changed), when ``greenckpt config`` is first asked for them (:mod:`greenckpt.native`).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from greenckpt.errors import GreenckptError

__all__ = [
    "LIBRARIES",
    "NATIVE_DIR",
    "SPANK_PLUGIN",
    "BuildError",
    "build_libraries",
    "build_spank",
    "compiler",
    "sources_digest",
    "spank_header",
]

NATIVE_DIR = Path(__file__).resolve().parent
"""Where the C sources, headers and the Fortran module are (inside the installed package)."""

LIBRARIES: dict[str, tuple[str, ...]] = {
    "libgreenckpt.so": ("c/greenckpt.c", "c/json_line.c"),
    "libgreenckpt_front.so": ("c/front.c", "c/json_line.c"),
    "libgreenckpt_gf.so": ("c/gf.c",),
    "libgreenckpt_intercept.so": (
        "c/greenckpt.c",
        "c/json_line.c",
        "c/intercept_common.c",
        "c/intercept_fti.c",
        "c/intercept_scr.c",
        "c/intercept_veloc.c",
    ),
}
"""Each shared library built, and its C sources (relative to :data:`NATIVE_DIR`)."""

_CFLAGS = ("-std=c99", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra")
_LDLIBS = ("-lpthread", "-ldl")
DIGEST_FILE = ".sources-digest"


class BuildError(GreenckptError, RuntimeError):
    """The libraries could not be built; the message is one line saying why and what to do."""


def compiler(env: dict[str, str] | None = None) -> list[str]:
    """The C compiler command: ``$CC`` if set, else ``cc`` or ``gcc`` on the PATH."""
    env = dict(os.environ) if env is None else env
    if env.get("CC", "").strip():
        return shlex.split(env["CC"])
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return [found]
    raise BuildError(
        "no C compiler found (set CC, or install gcc: apt-get install gcc) to build libgreenckpt"
    )


def sources_digest() -> str:
    """A digest of every source and header, so a build can tell it is out of date."""
    h = hashlib.sha256()
    folders = [NATIVE_DIR / "c", NATIVE_DIR / "include"]
    for path in sorted([NATIVE_DIR / "build.py", *(f for d in folders for f in d.glob("*"))]):
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _pkg_config(include_dir: str) -> str:
    return (
        "# greenckpt's C phase API (greenckpt.h); written when the library was built\n"
        "libdir=${pcfiledir}\n"
        f"includedir={include_dir}\n\n"
        "Name: greenckpt\n"
        "Description: energy-aware checkpoint/restart: phase announcements to greenckpt run\n"
        "Version: 0.1.0\n"
        "Cflags: -I${includedir}\n"
        "Libs: -L${libdir} -Wl,-rpath,${libdir} "
        "-Wl,--push-state,--no-as-needed -lgreenckpt -Wl,--pop-state\n"
    )


def _compile(cc: list[str], out: Path, sources: tuple[str, ...]) -> None:
    cmd = [
        *cc,
        *_CFLAGS,
        f"-I{NATIVE_DIR / 'include'}",
        f"-Wl,-soname,{out.name}",
        "-o",
        str(out),
        *(str(NATIVE_DIR / s) for s in sources),
        *_LDLIBS,
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise BuildError(
            f"cannot run the C compiler {cc[0]}: {exc.strerror}; set CC to a C compiler"
        ) from None
    if done.returncode != 0:
        first = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr)
        raise BuildError(f"{cc[0]} failed building {out.name}: {' '.join(first.split())[:300]}")


def build_libraries(
    out_dir: Path, *, include_dir: str | None = None, cc: list[str] | None = None
) -> None:
    """Build every library of :data:`LIBRARIES` and ``greenckpt.pc`` into ``out_dir``.

    Each file is compiled beside its final name and renamed over it, so a process that has the
    old library loaded keeps it and a reader never sees half a file. ``include_dir``: the
    ``includedir`` written into the pkg-config file (default: this package's include folder).
    """
    cc = compiler() if cc is None else cc
    out_dir.mkdir(parents=True, exist_ok=True)
    include = str(NATIVE_DIR / "include") if include_dir is None else include_dir
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        for name, sources in LIBRARIES.items():
            _compile(cc, Path(tmp) / name, sources)
        (Path(tmp) / "greenckpt.pc").write_text(_pkg_config(include))
        (Path(tmp) / DIGEST_FILE).write_text(sources_digest() + "\n")
        for built in sorted(Path(tmp).iterdir(), key=lambda p: p.name == DIGEST_FILE):
            os.replace(built, out_dir / built.name)  # the digest last: it marks "complete"


SPANK_PLUGIN = "greenckpt_spank.so"
"""The Slurm plugin (docs/admin-guide.md), built only where Slurm's ``spank.h`` is."""
SPANK_SOURCE = "spank/greenckpt_spank.c"
_SPANK_HEADER_DIRS = ("/usr/include", "/usr/local/include", "/opt/slurm/include")


def spank_header(env: dict[str, str] | None = None) -> Path:
    """The folder holding ``slurm/spank.h`` (``$SLURM_INCLUDE_DIR`` first); BuildError
    naming the package that provides it when there is none."""
    env = dict(os.environ) if env is None else env
    given = env.get("SLURM_INCLUDE_DIR", "").strip()
    for folder in ([given] if given else []) + list(_SPANK_HEADER_DIRS):
        if (Path(folder) / "slurm" / "spank.h").is_file():
            return Path(folder)
    raise BuildError(
        "Slurm's spank.h was not found (install libslurm-dev, or slurm-wlm-plugins-dev, on "
        "Debian/Ubuntu; slurm-devel on RHEL; or set SLURM_INCLUDE_DIR to the folder holding "
        "slurm/spank.h) to build greenckpt_spank.so"
    )


def spank_digest() -> str:
    """A digest of the plugin's source and this file (a build knows it is out of date)."""
    h = hashlib.sha256()
    for path in (NATIVE_DIR / SPANK_SOURCE, NATIVE_DIR / "build.py"):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build_spank(out_dir: Path, *, cc: list[str] | None = None) -> Path:
    """Build the SPANK plugin into ``out_dir`` (compiled beside its name, renamed over it).

    No Slurm library is linked: the plugin's Slurm calls are resolved when ``slurmstepd``,
    ``srun``, ``sbatch`` or ``salloc`` load it. ``-Wall -Wextra`` as for the libraries."""
    cc = compiler() if cc is None else cc
    include = spank_header()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / SPANK_PLUGIN
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        built = Path(tmp) / SPANK_PLUGIN
        cmd = [
            *cc,
            "-std=gnu99",
            "-O2",
            "-fPIC",
            "-shared",
            "-Wall",
            "-Wextra",
            f"-I{include}",
            "-o",
            str(built),
            str(NATIVE_DIR / SPANK_SOURCE),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise BuildError(f"cannot run the C compiler {cc[0]}: {exc.strerror}") from None
        if done.returncode != 0:
            first = next((ln for ln in done.stderr.splitlines() if "error" in ln), done.stderr)
            raise BuildError(
                f"{cc[0]} failed building {SPANK_PLUGIN}: {' '.join(first.split())[:300]}"
            )
        (Path(tmp) / f"{SPANK_PLUGIN}.digest").write_text(spank_digest() + "\n")
        os.replace(built, target)
        os.replace(Path(tmp) / f"{SPANK_PLUGIN}.digest", out_dir / f"{SPANK_PLUGIN}.digest")
    return target
