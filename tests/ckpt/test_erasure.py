"""Erasure code and group layout of level 3: any k of k + m pieces rebuild the data bit-exactly,
every stripe of the rotating layout survives any t lost members, and misuse is refused clearly."""

from __future__ import annotations

import itertools
import random
from functools import reduce

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenckpt.ckpt.redundancy.erasure import (
    MAX_RS_PIECES,
    Buffer,
    ErasureCode,
    ErasureError,
    GroupLayout,
    Scheme,
    Stripe,
)
from greenckpt.ckpt.redundancy.groups import group_segment
from greenckpt.ckpt.redundancy.whole_group import encode_group, rebuild_group
from greenckpt.ckpt.transfer import DIRECT_ALIGN, SEGMENT


def _naive_xor(pieces: list[bytes]) -> bytes:
    """Reference parity: byte-wise XOR with zero padding, written the slow obvious way."""
    length = max(len(p) for p in pieces)
    padded = [p + bytes(length - len(p)) for p in pieces]
    return bytes(reduce(lambda a, b: a ^ b, column, 0) for column in zip(*padded, strict=True))


def _drop(code: ErasureCode, pieces: list[bytes], lost: set[int]) -> dict[int, Buffer]:
    return {i: p for i, p in enumerate(pieces) if i not in lost}


# --------------------------------------------------------------------------- ErasureCode


def test_default_scheme_is_xor_for_one_parity_piece_and_reed_solomon_beyond() -> None:
    assert ErasureCode(4).scheme == "xor"
    assert ErasureCode(4, 1).scheme == "xor"
    assert ErasureCode(4, 2).scheme == "reed-solomon"
    assert ErasureCode(4, 1, "reed-solomon").scheme == "reed-solomon"
    code = ErasureCode(3, 2)
    assert (code.k, code.m, code.n) == (3, 2, 5)
    assert code == ErasureCode(3, 2, "reed-solomon")
    assert code != ErasureCode(3, 1)
    assert len({code, ErasureCode(3, 2)}) == 1


def test_xor_parity_is_the_bytewise_xor_of_zero_padded_pieces() -> None:
    rng = random.Random(7)
    # Unequal lengths, lengths not multiples of 8, and a piece starting at an odd address
    # (a memoryview slice) exercise the 8-byte path, its tail and the unaligned path.
    base = bytes(rng.randrange(256) for _ in range(200))
    pieces: list[bytes] = [base[:37], base[40:139], b"", base[150:158]]
    unaligned = memoryview(base)[1:100]
    parity = ErasureCode(5).encode([*pieces, unaligned])
    assert parity == [_naive_xor([*pieces, bytes(unaligned)])]
    assert len(parity[0]) == 99


def test_xor_of_a_large_unaligned_segment_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, size=(1 << 20) + 11, dtype=np.uint8)
    a, b = buf[3:], buf[: (1 << 19) + 5]
    (parity,) = ErasureCode(2).encode([a, b])
    expected = a.copy()
    expected[: len(b)] ^= b
    assert parity == expected.tobytes()
    rebuilt = ErasureCode(2).decode({1: b, 2: parity}, [len(a), len(b)])
    assert rebuilt[0] == a.tobytes()


@st.composite
def _code_and_pieces(draw: st.DrawFn) -> tuple[ErasureCode, list[bytes], set[int]]:
    k = draw(st.integers(1, 8))
    m = draw(st.integers(1, 4))
    scheme: Scheme = draw(st.sampled_from(["xor", "reed-solomon"])) if m == 1 else "reed-solomon"
    pieces = draw(st.lists(st.binary(max_size=70), min_size=k, max_size=k))
    lost = draw(st.sets(st.integers(0, k + m - 1), max_size=m))
    return ErasureCode(k, m, scheme), pieces, lost


