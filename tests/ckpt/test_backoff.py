"""Issue 18 item 6: no retry storm after a failed checkpoint.

A level that cannot be written (full disk, read-only directory) must not be asked for again at
every iteration: ``need_checkpoint`` holds it back for a growing delay counted from the failed
attempt, says so once, and meanwhile sends due checkpoints to the next level that can still be
written. Each case states the exact iterations (or fake-clock times) of every attempt.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.ckpt import api
from greenckpt.ckpt.api import Checkpointer, CheckpointError


def make(tmp_path: Path, **kw: object) -> Checkpointer:
    (tmp_path / "l").mkdir(exist_ok=True)
    (tmp_path / "g").mkdir(exist_ok=True)
    settings: dict[str, object] = {
        "local_dir": str(tmp_path / "l"),
        "global_dir": str(tmp_path / "g"),
        "keep": 2,
    }
    settings.update(kw)
    ck = Checkpointer(**settings)  # type: ignore[arg-type]
    ck.protect("u", np.arange(1000.0))
    return ck


def failing_under(monkeypatch: pytest.MonkeyPatch, directory: Path) -> Callable[[], None]:
    """Make every checkpoint write below ``directory`` fail with ENOSPC; returns the undo."""
    real = api.run_chunks

    def run_chunks(op: str, assignments: Any, **kw: Any) -> Any:
        if op == "write" and any(
            c.path.startswith(str(directory)) for chunks in assignments for c in chunks
        ):
            raise OSError(28, "No space left on device")
        return real(op, assignments, **kw)

    monkeypatch.setattr(api, "run_chunks", run_chunks)
    return lambda: monkeypatch.setattr(api, "run_chunks", real)


def drive(ck: Checkpointer, iterations: range) -> tuple[list[int], list[tuple[int, int]]]:
    """Run the usual loop; the iterations of failed attempts and the (iteration, level) of
    committed checkpoints."""
    failed: list[int] = []
    done: list[tuple[int, int]] = []
    for it in iterations:
        level = ck.need_checkpoint(it)
        if level is None:
            continue
        try:
            ck.checkpoint(level, iteration=it)
        except CheckpointError:
            failed.append(it)
        else:
            done.append((it, level))
    return failed, done


def backing_off(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "Backing off" in str(w.message)]


def test_a_failing_level_is_retried_after_a_doubling_delay_not_every_iteration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Level 1 every 2 iterations on a full disk, nothing else to fall through to: attempts
    at 2, then 2, 4, 8, 16 (capped at 8 intervals) iterations after each failure — 6 in 60
    iterations instead of 59 — and one warning. Once writable again, the next attempt
    succeeds, the back-off ends and the schedule is the plain one again."""
    ck = make(tmp_path, l1={"every": "2it"}, global_dir=None)
    undo = failing_under(monkeypatch, tmp_path / "l")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        failed, done = drive(ck, range(1, 61))
    assert failed == [2, 4, 8, 16, 32, 48]
    assert done == []
    held = ck.backoff[1]
    assert (held.failures, held.iteration, held.delay_iterations) == (6, 48, 16)
    assert "No space left on device" in held.reason
    (message,) = backing_off(caught)
    assert "level-1 (node-local) checkpoint failed" in message
    assert "offered again after 2 iterations (from iteration 2)" in message
    assert "no other level can be written" in message

    undo()
    failed, done = drive(ck, range(61, 71))
    assert failed == [] and done == [(64, 1), (66, 1), (68, 1), (70, 1)]
    assert ck.backoff == {}


def test_a_held_back_level_falls_through_to_the_next_higher_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Level 1 (every 2 iterations) fails, level 4 (every 100) works: level 1 is retried at
    2, 4, 8, 16; the checkpoints it misses meanwhile are taken at level 4 and count for level
    1's schedule, so level 4 does not take one at every iteration either."""
    ck = make(tmp_path, l1={"every": "2it"}, l4={"every": "100it"})
    failing_under(monkeypatch, tmp_path / "l")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        failed, done = drive(ck, range(1, 21))
    assert failed == [2, 4, 8, 16]
    assert done == [(i, 4) for i in (3, 5, 6, 9, 10, 12, 14, 17, 18, 20)]
    (message,) = backing_off(caught)
    assert "go to level 4 (global file system), the next higher level" in message


def test_a_held_back_level_falls_through_to_a_lower_one_when_none_is_higher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Level 4 (every 2 iterations) fails and level 1 takes explicit checkpoints only: level
    1 stands in, and its checkpoints count for level 4's schedule (a lower level does not
    serve a higher one by itself), so level 1 is not asked for at every iteration."""
    ck = make(tmp_path, l1={"enabled": True}, l4={"every": "2it"})
    failing_under(monkeypatch, tmp_path / "g")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        failed, done = drive(ck, range(1, 13))
    assert failed == [2, 4, 8]
    assert done == [(i, 1) for i in (3, 5, 6, 9, 10, 12)]
    (message,) = backing_off(caught)
    assert "the next lower level that can be written (no higher one can)" in message


def test_a_failing_stand_in_is_held_back_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both levels fail: the stand-in is held back after its own failure, and then nothing
    is offered until a delay is over (no storm at either level)."""
    ck = make(tmp_path, l1={"every": "2it"}, l4={"every": "100it"})
    failing_under(monkeypatch, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        failed, _ = drive(ck, range(1, 21))
    # 2: level 1 fails; 3: level 4 stands in and fails (its own interval: 100 iterations);
    # 4, 8, 16: level 1 again
    assert failed == [2, 3, 4, 8, 16]
    assert set(ck.backoff) == {1, 4} and ck.backoff[4].delay_iterations == 100
    assert len(backing_off(caught)) == 2  # once per level


def test_timed_levels_back_off_in_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every 10 s on a fake clock: after a failure at t = 10 the level is not due at t = 15
    (it was due at every call before the fix) and is tried at t = 20, then 20 s later."""
    now = [0.0]
    monkeypatch.setattr(api.time, "monotonic", lambda: now[0])
    ck = make(tmp_path, l1={"every": "10s"}, global_dir=None)
    failing_under(monkeypatch, tmp_path / "l")
    tried = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for t in (5, 10, 15, 19, 20, 25, 30, 39, 40):
            now[0] = float(t)
            if ck.need_checkpoint() is not None:
                tried.append(t)
                with pytest.raises(CheckpointError):
                    ck.checkpoint(1)
    assert tried == [10, 20, 40]
    assert ck.backoff[1].delay_s == 40.0


def test_explicit_checkpoints_are_never_refused_and_a_success_ends_the_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck = make(tmp_path, l1={"every": "5it"}, global_dir=None)
    undo = failing_under(monkeypatch, tmp_path / "l")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert drive(ck, range(1, 7))[0] == [5]
        with pytest.raises(CheckpointError):
            ck.checkpoint(1, iteration=7)  # asked for explicitly: attempted
    assert ck.backoff[1].failures == 2
    undo()
    assert ck.checkpoint(1, iteration=8).id == 3
    assert ck.backoff == {}
    assert drive(ck, range(9, 16)) == ([], [(10, 1), (15, 1)])
