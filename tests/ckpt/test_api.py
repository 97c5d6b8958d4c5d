"""The Checkpointer in one process, on the real disk: round trips, fallbacks, failures.

Every case states its outcome: restored from which checkpoint, or which one-line error.
Multi-rank behaviour (agreement, node loss) is in ``test_mpi.py``.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.ckpt import api, flush
from greenckpt.ckpt.api import Checkpointer, CheckpointError, RecoveryError, RecoveryInfo
from greenckpt.ckpt.hooks import PhaseAdvice
from greenckpt.ckpt.inject import flip_bits_in_buffer
from greenckpt.ckpt.protect import Protected
from greenckpt.ckpt.store import StoreError

ROOT = Path(__file__).resolve().parents[2]


def make(tmp_path: Path, **kw: object) -> tuple[Checkpointer, np.ndarray, bytearray]:
    settings: dict[str, object] = {"local_dir": str(tmp_path), "keep": 2}
    settings.update(kw)
    ck = Checkpointer(**settings)  # type: ignore[arg-type]
    u = np.zeros((64, 50))
    raw = bytearray(1000)
    ck.protect("u", u)
    ck.protect("raw", raw)
    return ck, u, raw


def fill(u: np.ndarray, raw: bytearray, it: int) -> None:
    u[:] = np.arange(u.size).reshape(u.shape) + it
    raw[:] = bytes([it % 256]) * len(raw)


def committed(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "greenckpt").glob("ckpt-*"))


@pytest.mark.parametrize("codec", [None, "zstd:1", "lz4", "zlib"])
def test_round_trip_restores_arrays_in_place_and_state(tmp_path: Path, codec: str | None) -> None:
    ck, u, raw = make(tmp_path, l1={"codec": codec} if codec else {})
    assert ck.recover() is None  # a first run: nothing to restore
    for it in (1, 2, 3):
        fill(u, raw, it)
        ck.state["it"] = it
        info = ck.checkpoint(iteration=it)
        assert info.level == 1 and info.logical_bytes > u.nbytes + len(raw)
        if codec:
            assert info.stored_bytes < info.logical_bytes  # an arange compresses
    ck.finalize()
    assert committed(tmp_path) == ["ckpt-00000002", "ckpt-00000003"]  # keep = 2

    ck2, u2, raw2 = make(tmp_path, l1={"codec": codec} if codec else {})
    rec = ck2.recover()
    assert rec is not None and (rec.id, rec.level, rec.iteration, rec.skipped) == (3, 1, 3, ())
    want_u, want_raw = np.zeros_like(u), bytearray(len(raw))
    fill(want_u, want_raw, 3)
    np.testing.assert_array_equal(u2, want_u)
    assert raw2 == want_raw and ck2.state == {"it": 3}
    assert ck2.checkpoint(iteration=4).id == 4  # ids continue after a restart


def test_corrupt_newest_falls_back_to_the_previous(tmp_path: Path) -> None:
    ck, u, raw = make(tmp_path)
    for it in (1, 2):
        fill(u, raw, it)
        ck.state["it"] = it
        ck.checkpoint(iteration=it)
    f = tmp_path / "greenckpt" / "ckpt-00000002" / "rank-000000.data"
    data = bytearray(f.read_bytes())
    data[100] ^= 1
    f.write_bytes(data)
    ck2, u2, _ = make(tmp_path)
    rec = ck2.recover()
    assert rec is not None and rec.id == 1 and ck2.state == {"it": 1}
    assert "digest does not match" in rec.skipped[0] and "checkpoint 2" in rec.skipped[0]
    want = np.zeros_like(u)
    fill(want, bytearray(1000), 1)
    np.testing.assert_array_equal(u2, want)


def test_truncated_manifest_falls_back(tmp_path: Path) -> None:
    ck, _, _ = make(tmp_path)
    ck.checkpoint(iteration=1)
    ck.checkpoint(iteration=2)
    m = tmp_path / "greenckpt" / "ckpt-00000002" / "manifest.json"
    m.write_text(m.read_text()[:40])
    rec = make(tmp_path)[0].recover()
    assert rec is not None and rec.id == 1 and "truncated or not JSON" in rec.skipped[0]


def test_changed_shape_is_a_clear_error(tmp_path: Path) -> None:
    ck, _, _ = make(tmp_path)
    ck.checkpoint(iteration=1)
    ck2 = Checkpointer(local_dir=str(tmp_path))
    ck2.protect("u", np.zeros((32, 50)))
    ck2.protect("raw", bytearray(1000))
    with pytest.raises(RecoveryError, match=r"u was <f8 of shape \(64, 50\) at checkpoint"):
        ck2.recover()


def test_failed_write_commits_nothing_and_keeps_the_previous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck, u, raw = make(tmp_path)
    fill(u, raw, 1)
    ck.state["it"] = 1
    ck.checkpoint(iteration=1)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(api, "run_chunks", full)
    fill(u, raw, 2)
    with pytest.raises(CheckpointError, match="No space left on device; nothing was committed"):
        ck.checkpoint(iteration=2)
    monkeypatch.undo()
    assert committed(tmp_path) == ["ckpt-00000001"]
    assert not list((tmp_path / "greenckpt").glob(".*"))  # no staging left
    rec = make(tmp_path)[0].recover()
    assert rec is not None and rec.id == 1


def test_bad_configuration_fails_before_anything(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Checkpointer(local_dir=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"level 2 \(partner copy\) needs at least 2 nodes"):
        Checkpointer(local_dir=str(tmp_path), l2={"every": "10it"})
    with pytest.raises(ValueError, match=r"level 3 needs more than parity = 1 ranks"):
        Checkpointer(local_dir=str(tmp_path), l3={"every": "10it"})
    ck, _, _ = make(tmp_path)
    with pytest.raises(ValueError, match="level 4 is not enabled"):
        ck.checkpoint(4)
    with pytest.raises(ValueError, match="protect a NumPy array or a buffer"):
        ck.protect("x", 3.5)
    assert not (tmp_path / "greenckpt").exists() or committed(tmp_path) == []


def test_need_checkpoint_by_iterations_and_seconds(tmp_path: Path) -> None:
    ck, _, _ = make(tmp_path, l1={"every": "3it"})
    due = [it for it in range(1, 10) if ck.need_checkpoint(it) and ck.checkpoint(iteration=it)]
    assert due == [3, 6, 9]
    with pytest.raises(ValueError, match="pass the iteration"):
        ck.need_checkpoint()
    (tmp_path / "s").mkdir()
    ck2, _, _ = make(tmp_path / "s", l1={"every": "50ms"})
    assert ck2.need_checkpoint() is None
    time.sleep(0.06)
    assert ck2.need_checkpoint() == 1


def test_auto_interval_uses_the_measured_checkpoint_time(tmp_path: Path) -> None:
    ck, _, _ = make(tmp_path, l1={"every": "auto"}, mtbf="1h")
    assert ck.need_checkpoint() == 1  # nothing measured yet: checkpoint to measure
    info = ck.checkpoint()
    assert ck.need_checkpoint() is None  # Young/Daly-like interval of minutes for ms checkpoints
    assert 10 * info.seconds < ck._schedule.auto_interval(1) < 3600


def test_global_level_serves_when_local_is_lost(tmp_path: Path) -> None:
    (tmp_path / "l").mkdir()
    (tmp_path / "g").mkdir()
    kw = {"local_dir": str(tmp_path / "l"), "global_dir": str(tmp_path / "g")}
    ck, u, raw = make(tmp_path, l1={"enabled": True}, l4={"enabled": True}, **kw)
    fill(u, raw, 1)
    ck.checkpoint(4, iteration=1)
    fill(u, raw, 2)
    ck.checkpoint(1, iteration=2)
    shutil.rmtree(tmp_path / "l" / "greenckpt")
    ck2, u2, _ = make(tmp_path, l1={"enabled": True}, l4={"enabled": True}, **kw)
    rec = ck2.recover()
    assert rec is not None and (rec.id, rec.level, rec.iteration) == (1, 4, 1)
    want = np.zeros_like(u2)
    fill(want, bytearray(1000), 1)
    np.testing.assert_array_equal(u2, want)


KILLER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from greenckpt.ckpt.api import Checkpointer
    ck = Checkpointer(local_dir=sys.argv[1], keep=2)
    u = np.zeros(1 << 19)
    ck.protect("u", u)
    rec = ck.recover()
    it = ck.state.get("it", 0)
    while True:
        it += 1
        u[:] = it
        ck.state["it"] = it
        info = ck.checkpoint(iteration=it)
        print(info.id, it, flush=True)
    """
)