@settings(max_examples=300, deadline=None)
@given(_code_and_pieces())
def test_any_k_of_k_plus_m_pieces_rebuild_the_data(
    case: tuple[ErasureCode, list[bytes], set[int]],
) -> None:
    code, data, lost = case
    parity = code.encode(data)
    longest = max(len(p) for p in data)
    assert len(parity) == code.m
    assert all(len(p) == longest for p in parity)
    rebuilt = code.decode(_drop(code, [*data, *parity], lost), [len(p) for p in data])
    assert rebuilt == data
    assert all(type(p) is bytes for p in rebuilt)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.binary(max_size=40), min_size=1, max_size=6),
    st.data(),
)
def test_one_parity_piece_xor_and_reed_solomon_are_interchangeable(
    data: list[bytes], draw: st.DataObject
) -> None:
    lengths = [len(p) for p in data]
    lost = draw.draw(st.integers(0, len(data)))
    results = []
    schemes: tuple[Scheme, ...] = ("xor", "reed-solomon")
    for scheme in schemes:
        code = ErasureCode(len(data), 1, scheme)
        pieces = [*data, *code.encode(data)]
        results.append(code.decode(_drop(code, pieces, {lost}), lengths))
    assert results[0] == results[1] == data


def test_all_empty_pieces_give_empty_parity_and_decode() -> None:
    for code in (ErasureCode(3), ErasureCode(3, 2)):
        parity = code.encode([b"", b"", b""])
        assert parity == [b""] * code.m
        present: dict[int, Buffer] = dict(enumerate([b"", b"", b"", *parity]))
        for lost in range(code.m):
            del present[lost]
        assert code.decode(present, [0, 0, 0]) == [b""] * 3


@pytest.mark.parametrize("m", [1, 2, 3])
def test_numpy_arrays_are_coded_as_their_raw_bytes(m: int) -> None:
    rng = np.random.default_rng(m)
    records = np.zeros(5, dtype=[("a", "<i4"), ("b", "<f8")])
    records["a"] = np.arange(5)
    arrays: list[np.ndarray] = [
        rng.standard_normal(13),
        rng.integers(0, 1 << 30, size=(3, 7), dtype=np.int32),
        records,
        np.array([], dtype=np.float32),
    ]
    raw = [a.tobytes() for a in arrays]
    code = ErasureCode(len(arrays), m)
    parity = code.encode(arrays)
    assert parity == code.encode(raw)
    lost = set(range(m))  # the first m data pieces
    pieces: list[Buffer] = [*arrays, *parity]
    present = {i: p for i, p in enumerate(pieces) if i not in lost}
    assert code.decode(present, [len(r) for r in raw]) == raw


def test_present_bytes_pieces_are_returned_without_copying() -> None:
    data = [b"alpha", b"beta", b"gamma"]
    code = ErasureCode(3, 2)
    parity = code.encode(data)
    out = code.decode({0: data[0], 2: data[2], 3: parity[0]}, [5, 4, 5])
    assert out[0] is data[0]
    assert out[2] is data[2]
    assert out[1] == b"beta"


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize(("k", "m", "scheme"), [(3, 1, "xor"), (3, 2, "reed-solomon")])
def test_a_parity_piece_encoded_into_a_buffer_is_the_piece_encoded_alone(
    monkeypatch: pytest.MonkeyPatch, native: bool, k: int, m: int, scheme: str
) -> None:
    """``into``: the piece lands at the start of a reused buffer (the level-3 writer's), the
    rest of it untouched, by the native encoder or the portable one."""
    from greenckpt.ckpt.redundancy import erasure  # noqa: PLC0415 - patched below

    if not native:
        monkeypatch.setattr(erasure.native_gf, "available", lambda: False)
    elif not erasure.native_gf.available():
        pytest.skip("libgreenckpt_gf is not built here")
    rng = np.random.default_rng(7)
    data = [rng.bytes(n) for n in (5000, 4093, 4999)]
    code = ErasureCode(k, m, scheme)  # type: ignore[arg-type]
    for j in range(m):
        alone = code.encode(data, only=j)[0]
        buffer = bytearray(b"\xee" * 6000)
        (piece,) = code.encode(data, only=j, into=buffer)
        assert bytes(piece) == bytes(alone) and len(piece) == 5000
        assert buffer[:5000] == alone and buffer[5000:] == b"\xee" * 1000
    with pytest.raises(ErasureError, match="only one parity piece"):
        code.encode(data, into=bytearray(6000))
    with pytest.raises(ErasureError, match="cannot hold a 5000-byte piece"):
        code.encode(data, only=0, into=bytearray(4999))


