"""Erasure coding for the level-3 checkpoint (L3): a lost member's data rebuilt from the others.

Level 3 protects a group of G members against the loss of up to t of them without a full
second copy of anybody's data (FTI's Reed–Solomon L3, RAID-5-like XOR for t = 1). This module
holds the two pure pieces of that level — :class:`ErasureCode` (a systematic (k, m) code:
``"xor"`` or ``"reed-solomon"`` through ``zfec``) and :class:`GroupLayout` (rotating parity:
one piece of every stripe on every member) — with no MPI and no file I/O, so they are tested
alone. The layout, a worked example and the memory bound: docs/design/checkpointer.md.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, NamedTuple, TypeAlias

import numpy as np
import zfec

from greenckpt.errors import GreenckptError
from greenckpt.native import gf as native_gf

__all__ = [
    "MAX_RS_PIECES",
    "Buffer",
    "ErasureCode",
    "ErasureError",
    "GroupLayout",
    "Scheme",
    "Stripe",
]

Buffer: TypeAlias = bytes | bytearray | memoryview | np.ndarray[Any, Any]
"""Anything holding a piece's bytes: C-contiguous buffers; NumPy arrays are read as raw bytes."""

Scheme: TypeAlias = Literal["xor", "reed-solomon"]

MAX_RS_PIECES = 256
"""zfec's Reed–Solomon works in GF(2⁸): at most 256 pieces (k + m) per code."""

_SCHEMES: tuple[Scheme, ...] = ("xor", "reed-solomon")


class ErasureError(GreenckptError, ValueError):
    """A code, a layout or a set of pieces that cannot work; the message says what would."""


# --------------------------------------------------------------------------- byte views


def _byte_view(buf: Buffer, what: str) -> memoryview:
    """A flat, zero-copy ``uint8`` view of ``buf`` (NumPy arrays of any dtype as raw bytes)."""
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise ErasureError(
                f"{what} is a non-contiguous array; pass numpy.ascontiguousarray(...) instead"
            )
        return buf.reshape(-1).view(np.uint8).data
    try:
        view = memoryview(buf)
    except TypeError:
        raise ErasureError(
            f"{what} is a {type(buf).__name__}; pass bytes, bytearray, memoryview or a NumPy array"
        ) from None
    if not view.c_contiguous:
        raise ErasureError(f"{what} is a non-contiguous buffer; pass a contiguous copy instead")
    if view.ndim == 1 and view.format == "B":
        return view
    return view.cast("B")


def _as_bytes(original: Buffer, view: memoryview) -> bytes:
    """``bytes`` of a piece, reusing ``original`` when it already is exactly that."""
    if type(original) is bytes:
        return original
    return view.tobytes()


def _u8(view: memoryview) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.frombuffer(view, dtype=np.uint8)


def _xor_into(acc: np.ndarray[Any, np.dtype[np.uint8]], view: memoryview) -> None:
    """``acc[:len(view)] ^= view`` in place, eight bytes at a time where both are aligned."""
    n = len(view)
    if n == 0:
        return
    src = _u8(view)
    head = n - n % 8
    if head and src.ctypes.data % 8 == 0 and acc.ctypes.data % 8 == 0:
        acc64 = acc[:head].view(np.uint64)
        np.bitwise_xor(acc64, src[:head].view(np.uint64), out=acc64)
        tail = acc[head:n]
        np.bitwise_xor(tail, src[head:], out=tail)
    else:
        part = acc[:n]
        np.bitwise_xor(part, src, out=part)


def _padded(view: memoryview, length: int) -> memoryview | bytearray:
    """``view`` zero-padded to ``length`` (copied only when it is shorter): zfec wants equal."""
    if len(view) == length:
        return view
    out = bytearray(length)
    out[: len(view)] = view
    return out


@lru_cache(maxsize=64)
def _rs_encoder(k: int, n: int) -> Any:
    # Building the coding matrix costs more than coding one small segment: share it.
    return zfec.Encoder(k, n)


@lru_cache(maxsize=64)
def _rs_decoder(k: int, n: int) -> Any:
    return zfec.Decoder(k, n)


_ONE = bytes(range(16)) + bytes(range(0, 256, 16))
"""The native encoder's tables of the coefficient 1 (x -> x): XOR parity."""