def test_kill_9_during_checkpoints_never_loses_the_previous(tmp_path: Path) -> None:
    """50 times: SIGKILL a process that checkpoints 4 MiB in a loop at a random moment; the
    restart must find a checkpoint at least as new as the last one reported committed, with
    data exactly as at that iteration."""
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    data = tmp_path / "data"
    data.mkdir()
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for trial in range(50):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(data)], stdout=subprocess.PIPE, text=True, env=env
        )
        assert proc.stdout is not None
        last = 0
        for _ in range(rng.randint(1, 4)):
            line = proc.stdout.readline()
            if line:
                last = int(line.split()[0])
        time.sleep(rng.random() * 0.03)  # somewhere inside the next checkpoint
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        ck = Checkpointer(local_dir=str(data), keep=2)
        u = np.zeros(1 << 19)
        ck.protect("u", u)
        rec = ck.recover()
        assert rec is not None, f"trial {trial}: nothing recovered"
        assert rec.id >= last and rec.skipped == ()
        assert np.all(u == ck.state["it"]), f"trial {trial}: data of another iteration"


def test_iteration_schedule_is_the_same_after_a_restart(tmp_path: Path) -> None:
    """Levels every 10 and 50 iterations checkpoint on multiples (the higher level when both
    are due), and a run restarted from iteration 110 keeps exactly that schedule."""
    (tmp_path / "g").mkdir()

    def run(first: int, last: int) -> list[tuple[int, int]]:
        ck, _, _ = make(
            tmp_path, global_dir=str(tmp_path / "g"), l1={"every": "10it"}, l4={"every": "50it"}
        )
        rec = ck.recover()
        assert (rec.iteration if rec else 0) == first - 1
        done = []
        for it in range(first, last + 1):
            if (level := ck.need_checkpoint(it)) is not None:
                ck.checkpoint(level, iteration=it)
                done.append((it, level))
        ck.finalize()
        return done

    schedule = run(1, 110)
    assert schedule == [(i, 4 if i % 50 == 0 else 1) for i in range(10, 111, 10)]
    assert run(111, 160) == [(120, 1), (130, 1), (140, 1), (150, 4), (160, 1)]


