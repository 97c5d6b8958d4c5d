"""The redundancy of a level: made after the rank files, used to rebuild lost ones.

A level-2 or level-3 checkpoint is a level-1 checkpoint (every rank's file in its node's local
directory) plus redundant data on *other* nodes: a partner copy (:class:`PartnerLevel`) or
erasure-code parity (:class:`ErasureLevel`); levels 1 and 4 have none (:class:`NoRedundancy`).
Each implements :class:`Redundancy`, the one interface the checkpointer uses, and is named by
a scheme registered with :func:`~greenckpt.ckpt.levels.register_scheme` (which also declares
the settings the scheme takes) that a level's spec (:mod:`greenckpt.ckpt.levels`) refers to. The
jobs of a redundancy:

* ``encode`` — after every rank wrote its file into the staging directory and all agreed, make
  the redundant files next to them and describe them for the manifest's ``redundancy`` object
  (collective; it returns the first rank's error on every rank, so that the checkpoint fails
  on every rank together);
* ``extra_bytes`` and ``extra_files`` — what each rank's directory holds for its peers (for
  the space check before a checkpoint, and the check of a rebuilt node directory);
* ``rebuild`` — at recovery, when some ranks' files are missing or corrupt (a node lost, a
  bad disk), write them again from the redundant data, plus the redundant files that were lost
  with them, as hidden temporary files in the node's directory. The caller renames them into
  place only after every rank succeeded, and every rebuilt file is checked against the digest
  the manifest recorded when the checkpoint was written, so a rebuild can never produce data
  that differ from what was checkpointed.

Which node directory receives rebuilt files (the committed one, or a fresh staging directory
when the node lost everything) and the commit afterwards are the caller's job
(:class:`greenckpt.ckpt.api.Checkpointer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from greenckpt.ckpt.agree import LocalFailure, agree_on, fail_if, one_line
from greenckpt.ckpt.comm import Comm
from greenckpt.ckpt.levels import scheme_spec
from greenckpt.ckpt.manifest import Manifest, RankEntry
from greenckpt.ckpt.redundancy.erasure import GroupLayout, Scheme
from greenckpt.ckpt.redundancy.groups import (
    encode_parity,
    erasure_groups,
    parity_name,
    rebuild_data,
)
from greenckpt.ckpt.redundancy.partner import copy_name, inverse, partner_holders
from greenckpt.ckpt.redundancy.scheme import Rebuilt, Redundancy
from greenckpt.ckpt.topology import Topology
from greenckpt.ckpt.transfer import InMemory, shift_file
from greenckpt.io.checksum import file_digest

if TYPE_CHECKING:
    from greenckpt.ckpt.config import LevelConfig

__all__ = [
    "ErasureLevel",
    "NoRedundancy",
    "PartnerLevel",
    "build_redundancy",
    "rebuild_name",
]

REBUILD_PREFIX: Final = ".rebuild-"


def rebuild_name(directory: Path, name: str) -> Path:
    """The hidden temporary name a rebuilt file has until every rank succeeded."""
    return directory / (REBUILD_PREFIX + name)


_NOBODY: Final = -1
"""Subject of an error that concerns no single rank (a whole erasure group)."""


Step = Callable[[], tuple[str | None, int | None]]
"""One step of a rebuild on this rank: its error (None: ok) and whom it is about (None: this
rank), see :func:`_first`."""


def _nothing() -> tuple[str | None, int | None]:
    """The step of a rank with nothing to do, which still takes part in the agreement."""
    return None, None


def _first(comm: Comm, step: Step) -> str | None:
    """Run ``step`` and agree on the error to report (a cause before its echoes), the same on
    every rank (collective).

    It is prefixed with the rank it is *about* — whose data cannot be rebuilt — which is this
    rank unless the step says otherwise: a partner that lost the copy it held reports about
    the copy's owner (naming the holder would blame a rank whose own data may be fine), and
    :data:`_NOBODY` means no prefix (the message names the ranks itself). An exception the
    step raises is about this rank.
    """

    def said() -> None:
        try:
            error, about = step()
        except Exception as exc:  # this rank's failure, reported on every rank
            raise LocalFailure(f"rank {comm.rank}: {one_line(exc)}") from exc
        subject = comm.rank if about is None else about
        if error:
            fail_if(error if subject == _NOBODY else f"rank {subject}: {error}")

    bad = agree_on(comm, said, causes_first=True).failure
    return None if bad is None else bad.error


class NoRedundancy:
    """The rank files alone (levels 1 and 4): nothing to encode, nothing to rebuild from."""

    rebuilds = False

    @classmethod
    def build(
        cls, comm: Comm, topology: Topology, settings: LevelConfig, checksum: str
    ) -> NoRedundancy:
        """The scheme ``none`` (a :data:`~greenckpt.ckpt.redundancy.scheme.SchemeFactory`)."""
        return cls()

    def encode(
        self, stage: Path, entries: Sequence[RankEntry]
    ) -> tuple[dict[str, Any], str | None]:
        """Nothing to make: an empty ``redundancy`` object (not collective)."""
        return {}, None

    def extra_bytes(self, sizes: Sequence[int]) -> list[int]:
        """No rank holds anything for another."""
        return [0] * len(sizes)

    def extra_files(self, manifest: Manifest, rank: int) -> list[str]:
        """No redundant files."""
        return []

    def rebuild(self, manifest: Manifest, lost: set[int], target: Path) -> tuple[Rebuilt, str]:
        """Never called (``rebuilds`` is false); says why if it were."""
        return [], "this level keeps no redundancy to rebuild from"


class PartnerLevel:
    """Level 2: each rank's file copied to its partner on another node (see
    :mod:`greenckpt.ckpt.redundancy.partner`)."""

    def __init__(self, comm: Comm, topology: Topology, checksum: str) -> None:
        self.comm = comm
        self.checksum = checksum
        self.topology = topology
        self.holders = partner_holders(topology)
        self.owners = inverse(self.holders)

    @classmethod
    def build(
        cls, comm: Comm, topology: Topology, settings: LevelConfig, checksum: str
    ) -> PartnerLevel:
        """The scheme ``partner`` (a :data:`~greenckpt.ckpt.redundancy.scheme.SchemeFactory`)."""
        return cls(comm, topology, checksum)

    rebuilds = True
    reads_memory = True

    def encode(
        self, stage: Path, entries: Sequence[RankEntry], memory: InMemory | None = None
    ) -> tuple[dict[str, Any], str | None]:
        """Every rank's file copied to its partner (collective), sent from ``memory`` when
        given (no read of the file just written): the manifest's ``redundancy`` object, or
        the first rank's error."""
        bad = agree_on(
            self.comm, lambda: self.protect(stage, entries, memory), causes_first=True
        ).failure
        return ({}, str(bad)) if bad is not None else (self.redundancy(), None)

    def extra_bytes(self, sizes: Sequence[int]) -> list[int]:
        """Each rank's directory also holds the copy of its owner's file."""
        return [sizes[self.owners[r]] for r in range(len(sizes))]

    def extra_files(self, manifest: Manifest, rank: int) -> list[str]:
        """The copy of ``rank``'s owner's file."""
        return [copy_name(manifest.ranks[self.owners[rank]].file)]

    def redundancy(self) -> dict[str, Any]:
        """The manifest's ``redundancy`` object: who holds whose copy."""
        return {"scheme": "partner", "holders": list(self.holders)}

    def protect(
        self, stage: Path, entries: Sequence[RankEntry], memory: InMemory | None = None
    ) -> None:
        """Send this rank's file (or ``memory``, the same bytes) to its partner and store the
        copy it receives (collective); :class:`LocalFailure` with this rank's error if it
        cannot."""
        me = self.comm.rank
        owner = entries[self.owners[me]]
        got = shift_file(
            self.comm,
            memory if memory is not None else stage / entries[me].file,
            self.holders[me],
            stage / copy_name(owner.file),
            owner.rank,
            self.checksum,
            cached=False,  # read back only if a node is lost
        )
        if got.error is not None:
            raise LocalFailure(f"partner copy of rank {owner.rank}: {got.error}")
        if got.digest != owner.digest:
            raise LocalFailure(
                f"partner copy of rank {owner.rank} arrived corrupt (digest mismatch: "
                "damaged on the way, or the rank's data changed while it checkpointed)"
            )

    def _check(self, manifest: Manifest) -> str | None:
        red = manifest.redundancy
        holders = red.get("holders")
        if red.get("scheme") != "partner" or list(self.holders) != holders:
            return (
                f"its partner map {holders} is not this job's {list(self.holders)} (written "
                "with another node layout)"
            )
        return None

    def rebuild(self, manifest: Manifest, lost: set[int], target: Path) -> tuple[Rebuilt, str]:
        """Rebuild the files of the ``lost`` ranks from their partners' copies, then re-make
        the copies the lost ranks held (collective). Returns this rank's temporary files and
        '' on success, or the first error (the same on every rank)."""
        problem = self._check(manifest)
        if problem is not None:
            return [], problem
        me = self.comm.rank
        entries = manifest.ranks
        mine = entries[me]
        done: Rebuilt = []
        recv = rebuild_name(target, mine.file) if me in lost else None
        first = _first(self.comm, lambda: self._restore(manifest, lost, target, recv, done))
        if first is not None:
            return done, first
        own = recv if recv is not None else target / mine.file
        return done, _first(
            self.comm, lambda: self._remake(manifest, lost, target, own, done)
        ) or ""

    def _restore(
        self, manifest: Manifest, lost: set[int], target: Path, recv: Path | None, done: Rebuilt
    ) -> tuple[str | None, int | None]:
        """1. lost ranks get their file back (into ``recv``) from the rank holding its copy
        (collective): this rank's error and whom it is about."""
        me = self.comm.rank
        entries = manifest.ranks
        mine = entries[me]
        owner = entries[self.owners[me]]
        send = target / copy_name(owner.file) if owner.rank in lost else None
        # a copy this rank should send but does not hold: an error about its owner's data
        # (a holder on a lost node has only a fresh staging directory, whose path means
        # nothing to the user)
        copy_lost = None
        if send is not None and not send.is_file():
            node = self.topology.node_of(me)
            copy_lost = f"its partner copy, kept by rank {me} on node {node}, is lost too"
            send = None
        got = shift_file(self.comm, send, owner.rank, recv, self.holders[me], self.checksum)
        error, about = None, None
        if recv is not None:
            if got.error is not None:
                error = f"its partner copy on rank {self.holders[me]} is unusable: {got.error}"
            elif got.digest != mine.digest:
                error = f"its partner copy on rank {self.holders[me]} is corrupt"
                recv.unlink(missing_ok=True)
            else:
                done.append((recv, target / mine.file))
        if copy_lost is not None or got.send_error is not None:
            # what fails is the copy this rank holds for its owner: the owner's data are lost
            # (a file this rank received stays in ``done``, for the caller to remove)
            error = copy_lost or f"its partner copy on rank {me} is unusable: {got.send_error}"
            about = owner.rank
        return error, about

    def _remake(
        self, manifest: Manifest, lost: set[int], target: Path, own: Path, done: Rebuilt
    ) -> tuple[str | None, int | None]:
        """2. the copies a lost rank held are re-made from the (now complete) originals
        (``own``: this rank's; collective): this rank's error."""
        me = self.comm.rank
        owner = manifest.ranks[self.owners[me]]
        send = own if self.holders[me] in lost else None
        recv = rebuild_name(target, copy_name(owner.file)) if me in lost else None
        got = shift_file(self.comm, send, self.holders[me], recv, owner.rank, self.checksum)
        error = None
        if recv is not None:
            if got.error is not None or got.digest != owner.digest:
                error = (
                    f"could not re-make the partner copy of rank {owner.rank}: "
                    f"{got.error or 'digest mismatch'}"
                )
                recv.unlink(missing_ok=True)
            else:
                done.append((recv, target / copy_name(owner.file)))
        return error, None


