"""greenckpt.io — the one parallel read/write engine used by both ``profile/`` and ``ckpt/``.

Why one engine: a profile predicts checkpoint time and energy only if the profiler measured
the same code path the checkpoints take (DESIGN.md). :func:`run_io` is saito2013's micro
benchmark (S bytes split among n processes, each moving its chunk sequentially, timed from a
common start, writes fsynced, reads past the page cache); :func:`run_chunks` is the executor
under it, which the checkpoint library drives with its own chunks
``(path, offset, length, source)`` and buffers (:class:`BufferSource`, no extra copy).

Example::

    from greenckpt.io import remove_files, run_io
    w = run_io("write", "/scratch/ckpt", total_bytes=2 << 30, workers=4, keep=True)
    r = run_io("read", "/scratch/ckpt", total_bytes=2 << 30, workers=4)
    remove_files(r.files)
    print(w.throughput, r.throughput, r.read_method)
"""

from __future__ import annotations

from greenckpt.io.codec import CODECS, CodecError, CodecSpec, parse_codec
from greenckpt.io.engine import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_TOTAL_BYTES,
    IOJobError,
    IOResult,
    Layout,
    ProcessResult,
    ReadMethodRequest,
    StartMethod,
    job_files,
    remove_files,
    run_chunks,
    run_io,
    split_sizes,
)
from greenckpt.io.sinks import BufferSink, ConcatSink, ConcatSource, DataSink, as_bytes_view
from greenckpt.io.sources import (
    DATA_KINDS,
    BufferSource,
    DataKind,
    DataSource,
    FieldSource,
    PatternSource,
    make_source,
)
from greenckpt.io.worker import Chunk, Fault, Op, ReadMethod, WorkerReport

__all__ = [
    "CODECS",
    "DATA_KINDS",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_TOTAL_BYTES",
    "BufferSink",
    "BufferSource",
    "Chunk",
    "CodecError",
    "CodecSpec",
    "ConcatSink",
    "ConcatSource",
    "DataKind",
    "DataSink",
    "DataSource",
    "Fault",
    "FieldSource",
    "IOJobError",
    "IOResult",
    "Layout",
    "Op",
    "PatternSource",
    "ProcessResult",
    "ReadMethod",
    "ReadMethodRequest",
    "StartMethod",
    "WorkerReport",
    "as_bytes_view",
    "job_files",
    "make_source",
    "parse_codec",
    "remove_files",
    "run_chunks",
    "run_io",
    "split_sizes",
]
