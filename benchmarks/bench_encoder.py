"""Reed–Solomon encode throughput per core: greenckpt's native encoder vs zfec and Intel ISA-L.

Run: ``python benchmarks/bench_encoder.py [--size 64MiB] [--codes 4+2,8+2,8+4] [--repeats 7]
[--warmup 1] [--isal-matrix zfec|cauchy] [--cpu N] [--no-install] [--json PATH]``.
Not a test: nothing here asserts a time; it prints each encoder's GB/s and native/ISA-L (the
median of per-round paired ratios) against the 0.8 target of issue 32 item 3.

Why: level 3 computes its parity with ``libgreenckpt_gf`` (``native/c/gf.c``, nibble tables and
AVX2 shuffles, ISA-L's method) so that encoding costs about what moving the bytes costs; ISA-L's
``ec_encode_data`` is the reference for how fast GF(2^8) encoding runs on one core, zfec is the
fallback the native encoder replaces.

Method. One buffer of S random bytes (``--size``) is cut into k pieces of S/k bytes (rounded
down to 64 B) for every (k, m); all three encoders get those same pieces and make the m parity
pieces, one thread each (all are single-threaded; ``--cpu N`` pins the process):

* **native** — ``ErasureCode(k, m, "reed-solomon").encode(pieces)``, the entry point level 3
  calls: when the library is built it runs ``gce_encode`` once for all m parity rows (one pass
  over the data, up to 6 rows in AVX2 registers) into m new bytearrays that are not zeroed
  first, asking for huge pages under outputs of 4 MiB or more (as NumPy does for the arrays
  ISA-L gets below);
* **zfec** — ``zfec.Encoder(k, k + m).encode(pieces, parity indices)`` (installed with pip
  here if missing);
* **ISA-L** — ``ec_init_tables`` once, then ``ec_encode_data`` through ctypes (Debian's
  ``libisal-dev``, installed with ``apt-get`` here if ``libisal.so`` is missing and we are root),
  into m freshly allocated output arrays per call, as the other two return new buffers. Its
  coefficients are zfec's (``--isal-matrix zfec``, the default: read off zfec, both use the
  polynomial 0x11d) so its parity can be compared byte for byte with the native one, or
  ``gf_gen_cauchy1_matrix``'s (``cauchy``; the speed does not depend on the values).
  ``ec_encode_data`` dispatches to ISA-L's best code for the CPU (AVX-512 where present); the
  row **ISA-L avx2** (``ec_encode_data_avx2``, the native loop's instruction set) is extra,
  for information: the verdict is on ``ec_encode_data``.

Coefficient tables and encoder objects are built before the clock starts (the project caches
them too). The first ``--warmup`` rounds are not counted; then ``--repeats`` rounds, each
running every (k, m) with every encoder in an order that rotates between rounds. GB/s counts
the data bytes in (k x piece bytes; parity out is not counted), 1 GB = 1e9 B, over the wall
time of one encode call; ``cpu/wall`` is the thread's CPU time over it (below 1: the core was
taken by something else). Each cell is the median with its min–max; native/ISA-L is the median
of each round's native figure over the same round's ISA-L figure. Before timing, the parity is
checked: native = zfec byte for byte, greenckpt's decoder rebuilds the data from the native
parity with the first m data pieces lost, ISA-L's parity = native's (same matrix) and ISA-L's
own decode (``gf_invert_matrix``) rebuilds the data from ISA-L's parity.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import datetime
import glob
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

import greenckpt
from greenckpt.units import UnitError, format_size, parse_size

TARGET = 0.8
"""native/ISA-L wanted (issue 32 item 3)."""
ENCODERS = ("native", "zfec", "isal", "isal-avx2")
LABELS = {"native": "native", "zfec": "zfec", "isal": "ISA-L", "isal-avx2": "ISA-L avx2"}
ISAL_FUNCTIONS = {"isal": "ec_encode_data", "isal-avx2": "ec_encode_data_avx2"}
"""ISA-L's dispatcher (its best code for this CPU: AVX-512 where present) and its AVX2 code,
the instruction set of the native loop (an extra row, for information: the verdict is on
``ec_encode_data``)."""
ALIGN = 64
INSTALL_TIMEOUT_S = 600.0
ROOT = Path(__file__).resolve().parent.parent

U8 = np.ndarray[Any, np.dtype[np.uint8]]
Encode = Callable[[Sequence[U8]], Sequence[Any]]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


# --------------------------------------------------------------------------- finding the encoders


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = (proc.stderr.strip() or proc.stdout.strip() or "(no output)").splitlines()
    return lines[-1]


def load_zfec(install: bool, installed: list[str]) -> tuple[Any | None, str]:
    """zfec's module, installed into this Python with pip if missing (then named in
    ``installed``); else None and why."""
    try:
        return importlib.import_module("zfec"), ""
    except ImportError:
        pass
    if not install:
        return None, "zfec is not installed (--no-install)"
    cmd = [sys.executable, "-m", "pip", "install", "zfec"]
    print(f"zfec is not installed: installing it into {sys.prefix} ({' '.join(cmd)})", flush=True)
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"pip install zfec failed: {exc}"
    if proc.returncode != 0:
        return None, f"pip install zfec failed: {_last_line(proc)}"
    importlib.invalidate_caches()
    installed.append("zfec")
    try:
        return importlib.import_module("zfec"), ""
    except ImportError as exc:
        return None, f"zfec installed but does not import: {exc}"


def _find_isal() -> str | None:
    name = ctypes.util.find_library("isal")
    if name:
        return name
    for pattern in (
        "/usr/lib/*/libisal.so*",
        "/usr/lib/libisal.so*",
        "/usr/local/lib*/libisal.so*",
    ):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    return None


def _apt_install() -> str:
    """``apt-get install -y libisal-dev`` (after ``apt-get update`` if the first try fails);
    "" when it worked, else why not."""
    if shutil.which("apt-get") is None:
        return "libisal.so not found and there is no apt-get to install libisal-dev"
    if os.geteuid() != 0:
        return "libisal.so not found; installing libisal-dev with apt-get needs root"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "libisal-dev"]
    print(f"libisal.so not found: installing ISA-L ({' '.join(install)})", flush=True)
    try:
        proc = subprocess.run(
            install, capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S, check=False
        )
        if proc.returncode != 0:
            print("  that failed; running apt-get update and trying again", flush=True)
            subprocess.run(
                ["apt-get", "update"],
                capture_output=True,
                text=True,
                env=env,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
            proc = subprocess.run(
                install,
                capture_output=True,
                text=True,
                env=env,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"apt-get install libisal-dev failed: {exc}"
    if proc.returncode != 0:
        return f"apt-get install libisal-dev failed: {_last_line(proc)}"
    return ""


def load_isal(install: bool, installed: list[str]) -> tuple[ctypes.CDLL | None, str]:
    """ISA-L's shared library with the functions used typed (installed with apt-get if missing,
    then named in ``installed``), or None and why."""
    path = _find_isal()
    if path is None:
        if not install:
            return None, "libisal.so not found (--no-install)"
        why = _apt_install()
        if why:
            return None, why
        installed.append("isal")
        path = _find_isal()
        if path is None:
            return None, "libisal-dev installed but libisal.so is still not found"
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        return None, f"{path} does not load: {exc}"
    vp, i = ctypes.c_void_p, ctypes.c_int
    lib.ec_init_tables.argtypes = (i, i, vp, vp)
    lib.ec_init_tables.restype = None
    for name in ISAL_FUNCTIONS.values():
        if hasattr(lib, name):
            getattr(lib, name).argtypes = (i, i, i, vp, ctypes.POINTER(vp), ctypes.POINTER(vp))
            getattr(lib, name).restype = None
    lib.gf_gen_cauchy1_matrix.argtypes = (vp, i, i)
    lib.gf_gen_cauchy1_matrix.restype = None
    lib.gf_invert_matrix.argtypes = (vp, vp, i)
    lib.gf_invert_matrix.restype = i
    return lib, ""


def package_version(*names: str) -> str:
    """The Debian package version of the first of ``names`` installed, else 'unknown'."""
    for name in names:
        try:
            proc = subprocess.run(
                ["dpkg-query", "-W", "-f=${Version}", name],
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError:
            break
        if proc.returncode == 0 and proc.stdout.strip():
            return f"{name} {proc.stdout.strip()}"
    return "unknown"


# --------------------------------------------------------------------------- the encoders


def zfec_matrix(zfec: Any, k: int, m: int) -> U8:
    """zfec's (k + m) x k encoding matrix (identity on top), read off zfec: piece i = b"\\x01"
    and the others zero give column i of the parity rows."""
    matrix = np.zeros((k + m, k), dtype=np.uint8)
    matrix[:k] = np.eye(k, dtype=np.uint8)
    encoder = zfec.Encoder(k, k + m)
    for i in range(k):
        blocks = tuple(b"\x01" if j == i else b"\x00" for j in range(k))
        products = encoder.encode(blocks, tuple(range(k, k + m)))
        matrix[k:, i] = [p[0] for p in products]
    return matrix


def cauchy_matrix(lib: ctypes.CDLL, k: int, m: int) -> U8:
    matrix = np.zeros((k + m, k), dtype=np.uint8)
    lib.gf_gen_cauchy1_matrix(matrix.ctypes.data, k + m, k)
    return matrix


def _pointers(arrays: Sequence[U8]) -> ctypes.Array[ctypes.c_void_p]:
    return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])


def isal_apply(lib: ctypes.CDLL, rows: U8, inputs: Sequence[U8], length: int) -> list[U8]:
    """``rows`` (r x k coefficients) times the k ``inputs`` by ``ec_encode_data``: r new arrays."""
    r, k = rows.shape
    coefficients = np.ascontiguousarray(rows)
    tables = np.empty(32 * k * r, dtype=np.uint8)
    lib.ec_init_tables(k, r, coefficients.ctypes.data, tables.ctypes.data)
    out = [np.empty(length, dtype=np.uint8) for _ in range(r)]
    lib.ec_encode_data(length, k, r, tables.ctypes.data, _pointers(inputs), _pointers(out))
    return out


class IsalEncoder:
    """ISA-L's encode with its tables made once (as the native encoder caches its own): each
    call writes the m parity pieces into m freshly allocated arrays."""

    def __init__(
        self, lib: ctypes.CDLL, matrix: U8, k: int, m: int, function: str = "ec_encode_data"
    ) -> None:
        self._encode, self._k, self._m = getattr(lib, function), k, m
        parity = np.ascontiguousarray(matrix[k:])
        self._tables = np.empty(32 * k * m, dtype=np.uint8)
        lib.ec_init_tables(k, m, parity.ctypes.data, self._tables.ctypes.data)

    def __call__(self, pieces: Sequence[U8]) -> list[U8]:
        length = len(pieces[0])
        out = [np.empty(length, dtype=np.uint8) for _ in range(self._m)]
        self._encode(
            length, self._k, self._m, self._tables.ctypes.data, _pointers(pieces), _pointers(out)
        )
        return out


def isal_decode(lib: ctypes.CDLL, matrix: U8, pieces: dict[int, U8], k: int) -> dict[int, U8]:
    """The lost data pieces rebuilt by ISA-L from any k of ``pieces`` (index -> bytes)."""
    chosen = sorted(pieces)[:k]
    square = np.ascontiguousarray(matrix[chosen])
    inverse = np.zeros_like(square)
    if lib.gf_invert_matrix(square.ctypes.data, inverse.ctypes.data, k) != 0:
        raise RuntimeError(f"gf_invert_matrix: rows {chosen} are singular")
    lost = [i for i in range(k) if i not in pieces]
    length = len(pieces[chosen[0]])
    out = isal_apply(lib, inverse[lost], [pieces[i] for i in chosen], length)
    return dict(zip(lost, out, strict=True))


# --------------------------------------------------------------------------- setting up


@dataclass
class Encoders:
    """What this run can use: zfec's module, ISA-L's library, and why one is missing."""

    zfec: Any | None
    isal: ctypes.CDLL | None
    why: dict[str, str]
    isal_matrix: str
    versions: dict[str, str]


def find_encoders(install: bool, isal_matrix: str) -> Encoders:
    why: dict[str, str] = {}
    installed: list[str] = []
    zfec, reason = load_zfec(install, installed)
    if zfec is None:
        why["zfec"] = reason
        why["native"] = f"greenckpt's erasure module imports zfec: {reason}"
    else:
        gf = importlib.import_module("greenckpt.native.gf")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            built = gf.available()
        if not built:
            said = str(caught[0].message) if caught else "libgreenckpt_gf does not load"
            why["native"] = f"{said} (encode would fall back to zfec)"
    isal, reason = load_isal(install, installed)
    if isal is None:
        why["isal"] = why["isal-avx2"] = reason
    elif not hasattr(isal, "ec_encode_data_avx2"):
        why["isal-avx2"] = "this libisal exports no ec_encode_data_avx2"
    elif "avx2" not in machine()["simd"]:
        why["isal-avx2"] = "this CPU has no AVX2"
    versions = {
        "greenckpt": f"{greenckpt.__version__} ({git_commit()})",
        "native": "not available"
        if "native" in why
        else f"libgreenckpt_gf, {importlib.import_module('greenckpt.native.gf').simd()} loop",
        "zfec": getattr(zfec, "__version__", "unknown") if zfec is not None else "not available",
        "isal": package_version("libisal-dev", "libisal2") if isal is not None else "not available",
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    for name in installed:
        versions[name] += " (installed by this run)"
    return Encoders(zfec, isal, why, isal_matrix, versions)


def git_commit() -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return "no git"
    return proc.stdout.strip() if proc.returncode == 0 else "no git"


@dataclass
class Code:
    """One (k, m) case: its pieces, its encoders (or why one is missing) and its samples."""

    k: int
    m: int
    pieces: list[U8]
    encoders: dict[str, Encode] = field(default_factory=dict)
    matrix: U8 | None = None
    same_matrix: bool = False
    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.k}+{self.m}"

    @property
    def data_bytes(self) -> int:
        return self.k * len(self.pieces[0])


def make_code(k: int, m: int, data: U8, found: Encoders) -> Code:
    """The (k, m) case over the first k x (len(data) / k, rounded down to 64 B) bytes."""
    size = len(data) // k // ALIGN * ALIGN
    code = Code(k, m, [data[i * size : (i + 1) * size] for i in range(k)])
    if "native" not in found.why:
        erasure = importlib.import_module("greenckpt.ckpt.redundancy.erasure")
        code.encoders["native"] = erasure.ErasureCode(k, m, "reed-solomon").encode
    if found.zfec is not None:
        encoder = found.zfec.Encoder(k, k + m)
        wanted = tuple(range(k, k + m))
        code.encoders["zfec"] = lambda pieces: encoder.encode(tuple(pieces), wanted)
    if found.isal is not None:
        if found.isal_matrix == "zfec" and found.zfec is not None:
            code.matrix = zfec_matrix(found.zfec, k, m)
            code.same_matrix = True
        else:
            code.matrix = cauchy_matrix(found.isal, k, m)
        for name, function in ISAL_FUNCTIONS.items():
            if name not in found.why:
                code.encoders[name] = IsalEncoder(found.isal, code.matrix, k, m, function)
    return code


# --------------------------------------------------------------------------- checking the parity


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(np.frombuffer(x, dtype=np.uint8), np.frombuffer(y, dtype=np.uint8))
        for x, y in zip(a, b, strict=True)
    )


def check(code: Code, found: Encoders) -> list[tuple[str, bool]]:
    """Encode once with each encoder and check the parity; (what, passed) per check."""
    k, m, pieces = code.k, code.m, code.pieces
    out = {name: list(encode(pieces)) for name, encode in code.encoders.items()}
    lost = min(m, k)
    gone = f"data pieces 0..{lost - 1} lost"
    checks: list[tuple[str, bool]] = []
    if "native" in out and "zfec" in out:
        checks.append(("native parity = zfec's, byte for byte", _same(out["native"], out["zfec"])))
    if "native" in out:
        erasure = importlib.import_module("greenckpt.ckpt.redundancy.erasure")
        present: dict[int, Any] = {i: pieces[i] for i in range(lost, k)}
        present.update({k + j: p for j, p in enumerate(out["native"])})
        lengths = [len(p) for p in pieces]
        decoded = erasure.ErasureCode(k, m, "reed-solomon").decode(present, lengths)
        checks.append(
            (f"greenckpt's decoder rebuilds from native parity ({gone})", _same(decoded, pieces))
        )
    for name in ("isal", "isal-avx2"):
        if name not in out or found.isal is None or code.matrix is None:
            continue
        label = LABELS[name]
        if "native" in out and code.same_matrix:
            same = _same(out[name], out["native"])
            checks.append((f"{label} parity = native's, byte for byte", same))
        present = {i: pieces[i] for i in range(lost, k)}
        present.update({k + j: p for j, p in enumerate(out[name])})
        rebuilt = isal_decode(found.isal, code.matrix, present, k)
        same = _same([rebuilt[i] for i in range(lost)], pieces[:lost])
        checks.append((f"ISA-L's decode rebuilds from {label} parity ({gone})", same))
    return checks


# --------------------------------------------------------------------------- measuring


def timed(encode: Encode, pieces: Sequence[U8]) -> tuple[float, float]:
    """Wall and thread-CPU seconds of one encode (freeing its output is not timed)."""
    cpu0 = time.thread_time()
    wall0 = time.perf_counter()
    out = encode(pieces)
    wall = time.perf_counter() - wall0
    cpu = time.thread_time() - cpu0
    del out
    return wall, cpu


def measure(codes: Sequence[Code], warmup: int, repeats: int) -> None:
    """Warm-up rounds, then interleaved rounds rotating the encoder order; samples kept."""
    for rep in range(-warmup, repeats):
        for ci, code in enumerate(codes):
            names = list(code.encoders)
            if not names:
                continue
            shift = (rep + ci) % len(names)
            for name in names[shift:] + names[:shift]:
                wall, cpu = timed(code.encoders[name], code.pieces)
                if rep >= 0:
                    code.wall.setdefault(name, []).append(wall)
                    code.cpu.setdefault(name, []).append(cpu)


def gbps(code: Code, name: str) -> list[float]:
    return [code.data_bytes / s / 1e9 for s in code.wall.get(name, [])]


def paired(code: Code, a: str, b: str) -> list[float]:
    """a/b of each round: both ran seconds apart, so a drift of the machine divides out."""
    return [x / y for x, y in zip(gbps(code, a), gbps(code, b), strict=True)]


def summary(code: Code, found: Encoders) -> dict[str, Any]:
    out: dict[str, Any] = {"k": code.k, "m": code.m, "data_bytes": code.data_bytes}
    for name in ENCODERS:
        if name not in code.encoders:
            out[name] = {"available": False, "reason": found.why.get(name, "")}
            continue
        rates = gbps(code, name)
        shares = [c / w for c, w in zip(code.cpu[name], code.wall[name], strict=True)]
        out[name] = {
            "available": True,
            "gbps": rates,
            "median_gbps": statistics.median(rates),
            "min_gbps": min(rates),
            "max_gbps": max(rates),
            "cpu_over_wall": statistics.median(shares),
        }
    for a, b in (("native", "isal"), ("native", "isal-avx2"), ("native", "zfec")):
        if a in code.encoders and b in code.encoders:
            ratios = paired(code, a, b)
            out[f"{a}/{b}"] = {
                "per_round": ratios,
                "median": statistics.median(ratios),
                "min": min(ratios),
                "max": max(ratios),
            }
    return out


# --------------------------------------------------------------------------- printing


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        pass
    simd = [x for x in ("avx2", "avx512bw", "gfni") if f" {x}" in flags]
    return {
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "simd": simd,
    }


def print_table(results: Sequence[dict[str, Any]]) -> None:
    print(f"{'(k, m)':<8}{'encoder':<12}{'GB/s':>7}  {'min-max':<12}{'cpu/wall':>9}")
    for res in results:
        for i, name in enumerate(ENCODERS):
            cell = res[name]
            label = f"{res['k']}+{res['m']}" if i == 0 else ""
            if not cell["available"]:
                print(f"{label:<8}{LABELS[name]:<12}{'':>7}  not available: {cell['reason']}")
                continue
            span = f"{cell['min_gbps']:.2f}-{cell['max_gbps']:.2f}"
            print(
                f"{label:<8}{LABELS[name]:<12}{cell['median_gbps']:>7.2f}  {span:<12}"
                f"{cell['cpu_over_wall']:>9.2f}"
            )
    print()
    print(f"native / ISA-L (median of per-round ratios, min-max), target >= {TARGET}:")
    for res in results:
        ratio = res.get("native/isal")
        if ratio is None:
            print(f"  {res['k']}+{res['m']}: not measured (native or ISA-L not available)")
            continue
        verdict = "meets" if ratio["median"] >= TARGET else "BELOW"
        others = [
            f"native / {LABELS[b]} {res[f'native/{b}']['median']:.2f}"
            for b in ("isal-avx2", "zfec")
            if f"native/{b}" in res
        ]
        vs_others = f"; {', '.join(others)}" if others else ""
        print(
            f"  {res['k']}+{res['m']}: {ratio['median']:.2f} ({ratio['min']:.2f}-"
            f"{ratio['max']:.2f}) {verdict} {TARGET}x{vs_others}"
        )


# --------------------------------------------------------------------------- main


def parse_codes(text: str) -> list[tuple[int, int]]:
    codes = []
    for part in text.split(","):
        k, plus, m = part.strip().partition("+")
        if not plus or not k.isdigit() or not m.isdigit() or int(k) < 1 or int(m) < 1:
            raise ValueError(f"{part!r} is not k+m (e.g. 8+2)")
        if int(k) + int(m) > 256:
            raise ValueError(f"{part!r}: GF(2^8) codes have at most 256 pieces")
        codes.append((int(k), int(m)))
    return codes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(
        prog="bench_encoder.py",
        description="Reed-Solomon encode GB/s per core: greenckpt's native encoder, zfec, ISA-L.",
    )
    parser.add_argument("--size", default="64MiB", help="data bytes per encode (default 64MiB)")
    parser.add_argument(
        "--codes", default="4+2,8+2,8+4", help="comma-separated k+m (default 4+2,8+2,8+4)"
    )
    parser.add_argument("--repeats", type=int, default=7, help="counted rounds (default 7)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted rounds (default 1)")
    parser.add_argument(
        "--isal-matrix",
        choices=("zfec", "cauchy"),
        default="zfec",
        help="ISA-L's coefficients: zfec's (default; parity compared with the native "
        "encoder's) or gf_gen_cauchy1_matrix's",
    )
    parser.add_argument("--cpu", type=int, default=None, help="pin the process to this CPU")
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="do not pip-install zfec or apt-get install libisal-dev where missing",
    )
    parser.add_argument("--seed", type=int, default=0, help="random data seed (default 0)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write results here")
    args = parser.parse_args(argv)
    try:
        args.size_bytes = int(parse_size(args.size))
        args.code_list = parse_codes(args.codes)
    except (UnitError, TypeError, ValueError) as exc:
        parser.error(f"{exc}")
    if args.size_bytes < ALIGN * max(k for k, _ in args.code_list):
        parser.error(f"--size {args.size} is below {ALIGN} B per data piece")
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be >= 1 and --warmup >= 0")
    if args.cpu is not None and args.cpu not in os.sched_getaffinity(0):
        parser.error(f"--cpu {args.cpu} is not one of {sorted(os.sched_getaffinity(0))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    found = find_encoders(not args.no_install, args.isal_matrix)
    info = machine()
    date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    v = found.versions
    print(
        f"machine: {info['host']}, {info['cpu']}, {info['cpus']} CPUs "
        f"({', '.join(info['simd']) or 'no AVX2'}), Linux {info['kernel']}; {date}"
    )
    print(
        f"versions: greenckpt {v['greenckpt']}, native {v['native']}, zfec {v['zfec']}, "
        f"ISA-L {v['isal']}, NumPy {v['numpy']}, Python {v['python']}"
    )
    pinned = f"pinned to CPU {args.cpu}" if args.cpu is not None else "not pinned (--cpu N)"
    print(
        f"one thread per encoder, {pinned}; {args.warmup} uncounted warm-up round(s), then "
        f"{args.repeats} rounds rotating the encoder order; ISA-L matrix: {args.isal_matrix}"
    )
    print(
        "ISA-L: ec_encode_data (dispatched to ISA-L's best code for this CPU) and, for "
        "information, ec_encode_data_avx2 (row 'ISA-L avx2': the native loop's instruction set);"
        " outputs freshly allocated per call, as native and zfec return new buffers"
    )
    print(
        f"GB/s = data bytes in (k pieces of {format_size(args.size_bytes)}/k, parity out not "
        "counted) / wall seconds of one encode call, 1 GB = 1e9 B"
    )
    print(f"load average at start (1/5/15 min): {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sys.stdout.flush()

    data: U8 = np.random.default_rng(args.seed).integers(0, 256, args.size_bytes, dtype=np.uint8)
    codes = [make_code(k, m, data, found) for k, m in args.code_list]
    checks: dict[str, list[tuple[str, bool]]] = {}
    print("checks:")
    for code in codes:
        checks[code.name] = check(code, found)
        for what, passed in checks[code.name]:
            print(f"  {code.name}: {what}: {'ok' if passed else 'FAILED'}")
        if found.isal is not None and not code.same_matrix:
            print(f"  {code.name}: ISA-L uses another generator matrix: parity not compared")
    sys.stdout.flush()

    measure(codes, args.warmup, args.repeats)
    results = [summary(code, found) for code in codes]
    print()
    print_table(results)
    print(f"load average at end (1/5/15 min): {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    failed = [f"{name}: {what}" for name, items in checks.items() for what, ok in items if not ok]
    if args.json:
        doc = {
            "date": date,
            "machine": info,
            "versions": v,
            "args": {
                "size_bytes": args.size_bytes,
                "codes": args.codes,
                "repeats": args.repeats,
                "warmup": args.warmup,
                "isal_matrix": args.isal_matrix,
                "cpu": args.cpu,
                "seed": args.seed,
            },
            "gbps_counts": "data bytes in (k x piece bytes), 1e9 B per GB, per wall second",
            "target_native_over_isal": TARGET,
            "checks": {n: [{"check": w, "ok": ok} for w, ok in c] for n, c in checks.items()},
            "results": results,
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"results written to {args.json}")
    if failed:
        print(f"parity checks FAILED: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