def test_losing_more_pieces_than_parity_is_refused_with_what_is_needed() -> None:
    data = [b"abcd", b"ef", b"ghijk", b"l"]
    code = ErasureCode(4)
    parity = code.encode(data)
    present = {1: data[1], 2: data[2], 4: parity[0]}
    with pytest.raises(
        ErasureError,
        match=r"^cannot rebuild: 2 of 5 pieces lost but the code tolerates 1 \(need any 4 of 5\)$",
    ):
        code.decode(present, [4, 2, 5, 1])
    rs = ErasureCode(3, 2)
    with pytest.raises(ErasureError, match=r"3 of 5 pieces lost but the code tolerates 2"):
        rs.decode({0: b"x", 4: rs.encode([b"x", b"y", b"z"])[1]}, [1, 1, 1])


def test_reed_solomon_beyond_256_pieces_is_refused() -> None:
    assert ErasureCode(254, 2).n == MAX_RS_PIECES
    with pytest.raises(ErasureError, match=r"at most 256 pieces but k\+m=255\+2=257"):
        ErasureCode(255, 2)
    with pytest.raises(ErasureError, match="at most 256 pieces"):
        ErasureCode(256, 1, "reed-solomon")
    # XOR has no such limit.
    wide = ErasureCode(300)
    data = [bytes([i % 256]) * 3 for i in range(300)]
    parity = wide.encode(data)
    assert wide.decode({i: p for i, p in enumerate([*data, *parity]) if i != 17}, [3] * 300) == data


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1, None), r"k \(data pieces\) must be at least 1, got 0"),
        ((3, 0, None), r"m \(parity pieces\) must be at least 1, got 0"),
        ((3, 2, "xor"), r"XOR parity tolerates one lost piece, not m=2; use scheme='reed-solomon'"),
        ((3, 1, "raid6"), r"unknown scheme 'raid6'; use 'xor' or 'reed-solomon'"),
        ((2.5, 1, None), r"k \(data pieces\) must be an integer, got 2.5"),
    ],
)
def test_invalid_codes_are_refused(args: tuple[object, object, object], message: str) -> None:
    with pytest.raises(ErasureError, match=message):
        ErasureCode(*args)  # type: ignore[arg-type]


def test_malformed_encode_and_decode_calls_are_refused() -> None:
    code = ErasureCode(3, 2)
    data = [b"abc", b"de", b"f"]
    parity = code.encode(data)
    with pytest.raises(ErasureError, match="expected 3 data pieces for a \\(3\\+2\\) code, got 2"):
        code.encode(data[:2])
    with pytest.raises(ErasureError, match="not one buffer"):
        code.encode(b"abc")  # type: ignore[arg-type]
    with pytest.raises(ErasureError, match="data piece 1 is a str"):
        code.encode([b"abc", "de", b"f"])  # type: ignore[list-item]
    with pytest.raises(ErasureError, match="data piece 0 is a non-contiguous array"):
        code.encode([np.arange(10)[::2], b"x", b"y"])
    with pytest.raises(ErasureError, match="non-contiguous buffer"):
        code.encode([memoryview(b"abcdef")[::2], b"x", b"y"])
    with pytest.raises(ErasureError, match="expected 3 data lengths, got 2"):
        code.decode({0: data[0], 1: data[1], 2: data[2]}, [3, 2])
    with pytest.raises(ErasureError, match=r"piece index 5 is out of range: .* pieces 0\.\.4"):
        code.decode({0: data[0], 1: data[1], 5: parity[0]}, [3, 2, 1])
    with pytest.raises(ErasureError, match="piece index -1 is out of range"):
        code.decode({-1: parity[0], 0: data[0], 1: data[1]}, [3, 2, 1])
    with pytest.raises(
        ErasureError,
        match="parity piece 3 is 2 bytes but the longest data piece is 3 bytes",
    ):
        code.decode({0: data[0], 1: data[1], 3: parity[0][:2]}, [3, 2, 1])
    with pytest.raises(ErasureError, match="data piece 1 is 3 bytes but its length is given as 2"):
        code.decode({0: data[0], 1: b"dex", 3: parity[0]}, [3, 2, 1])
    with pytest.raises(ErasureError, match="length of data piece 2 must be at least 0, got -1"):
        code.decode({0: data[0], 1: data[1], 3: parity[0]}, [3, 2, -1])


