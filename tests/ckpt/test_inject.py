"""Failure injection: plan parsing, which call dies (in-process and in real processes), bit
flips on disk and in memory, and erasing a node's local storage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from greenckpt.ckpt.inject import (
    ENV,
    POINTS,
    Fault,
    InjectError,
    active_plan,
    erase_node_storage,
    flip_bits_in_buffer,
    flip_bits_in_file,
    maybe_fail,
    parse_plan,
    reset,
)

ROOT = Path(__file__).resolve().parents[2]


class Died(BaseException):
    """Raised by the patched os.kill / os._exit so a test sees which death was asked for."""


@pytest.fixture(autouse=True)
def _clean_plan(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No plan from the test runner's environment leaks in, and none leaks out."""
    monkeypatch.delenv(ENV, raising=False)
    reset()
    yield
    reset()


@pytest.fixture
def deaths(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record kill/exit requests instead of dying: ("kill", signal) or ("exit", code)."""
    seen: list[tuple[str, int]] = []

    def fake_kill(pid: int, sig: int) -> None:
        assert pid == os.getpid()
        seen.append(("kill", sig))
        raise Died

    def fake_exit(code: int) -> None:
        seen.append(("exit", code))
        raise Died

    monkeypatch.setattr(os, "kill", fake_kill)
    monkeypatch.setattr(os, "_exit", fake_exit)
    return seen


def survives(point: str, rank: int, iteration: int | None = None) -> bool:
    """Whether a call of maybe_fail returns (True) or asks to die (False)."""
    try:
        maybe_fail(point, rank=rank, iteration=iteration)
    except Died:
        return False
    return True


# ---------------------------------------------------------------------- parsing


def test_parse_the_documented_example() -> None:
    plan = parse_plan("kill@compute:rank=2,iteration=7;exit@checkpoint-write:rank=1,hit=2,code=3")
    assert plan == (
        Fault("kill", "compute", rank=2, iteration=7),
        Fault("exit", "checkpoint-write", rank=1, hit=2, code=3),
    )


def test_parse_allows_whitespace_and_defaults() -> None:
    plan = parse_plan("  exit @ flush ;\n kill@restart-read : hit = 3 , rank= 0  ")
    assert plan == (
        Fault("exit", "flush", rank=None, iteration=None, hit=None, code=1),
        Fault("kill", "restart-read", rank=0, hit=3),
    )


@pytest.mark.parametrize("point", POINTS)
def test_parse_every_point_and_round_trip(point: str) -> None:
    fault = Fault("exit", point, rank=3, iteration=0, hit=1, code=0)
    assert parse_plan(str(fault)) == (fault,)


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_blank_plan_is_empty(text: str) -> None:
    assert parse_plan(text) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("kil@compute", ["unknown action 'kil'", "kill, exit"]),
        ("kill@computing", ["unknown point 'computing'", ", ".join(POINTS)]),
        ("kill", ["no '@POINT'"]),
        ("kill@compute:rnk=1", ["unknown key 'rnk'", "rank, iteration, hit, code"]),
        ("kill@compute:rank", ["'rank' is not key=value", "rank, iteration, hit, code"]),
        ("kill@compute:", ["'' is not key=value"]),
        ("kill@compute:rank=-1", ["rank='-1'", "integer >= 0"]),
        ("kill@compute:rank=two", ["rank='two'", "integer >= 0"]),
        ("kill@compute:iteration=1.5", ["iteration='1.5'"]),
        ("kill@compute:hit=0", ["hit must be an integer >= 1, not 0"]),
        ("kill@compute:rank=1,rank=2", ["key 'rank' is given twice"]),
        ("kill@compute;;exit@flush", ["fault 2 of plan", "is empty"]),
        ("kill@compute;", ["fault 2 of plan", "is empty"]),
        ("kill@compute:code=3", ["code applies only to action 'exit'"]),
        ("exit@compute:code=256", ["code must be an integer from 0 to 255, not 256"]),
    ],
)
def test_invalid_plans_say_what_is_wrong(text: str, expected: list[str]) -> None:
    with pytest.raises(InjectError) as info:
        parse_plan(text)
    message = str(info.value)
    assert "\n" not in message
    assert "syntax: ACTION@POINT" in message
    for part in expected:
        assert part in message


def test_invalid_fault_built_in_python() -> None:
    with pytest.raises(InjectError, match="unknown point 'nowhere'"):
        Fault("kill", "nowhere")
    with pytest.raises(InjectError, match="hit must be an integer >= 1"):
        Fault("kill", "compute", hit=0)


def test_active_plan_reads_env_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "exit@flush:code=4")
    assert active_plan() == (Fault("exit", "flush", code=4),)
    monkeypatch.setenv(ENV, "kill@compute")
    assert active_plan() == (Fault("exit", "flush", code=4),)  # cached
    reset()
    assert active_plan() == (Fault("kill", "compute"),)


def test_active_plan_bad_env_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "kill@nowhere")
    with pytest.raises(InjectError, match=r"^GREENCKPT_INJECT='kill@nowhere': unknown point"):
        maybe_fail("compute", rank=0)


def test_reset_with_plan_overrides_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "kill@compute")
    reset("")
    assert active_plan() == ()
    reset("exit@flush")
    assert active_plan() == (Fault("exit", "flush"),)


# ---------------------------------------------------------------------- which call dies


def test_no_plan_does_nothing(deaths: list[tuple[str, int]]) -> None:
    for it in range(100):
        for point in POINTS:
            maybe_fail(point, rank=it % 4, iteration=it)
    assert deaths == []
    assert active_plan() == ()


def test_unknown_point_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown injection point 'checkpoint'"):
        maybe_fail("checkpoint", rank=0)
    reset("kill@compute")
    with pytest.raises(ValueError, match="valid points: compute, checkpoint-write"):
        maybe_fail("checkpoint", rank=0)


def test_rank_and_iteration_filter(deaths: list[tuple[str, int]]) -> None:
    reset("kill@compute:rank=2,iteration=7")
    assert survives("compute", rank=1, iteration=7)
    assert survives("compute", rank=2, iteration=6)
    assert survives("compute", rank=2)  # no iteration given: never matches an iteration fault
    assert survives("checkpoint-write", rank=2, iteration=7)
    assert deaths == []
    assert not survives("compute", rank=2, iteration=7)
    assert deaths == [("kill", signal.SIGKILL)]


def test_hit_counts_only_matching_calls(deaths: list[tuple[str, int]]) -> None:
    reset("exit@checkpoint-write:rank=1,hit=3,code=3")
    assert survives("checkpoint-write", rank=1)  # hit 1
    assert survives("checkpoint-write", rank=0)  # another rank: not counted
    assert survives("compute", rank=1)  # another point: not counted
    assert survives("checkpoint-write", rank=1)  # hit 2
    assert deaths == []
    assert not survives("checkpoint-write", rank=1)  # hit 3
    assert deaths == [("exit", 3)]
    assert survives("checkpoint-write", rank=1)  # hit 4: only the third fires


def test_hits_are_counted_per_rank(deaths: list[tuple[str, int]]) -> None:
    reset("exit@restart-read:hit=2")
    assert survives("restart-read", rank=0)
    assert survives("restart-read", rank=1)
    assert not survives("restart-read", rank=1)
    assert not survives("restart-read", rank=0)
    assert deaths == [("exit", 1), ("exit", 1)]


def test_without_hit_every_matching_call_fires(deaths: list[tuple[str, int]]) -> None:
    reset("exit@flush:code=0")
    assert not survives("flush", rank=5)
    assert not survives("flush", rank=5)
    assert deaths == [("exit", 0), ("exit", 0)]


def test_first_firing_fault_wins(deaths: list[tuple[str, int]]) -> None:
    reset("exit@compute:hit=2,code=7;kill@compute:iteration=1")
    assert survives("compute", rank=0, iteration=0)
    assert not survives("compute", rank=0, iteration=1)  # both fire: the first listed wins
    assert deaths == [("exit", 7)]


def test_announcement_on_stderr(
    deaths: list[tuple[str, int]], capfd: pytest.CaptureFixture[str]
) -> None:
    reset("kill@compute:rank=2,iteration=7")
    assert not survives("compute", rank=2, iteration=7)
    err = capfd.readouterr().err
    assert err == "greenckpt.inject: killing rank 2 at compute (iteration 7)\n"


# ---------------------------------------------------------------------- real processes

LOOP = textwrap.dedent(
    """
    import sys
    from greenckpt.ckpt.inject import maybe_fail
    rank = int(sys.argv[1])
    for it in range(20):
        maybe_fail("compute", rank=rank, iteration=it)
        print(it, flush=True)
        maybe_fail("checkpoint-write", rank=rank, iteration=it)
    print("done", flush=True)
    """
)


def run_loop(plan: str | None, rank: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    if plan is not None:
        env[ENV] = plan
    return subprocess.run(
        [sys.executable, "-c", LOOP, str(rank)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_process_is_killed_at_the_planned_iteration() -> None:
    proc = run_loop("kill@compute:rank=2,iteration=7", rank=2)
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout.split() == [str(i) for i in range(7)]
    assert proc.stderr == "greenckpt.inject: killing rank 2 at compute (iteration 7)\n"


def test_process_exits_with_code_on_the_planned_hit() -> None:
    proc = run_loop("exit@checkpoint-write:rank=1,hit=2,code=3", rank=1)
    assert proc.returncode == 3
    assert proc.stdout.split() == ["0", "1"]
    assert "exiting rank 1 with code 3 at checkpoint-write (iteration 1, hit 2)" in proc.stderr


def test_other_ranks_and_no_plan_run_to_the_end() -> None:
    for proc in (run_loop("kill@compute:rank=2,iteration=7", rank=0), run_loop(None, rank=2)):
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [*map(str, range(20)), "done"]
        assert proc.stderr == ""


# ---------------------------------------------------------------------- bit flips


def bits_of(data: bytes) -> np.ndarray:
    """Bits in the documented order: index = byte * 8 + bit, bit 0 the least significant."""
    return np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")


def test_flip_exact_positions_in_file(tmp_path: Path) -> None:
    path = tmp_path / "rank-000000.data"
    original = bytes(range(256)) * 4
    path.write_bytes(original)
    flipped = flip_bits_in_file(path, positions=[8 * 1000 + 7, 0, 9])
    assert flipped == [0, 9, 8007]
    after = path.read_bytes()
    assert len(after) == len(original)
    diff = np.flatnonzero(bits_of(original) != bits_of(after))
    assert diff.tolist() == [0, 9, 8007]
    assert after[0] == original[0] ^ 0x01
    assert after[1] == original[1] ^ 0x02
    assert after[1000] == original[1000] ^ 0x80


def test_flip_random_bits_in_file_is_seeded_and_distinct(tmp_path: Path) -> None:
    original = bytes(64)
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(original)
    b.write_bytes(original)
    first = flip_bits_in_file(a, count=40, seed=11)
    assert flip_bits_in_file(b, count=40, seed=11) == first
    assert first == sorted(set(first))
    assert len(first) == 40
    assert all(0 <= p < 512 for p in first)
    assert np.flatnonzero(bits_of(a.read_bytes())).tolist() == first
    assert a.read_bytes() == b.read_bytes()


def test_flip_every_bit_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"\x0f\xf0")
    assert flip_bits_in_file(path, count=16, seed=0) == list(range(16))
    assert path.read_bytes() == b"\xf0\x0f"


def test_flip_in_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    with pytest.raises(ValueError, match=r"bit position 24 is outside file .*holds 24 bits"):
        flip_bits_in_file(path, positions=[3, 24])
    with pytest.raises(ValueError, match="repeat"):
        flip_bits_in_file(path, positions=[3, 3])
    with pytest.raises(ValueError, match=r"count must be from 1 to 24"):
        flip_bits_in_file(path, count=25)
    assert path.read_bytes() == b"abc"  # nothing flipped by a refused call
    empty = tmp_path / "empty"
    empty.touch()
    with pytest.raises(ValueError, match="is empty"):
        flip_bits_in_file(empty)
    with pytest.raises(FileNotFoundError):
        flip_bits_in_file(tmp_path / "missing")


def test_flip_bits_in_numpy_array() -> None:
    u = np.zeros((4, 8), dtype=np.float64)
    assert flip_bits_in_buffer(u, positions=[63]) == [63]  # the sign bit of u[0, 0]
    assert u[0, 0] == 0.0
    assert np.signbit(u[0, 0])
    v = np.arange(32, dtype=np.int32).reshape(4, 8)
    before = v.copy()
    flipped = flip_bits_in_buffer(v, count=5, seed=3)
    assert flipped == flip_bits_in_buffer(before.copy(), count=5, seed=3)
    diff = np.flatnonzero(bits_of(before.tobytes()) != bits_of(v.tobytes()))
    assert diff.tolist() == flipped


def test_flip_bits_in_bytearray_and_memoryview() -> None:
    raw = bytearray(4)
    assert flip_bits_in_buffer(raw, positions=[1, 31]) == [1, 31]
    assert raw == bytearray(b"\x02\x00\x00\x80")
    flip_bits_in_buffer(memoryview(raw)[2:], positions=[0])
    assert raw == bytearray(b"\x02\x00\x01\x80")


def test_flip_in_buffer_errors() -> None:
    with pytest.raises(ValueError, match="bytes is read-only"):
        flip_bits_in_buffer(b"abc")
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="ndarray is read-only"):
        flip_bits_in_buffer(frozen)
    with pytest.raises(ValueError, match="not C-contiguous"):
        flip_bits_in_buffer(np.zeros((4, 4))[:, 1])
    with pytest.raises(ValueError, match="is empty"):
        flip_bits_in_buffer(bytearray())
    with pytest.raises(ValueError, match="outside the buffer, which holds 16 bits"):
        flip_bits_in_buffer(bytearray(2), positions=[16])
    with pytest.raises(ValueError, match="int is not a buffer"):
        flip_bits_in_buffer(12)
    with pytest.raises(ValueError, match="ndarray is not a buffer"):
        flip_bits_in_buffer(np.zeros(2, dtype="datetime64[s]"))


# ---------------------------------------------------------------------- erase node storage


def populate(local: Path) -> None:
    """Two emulated nodes' local storage, each with a committed checkpoint and staging."""
    for k in (0, 1):
        job = local / f"node{k}" / "greenckpt"
        (job / "ckpt-00000001").mkdir(parents=True)
        (job / "ckpt-00000001" / "manifest.json").write_text("{}")
        (job / ".ckpt-00000002.partial").mkdir()
        (local / f"node{k}" / "stray").write_text("x")


def test_erase_one_node(tmp_path: Path) -> None:
    populate(tmp_path)
    removed = erase_node_storage(tmp_path, node=1)
    assert removed == [tmp_path / "node1" / "greenckpt", tmp_path / "node1" / "stray"]
    assert (tmp_path / "node1").is_dir()
    assert list((tmp_path / "node1").iterdir()) == []
    assert (tmp_path / "node0" / "greenckpt" / "ckpt-00000001" / "manifest.json").is_file()
    assert erase_node_storage(tmp_path, node=1) == []  # already blank


def test_erase_all_local_storage(tmp_path: Path) -> None:
    populate(tmp_path)
    assert erase_node_storage(str(tmp_path)) == [tmp_path / "node0", tmp_path / "node1"]
    assert tmp_path.is_dir()
    assert list(tmp_path.iterdir()) == []


def test_erase_missing_storage(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"node-local storage .*missing does not exist"):
        erase_node_storage(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"node3 does not exist"):
        erase_node_storage(tmp_path, node=3)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a directory"):
        erase_node_storage(tmp_path / "file")
    with pytest.raises(ValueError, match="node must be an integer >= 0"):
        erase_node_storage(tmp_path, node=-1)
