"""Level 3: erasure-coded groups of ranks on different nodes, encoded and rebuilt over MPI.

Why: a partner copy (level 2) doubles the node-local storage and the traffic; an erasure code
over a group of G members on G different nodes protects against the loss of t of them for about
t / (G − t) of the data (FTI's Reed–Solomon L3 in wu2018, the XOR-encoded diskless checkpoint of
saito2013's slides). The arithmetic and the rotating placement of data and parity pieces are in
:mod:`greenckpt.ckpt.redundancy.erasure`; this module forms the groups and moves the pieces:

* **Groups** (:func:`erasure_groups`): ranks are ordered by their position on their node, then
  by node (``node0[0], node1[0], …, node0[1], node1[1], …``) and cut into groups of G, so the
  members of a group are consecutive in that order and sit on different nodes whenever there are
  at least G nodes. A group's size does not depend on the number of ranks; a short last group
  with t or fewer members cannot be coded and joins the previous group. Every group is checked
  to have its members on different nodes (one node lost = one member lost).
* **Encoding** (:func:`encode_parity`): each member cuts its stored checkpoint file into k = G − t
  pieces; segment by segment, every member holding parity receives its stripe's data pieces
  in one all-to-all exchange over the group's communicator (all members encode at the same
  time, each only the parity piece it stores) and writes it into its parity file.
* **Rebuilding** (:func:`rebuild_data`): a lost member receives, for each stripe where it held
  data, the surviving pieces (data and parity) segment by segment — one all-to-all per segment
  in which every survivor sends its piece to it — and decodes its own. Its parity is then
  re-encoded with :func:`encode_parity` (``roots``), so the group is fully protected again.

Every member takes part in every exchange (sending no piece when it has nothing for that
round): the loops depend only on values all members know (the group's file lengths, who is
lost), so nobody can wait on a peer that skipped a round. The exchanges move raw bytes between
buffers reused for the whole file, so a member holds a bounded few MiB
(:func:`group_segment`) whatever the size of the files.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Final

from greenckpt.ckpt.agree import PEER, one_line
from greenckpt.ckpt.comm import Comm
from greenckpt.ckpt.redundancy.erasure import (
    Buffer,
    ErasureCode,
    ErasureError,
    GroupLayout,
    Scheme,
    Stripe,
)
from greenckpt.ckpt.topology import Topology
from greenckpt.ckpt.transfer import DIRECT_ALIGN, SEGMENT, InMemory, SegmentWriter, read_into
from greenckpt.errors import GreenckptError, InvalidValueError
from greenckpt.io.checksum import file_digest

__all__ = [
    "GroupError",
    "encode_parity",
    "erasure_groups",
    "group_segment",
    "parity_name",
    "rebuild_data",
]

PARITY_PREFIX: Final = "parity-"
_GATHER_BUDGET: Final = 32 * 1024 * 1024
"""Bytes of exchange buffers a member may hold: one segment per member to send and one per
member received (with the writer's and the coder's few segments, an erasure level stays within
the library's 64 MiB beyond the protected data whatever the group size)."""


class GroupError(GreenckptError, ValueError):
    """The job's layout cannot form erasure groups of members on different nodes."""


def parity_name(rank_file: str) -> str:
    """File name of a member's parity pieces (next to its rank file)."""
    return PARITY_PREFIX + rank_file


def group_segment(members: int) -> int:
    """Segment size for a group: a member holds one segment per member to send and one per
    member received. Why both count: with groups of 8 and the budget spent on the received
    side alone, a level-3 checkpoint held 80 MiB and a rebuild 110 MiB beyond the data
    (benchmarks/bench_ckpt_memory.py --ranks 8); groups of up to 4 keep full segments."""
    segment = min(SEGMENT, _GATHER_BUDGET // (2 * members))
    # whole pages: a parity piece's segments then start where O_DIRECT can write them
    return max(64 * 1024, segment - segment % DIRECT_ALIGN)


def erasure_groups(
    topology: Topology, group_size: int, tolerance: int
) -> tuple[tuple[int, ...], ...]:
    """The job's erasure groups (ranks ascending in each), members on different nodes."""
    if group_size <= tolerance:
        raise GroupError(
            f"an erasure group of {group_size} tolerates at most {group_size - 1} lost members, "
            f"not parity = {tolerance}; set parity below group_size"
        )
    longest = max(len(ranks) for ranks in topology.nodes)
    order = [ranks[j] for j in range(longest) for ranks in topology.nodes if j < len(ranks)]
    groups = [order[s : s + group_size] for s in range(0, len(order), group_size)]
    if len(groups) > 1 and len(groups[-1]) <= tolerance:
        groups[-2].extend(groups.pop())
    if len(groups[-1]) <= tolerance:
        raise GroupError(
            f"level 3 needs more than parity = {tolerance} ranks, this job has "
            f"{topology.nranks}; use fewer parity pieces or more ranks"
        )
    for group in groups:
        nodes = [topology.node_of(r) for r in group]
        if len(set(nodes)) != len(nodes):
            raise GroupError(
                f"level 3 needs each group's members on different nodes, but group_size "
                f"{group_size} with {len(topology.nodes)} nodes puts ranks {sorted(group)} on "
                f"nodes {nodes}; use group_size <= the number of nodes (emulate nodes with "
                "ranks_per_node on one host)"
            )
    return tuple(tuple(sorted(g)) for g in groups)


def _create_writer(
    path: Path, checksum: str, *, cached: bool = True
) -> tuple[SegmentWriter | None, str | None]:
    """A writer for ``path``, or why it cannot be created (reported to the group, not raised:
    every member must still take part in the exchange)."""
    try:
        return SegmentWriter(path, checksum, cached=cached), None
    except OSError as exc:
        return None, f"cannot create {path}: {one_line(exc)}"


def _segments(length: int, segment: int) -> range:
    return range(0, length, segment)


def _piece_segment(
    layout: GroupLayout,
    lengths: Sequence[int],
    member: int,
    stripe: int,
    size: int,
    off: int,
    segment: int,
) -> tuple[int, int]:
    """(file offset, length) of ``member``'s data in ``stripe`` at piece offset ``off``."""
    piece = layout.piece_of(member, stripe)
    assert piece is not None
    start, length = layout.piece_range(lengths[member], piece, size)
    return start + off, max(0, min(segment, length - off))


def _unpack(buffer: bytearray, counts: Sequence[int]) -> list[memoryview | None]:
    """The pieces packed one after the other in ``buffer`` (None where a count is -1)."""
    view, at = memoryview(buffer), 0
    pieces: list[memoryview | None] = []
    for n in counts:
        pieces.append(None if n < 0 else view[at : at + n])
        at += max(n, 0)
    return pieces


def _open_read(path: Path) -> tuple[int, str | None]:
    """A read-only descriptor of ``path``, or -1 and why it cannot be read."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC), None
    except OSError as exc:
        return -1, f"cannot read {path}: {one_line(exc)}"


def _write_parity(
    code: ErasureCode,
    stripe: Stripe,
    s: int,
    root: int,
    pieces: Sequence[Buffer | None],
    writer: SegmentWriter,
    at: int,
    length: int,
) -> str | None:
    """Encode ``root``'s parity of one segment of stripe ``s`` from the received ``pieces``
    and write it at ``at``, zero-padded to ``length``: the error, or None (local work only:
    an error must not stop this rank's exchanges)."""
    missing = [m for m in stripe.data if pieces[m] is None]
    if missing:
        return PEER + f"members {missing} sent no data for stripe {s}"
    blocks: list[Buffer] = [pieces[m] or b"" for m in stripe.data]
    try:
        # encoded straight into the writer's aligned buffer: written from there, no copy
        out = memoryview(writer.buffer(length))[:length]
        (encoded,) = code.encode(blocks, only=stripe.parity.index(root), into=out)
        out[len(encoded) :] = bytes(length - len(encoded))  # the buffer held an older piece
        writer.write_at(at, out)
    except (OSError, ErasureError) as exc:
        return one_line(exc)
    return None


def _close_parity(
    writer: SegmentWriter | None, error: str | None, parity: Path | None
) -> tuple[int, str | None, str | None]:
    """Keep the parity file if it was written without error: (bytes, digest, error)."""
    if writer is None:
        return 0, None, error
    if error is not None:
        writer.abandon()
        return 0, None, error
    try:
        digest = writer.close()
    except OSError as exc:  # an fsync that fails (EIO, ENOSPC) is this member's error
        writer.path.unlink(missing_ok=True)
        return 0, None, f"cannot write {parity}: {one_line(exc)}"
    return writer.size, digest, None


def _in_place(
    memory: InMemory | None, wanted: Sequence[tuple[int, int, int]], members: int
) -> tuple[memoryview, list[int], list[int]] | None:
    """The protected buffer that holds every piece of ``wanted`` (root, offset, length), with
    each root's count and the piece's offset in that buffer: the pieces are sent from where
    they lie, with no copy into a send buffer (an empty one when every piece is empty). None
    when there is no memory, the pieces lie in different buffers (the last one crosses into
    the pickled state), or an offset is past what MPI's ``int`` displacements reach: the
    caller packs them."""
    if memory is None:
        return None
    base: memoryview | None = None
    counts, displs = [-1] * members, [0] * members
    for root, at, n in wanted:
        counts[root] = k = max(min(n, memory.size - at), 0)
        if not k:
            continue
        found = memory.holder(at, k)
        if found is None or found[1] + k > _MAX_DISPLACEMENT:
            return None
        if base is not None and found[0] is not base:
            return None
        base, displs[root] = found
    # nothing to send (past the end of this member's pieces): no buffer either
    return (memoryview(b"") if base is None else base), counts, displs


_MAX_DISPLACEMENT: Final = 2**31 - 1
"""MPI's displacements and counts are C ``int``s."""


def _pack(
    memory: InMemory | None,
    fd: int,
    data: Path | InMemory | None,
    wanted: Sequence[tuple[int, int, int]],
    send: bytearray,
    read_error: str | None,
    members: int,
) -> tuple[list[int], str | None]:
    """Copy the pieces of ``wanted`` one after the other into ``send``, from memory or the
    file: the counts per member (-1: nothing sent), and the read error if one happened."""
    counts = [-1] * members
    packed = 0
    for root, at, n in wanted:
        if read_error is not None:  # the first error is the one reported
            break
        into = memoryview(send)[packed:]
        try:
            got = memory.read_into(at, into, n) if memory else read_into(fd, at, into, n)
        except OSError as exc:
            read_error = f"cannot read {data}: {one_line(exc)}"
            continue
        counts[root] = got
        packed += got
    return counts, read_error


def _exchange(
    comm: Comm,
    send: bytes | bytearray | memoryview,
    counts: list[int],
    recv: bytearray,
    displs: Sequence[int] | None = None,
) -> tuple[list[int] | None, str | None]:
    """``comm.alltoall_into``, with more bytes than ``recv`` holds (peers that disagree on the
    layout) made this member's error rather than an exception: the exchange is complete on
    every rank then, and this member goes on taking part in the ones that follow, so no rank
    waits for it and the error reaches every rank through the checkpoint's agreement."""
    try:
        return comm.alltoall_into(send, counts, recv, displs), None
    except InvalidValueError as exc:
        return None, one_line(exc)


def encode_parity(
    comm: Comm,
    layout: GroupLayout,
    lengths: Sequence[int],
    data: Path | InMemory | None,
    parity: Path | None,
    checksum: str,
    *,
    roots: Collection[int] | None = None,
    scheme: Scheme | None = None,
) -> tuple[int, str | None, str | None]:
    """Compute and write parity pieces (collective over the group's ``comm``).

    ``lengths`` are every member's stored file length; ``data`` is this member's file (None if
    it has none, which is an error for its peers), or the same bytes as they sit in memory
    (:class:`~greenckpt.ckpt.transfer.InMemory`: no read of the file just written);
    ``parity`` is where this member's parity pieces go when it is in ``roots`` (default: every
    member). Returns (parity bytes written, their digest, this member's error or None).
    """
    me = comm.rank
    size = layout.piece_size(max(lengths))
    segment = group_segment(layout.members)
    code = layout.code(scheme)
    targets = set(range(layout.members) if roots is None else roots)
    # read_error: this member cannot send its data (peers see it); error: it cannot compute
    # or store its parity
    memory = data if isinstance(data, InMemory) else None
    fd, read_error = (-1, None) if not isinstance(data, Path) else _open_read(data)
    writer, error = (None, None)
    if me in targets and parity is not None:  # parity is read back only if a member is lost
        writer, error = _create_writer(parity, checksum, cached=False)
    # the pieces this member receives, packed in member order (reused); those it sends go
    # from the protected memory where they lie, else packed into ``send`` (made when needed)
    send: bytearray | None = None
    recv = bytearray(layout.members * segment)
    try:
        # every round, each target member receives the pieces of its own stripe at once (one
        # all-to-all): the members encode side by side, none waits for another's turn
        for index in range(layout.tolerance):
            stripes = {r: layout.parity_stripes(r)[index] for r in targets}
            for off in _segments(size, segment):
                wanted = []  # (root, offset in the file, length) of the pieces this member sends
                for root, s in sorted(stripes.items()):
                    readable = fd >= 0 or memory is not None
                    if me not in layout.stripe(s).data or not readable or read_error is not None:
                        continue
                    at, n = _piece_segment(layout, lengths, me, s, size, off, segment)
                    wanted.append((root, at, n))
                in_place = _in_place(memory, wanted, layout.members)
                if in_place is not None:
                    got, problem = _exchange(comm, *in_place[:2], recv, in_place[2])
                else:
                    send = send if send is not None else bytearray(len(recv))
                    counts, read_error = _pack(
                        memory, fd, data, wanted, send, read_error, layout.members
                    )
                    got, problem = _exchange(comm, send, counts, recv)
                error = error or problem
                if got is None or me not in stripes or writer is None or error is not None:
                    continue
                s = stripes[me]
                length = min(segment, size - off)
                error = _write_parity(
                    code,
                    layout.stripe(s),
                    s,
                    me,
                    _unpack(recv, got),
                    writer,
                    index * size + off,
                    length,
                )
    finally:
        if fd >= 0:
            os.close(fd)
    return _close_parity(writer, read_error or error, parity)


def _open_survivor(data: Path | None, parity: Path | None) -> tuple[dict[str, int], str | None]:
    """A surviving member's data and parity files opened for reading, by kind; an error
    (the last file that cannot be read) or None."""
    fds: dict[str, int] = {}
    error: str | None = None
    for key, path in (("data", data), ("parity", parity)):
        if path is not None:
            fd, failed = _open_read(path)
            if fd >= 0:
                fds[key] = fd
            error = failed or error
    return fds, error


def _survivor_piece(
    layout: GroupLayout,
    lengths: Sequence[int],
    fds: dict[str, int],
    me: int,
    s: int,
    at: tuple[int, int, int, int],
    out: bytearray,
) -> int:
    """Read what surviving member ``me`` sends for one segment of stripe ``s`` into the start
    of ``out``: its data piece, or its parity piece (``longest`` bytes); how many bytes, or -1
    when it sends nothing. ``at`` is (piece size, offset, segment, longest). Raises OSError
    when its file cannot be read."""
    size, off, segment, longest = at
    stripe = layout.stripe(s)
    if me in stripe.data and "data" in fds:
        start, n = _piece_segment(layout, lengths, me, s, size, off, segment)
        return read_into(fds["data"], start, out, n)
    if me in stripe.parity and "parity" in fds:
        index = layout.parity_stripes(me).index(s)
        return read_into(fds["parity"], index * size + off, out, longest)
    return -1


def _present(
    code: ErasureCode,
    stripe: Stripe,
    pieces: Sequence[Buffer | None],
    seg_lengths: Sequence[int],
    longest: int,
) -> dict[int, Buffer]:
    """The received pieces a decode can use (those of the expected length), by code index."""
    present: dict[int, Buffer] = {}
    for q, member in enumerate(stripe.data):
        piece = pieces[member]
        if piece is not None and len(piece) == seg_lengths[q]:
            present[q] = piece
    for j, member in enumerate(stripe.parity):
        piece = pieces[member]
        if piece is not None and len(piece) == longest:
            present[code.k + j] = piece
    return present


def _write_rebuilt(
    code: ErasureCode,
    stripe: Stripe,
    s: int,
    root: int,
    present: dict[int, Buffer],
    seg_lengths: Sequence[int],
    writer: SegmentWriter,
    at: int,
) -> str | None:
    """Decode ``root``'s piece of one segment of stripe ``s`` and write it at ``at``: the
    error, or None (local work only: an error must not stop this rank's exchanges)."""
    try:
        decoded = code.decode(present, seg_lengths)
        writer.write_at(at, decoded[stripe.data.index(root)])
    except (OSError, ErasureError) as exc:
        return f"stripe {s}: {one_line(exc)}"
    return None


def _close_rebuilt(
    writer: SegmentWriter | None, error: str | None, out: Path | None, checksum: str, length: int
) -> tuple[str | None, str | None]:
    """Keep a lost member's rebuilt file if it is whole: (its digest, error)."""
    if writer is None:
        return None, error
    if error is not None:
        writer.abandon()
        return None, error
    try:
        writer.close()
        # pieces arrive stripe by stripe, not in file order: hash the result once more
        digest, nread = file_digest(writer.path, checksum)
    except OSError as exc:
        writer.path.unlink(missing_ok=True)
        return None, f"cannot write {out}: {one_line(exc)}"
    if nread != length:
        writer.path.unlink(missing_ok=True)
        return None, f"rebuilt {nread} of {length} bytes"
    return digest, None


def rebuild_data(
    comm: Comm,
    layout: GroupLayout,
    lengths: Sequence[int],
    lost: Sequence[int],
    parity_ok: Sequence[bool],
    data: Path | None,
    parity: Path | None,
    out: Path | None,
    checksum: str,
    *,
    scheme: Scheme | None = None,
) -> tuple[str | None, str | None]:
    """Rebuild the data files of the ``lost`` members (collective over the group's ``comm``).

    Surviving members send their data pieces (``data``) and, where ``parity_ok``, their parity
    pieces (``parity``); each lost member writes its rebuilt file to ``out``. Returns (digest of
    the rebuilt file on a lost member, this member's error or None).
    """
    me = comm.rank
    g = layout.members
    if len(lost) > layout.tolerance:
        return None, (
            f"{len(lost)} members of a group of {g} are lost (members {list(lost)}) but it "
            f"tolerates {layout.tolerance}"
        )
    size = layout.piece_size(max(lengths))
    segment = group_segment(g)
    code = layout.code(scheme)
    fds: dict[str, int] = {}
    error: str | None = None
    if me not in lost:
        fds, error = _open_survivor(data, parity if parity_ok[me] else None)
    writer: SegmentWriter | None = None
    if me in lost and out is not None:
        writer, failed = _create_writer(out, checksum)
        error = failed or error
    # a survivor sends one piece per round, to the member being rebuilt: one all-to-all
    # (counts, then bytes into reused buffers, no pickling); only lost members receive
    send = bytearray(segment)
    recv = bytearray(g * segment if me in lost else 0)
    try:
        for root in sorted(lost):
            for s in layout.stripes():
                if layout.piece_of(root, s) is None:
                    continue
                stripe = layout.stripe(s)
                _, own_len = _piece_segment(layout, lengths, root, s, size, 0, size)
                for off in _segments(own_len, segment):
                    seg_lengths = [
                        _piece_segment(layout, lengths, d, s, size, off, segment)[1]
                        for d in stripe.data
                    ]
                    longest = max(seg_lengths)
                    counts = [-1] * g  # -1: no piece (none to send, or an error)
                    if me not in lost and error is None:
                        try:
                            counts[root] = _survivor_piece(
                                layout, lengths, fds, me, s, (size, off, segment, longest), send
                            )
                        except OSError as exc:
                            error = one_line(exc)
                    got, problem = _exchange(comm, send, counts, recv)
                    error = error or problem
                    if got is None or me != root or writer is None or error is not None:
                        continue
                    at, _ = _piece_segment(layout, lengths, root, s, size, off, segment)
                    present = _present(code, stripe, _unpack(recv, got), seg_lengths, longest)
                    error = _write_rebuilt(code, stripe, s, root, present, seg_lengths, writer, at)
    finally:
        for fd in fds.values():
            os.close(fd)
    return _close_rebuilt(writer, error, out, checksum, lengths[me])
