"""ctypes access to libgreenckpt_gf: one parity piece of an erasure code (see ``c/gf.c``).

Why here: the library is built with the others, at install or by ``greenckpt config``
(:func:`greenckpt.native.library_dir`); the checkpoint library's erasure code
(:mod:`greenckpt.ckpt.redundancy.erasure`) calls :func:`combine` when it loads and keeps zfec
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

from greenckpt.errors import InvalidValueError
from greenckpt.native import built_library_dir
from greenckpt.native.build import BuildError

__all__ = ["LIBRARY", "available", "combine", "force_portable", "simd"]

LIBRARY = "libgreenckpt_gf.so"
NOT_BUILT = (
    f"greenckpt: {LIBRARY} is not built for this installation; level 3's parity is computed "
    "by zfec (the same bytes, slower): run `greenckpt config --lib-dir` once, where a C "
    "compiler is, to build it"
)
"""The one line warned (once per process) where the library is not built."""


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
    lib.gce_combine.argtypes = (ctypes.c_int, ctypes.POINTER(vp), ctypes.POINTER(size),
                                ctypes.c_char_p, ctypes.c_char_p, vp, size)  # fmt: skip
    lib.gce_combine.restype = ctypes.c_int
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


def combine(
    addresses: Sequence[int], lengths: Sequence[int], tables: bytes, ones: bytes, length: int
) -> bytearray:
    """``sum_i c_i * in_i`` over GF(2^8) into a new buffer of ``length`` bytes: input i at
    ``addresses[i]`` holds ``lengths[i]`` <= ``length`` bytes (zero beyond); ``tables`` are
    32 bytes per input (the products of c_i with 0..15 and with 0x00, 0x10, .., 0xf0);
    ``ones[i]`` is 1 where c_i = 1 (a plain XOR). The caller keeps the inputs alive."""
    lib = _library()
    if lib is None:
        raise BuildError(
            f"{LIBRARY} is not available (run `greenckpt config --lib-dir` to build it): "
            "use zfec instead"
        )
    k = len(addresses)
    if len(lengths) != k or len(tables) != 32 * k or len(ones) != k:
        raise InvalidValueError(
            f"combine: {k} inputs need {k} lengths, {32 * k} table bytes and {k} flags"
        )
    out = bytearray(length)
    buffer = (ctypes.c_char * length).from_buffer(out) if length else None
    rc = lib.gce_combine(
        k,
        (ctypes.c_void_p * k)(*addresses),
        (ctypes.c_size_t * k)(*lengths),
        tables,
        ones,
        ctypes.addressof(buffer) if buffer is not None else None,
        length,
    )
    del buffer  # the bytearray may be resized again once no ctypes view holds it
    if rc != 0:
        raise InvalidValueError(f"combine: an input is longer than the output ({length} bytes)")
    return out