# --------------------------------------------------------------------------- GroupLayout

ALL_SHAPES = [(g, t) for g in range(2, 9) for t in range(1, g)]


@pytest.mark.parametrize(("g", "t"), ALL_SHAPES)
def test_every_stripe_has_g_minus_t_data_and_t_parity_members(g: int, t: int) -> None:
    layout = GroupLayout(g, t)
    assert list(layout.stripes()) == list(range(g))
    for s in layout.stripes():
        stripe = layout.stripe(s)
        assert len(stripe.data) == g - t == layout.data_per_stripe
        assert stripe.parity == tuple((s + j) % g for j in range(t))
        assert sorted(stripe.data + stripe.parity) == list(range(g))
        for member in range(g):
            assert (layout.piece_of(member, s) is None) == (member in stripe.parity)


@pytest.mark.parametrize(("g", "t"), ALL_SHAPES)
def test_every_piece_of_every_member_lies_in_exactly_one_stripe(g: int, t: int) -> None:
    layout = GroupLayout(g, t)
    for member in range(g):
        placed = [(layout.piece_of(member, s), s) for s in layout.stripes()]
        pieces = sorted(p for p, _ in placed if p is not None)
        assert pieces == list(range(g - t))
        for piece, s in placed:
            if piece is not None:
                assert layout.stripe_of(member, piece) == s
        holds = tuple(s for p, s in placed if p is None)
        assert layout.parity_stripes(member) == holds
        assert len(holds) == t


def test_worked_example_of_the_module_docstring() -> None:
    layout = GroupLayout(4, 1)
    table = [
        [None, 2, 1, 0],
        [0, None, 2, 1],
        [1, 0, None, 2],
        [2, 1, 0, None],
    ]
    assert [[layout.piece_of(i, s) for i in range(4)] for s in range(4)] == table
    assert layout.stripe(0) == Stripe(data=(1, 2, 3), parity=(0,))
    assert layout.parity_stripes(2) == (2,)
    assert layout.code() == ErasureCode(3, 1, "xor")


def test_piece_size_and_ranges_cut_a_member_into_padded_pieces() -> None:
    layout = GroupLayout(4, 1)
    assert layout.piece_size(0) == 0
    assert layout.piece_size(9) == 3
    assert layout.piece_size(10) == 4
    assert [layout.piece_range(10, p, 4) for p in range(3)] == [(0, 4), (4, 4), (8, 2)]
    assert [layout.piece_range(5, p, 4) for p in range(3)] == [(0, 4), (4, 1), (5, 0)]
    assert [layout.piece_range(0, p, 4) for p in range(3)] == [(0, 0)] * 3
    # Stripe 0 holds piece 2 of member 1, piece 1 of member 2 and piece 0 of member 3.
    assert layout.stripe_lengths([10, 5, 0, 7], 0) == [0, 0, 4]
    # Stripe 1 holds piece 0 of member 0, piece 2 of member 2 and piece 1 of member 3.
    assert layout.stripe_lengths([10, 5, 0, 7], 1) == [4, 0, 3]
    with pytest.raises(ErasureError, match=r"piece 3 is out of range: .* pieces 0\.\.2"):
        layout.piece_range(10, 3, 4)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 9), st.data())