@lru_cache(maxsize=256)
def _row_tables(k: int, n: int, rows: tuple[int, ...]) -> bytes:
    """Parity rows ``rows`` (k..n-1) of zfec's (k, n) code as the native encoder takes them:
    row by row, per data piece, the products of its coefficient with 0..15 and 0x00, 0x10, ..,
    0xf0 (32 bytes). Read off zfec itself (piece i = 0..255, the others 0), so the native
    parity is zfec's byte for byte."""
    ramp, zero = bytes(range(256)), bytes(256)
    columns = [
        _rs_encoder(k, n).encode(tuple(ramp if j == i else zero for j in range(k)), rows)
        for i in range(k)
    ]
    return b"".join(c[r][:16] + c[r][0:256:16] for r in range(len(rows)) for c in columns)


def _native_parity(
    views: Sequence[memoryview],
    length: int,
    tables: bytes,
    m: int,
    out: memoryview | None = None,
) -> list[Any]:
    """The m parity pieces by libgreenckpt_gf in one pass over the data (shorter pieces count
    as zero-padded), as new bytearrays that are written once, never zeroed first, or (one
    piece) into ``out``."""
    arrays = [_u8(v) for v in views]  # zero-copy; kept alive through the call
    return native_gf.encode(
        [a.ctypes.data for a in arrays],
        [len(v) for v in views],
        tables,
        m,
        length,
        None if out is None else [out],
    )


# --------------------------------------------------------------------------- the code


