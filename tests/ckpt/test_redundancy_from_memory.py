"""Levels 2 and 3 take a rank's file from memory (``InMemory``) instead of reading it back.

Why: right after level 1 wrote a rank's file without a codec, the file is the protected
buffers end to end; reading it again for the partner copy or the parity is a second pass over
the bytes (issue 32: redundancy at its floor). With a codec the file holds other bytes, so it
is read.
Ranks are threads of this process, each its own emulated node (``greenckpt.testing.comm``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.ckpt import Checkpointer, transfer
from greenckpt.ckpt.comm import Comm
from greenckpt.ckpt.manifest import read_manifest
from greenckpt.ckpt.redundancy import builtin, groups
from greenckpt.ckpt.redundancy.erasure import GroupLayout
from greenckpt.ckpt.redundancy.partner import copy_name
from greenckpt.ckpt.redundancy.whole_group import encode_group
from greenckpt.ckpt.transfer import InMemory
from greenckpt.testing.comm import run_ranks


def _buffers(sizes: list[int], seed: int = 1) -> list[memoryview]:
    rng = np.random.default_rng(seed)
    return [memoryview(rng.integers(0, 256, n, dtype=np.uint8).tobytes()) for n in sizes]


@pytest.mark.parametrize("segment", [1, 7, 64, 100, 1000])
def test_segments_are_the_buffers_end_to_end(segment: int) -> None:
    views = _buffers([0, 100, 1, 0, 250, 33])
    whole = b"".join(bytes(v) for v in views)
    source = InMemory(views)
    assert source.size == len(whole)
    scratch = bytearray(segment)
    got = b"".join(
        bytes(source.segment(off, segment, scratch)) for off in range(0, len(whole), segment)
    )
    assert got == whole
    assert len(source.segment(len(whole), segment, scratch)) == 0
    assert bytes(source.segment(len(whole) - 3, segment, scratch)) == whole[-3:][:segment]


def test_a_segment_inside_one_buffer_is_a_view_of_it_not_a_copy() -> None:
    data = np.arange(1000, dtype=np.uint8)
    source = InMemory([memoryview(b"ab"), memoryview(data)])
    piece = source.segment(10, 100, bytearray(100))
    data[8] = 99  # byte 10 of the stream is byte 8 of the array
    assert piece[0] == 99
    across = source.segment(0, 4, bytearray(4))
    data[0] = 77
    assert bytes(across) == b"ab" + bytes([0, 1])  # copied: the change is not seen


def _checkpoint(tmp_path: Path, codec: str, opened: list[str]) -> list[Any]:
    real = transfer._open_send

    def watched(path: Path) -> tuple[int, int, str | None]:
        opened.append(path.name)
        return real(path)

    transfer._open_send = watched  # type: ignore[assignment]
    try:

        def work(comm: Comm) -> Any:
            dirs = {}
            for name in ("local", "global"):
                (tmp_path / name).mkdir(exist_ok=True)
                dirs[f"{name}_dir"] = str(tmp_path / name)
            ck = Checkpointer(
                env={}, comm=comm, ranks_per_node=1, l2={"enabled": True, "codec": codec}, **dirs
            )
            u = np.random.default_rng(comm.rank).random(300_000)
            ck.protect("u", u)
            ck.state["rank"] = comm.rank
            ck.checkpoint(2, iteration=1)
            ck.finalize()
            return u.copy()

        return run_ranks(2, work)
    finally:
        transfer._open_send = real  # type: ignore[assignment]


def _files(tmp_path: Path) -> dict[str, bytes]:
    manifests = list((tmp_path / "local").rglob("manifest.json"))
    assert len(manifests) == 2  # one per emulated node
    return {p.name: p.read_bytes() for m in manifests for p in m.parent.iterdir()}


def test_the_partner_copy_is_sent_from_memory_and_equals_the_file(tmp_path: Path) -> None:
    opened: list[str] = []
    _checkpoint(tmp_path, "none", opened)
    assert opened == []  # no rank file was read back for the copy
    files = _files(tmp_path)
    for rank in (0, 1):
        name = f"rank-{rank:06d}.data"
        assert files[copy_name(name)] == files[name]
    manifest = read_manifest(next((tmp_path / "local").rglob("manifest.json")))
    assert manifest.redundancy["scheme"] == "partner"


def test_with_a_codec_the_stored_file_is_read_for_the_copy(tmp_path: Path) -> None:
    opened: list[str] = []
    _checkpoint(tmp_path, "zstd", opened)
    assert sorted(opened) == ["rank-000000.data", "rank-000001.data"]
    files = _files(tmp_path)
    for rank in (0, 1):
        name = f"rank-{rank:06d}.data"
        assert files[copy_name(name)] == files[name]


def test_data_that_change_before_the_copy_fail_the_checkpoint_not_the_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy is checked against the digest the write took: memory that changed between
    the write and the copy is caught, and nothing is committed."""
    from greenckpt.ckpt import commit  # noqa: PLC0415

    real = commit.InMemory

    def changed(views: list[memoryview]) -> InMemory:
        bad = [bytearray(v) for v in views]
        bad[0][0] ^= 0xFF
        return real([memoryview(b) for b in bad])

    monkeypatch.setattr(commit, "InMemory", changed)
    with pytest.raises(Exception, match="arrived corrupt"):
        _checkpoint(tmp_path, "none", [])
    assert not list((tmp_path / "local").rglob("manifest.json"))