class ErasureLevel:
    """Level 3: parity over groups of ranks on different nodes (see
    :mod:`greenckpt.ckpt.redundancy.groups`). Construction is collective (it splits the
    communicator)."""

    def __init__(
        self, comm: Comm, topology: Topology, group_size: int, parity: int, checksum: str
    ) -> None:
        self.comm = comm
        self.checksum = checksum
        self.groups = erasure_groups(topology, group_size, parity)
        self.index = next(i for i, g in enumerate(self.groups) if comm.rank in g)
        self.group = self.groups[self.index]
        self.layout = GroupLayout(len(self.group), parity)
        self.scheme: Scheme = self.layout.code().scheme
        self.gcomm = comm.split(self.index, comm.rank)

    @classmethod
    def build(
        cls, comm: Comm, topology: Topology, settings: LevelConfig, checksum: str
    ) -> ErasureLevel:
        """The scheme ``erasure`` (a :data:`~greenckpt.ckpt.redundancy.scheme.SchemeFactory`): its
        ``group_size`` and ``parity`` settings (collective)."""
        values = settings.settings
        group_size, parity = cast(int, values["group_size"]), cast(int, values["parity"])
        return cls(comm, topology, group_size, parity, checksum)

    rebuilds = True
    reads_memory = True

    def encode(
        self, stage: Path, entries: Sequence[RankEntry], memory: InMemory | None = None
    ) -> tuple[dict[str, Any], str | None]:
        """Every group's parity, each rank writing its parity file (collective), its data
        read from ``memory`` when given (no read of the file just written): the manifest's
        ``redundancy`` object, or the first rank's error."""
        infos = agree_on(self.comm, lambda: self.protect(stage, entries, memory), causes_first=True)
        if infos.failure is not None:
            return {}, str(infos.failure)
        return self.redundancy([info or {} for info in infos.values]), None

    def extra_bytes(self, sizes: Sequence[int]) -> list[int]:
        """Each rank's directory also holds its parity piece: the group's tolerance times
        the piece size its largest member needs."""
        extra = [0] * len(sizes)
        tolerance = self.layout.tolerance
        for group in self.groups:
            piece = GroupLayout(len(group), tolerance).piece_size(max(sizes[r] for r in group))
            for r in group:
                extra[r] = tolerance * piece
        return extra

    def extra_files(self, manifest: Manifest, rank: int) -> list[str]:
        """``rank``'s parity file."""
        return [parity_name(manifest.ranks[rank].file)]

    def _lengths(self, entries: Sequence[RankEntry]) -> list[int]:
        return [entries[r].stored_bytes for r in self.group]

    def redundancy(self, parity: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The manifest's ``redundancy`` object: code, groups and every rank's parity file."""
        return {
            "scheme": self.scheme,
            "parity": self.layout.tolerance,
            "groups": [list(g) for g in self.groups],
            "files": list(parity),
        }

    def protect(
        self, stage: Path, entries: Sequence[RankEntry], memory: InMemory | None = None
    ) -> dict[str, Any]:
        """Compute this group's parity from this rank's file (or ``memory``, the same
        bytes) and write this rank's parity file (collective). Returns its description for
        the manifest (:class:`LocalFailure` with this rank's error if it cannot)."""
        mine = entries[self.comm.rank]
        path = stage / parity_name(mine.file)
        nbytes, digest, error = encode_parity(
            self.gcomm,
            self.layout,
            self._lengths(entries),
            memory if memory is not None else stage / mine.file,
            path,
            self.checksum,
            scheme=self.scheme,
        )
        if error is not None:
            raise LocalFailure(f"parity of group {list(self.group)}: {error}")
        return {"file": path.name, "bytes": nbytes, "digest": digest}

    def _parity_of(self, manifest: Manifest) -> tuple[list[dict[str, Any]], str | None]:
        red = manifest.redundancy
        files = red.get("files")
        if (
            red.get("scheme") != self.scheme
            or red.get("parity") != self.layout.tolerance
            or red.get("groups") != [list(g) for g in self.groups]
            or not isinstance(files, list)
            or len(files) != manifest.nranks
            or not all(isinstance(f, dict) for f in files)
        ):
            return [], (
                f"its erasure groups ({red.get('scheme')}, parity {red.get('parity')}, groups "
                f"{red.get('groups')}) are not this job's ({self.scheme}, parity "
                f"{self.layout.tolerance}, groups {[list(g) for g in self.groups]})"
            )
        return files, None

    def rebuild(self, manifest: Manifest, lost: set[int], target: Path) -> tuple[Rebuilt, str]:
        """Rebuild the files of the ``lost`` ranks from their groups' data and parity, then
        their parity files (collective). Returns this rank's temporary files and '' on
        success, or the first error (the same on every rank)."""
        files, problem = self._parity_of(manifest)
        if problem is not None:
            return [], problem
        me = self.comm.rank
        mine = manifest.ranks[me]
        lost_members = [i for i, r in enumerate(self.group) if r in lost]
        if not lost_members:  # nothing to do in this group, but stay in step with the others
            first = _first(self.comm, _nothing)
            if first is not None:
                return [], first
            return [], _first(self.comm, _nothing) or ""
        my_parity = target / parity_name(mine.file)
        intact = me not in lost and self._parity_intact(my_parity, files[me], manifest.checksum)
        ok = self.gcomm.allgather(intact)
        out = rebuild_name(target, mine.file) if me in lost else None
        done: Rebuilt = []

        def restore() -> tuple[str | None, int | None]:
            digest_out, error, about = self._rebuild_members(
                manifest, lost_members, ok, target, out
            )
            if out is not None and error is None:
                if digest_out != mine.digest:
                    error = "its rebuilt data do not match the checkpoint's digest"
                    out.unlink(missing_ok=True)
                else:
                    done.append((out, target / mine.file))
            return error, about

        first = _first(self.comm, restore)
        if first is not None:
            return done, first
        source = out if out is not None else target / mine.file

        def reencode() -> tuple[str | None, int | None]:
            return self._reencode(manifest, files[me], ok, source, my_parity, done), None

        return done, _first(self.comm, reencode) or ""

    @staticmethod
    def _parity_intact(path: Path, recorded: dict[str, Any], checksum: str) -> bool:
        """Whether this rank's parity file is the one the manifest records."""
        try:
            found, nread = file_digest(path, checksum)
        except OSError:
            return False
        return found == recorded.get("digest") and nread == recorded.get("bytes")

    def _rebuild_members(
        self,
        manifest: Manifest,
        lost_members: list[int],
        ok: list[bool],
        target: Path,
        out: Path | None,
    ) -> tuple[str | None, str | None, int | None]:
        """Rebuild the lost members' data (collective over the group): (the rebuilt file's
        digest on a lost member, this rank's error, whom the error is about)."""
        mine = manifest.ranks[self.comm.rank]
        if len(lost_members) > self.layout.tolerance:
            # said here, in ranks, rather than by rebuild_data in group members
            gone = [self.group[i] for i in lost_members]
            message = (
                f"ranks {', '.join(map(str, gone))} of erasure group {list(self.group)} lost "
                f"their files, but the group tolerates {self.layout.tolerance} lost member"
                f"{'s' if self.layout.tolerance > 1 else ''} (parity = {self.layout.tolerance})"
            )
            return None, message, _NOBODY
        digest, error = rebuild_data(
            self.gcomm,
            self.layout,
            self._lengths(manifest.ranks),
            lost_members,
            ok,
            target / mine.file,
            target / parity_name(mine.file),
            out,
            manifest.checksum,
            scheme=self.scheme,
        )
        return digest, error, None

    def _reencode(
        self,
        manifest: Manifest,
        recorded: dict[str, Any],
        ok: list[bool],
        source: Path,
        my_parity: Path,
        done: Rebuilt,
    ) -> str | None:
        """Encode again the parity the group's members lost (collective over the group),
        checked against the manifest's record; this rank's error."""
        roots = [i for i, good in enumerate(ok) if not good]
        tmp = rebuild_name(my_parity.parent, my_parity.name)
        nbytes, digest, error = encode_parity(
            self.gcomm,
            self.layout,
            self._lengths(manifest.ranks),
            source,
            tmp,
            manifest.checksum,
            roots=roots,
            scheme=self.scheme,
        )
        if self.gcomm.rank in roots and error is None:
            if digest != recorded.get("digest") or nbytes != recorded.get("bytes"):
                error = "its re-encoded parity does not match the checkpoint's digest"
                tmp.unlink(missing_ok=True)
            else:
                done.append((tmp, my_parity))
        return error


def build_redundancy(
    scheme: str, comm: Comm, topology: Topology, settings: LevelConfig, checksum: str
) -> Redundancy:
    """The redundancy named ``scheme`` for one level of this job (collective)."""
    return scheme_spec(scheme).build_factory()(comm, topology, settings, checksum)
