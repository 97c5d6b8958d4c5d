"""Block compression for checkpoint and profile I/O: codec names, and the framed block format.

Why compression lives in the I/O engine: compressing trades CPU work for bytes moved, so its
cost depends on the CPU frequency and on how many processes compress at once — exactly what the
profiler sweeps (moran2018 section 5.5). The profile is only worth something if the checkpoint
library compresses through the same loop, so both use the worker's compressed path.

Codecs: ``zstd[:1-22]``, ``lz4`` and ``zlib[:0-9]`` (all C-backed); ``none`` is uncompressed.
Each block becomes one self-delimiting frame (an 8-byte header, then the payload, stored raw
when it does not shrink), so incompressible data barely grows and a reader needs only the
logical length. Integrity is not the frame's job: the checkpoint library checksums the stored
bytes. docs/design/measurement.md and docs/formats.md give the frame layout.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from greenckpt.errors import GreenckptError

__all__ = [
    "CODECS",
    "CODEC_LEVEL_RANGES",
    "FRAME_HEADER",
    "MAX_BLOCK",
    "BlockCodec",
    "CodecError",
    "CodecSpec",
    "parse_codec",
]

CODECS = ("zstd", "lz4", "zlib")
_LEVELS: dict[str, tuple[int, int, int] | None] = {
    "zstd": (1, 22, 3),
    "lz4": None,
    "zlib": (0, 9, 6),
}
"""Allowed level range and default per codec (``None``: the codec takes no level)."""
CODEC_LEVEL_RANGES: dict[str, tuple[int, int] | None] = {
    name: None if bounds is None else (bounds[0], bounds[1]) for name, bounds in _LEVELS.items()
}
"""Each codec's ``name:level`` range (``None``: no level), for configuration checks."""

FRAME_HEADER = struct.Struct("<II")
RAW_FLAG = 1 << 31
MAX_BLOCK = RAW_FLAG - 1
"""Largest block a frame can describe (lengths are 31-bit)."""


class CodecError(GreenckptError, ValueError):
    """A codec name is malformed or unknown, or a compressed stream is corrupt."""


@dataclass(frozen=True)
class CodecSpec:
    """A codec and its level (``None`` for the codec's default or a codec without levels)."""

    name: str
    level: int | None = None

    @property
    def effective_level(self) -> int | None:
        """The level actually used (the default when none was given)."""
        bounds = _LEVELS[self.name]
        if bounds is None:
            return None
        return self.level if self.level is not None else bounds[2]

    @property
    def label(self) -> str:
        """Canonical text form, e.g. ``zstd:3``, ``lz4`` (round-trips through parse_codec)."""
        level = self.effective_level
        return self.name if level is None else f"{self.name}:{level}"

    def __str__(self) -> str:
        return self.label


def parse_codec(text: str | CodecSpec | None) -> CodecSpec | None:
    """``"zstd"``, ``"zstd:5"``, ``"lz4"``, ``"zlib:9"`` → spec; ``None``/``"none"`` → None.

    Raises :class:`CodecError` with a one-line message naming what is valid.
    """
    if text is None or isinstance(text, CodecSpec):
        return text
    raw = text.strip().lower()
    if raw in ("", "none", "off"):
        return None
    name, sep, level_text = raw.partition(":")
    if name not in _LEVELS:
        raise CodecError(
            f"unknown codec {text!r}: use one of {', '.join(CODECS)} (or none), "
            "optionally with a level, e.g. zstd:3"
        )
    bounds = _LEVELS[name]
    if not sep:
        return CodecSpec(name)
    if bounds is None:
        raise CodecError(f"codec {name} takes no level: write {name!r}, not {text!r}")
    low, high, _ = bounds
    try:
        level = int(level_text)
    except ValueError:
        raise CodecError(
            f"codec level in {text!r} is not a whole number: use {name}:{low}..{name}:{high}"
        ) from None
    if not low <= level <= high:
        raise CodecError(f"{name} level {level} is out of range: use {low} to {high}")
    return CodecSpec(name, level)


class BlockCodec:
    """Compresses and decompresses single blocks as frames (see the module docstring).

    Not picklable on purpose: a worker builds its own from the :class:`CodecSpec` (compressor
    contexts hold C state). One instance per worker, reused for every block.
    """

    def __init__(self, spec: CodecSpec) -> None:
        self.spec = spec
        self._compress: Callable[[memoryview], bytes]
        self._decompress: Callable[[memoryview, int], bytes]
        level = spec.effective_level
        if spec.name == "zstd":
            import zstandard  # noqa: PLC0415 - a worker loads only the codec it uses

            cctx = zstandard.ZstdCompressor(level=level if level is not None else 3)
            dctx = zstandard.ZstdDecompressor()
            self._compress = cctx.compress
            self._decompress = lambda data, n: dctx.decompress(data, max_output_size=n)
        elif spec.name == "lz4":
            import lz4.block  # noqa: PLC0415 - a worker loads only the codec it uses

            self._compress = lambda data: lz4.block.compress(data, store_size=False)
            self._decompress = lambda data, n: lz4.block.decompress(data, uncompressed_size=n)
        else:
            zlevel = level if level is not None else 6
            self._compress = lambda data: zlib.compress(data, zlevel)
            self._decompress = lambda data, n: zlib.decompress(data, bufsize=max(n, 1))

    def encode(self, block: memoryview) -> tuple[bytes, memoryview | bytes]:
        """``(header, payload)`` of one frame; the payload is the block itself when stored raw
        (no copy), so the caller writes both with one ``pwritev``."""
        n = len(block)
        if n > MAX_BLOCK:
            raise CodecError(f"block of {n} B is larger than a frame holds ({MAX_BLOCK} B)")
        packed = self._compress(block)
        if len(packed) >= n:
            return FRAME_HEADER.pack(n | RAW_FLAG, n), block
        return FRAME_HEADER.pack(len(packed), n), packed

    def decode_header(
        self, header: bytes | bytearray | memoryview, where: str
    ) -> tuple[int, int, bool]:
        """``(stored_length, raw_length, raw)`` of a frame header, checked for sanity."""
        stored, raw_len = FRAME_HEADER.unpack(header)
        raw = bool(stored & RAW_FLAG)
        stored &= MAX_BLOCK
        if raw and stored != raw_len:
            raise CodecError(f"corrupt compressed stream at {where}: raw frame length mismatch")
        return stored, raw_len, raw

    def decode_payload(
        self, payload: memoryview, raw_len: int, raw: bool, where: str
    ) -> bytes | memoryview:
        """The block's logical bytes from a frame payload (a view of it when stored raw)."""
        if raw:
            return payload
        try:
            out = self._decompress(payload, raw_len)
        except Exception as exc:  # each library raises its own error type
            raise CodecError(f"corrupt compressed stream at {where}: {exc}") from exc
        if len(out) != raw_len:
            raise CodecError(
                f"corrupt compressed stream at {where}: frame gave {len(out)} B, "
                f"header says {raw_len} B"
            )
        return out
