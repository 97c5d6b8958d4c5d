"""What the native libraries share is defined once (issue 28 item 5).

The phase kinds' number and names live in native/c/internal.h and must be Python's
(greenckpt.phases.WIRE_KINDS; the C order is greenckpt.h's GREENCKPT_CHECKPOINT (0) ..
GREENCKPT_COMPUTE (4), an ABI, which is not Python's: the native front takes its kinds from
Python in Python's order); the interposition wrappers' REAL macro lives in native/c/intercept.h, and
the first calls of a wrapped function from several threads at once look the real one up
without a data race (ThreadSanitizer) and print a missing function's line once.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from greenckpt.native import library_dir
from greenckpt.native.build import NATIVE_DIR
from greenckpt.phases import WIRE_KINDS

C_DIR = NATIVE_DIR / "c"
INCLUDE_DIR = NATIVE_DIR / "include"


def _sources() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(C_DIR.glob("*.[ch]"))}


def _defining(pattern: str) -> list[str]:
    regex = re.compile(rf"^\s*#\s*define\s+{pattern}\b", re.MULTILINE)
    return [name for name, text in _sources().items() if regex.search(text)]


def test_each_shared_macro_is_defined_in_exactly_one_internal_header() -> None:
    assert _defining("REAL") == ["intercept.h"]
    assert _defining("GC_NKINDS") == ["internal.h"]
    assert _defining("GC_KIND_NAMES") == ["internal.h"]
    # no library keeps a count of kinds of its own (GCI_KINDS, GCF_MAX_KINDS were such)
    assert _defining(r"\w*KINDS") == ["internal.h"]
    for name, text in _sources().items():
        if name != "internal.h":
            assert '"checkpoint", "restart"' not in text, f"{name} spells the kinds itself"


def test_the_c_kinds_are_pythons_wire_kinds() -> None:
    internal = (C_DIR / "internal.h").read_text()
    count = re.search(r"#define GC_NKINDS (\d+)", internal)
    names = re.search(r"#define GC_KIND_NAMES \{([^}]*)\}", internal)
    assert count is not None and names is not None
    assert int(count.group(1)) == len(WIRE_KINDS)
    c_kinds = re.findall(r'"(\w+)"', names.group(1))
    assert sorted(c_kinds) == sorted(WIRE_KINDS) and len(c_kinds) == len(WIRE_KINDS)
    public = (INCLUDE_DIR / "greenckpt.h").read_text()
    for index, kind in enumerate(c_kinds):
        assert re.search(rf"#define GREENCKPT_{kind.upper()} {index}\b", public), kind


def test_the_built_library_names_exactly_pythons_kinds() -> None:
    try:
        lib = ctypes.CDLL(str(library_dir() / "libgreenckpt.so"))
    except Exception as exc:  # no compiler here: the source checks above still ran
        pytest.skip(f"libgreenckpt cannot be built here: {exc}")
    lib.greenckpt_kind_name.argtypes = (ctypes.c_int,)
    lib.greenckpt_kind_name.restype = ctypes.c_char_p
    names = [lib.greenckpt_kind_name(k) for k in range(len(WIRE_KINDS) + 1)]
    assert names[-1] is None  # one past the last kind is unknown
    assert sorted(n.decode() for n in names[:-1]) == sorted(WIRE_KINDS)


# ---------------------------------------------------------------------- REAL's first call

_PROBES = 48
_THREADS = 4

_RACE_DRIVER = """
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "intercept.h"

#define GCI_FAMILY "test"
typedef pid_t (*getpid_fn)(void);
typedef int (*missing_fn)(void);

#define FOUND(i) \\
    static pid_t found##i(void) { REAL(getpid_fn, getpid); return real_ ? real_() : -1; }
#define MISSING(i) \\
    static int missing##i(void) { REAL(missing_fn, gc_no_such_function_##i); \\
                                  return real_ ? 1 : 0; }
%(defs)s
static pid_t (*const found[])(void) = {%(found)s};
static int (*const missing[])(void) = {%(missing)s};
static pthread_barrier_t barrier;
static int bad;

static void *run(void *arg) {
    int i;
    (void)arg;
    for (i = 0; i < %(n)d; ++i) {
        pthread_barrier_wait(&barrier);
        if (found[i]() != getpid()) __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
        pthread_barrier_wait(&barrier);
        if (missing[i]() != 0) __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(void) {
    pthread_t t[%(threads)d];
    int i;
    pthread_barrier_init(&barrier, NULL, %(threads)d);
    for (i = 0; i < %(threads)d; ++i) pthread_create(&t[i], NULL, run, NULL);
    for (i = 0; i < %(threads)d; ++i) pthread_join(t[i], NULL);
    printf("bad %%d\\n", bad);
    return 0;
}
"""


def _race_driver() -> str:
    n = _PROBES
    defs = "\n".join(f"FOUND({i})\nMISSING({i})" for i in range(n))
    return _RACE_DRIVER % {
        "defs": defs,
        "found": ", ".join(f"found{i}" for i in range(n)),
        "missing": ", ".join(f"missing{i}" for i in range(n)),
        "n": n,
        "threads": _THREADS,
    }


def test_first_calls_from_many_threads_race_on_nothing(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler on this machine")
    source = tmp_path / "race.c"
    source.write_text(_race_driver())
    exe = tmp_path / "race"
    sources = [C_DIR / n for n in ("intercept_common.c", "greenckpt.c", "json_line.c")]
    built = subprocess.run(
        [cc, "-std=c99", "-O1", "-g", "-fsanitize=thread", "-Wall", "-Wextra", "-Werror",
         f"-I{INCLUDE_DIR}", f"-I{C_DIR}", str(source), *map(str, sources),
         "-o", str(exe), "-lpthread", "-ldl"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if built.returncode != 0:
        if "sanitize" in built.stderr or "tsan" in built.stderr:
            pytest.skip(f"no ThreadSanitizer here: {built.stderr.strip()[:200]}")
        raise AssertionError(built.stderr)
    done = subprocess.run(
        [str(exe)], capture_output=True, text=True, check=False, timeout=120,
        env={"PATH": "/usr/bin:/bin", "TSAN_OPTIONS": "halt_on_error=0 exitcode=66"},
    )  # fmt: skip
    if "FATAL: ThreadSanitizer" in done.stderr:  # e.g. an address-space layout it refuses
        pytest.skip(f"ThreadSanitizer cannot run here: {done.stderr.strip()[:200]}")
    assert "WARNING: ThreadSanitizer" not in done.stderr, done.stderr[:4000]
    assert done.returncode == 0 and done.stdout == "bad 0\n"
    # one line for each missing function, however many threads made its first call
    for i in range(_PROBES):
        assert done.stderr.count(f"gc_no_such_function_{i} is not in") == 1, done.stderr