class ErasureCode:
    """A systematic (k, m) erasure code: k data pieces, m parity pieces, any k rebuild all.

    Piece indices 0..k-1 are the data pieces and k..k+m-1 the parity pieces. ``scheme`` defaults
    to ``"xor"`` for m = 1 and ``"reed-solomon"`` otherwise; both give the same guarantees for
    m = 1, XOR is just cheaper.
    """

    __slots__ = ("_k", "_m", "_scheme")

    def __init__(self, k: int, m: int = 1, scheme: Scheme | None = None) -> None:
        k = _count(k, "k (data pieces)")
        m = _count(m, "m (parity pieces)")
        if scheme is None:
            scheme = "xor" if m == 1 else "reed-solomon"
        if scheme not in _SCHEMES:
            raise ErasureError(f"unknown scheme {scheme!r}; use 'xor' or 'reed-solomon'")
        if scheme == "xor" and m != 1:
            raise ErasureError(
                f"XOR parity tolerates one lost piece, not m={m}; use scheme='reed-solomon'"
            )
        if scheme == "reed-solomon" and k + m > MAX_RS_PIECES:
            raise ErasureError(
                f"Reed–Solomon (zfec) codes at most {MAX_RS_PIECES} pieces but k+m={k}+{m}="
                f"{k + m}; use smaller groups"
            )
        self._k = k
        self._m = m
        self._scheme: Scheme = scheme

    @property
    def k(self) -> int:
        """Number of data pieces (and of pieces needed to rebuild them)."""
        return self._k

    @property
    def m(self) -> int:
        """Number of parity pieces = number of lost pieces tolerated."""
        return self._m

    @property
    def scheme(self) -> Scheme:
        return self._scheme

    @property
    def n(self) -> int:
        """Total number of pieces, k + m."""
        return self._k + self._m

    def __repr__(self) -> str:
        return f"ErasureCode(k={self._k}, m={self._m}, scheme={self._scheme!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ErasureCode):
            return NotImplemented
        return (self._k, self._m, self._scheme) == (other._k, other._m, other._scheme)

    def __hash__(self) -> int:
        return hash((self._k, self._m, self._scheme))

    # ------------------------------------------------------------------ encode

    def encode(
        self,
        data: Sequence[Buffer],
        only: int | None = None,
        into: bytearray | memoryview | None = None,
    ) -> list[Any]:
        """The m parity pieces of ``data`` (k pieces), each as long as the longest data piece;
        with ``only`` = j, just parity piece j (a list of one: a member that stores one
        parity piece of a stripe computes only that one). With ``only`` and ``into`` (a
        writable buffer at least that long), the piece is written at the start of ``into``
        and the list holds a view of it: no new buffer per piece (the level-3 writer hands
        its aligned buffer, which the native encoder fills in place)."""
        if into is not None and only is None:
            raise ErasureError("encode writes into a buffer only one parity piece (give only=)")
        if only is not None and not 0 <= only < self._m:
            raise ErasureError(
                f"parity piece {only} does not exist in a ({self._k}+{self._m}) code"
            )
        if isinstance(data, bytes | bytearray | memoryview | np.ndarray):
            raise ErasureError(
                f"encode takes a sequence of {self._k} data pieces, not one buffer; "
                "wrap it in a list"
            )
        if len(data) != self._k:
            raise ErasureError(
                f"expected {self._k} data pieces for a ({self._k}+{self._m}) code, got {len(data)}"
            )
        views = [_byte_view(piece, f"data piece {i}") for i, piece in enumerate(data)]
        length = max(len(v) for v in views)
        if length == 0:
            return [b""] * (self._m if only is None else 1)
        out = None if into is None else memoryview(into).cast("B")[:length]
        if out is not None and len(out) < length:
            raise ErasureError(f"a {len(out)}-byte buffer cannot hold a {length}-byte piece")
        if native_gf.available():  # libgreenckpt_gf: zfec's parity at memory speed
            rows = tuple(range(self._k, self.n)) if only is None else (self._k + only,)
            return _native_parity(views, length, self._tables(rows), len(rows), out)
        if out is not None:
            (piece,) = self.encode(data, only)
            out[:] = piece
            return [out]
        if self._scheme == "xor":
            acc = np.zeros(length, dtype=np.uint8)
            for view in views:
                _xor_into(acc, view)
            return [acc.tobytes()]
        blocks = tuple(_padded(v, length) for v in views)
        wanted = tuple(range(self._k, self.n)) if only is None else (self._k + only,)
        parity: list[bytes] = _rs_encoder(self._k, self.n).encode(blocks, wanted)
        return list(parity)

    def _tables(self, rows: tuple[int, ...]) -> bytes:
        """The native encoder's tables of parity rows ``rows`` (XOR: every coefficient 1)."""
        if self._scheme == "xor":
            return _ONE * self._k
        return _row_tables(self._k, self.n, rows)

    # ------------------------------------------------------------------ decode

    def decode(self, present: Mapping[int, Buffer], lengths: Sequence[int]) -> list[bytes]:
        """All k data pieces, with their true ``lengths``, from any k of the k + m pieces.

        ``present`` maps piece index (0..k-1 data, k..k+m-1 parity) to its bytes; pieces not in
        it are lost. Data pieces must have their true length and parity pieces the length of the
        longest data piece, as :meth:`encode` made them.
        """
        k, n = self._k, self.n
        if len(lengths) != k:
            raise ErasureError(f"expected {k} data lengths, got {len(lengths)}")
        sizes = [_count(length, f"length of data piece {i}", 0) for i, length in enumerate(lengths)]
        longest = max(sizes)
        views: dict[int, memoryview] = {}
        originals: dict[int, Buffer] = {}
        for key, piece in present.items():
            index = _index(key)
            if not 0 <= index < n:
                raise ErasureError(
                    f"piece index {index} is out of range: a ({k}+{self._m}) code has pieces "
                    f"0..{n - 1} (data 0..{k - 1}, parity {k}..{n - 1})"
                )
            view = _byte_view(piece, f"piece {index}")
            if index < k and len(view) != sizes[index]:
                raise ErasureError(
                    f"data piece {index} is {len(view)} bytes but its length is given as "
                    f"{sizes[index]}"
                )
            if index >= k and len(view) != longest:
                raise ErasureError(
                    f"parity piece {index} is {len(view)} bytes but the longest data piece is "
                    f"{longest} bytes; parity must be as long as the longest data piece"
                )
            views[index] = view
            originals[index] = piece
        lost = n - len(views)
        if lost > self._m:
            raise ErasureError(
                f"cannot rebuild: {lost} of {n} pieces lost but the code tolerates {self._m} "
                f"(need any {k} of {n})"
            )
        missing = [i for i in range(k) if i not in views]
        out: list[bytes] = [
            b"" if i in missing else _as_bytes(originals[i], views[i]) for i in range(k)
        ]
        if not missing or longest == 0:
            return out
        if self._scheme == "xor":
            (gone,) = missing
            acc = _u8(views[k]).copy()
            for i in range(k):
                if i != gone:
                    _xor_into(acc, views[i])
            out[gone] = acc[: sizes[gone]].tobytes()
            return out
        # Any k pieces do; prefer data pieces (no arithmetic for them), then parity in order.
        chosen = [i for i in range(k) if i in views]
        chosen += [i for i in range(k, n) if i in views][: k - len(chosen)]
        blocks = tuple(_padded(views[i], longest) for i in chosen)
        decoded: list[bytes] = _rs_decoder(k, n).decode(blocks, tuple(chosen))
        for i in missing:
            out[i] = bytes(decoded[i][: sizes[i]])
        return out


def _index(key: object) -> int:
    try:
        return operator.index(key)  # type: ignore[arg-type]
    except TypeError:
        raise ErasureError(f"piece index {key!r} is not an integer") from None


def _count(value: object, what: str, minimum: int = 1) -> int:
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ErasureError(f"{what} must be an integer, got {value!r}") from None
    if number < minimum:
        raise ErasureError(f"{what} must be at least {minimum}, got {number}")
    return number


