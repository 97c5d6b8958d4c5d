"""The names io/engine.py held before the issue-17 split still import from there.

Why a test: ``greenckpt.io.engine`` and the package ``greenckpt.io`` are what callers import;
splitting the engine into jobplan, pool and results must not change what they find.
"""

from __future__ import annotations

import pytest

from greenckpt import io
from greenckpt.io import engine, jobplan, pool, results


@pytest.mark.parametrize(
    ("home", "name"),
    [
        (jobplan, "split_sizes"),
        (jobplan, "job_files"),
        (jobplan, "remove_files"),
        (jobplan, "Layout"),
        (jobplan, "ReadMethodRequest"),
        (jobplan, "StartMethod"),
        (jobplan, "DEFAULT_BLOCK_SIZE"),
        (jobplan, "DEFAULT_TOTAL_BYTES"),
        (pool, "IOJobError"),
        (pool, "run_chunks"),
        (results, "IOResult"),
        (results, "ProcessResult"),
    ],
)
def test_engine_and_package_re_export_what_moved(home: object, name: str) -> None:
    assert getattr(engine, name) is getattr(home, name)
    assert getattr(io, name) is getattr(home, name)


def test_a_request_is_refused_before_anything_starts() -> None:
    """check_request refuses in the order run_io always did: op first."""
    with pytest.raises(ValueError, match="op must be"):
        jobplan.check_request("append", "bogus", "auto", "spawn", "x", "random", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a codec needs layout file_per_process"):
        jobplan.check_request("write", "shared_file", "auto", "spawn", "x", "random", "zlib")
