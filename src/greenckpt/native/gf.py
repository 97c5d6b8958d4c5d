"""ctypes access to libgreenckpt_gf: all parity pieces of an erasure code in one pass (``c/gf.c``).

Why here: the library is built with the others, at install or by ``greenckpt config``
(:func:`greenckpt.native.library_dir`); the checkpoint library's erasure code
(:mod:`greenckpt.ckpt.redundancy.erasure`) calls :func:`encode` when it loads and keeps zfec
and NumPy as the fallback where it does not. Never built here: importing this module or
encoding runs no compiler (a job's every rank would, at its first level-3 checkpoint); where
the library is not built, the first encode warns once, in one line, that ``greenckpt config``
builds it.
"""

from __future__ import annotations

import ctypes
import functools
import warnings
from collections.abc import Sequence
from typing import Any

from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.native import built_library_dir
from greenckpt.native.build import BuildError

__all__ = ["LIBRARY", "available", "encode", "force_portable", "simd"]

LIBRARY = "libgreenckpt_gf.so"
NOT_BUILT = (
    f"greenckpt: {LIBRARY} is not built for this installation; level 3's parity is computed "
    "by zfec (the same bytes, slower): run `greenckpt config --lib-dir` once, where a C "
    "compiler is, to build it"
)
"""The one line warned (once per process) where the library is not built."""


def _python_api(name: str, restype: object, *argtypes: object) -> Any:
    """CPython's C function ``name``, typed, or None where there is none (not CPython)."""
    function = getattr(getattr(ctypes, "pythonapi", None), name, None)
    if function is not None:
        function.restype, function.argtypes = restype, argtypes
    return function


_NEW_BYTEARRAY = _python_api(
    "PyByteArray_FromStringAndSize", ctypes.py_object, ctypes.c_void_p, ctypes.c_ssize_t
)
"""A bytearray whose bytes are not initialised (given NULL): the parity's own buffers."""
_BYTEARRAY_AT = _python_api("PyByteArray_AsString", ctypes.c_void_p, ctypes.py_object)
"""Where a bytearray's bytes are, without exporting its buffer."""


@functools.cache
def _library() -> ctypes.CDLL | None:
    folder = built_library_dir()
    if folder is None:
        warnings.warn(NOT_BUILT, RuntimeWarning, stacklevel=4)
        return None
    try:
        lib = ctypes.CDLL(str(folder / LIBRARY))
    except OSError:
        return None
    vp, size = ctypes.c_void_p, ctypes.c_size_t
    lib.gce_encode.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.POINTER(vp),
                               ctypes.POINTER(size), ctypes.c_char_p, ctypes.POINTER(vp),
                               size)  # fmt: skip
    lib.gce_encode.restype = ctypes.c_int
    lib.gce_simd.argtypes = ()
    lib.gce_simd.restype = ctypes.c_int
    lib.gce_force_portable.argtypes = (ctypes.c_int,)
    lib.gce_force_portable.restype = None
    return lib


def available() -> bool:
    """Whether the library is built and loads (else the caller uses its fallback)."""
    return _library() is not None


def simd() -> str:
    """``avx2`` or ``portable``: the loop the library runs on this CPU."""
    lib = _library()
    return "avx2" if lib is not None and lib.gce_simd() == 2 else "portable"


def force_portable(on: bool) -> None:
    """Run the portable loop even on an AVX2 CPU (tests compare the two)."""
    lib = _library()
    if lib is not None:
        lib.gce_force_portable(int(on))


def _uninitialised(length: int) -> bytearray:
    """A new bytearray of ``length`` bytes that nothing writes first: :func:`encode` writes
    every byte, so zeroing it (``bytearray(length)``) would be one more pass over the parity."""
    if _NEW_BYTEARRAY is None:  # not CPython: the zeroed one
        return bytearray(length)
    made: bytearray = _NEW_BYTEARRAY(None, length)
    return made


def _address(buffer: bytearray | memoryview, what: str) -> tuple[int, object]:
    """Where a writable buffer's bytes are, and the ctypes view that must outlive the call."""
    if isinstance(buffer, bytearray) and _BYTEARRAY_AT is not None:
        return _BYTEARRAY_AT(buffer) or 0, None  # no buffer export: the caller may resize it
    try:
        view = (ctypes.c_char * len(memoryview(buffer).cast("B"))).from_buffer(buffer)
    except (TypeError, ValueError) as exc:
        raise InvalidValueError(
            f"encode: {what} is not a writable contiguous buffer: {exc}"
        ) from None
    return ctypes.addressof(view), view


def encode(
    addresses: Sequence[int],
    lengths: Sequence[int],
    tables: bytes,
    m: int,
    length: int,
    out: Sequence[bytearray | memoryview] | None = None,
) -> list[bytearray | memoryview]:
    """The m parity pieces ``sum_i c_ri * in_i`` (r < m) over GF(2^8), in one pass over the
    k inputs: input i at ``addresses[i]`` holds ``lengths[i]`` <= ``length`` bytes (zero
    beyond); ``tables`` are 32 bytes per (row, input), row by row (the products of c_ri with
    0..15 and with 0x00, 0x10, .., 0xf0). Written into ``out`` (m writable buffers of
    ``length`` bytes, returned) or into m new bytearrays that are not zeroed first: every
    byte is written once. The caller keeps the inputs alive."""
    lib = _library()
    if lib is None:
        raise BuildError(
            f"{LIBRARY} is not available (run `greenckpt config --lib-dir` to build it): "
            "use zfec instead"
        )
    k = len(addresses)
    if len(lengths) != k or len(tables) != 32 * k * m or m < 1:
        raise InvalidValueError(
            f"encode: {k} inputs and {m} rows need {k} lengths and {32 * k * m} table bytes"
        )
    outputs: list[bytearray | memoryview] = (
        [_uninitialised(length) for _ in range(m)] if out is None else list(out)
    )
    if len(outputs) != m:
        raise InvalidValueError(f"encode: {m} rows need {m} output buffers, got {len(outputs)}")
    located = [_address(o, f"output {r}") for r, o in enumerate(outputs)]
    if any(memoryview(o).nbytes != length for o in outputs):
        raise InvalidValueError(f"encode: every output must be {length} bytes")
    rc = lib.gce_encode(
        k,
        m,
        (ctypes.c_void_p * k)(*addresses),
        (ctypes.c_size_t * k)(*lengths),
        tables,
        (ctypes.c_void_p * m)(*[at for at, _ in located]),
        length,
    )
    del located  # the ctypes views: a bytearray may be resized once none holds it
    if rc == -2:
        raise GreenckptError(f"encode: no memory for the pointers of {k} inputs")
    if rc != 0:
        raise InvalidValueError(
            f"encode: an input is longer than the output ({length} bytes), or m={m} "
            "is not in 1..256"
        )
    return outputs