# --------------------------------------------------------------------------- the group layout


class Stripe(NamedTuple):
    """Who is in one stripe: its data members (code positions 0..k-1) and parity members."""

    data: tuple[int, ...]
    parity: tuple[int, ...]


@dataclass(frozen=True)
class GroupLayout:
    """Rotating placement of data and parity pieces in a group of ``members`` (G) members that
    survives the loss of any ``tolerance`` (t) of them; see the module docstring."""

    members: int
    tolerance: int = 1

    def __post_init__(self) -> None:
        members = _count(self.members, "group size G", 2)
        tolerance = _count(self.tolerance, "tolerance t")
        if tolerance >= members:
            raise ErasureError(
                f"a group of {members} members tolerates at most {members - 1} lost, not "
                f"{tolerance}; use a larger group or a smaller tolerance"
            )

    @property
    def data_per_stripe(self) -> int:
        """k = G − t: pieces of data per stripe, and pieces each member's data is cut into."""
        return self.members - self.tolerance

    def code(self, scheme: Scheme | None = None) -> ErasureCode:
        """The (G − t, t) code every stripe uses (XOR for t = 1 unless told otherwise)."""
        return ErasureCode(self.data_per_stripe, self.tolerance, scheme)

    def stripes(self) -> range:
        return range(self.members)

    def stripe(self, stripe: int) -> Stripe:
        """Data members in ascending order, then parity members s, s+1, …, s+t-1 (mod G)."""
        s = self._stripe(stripe)
        g, t = self.members, self.tolerance
        parity = tuple((s + j) % g for j in range(t))
        data = tuple(sorted((s + j) % g for j in range(t, g)))
        return Stripe(data, parity)

    def piece_of(self, member: int, stripe: int) -> int | None:
        """Which piece of ``member``'s data goes into ``stripe``; None where it holds parity."""
        i, s = self._member(member), self._stripe(stripe)
        if (i - s) % self.members < self.tolerance:
            return None
        return (s - i - 1) % self.members

    def stripe_of(self, member: int, piece_index: int) -> int:
        """The stripe that piece ``piece_index`` of ``member``'s data belongs to."""
        return (self._member(member) + 1 + self._piece(piece_index)) % self.members

    def parity_stripes(self, member: int) -> tuple[int, ...]:
        """The stripes whose parity ``member`` stores, ascending (its parity pieces' order)."""
        i = self._member(member)
        return tuple(sorted((i - j) % self.members for j in range(self.tolerance)))

    def piece_size(self, max_length: int) -> int:
        """Bytes per data piece, ``ceil(max_length / (G − t))`` for the group's longest data."""
        return -(-_count(max_length, "max_length", 0) // self.data_per_stripe)

    def piece_range(self, member_length: int, piece_index: int, piece_size: int) -> tuple[int, int]:
        """(offset, length) of a piece in a member's data; shorter or empty past its end."""
        length = _count(member_length, "member_length", 0)
        size = _count(piece_size, "piece_size", 0)
        start = min(self._piece(piece_index) * size, length)
        return start, min(size, length - start)

    def stripe_lengths(self, lengths: Sequence[int], stripe: int) -> list[int]:
        """The stripe's data piece lengths in code order, from all G members' data lengths."""
        sizes = self._lengths(lengths)
        size = self.piece_size(max(sizes))
        s = self._stripe(stripe)
        out = []
        for member in self.stripe(s).data:
            piece = self.piece_of(member, s)
            assert piece is not None
            out.append(self.piece_range(sizes[member], piece, size)[1])
        return out

    def _lengths(self, lengths: Sequence[int]) -> list[int]:
        if len(lengths) != self.members:
            raise ErasureError(f"expected {self.members} member lengths, got {len(lengths)}")
        return [_count(n, f"length of member {i}", 0) for i, n in enumerate(lengths)]

    def _member(self, member: int) -> int:
        i = _index(member)
        if not 0 <= i < self.members:
            raise ErasureError(
                f"member {i} is out of range: the group has members 0..{self.members - 1}"
            )
        return i

    def _stripe(self, stripe: int) -> int:
        s = _index(stripe)
        if not 0 <= s < self.members:
            raise ErasureError(
                f"stripe {s} is out of range: the group has stripes 0..{self.members - 1}"
            )
        return s

    def _piece(self, piece_index: int) -> int:
        p = _index(piece_index)
        if not 0 <= p < self.data_per_stripe:
            raise ErasureError(
                f"piece {p} is out of range: each member's data has pieces "
                f"0..{self.data_per_stripe - 1}"
            )
        return p