def test_a_members_pieces_concatenate_to_its_data(g: int, draw: st.DataObject) -> None:
    t = draw.draw(st.integers(1, g - 1))
    lengths = draw.draw(st.lists(st.integers(0, 1000), min_size=1, max_size=4))
    layout = GroupLayout(g, t)
    size = layout.piece_size(max(lengths))
    assert size * layout.data_per_stripe >= max(lengths)
    for length in lengths:
        ranges = [layout.piece_range(length, p, size) for p in range(layout.data_per_stripe)]
        assert sum(n for _, n in ranges) == length
        assert all(start + n <= length for start, n in ranges)
        assert [start for start, n in ranges if n] == list(range(0, length, size) if size else [])


def _group_data(g: int, rng: random.Random) -> list[bytes]:
    # Unequal lengths, one empty member, and lengths not divisible by the piece count.
    lengths = [rng.randrange(0, 60) for _ in range(g)]
    lengths[rng.randrange(g)] = 0
    lengths[rng.randrange(g)] = 61
    return [rng.randbytes(n) for n in lengths]


def _lost_sets(g: int, t: int) -> list[tuple[int, ...]]:
    if g <= 6:
        return [c for n in range(t + 1) for c in itertools.combinations(range(g), n)]
    # Larger groups: every set of exactly t (the hardest case) plus the empty set.
    return [(), *itertools.combinations(range(g), t)]


@pytest.mark.parametrize(("g", "t"), ALL_SHAPES)
def test_rebuild_group_recovers_any_t_lost_members_bit_exactly(g: int, t: int) -> None:
    rng = random.Random(g * 100 + t)
    layout = GroupLayout(g, t)
    datas = _group_data(g, rng)
    lengths = [len(d) for d in datas]
    parity = encode_group(layout, datas)
    size = layout.piece_size(max(lengths))
    for member, pieces in parity.items():
        assert len(pieces) == t
        assert all(len(p) <= size for p in pieces)
        assert len(layout.parity_stripes(member)) == t
    for lost in _lost_sets(g, t):
        datas_present = {i: d for i, d in enumerate(datas) if i not in lost}
        parity_present = {i: p for i, p in parity.items() if i not in lost}
        rebuilt = rebuild_group(layout, datas_present, parity_present, lengths)
        assert rebuilt == {i: datas[i] for i in lost}


@pytest.mark.parametrize(("g", "t"), ALL_SHAPES)
def test_losing_t_plus_one_members_is_refused(g: int, t: int) -> None:
    layout = GroupLayout(g, t)
    datas = _group_data(g, random.Random(g + t))
    parity = encode_group(layout, datas)
    lost = set(range(t + 1))
    with pytest.raises(
        ErasureError,
        match=rf"^cannot rebuild: {t + 1} of {g} members lost .* the group tolerates {t} ",
    ):
        rebuild_group(
            layout,
            {i: d for i, d in enumerate(datas) if i not in lost},
            {i: p for i, p in parity.items() if i not in lost},
            [len(d) for d in datas],
        )


def test_a_missing_parity_piece_counts_against_the_tolerance() -> None:
    layout = GroupLayout(4, 1)
    datas = [b"member zero data", b"one", b"member two, longer than the rest", b""]
    parity = encode_group(layout, datas)
    lengths = [len(d) for d in datas]
    present = {0: datas[0], 2: datas[2], 3: datas[3]}
    # Member 1's pieces lie in stripes 2, 3 and 0; stripe 3's parity lives on member 3.
    with pytest.raises(ErasureError, match=r"stripe 3 lost 2 of its 4 pieces .* members \[3\]"):
        rebuild_group(layout, present, {0: parity[0], 2: parity[2]}, lengths)
    # Member 1's own parity (stripe 1) is not needed to rebuild member 1's data.
    assert rebuild_group(layout, present, {0: parity[0], 2: parity[2], 3: parity[3]}, lengths) == {
        1: datas[1]
    }