def _async(tmp_path: Path, **kw: object) -> tuple[Checkpointer, np.ndarray, bytearray]:
    (tmp_path / "g").mkdir(exist_ok=True)
    return make(
        tmp_path,
        global_dir=str(tmp_path / "g"),
        l1={"enabled": True},
        l4={"enabled": True, "async": True},
        **kw,
    )


def _global_ids(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "g" / "greenckpt").glob("*ckpt-*"))


def test_async_flush_is_committed_only_after_the_copy_is_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the background copy runs, the level-4 checkpoint exists only as staging; the
    next call after it finished commits it; keep-last-k never removes the local source."""
    release = threading.Event()
    real = flush.copy_file

    def slow(source: Path, target: Path) -> int:
        release.wait(30)
        return real(source, target)

    monkeypatch.setattr(flush, "copy_file", slow)
    ck, u, raw = _async(tmp_path, keep=1)
    fill(u, raw, 1)
    ck.state["it"] = 1
    info = ck.checkpoint(4, iteration=1)
    assert (info.level, info.flushing) == (4, True)
    for it in (2, 3):  # two level-1 checkpoints with keep = 1 while checkpoint 1 is flushing
        fill(u, raw, it)
        ck.checkpoint(1, iteration=it)
    assert ck.need_checkpoint(3) is None  # polls: still copying
    assert _global_ids(tmp_path) == [".ckpt-00000001.partial"]  # not complete, not committed
    assert committed(tmp_path) == ["ckpt-00000001", "ckpt-00000003"]  # the source is kept
    release.set()
    ck.finalize()  # waits for the copy and commits it
    assert _global_ids(tmp_path) == ["ckpt-00000001"]
    assert [(h.id, h.level, h.flushing) for h in ck.history][-1] == (1, 4, False)
    shutil.rmtree(tmp_path / "greenckpt")  # the node-local storage is lost
    ck2, u2, raw2 = _async(tmp_path)
    rec = ck2.recover()
    assert rec is not None and (rec.id, rec.level, rec.iteration) == (1, 4, 1)
    expected_u, expected_raw = np.zeros_like(u), bytearray(len(raw))
    fill(expected_u, expected_raw, 1)
    assert np.array_equal(u2, expected_u) and raw2 == expected_raw


def test_recovery_reads_the_local_copy_of_a_flushed_checkpoint(tmp_path: Path) -> None:
    """A level-1 checkpoint flushed to level 4 keeps its id: both copies are complete, and
    the node-local one is read (the fastest); the global one serves once it is gone."""
    ck, u, raw = _async(tmp_path)
    fill(u, raw, 1)
    assert ck.checkpoint(4, iteration=1).flushing
    ck.finalize()
    assert (_global_ids(tmp_path), committed(tmp_path)) == (["ckpt-00000001"], ["ckpt-00000001"])
    rec = _async(tmp_path)[0].recover()
    assert rec is not None and (rec.id, rec.level) == (1, 1)
    shutil.rmtree(tmp_path / "greenckpt")
    rec = _async(tmp_path)[0].recover()
    assert rec is not None and (rec.id, rec.level) == (1, 4)


def test_async_flush_failure_is_raised_at_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(source: Path, target: Path) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(flush, "copy_file", full)
    ck, u, raw = _async(tmp_path)
    fill(u, raw, 1)
    assert ck.checkpoint(4, iteration=1).flushing
    time.sleep(0.2)  # let the background copy fail
    with pytest.raises(
        CheckpointError,
        match=r"asynchronous flush of checkpoint 1 .* failed on "
        r"rank 0: OSError: \[Errno 28\] No space left on device; it was not "
        r"committed there \(the checkpoint is still on node-local storage\)",
    ):
        ck.need_checkpoint(2)
    assert _global_ids(tmp_path) == []  # no committed copy and no staging left
    assert committed(tmp_path) == ["ckpt-00000001"]
    assert ck.need_checkpoint(2) is None  # reported once; the run goes on
    ck.finalize()
    rec = _async(tmp_path)[0].recover()
    assert rec is not None and (rec.id, rec.level) == (1, 1)


def test_async_flush_needs_local_storage(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="async = true flushes from node-local storage"):
        Checkpointer(global_dir=str(tmp_path), l4={"every": "5it", "async": True})


def _flip_after_the_data_are_written(monkeypatch: pytest.MonkeyPatch, u: np.ndarray) -> None:
    """From now on, a bit of ``u`` flips after the writer read it and before the digest thread
    does: memory changing while a checkpoint is in progress. (The digest thread waits for the
    write to end, then flips the bit, then hashes: deterministic, whatever the scheduling.)"""
    real_write, real_digests = api.run_chunks, Protected.variables
    written = threading.Event()

    def writing(op: str, *args: Any, **kw: Any) -> Any:
        out = real_write(op, *args, **kw)  # type: ignore[arg-type]
        if op == "write":
            written.set()
        return out

    def digesting(self: Protected, *args: Any, **kw: Any) -> Any:
        assert written.wait(30), "the data were never written"
        flip_bits_in_buffer(u, positions=[12345])
        return real_digests(self, *args, **kw)

    monkeypatch.setattr(api, "run_chunks", writing)
    monkeypatch.setattr(Protected, "variables", digesting)


def _recovers_checkpoint_1(tmp_path: Path, **kw: object) -> RecoveryInfo:
    """A fresh Checkpointer recovers checkpoint 1 (iteration 1) with its exact data."""
    ck2, u2, raw2 = make(tmp_path, **kw)
    rec = ck2.recover()
    assert rec is not None and (rec.id, rec.iteration) == (1, 1)
    expected_u, expected_raw = np.zeros_like(u2), bytearray(len(raw2))
    fill(expected_u, expected_raw, 1)
    assert np.array_equal(u2, expected_u) and raw2 == expected_raw
    return rec


@pytest.mark.parametrize("codec", [None, "zstd:1"])
def test_memory_changing_during_a_checkpoint_fails_it_with_the_memory_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: str | None
) -> None:
    """With ``memory_check`` the variables' digests taken as the file was written must equal
    those of a second pass over memory: a bit that flipped in between fails checkpoint 2 at
    once (compressed or not), nothing of it is committed, and recovery restores checkpoint 1."""
    levels = {} if codec is None else {"l1": {"codec": codec}}
    ck, u, raw = make(tmp_path, memory_check=True, **levels)
    fill(u, raw, 1)
    ck.state["it"] = 1
    ck.checkpoint(iteration=1)
    fill(u, raw, 2)
    _flip_after_the_data_are_written(monkeypatch, u)
    with pytest.raises(CheckpointError, match="protected data changed while the checkpoint"):
        ck.checkpoint(iteration=2)
    monkeypatch.undo()
    ck.finalize()
    assert committed(tmp_path) == ["ckpt-00000001"]
    rec = _recovers_checkpoint_1(tmp_path, **levels)
    assert not rec.skipped  # checkpoint 2 was never committed


def test_without_the_memory_check_memory_is_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default the variables' digests come from the write's own pass (no second pass over
    memory), and they and the file's digest are right: recovery checks them."""
    ck, u, raw = make(tmp_path)
    monkeypatch.setattr(Protected, "variables", lambda *a, **k: pytest.fail("second pass"))
    fill(u, raw, 1)
    ck.state["it"] = 1
    ck.checkpoint(iteration=1)
    monkeypatch.undo()
    ck.finalize()
    assert not _recovers_checkpoint_1(tmp_path).skipped