def _erasure(
    tmp_path: Path, codec: str, parity: int, opened: list[str], doubles: Any = None
) -> None:
    """Level 3 over 4 ranks of different sizes (``doubles(rank)``: each rank's count)."""
    real = groups._open_read

    def watched(path: Path) -> tuple[int, str | None]:
        opened.append(path.name)
        return real(path)

    groups._open_read = watched  # type: ignore[assignment]
    try:

        def work(comm: Comm) -> None:
            ck = Checkpointer(
                env={},
                comm=comm,
                ranks_per_node=1,
                local_dir=str(tmp_path),
                l3={"enabled": True, "codec": codec, "group_size": 4, "parity": parity},
            )
            n = 100_000 + 777 * comm.rank if doubles is None else doubles(comm.rank)
            u = np.random.default_rng(comm.rank).random(n)
            ck.protect("u", u)
            ck.checkpoint(3, iteration=1)
            ck.finalize()

        run_ranks(4, work)
    finally:
        groups._open_read = real  # type: ignore[assignment]


@pytest.mark.parametrize("parity", [1, 2])
def test_parity_from_memory_is_the_parity_of_the_files(tmp_path: Path, parity: int) -> None:
    """Byte for byte the parity level 3 computes from the stored files (its opt-in turned
    off for the comparison); the ranks' sizes differ, so pieces end in different buffers.
    (That rebuilds from it succeed is the level contract's test, which now runs on it.)"""
    opened: list[str] = []
    (tmp_path / "mem").mkdir()
    _erasure(tmp_path / "mem", "none", parity, opened)
    assert opened == []  # no rank file was read back for the parity

    real = builtin.ErasureLevel.reads_memory
    builtin.ErasureLevel.reads_memory = False  # the files' own parity, for comparison
    try:
        (tmp_path / "file").mkdir()
        _erasure(tmp_path / "file", "none", parity, opened)
    finally:
        builtin.ErasureLevel.reads_memory = real
    assert sorted(opened) == [f"rank-{r:06d}.data" for r in range(4)]

    def stored(base: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in base.rglob("*") if p.is_file()}

    mem, files = stored(tmp_path / "mem"), stored(tmp_path / "file")
    parity_files = [n for n in mem if n.startswith("parity-")]
    assert len(parity_files) == 4
    for name in parity_files:
        assert mem[name] == files[name]


def test_with_a_codec_the_parity_reads_the_stored_files(tmp_path: Path) -> None:
    opened: list[str] = []
    _erasure(tmp_path, "zstd", 1, opened)
    assert sorted(opened) == [f"rank-{r:06d}.data" for r in range(4)]