def test_group_with_one_parity_member_also_works_with_reed_solomon() -> None:
    layout = GroupLayout(5, 1)
    datas = _group_data(5, random.Random(1))
    lengths = [len(d) for d in datas]
    xor = encode_group(layout, datas)
    rs = encode_group(layout, datas, "reed-solomon")
    cases: tuple[tuple[dict[int, list[bytes]], Scheme], ...] = ((xor, "xor"), (rs, "reed-solomon"))
    for lost in range(5):
        for parity, scheme in cases:
            rebuilt = rebuild_group(
                layout,
                {i: d for i, d in enumerate(datas) if i != lost},
                {i: p for i, p in parity.items() if i != lost},
                lengths,
                scheme,
            )
            assert rebuilt == {lost: datas[lost]}


def test_group_data_may_be_numpy_arrays() -> None:
    layout = GroupLayout(3, 1)
    arrays: list[np.ndarray] = [
        np.arange(10, dtype=np.float64),
        np.arange(3, dtype=np.int16),
        np.ones((2, 5)),
    ]
    parity = encode_group(layout, arrays)
    assert parity == encode_group(layout, [a.tobytes() for a in arrays])
    rebuilt = rebuild_group(
        layout, {0: arrays[0], 1: arrays[1]}, {0: parity[0], 1: parity[1]}, [80, 6, 80]
    )
    assert rebuilt == {2: arrays[2].tobytes()}


def test_invalid_layouts_and_arguments_are_refused() -> None:
    with pytest.raises(ErasureError, match="group size G must be at least 2, got 1"):
        GroupLayout(1, 1)
    with pytest.raises(ErasureError, match="tolerance t must be at least 1, got 0"):
        GroupLayout(4, 0)
    with pytest.raises(ErasureError, match="a group of 4 members tolerates at most 3 lost, not 4"):
        GroupLayout(4, 4)
    layout = GroupLayout(4, 2)
    with pytest.raises(ErasureError, match=r"member 4 is out of range: .* members 0\.\.3"):
        layout.piece_of(4, 0)
    with pytest.raises(ErasureError, match=r"stripe -1 is out of range"):
        layout.stripe(-1)
    with pytest.raises(ErasureError, match="expected 4 member lengths, got 3"):
        rebuild_group(layout, {}, {}, [1, 2, 3])
    with pytest.raises(ErasureError, match="expected data of 4 members, got 3"):
        encode_group(layout, [b"a", b"b", b"c"])
    datas = [b"aaaa", b"bb", b"c", b"dddddd"]
    parity = encode_group(layout, datas)
    with pytest.raises(ErasureError, match=r"member 1 should hold 2 parity pieces .*, got 1"):
        rebuild_group(layout, {0: datas[0]}, {1: parity[1][:1]}, [4, 2, 1, 6])
    with pytest.raises(ErasureError, match="data of member 0 is 4 bytes but its length is given"):
        rebuild_group(layout, {0: datas[0]}, {}, [5, 2, 1, 6])


def test_large_groups_need_reed_solomon_within_its_limit() -> None:
    assert GroupLayout(300, 1).code().scheme == "xor"
    with pytest.raises(ErasureError, match="at most 256 pieces"):
        GroupLayout(300, 2).code()


def test_group_segments_are_whole_pages_within_the_exchange_budget() -> None:
    """A member's send and receive buffers (one segment per member each) stay within 32 MiB
    for any group size (groups of 8 used to hold 64 MiB of them), and segments are whole
    pages so that parity written segment by segment can go past the page cache (found in
    review: groups of 5 or more had unaligned segments)."""
    for members in range(2, 257):
        segment = group_segment(members)
        assert segment % DIRECT_ALIGN == 0, members
        assert 64 * 1024 <= segment <= SEGMENT
        assert 2 * members * segment <= 32 * 1024 * 1024 or segment == 64 * 1024, members
    assert group_segment(4) == SEGMENT  # up to groups of 4: full segments