class RecordingHook:
    """A runtime stand-in: records the phases and advises 1 I/O process."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail = fail

    def begin(
        self, kind: str, *, level: int | None, path: str, size: int, node: int
    ) -> PhaseAdvice:
        self.calls.append(("begin", kind, str(level), str(size)))
        if self.fail:
            raise OSError("runtime unreachable")
        return PhaseAdvice(io_processes=1, note="test")

    def end(self, kind: str, *, node: int, ok: bool, seconds: float) -> None:
        self.calls.append(("end", kind, str(ok)))


def test_phases_are_announced_to_the_runtime(tmp_path: Path) -> None:
    """Every checkpoint, flush and restart (not a first run's empty recovery) is bracketed by
    begin/end with the node's protected bytes; a failed checkpoint ends with ok=False."""
    hook = RecordingHook()
    ck, u, raw = _async(tmp_path, hook=hook)
    size = str(u.nbytes + len(raw))
    assert ck.recover() is None
    ck.checkpoint(1, iteration=1)
    ck.checkpoint(4, iteration=2)
    ck.finalize()
    assert hook.calls == [
        ("begin", "checkpoint", "1", size),
        ("end", "checkpoint", "True"),
        ("begin", "checkpoint", "1", size),  # async level 4: node-local first ...
        ("end", "checkpoint", "True"),
        ("begin", "flush", "4", size),  # ... then the background copy
        ("end", "flush", "True"),
    ]
    hook2 = RecordingHook()
    ck2, _, _ = _async(tmp_path, hook=hook2)
    assert ck2.recover() is not None
    ck2._write = lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device"))  # type: ignore[method-assign]
    with pytest.raises(CheckpointError):
        ck2.checkpoint(1, iteration=3)
    assert hook2.calls == [
        ("begin", "restart", "None", size),
        ("end", "restart", "True"),
        ("begin", "checkpoint", "1", size),
        ("end", "checkpoint", "False"),
    ]


def test_an_unreachable_runtime_never_fails_a_checkpoint(tmp_path: Path) -> None:
    ck, u, raw = make(tmp_path, hook=RecordingHook(fail=True))
    fill(u, raw, 1)
    with pytest.warns(
        RuntimeWarning,
        match="could not notify the runtime of the start of a "
        "checkpoint: OSError: runtime unreachable",
    ):
        info = ck.checkpoint(iteration=1)
    assert info.id == 1 and committed(tmp_path) == ["ckpt-00000001"]


def test_rework_after_a_restart_is_announced_until_the_lost_work_is_redone(
    tmp_path: Path,
) -> None:
    """The run reached iteration 7, its newest checkpoint is at 5: after the restart the
    runtime hears "rework" begin at recovery and end when iteration 7 is computed again."""
    ck, u, raw = make(tmp_path, hook=RecordingHook(), l1={"every": "5it"})
    for it in range(1, 8):
        fill(u, raw, it)
        ck.state["it"] = it
        if (level := ck.need_checkpoint(it)) is not None:
            ck.checkpoint(level, iteration=it)
    del ck  # the process dies after computing iteration 7 (no finalize)
    hook = RecordingHook()
    ck2, _, _ = make(tmp_path, hook=hook, l1={"every": "5it"})
    rec = ck2.recover()
    assert rec is not None and rec.iteration == 5
    assert hook.calls[-1] == ("begin", "rework", "1", "0")  # the level restored
    ck2.need_checkpoint(6)
    assert hook.calls[-1][1] == "rework" and hook.calls[-1][0] == "begin"  # still redoing
    ck2.need_checkpoint(7)
    assert hook.calls[-1] == ("end", "rework", "True")
    ck2.need_checkpoint(8)
    ck2.finalize()
    assert [c for c in hook.calls if c[1] == "rework"] == [
        ("begin", "rework", "1", "0"),
        ("end", "rework", "True"),
    ]


def test_failing_housekeeping_is_a_warning_not_a_failed_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removing an old checkpoint fails (a busy NFS file, a permission): the new checkpoint
    is committed, the old one is kept, and a warning says so (under MPI, an exception on the
    leader alone would leave the other ranks waiting)."""
    ck, u, raw = make(tmp_path, keep=1)
    fill(u, raw, 1)
    ck.checkpoint(iteration=1)

    def busy(self: object, ckpt_id: int, **kw: object) -> None:
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr("greenckpt.ckpt.store.CheckpointStore.remove", busy)
    with pytest.warns(RuntimeWarning, match="could not remove old checkpoints: OSError: "):
        info = ck.checkpoint(iteration=2)
    assert info.id == 2
    assert committed(tmp_path) == ["ckpt-00000001", "ckpt-00000002"]


def test_an_async_flush_that_cannot_start_is_reported_at_the_next_call(tmp_path: Path) -> None:
    ck, u, raw = _async(tmp_path)
    blocker = tmp_path / "g" / "greenckpt"
    blocker.parent.mkdir(exist_ok=True)
    blocker.write_text("not a directory")  # the global job directory cannot be created
    fill(u, raw, 1)
    assert ck.checkpoint(4, iteration=1).flushing
    with pytest.raises(
        CheckpointError,
        match=r"asynchronous flush of checkpoint 1 .* failed on "
        r"rank 0: (FileExistsError|NotADirectoryError)",
    ):
        ck.need_checkpoint(2)
    assert committed(tmp_path) == ["ckpt-00000001"]  # still on node-local storage
    ck.finalize()