def test_a_buffer_holds_a_range_whole_or_not_at_all() -> None:
    first, second = memoryview(b"0123456789"), memoryview(b"abcdef")
    source = InMemory([first, second])
    view, at = source.holder(2, 5) or (None, -1)
    assert bytes(view[at : at + 5]) == b"23456"  # type: ignore[index]
    view, at = source.holder(11, 4) or (None, -1)
    assert bytes(view[at : at + 4]) == b"bcde"  # type: ignore[index]
    assert source.holder(8, 4) is None  # across the two buffers
    view, at = source.holder(14, 10) or (None, -1)  # clipped at the end
    assert bytes(view[at:]) == b"ef"  # type: ignore[index]


def test_pieces_in_one_buffer_go_from_where_they_lie() -> None:
    data = bytes(range(200)) * 10
    source = InMemory([memoryview(data), memoryview(b"state")])
    # (root, offset, length): root 1 gets nothing (not in wanted), root 3 an empty piece
    sent = groups._in_place(source, [(0, 100, 30), (2, 900, 50), (3, 500, 0)], 4)
    assert sent is not None
    base, counts, displs = sent
    assert counts == [30, -1, 50, 0]
    assert bytes(base[displs[0] : displs[0] + 30]) == data[100:130]
    assert bytes(base[displs[2] : displs[2] + 50]) == data[900:950]
    # a piece that runs into the pickled state must be packed
    assert groups._in_place(source, [(0, 1990, 20)], 4) is None
    # as must offsets MPI's int displacements cannot reach
    real = groups._MAX_DISPLACEMENT
    groups._MAX_DISPLACEMENT = 120  # type: ignore[misc]
    try:
        assert groups._in_place(source, [(0, 100, 30)], 4) is None
    finally:
        groups._MAX_DISPLACEMENT = real  # type: ignore[misc]
    assert groups._in_place(None, [(0, 0, 1)], 4) is None
    # every piece empty (past the end of a shorter member's pieces): nothing to send
    base, counts, _ = groups._in_place(source, [(0, 2005, 7), (3, 1500, 0)], 4) or (b"x", [], [])
    assert len(base) == 0 and counts == [0, -1, -1, 0]


def test_parity_sent_in_place_is_the_parity_of_packed_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most pieces go from the protected array where they lie; the last segment of a member
    runs into its pickled state and is packed. Both ways give the same parity bytes as
    packing every piece."""
    used = {"in place": 0, "packed": 0}
    real_in_place = groups._in_place

    def in_place(*args: Any) -> Any:
        out = real_in_place(*args)
        used["in place" if out is not None else "packed"] += 1
        return out

    monkeypatch.setattr(groups, "_in_place", in_place)
    (tmp_path / "in-place").mkdir()
    _erasure(tmp_path / "in-place", "none", 2, [])
    assert used["in place"] > 0 and used["packed"] > 0

    monkeypatch.setattr(groups, "_in_place", lambda *args: None)
    (tmp_path / "packed").mkdir()
    _erasure(tmp_path / "packed", "none", 2, [])

    def parity(base: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in base.rglob("parity-*")}

    assert len(parity(tmp_path / "packed")) == 4
    assert parity(tmp_path / "in-place") == parity(tmp_path / "packed")


@pytest.mark.parametrize("parity", [1, 2])
def test_each_parity_file_is_its_pieces_zero_padded_to_the_piece_size(
    tmp_path: Path, parity: int
) -> None:
    """Against the whole-group encoder: each stored parity piece is followed by zeros up to
    the piece size, whatever the writer's reused buffers held before. Rank 3 holds 6 times
    the others' data, so in the stripe whose parity it holds the data pieces are shorter than
    the piece, which spans several segments (its writer reuses each buffer)."""
    _erasure(tmp_path, "none", parity, [], lambda rank: 6_000_000 if rank == 3 else 1_000_000)
    datas = [next(tmp_path.rglob(f"rank-{r:06d}.data")).read_bytes() for r in range(4)]
    layout = GroupLayout(4, parity)
    size = layout.piece_size(max(map(len, datas)))
    expected = encode_group(layout, datas)
    shorter = 0
    for r in range(4):
        stored = next(tmp_path.rglob(groups.parity_name(f"rank-{r:06d}.data"))).read_bytes()
        pieces = [bytes(p) + bytes(size - len(p)) for p in expected[r]]
        shorter += sum(len(p) < size for p in expected[r])
        assert stored == b"".join(pieces)
    assert shorter > 0  # the case the padding is for did occur
