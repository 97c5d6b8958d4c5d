"""A whole erasure group in memory: every member's parity pieces at once, and the lost
members' data rebuilt from everything that survived.

Why apart from :mod:`greenckpt.ckpt.redundancy.erasure`: level 3 itself never holds a whole
group (:mod:`greenckpt.ckpt.redundancy.groups` moves it segment by segment between ranks and
files); these two functions are the reference it is checked against — the same code and
layout applied to whole buffers — and serve small groups and the tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from greenckpt.ckpt.redundancy.erasure import (
    Buffer,
    ErasureCode,
    ErasureError,
    GroupLayout,
    Scheme,
    _byte_view,
)

__all__ = ["encode_group", "rebuild_group"]


def _stripe_pieces(
    layout: GroupLayout, stripe: int, views: Mapping[int, memoryview], size: int
) -> dict[int, memoryview]:
    """The present data pieces of ``stripe``, by code position, sliced without copying."""
    pieces: dict[int, memoryview] = {}
    for position, member in enumerate(layout.stripe(stripe).data):
        if member in views:
            piece = layout.piece_of(member, stripe)
            assert piece is not None
            start, length = layout.piece_range(len(views[member]), piece, size)
            pieces[position] = views[member][start : start + length]
    return pieces


def encode_group(
    layout: GroupLayout, datas: Sequence[Buffer], scheme: Scheme | None = None
) -> dict[int, list[bytes]]:
    """Every member's t parity pieces, in the order of :meth:`GroupLayout.parity_stripes`."""
    if len(datas) != layout.members:
        raise ErasureError(f"expected data of {layout.members} members, got {len(datas)}")
    views = {i: _byte_view(d, f"data of member {i}") for i, d in enumerate(datas)}
    size = layout.piece_size(max(len(v) for v in views.values()))
    code = layout.code(scheme)
    parity: dict[int, dict[int, bytes]] = {i: {} for i in range(layout.members)}
    for s in layout.stripes():
        pieces = _stripe_pieces(layout, s, views, size)
        encoded = code.encode([pieces[p] for p in range(code.k)])
        for member, piece in zip(layout.stripe(s).parity, encoded, strict=True):
            parity[member][s] = piece
    return {
        member: [held[s] for s in layout.parity_stripes(member)] for member, held in parity.items()
    }


def _present_views(
    layout: GroupLayout, datas_present: Mapping[int, Buffer], sizes: Sequence[int]
) -> dict[int, memoryview]:
    """The surviving members' data, by member, checked against their given lengths."""
    views: dict[int, memoryview] = {}
    for key, buf in datas_present.items():
        i = layout._member(key)
        views[i] = _byte_view(buf, f"data of member {i}")
        if len(views[i]) != sizes[i]:
            raise ErasureError(
                f"data of member {i} is {len(views[i])} bytes but its length is given as {sizes[i]}"
            )
    return views


def _present_parity(
    layout: GroupLayout, parity_present: Mapping[int, Sequence[Buffer]]
) -> dict[tuple[int, int], memoryview]:
    """The surviving parity pieces, by (member, stripe), each member's count checked."""
    t = layout.tolerance
    parity: dict[tuple[int, int], memoryview] = {}
    for key, pieces in parity_present.items():
        i = layout._member(key)
        if len(pieces) != t:
            raise ErasureError(
                f"member {i} should hold {t} parity pieces (one per stripe it protects), "
                f"got {len(pieces)}"
            )
        for s, piece in zip(layout.parity_stripes(i), pieces, strict=True):
            parity[i, s] = _byte_view(piece, f"parity of member {i} for stripe {s}")
    return parity


def _decode_stripe(
    layout: GroupLayout,
    code: ErasureCode,
    s: int,
    views: Mapping[int, memoryview],
    parity: Mapping[tuple[int, int], memoryview],
    sizes: Sequence[int],
    lost: list[int],
) -> list[bytes]:
    """Every data piece of stripe ``s``, in code order, decoded from what survived."""
    g, t = layout.members, layout.tolerance
    stripe = layout.stripe(s)
    size = layout.piece_size(max(sizes))
    present: dict[int, Buffer] = dict(_stripe_pieces(layout, s, views, size))
    for j, member in enumerate(stripe.parity):
        if (member, s) in parity:
            present[code.k + j] = parity[member, s]
    gone = code.n - len(present)
    if gone > t:
        raise ErasureError(
            f"cannot rebuild members {lost}: stripe {s} lost {gone} of its {g} pieces "
            f"(data and parity) but the group tolerates {t}; parity of members "
            f"{[m for m in stripe.parity if (m, s) not in parity]} is missing"
        )
    return code.decode(present, layout.stripe_lengths(sizes, s))


def rebuild_group(
    layout: GroupLayout,
    datas_present: Mapping[int, Buffer],
    parity_present: Mapping[int, Sequence[Buffer]],
    lengths: Sequence[int],
    scheme: Scheme | None = None,
) -> dict[int, bytes]:
    """The data of the members missing from ``datas_present``, rebuilt bit-exactly.

    ``parity_present`` maps a member to its t parity pieces (as :func:`encode_group` returned
    them); a member missing there has lost its parity. ``lengths`` are all G members' data
    lengths (kept in the checkpoint's metadata). Members whose data survived are not returned.
    The lost members' parity pieces are not rebuilt here: re-encode (:func:`encode_group`, or
    the affected stripes) once their data is back to restore full protection.
    """
    g, t = layout.members, layout.tolerance
    sizes = layout._lengths(lengths)
    views = _present_views(layout, datas_present, sizes)
    parity = _present_parity(layout, parity_present)
    lost = sorted(set(range(g)) - views.keys())
    if len(lost) > t:
        raise ErasureError(
            f"cannot rebuild: {len(lost)} of {g} members lost ({lost}) but the group tolerates "
            f"{t} (need the data of any {g - t} of {g} members)"
        )
    if not lost:
        return {}
    code = layout.code(scheme)
    rebuilt: dict[int, list[bytes]] = {i: [b""] * code.k for i in lost}
    for s in layout.stripes():
        stripe = layout.stripe(s)
        if not any(member in rebuilt for member in stripe.data):
            continue
        decoded = _decode_stripe(layout, code, s, views, parity, sizes, lost)
        for position, member in enumerate(stripe.data):
            if member in rebuilt:
                index = layout.piece_of(member, s)
                assert index is not None
                rebuilt[member][index] = decoded[position]
    return {member: b"".join(pieces) for member, pieces in rebuilt.items()}
