"""Each write wave's ranks move onto the runtime's writer cores under a per-core split
(:mod:`greenckpt.ckpt.writer_cpu`), and back; a refused move is a warning, never a failure."""

from __future__ import annotations

import os
import warnings

import pytest

from greenckpt.ckpt import writer_cpu
from greenckpt.ckpt.writer_cpu import on_writer_cpus

ALL = os.sched_getaffinity(0)
FIRST = min(ALL)


def test_a_writer_runs_on_the_writer_cores_and_goes_back() -> None:
    with on_writer_cpus(0, (FIRST,)) as moved:
        assert moved
        assert os.sched_getaffinity(0) == {FIRST}
    assert os.sched_getaffinity(0) == ALL


def test_its_affinity_goes_back_when_the_write_raises() -> None:
    with pytest.raises(OSError, match="disk full"), on_writer_cpus(0, (FIRST,)):
        raise OSError("disk full")
    assert os.sched_getaffinity(0) == ALL


def test_no_split_leaves_the_rank_where_it_runs() -> None:
    with on_writer_cpus(0, ()) as moved:
        assert not moved
        assert os.sched_getaffinity(0) == ALL


def test_a_refused_move_writes_in_place_and_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_cpu, "_warned", False)
    absent = (max(ALL) + 4096,)  # no such CPU: sched_setaffinity refuses it (EINVAL)
    with (
        pytest.warns(RuntimeWarning, match=r"rank 3 could not move onto the writer CPUs"),
        on_writer_cpus(3, absent) as moved,
    ):
        assert not moved
        assert os.sched_getaffinity(0) == ALL
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        with on_writer_cpus(3, absent) as moved:
            assert not moved
