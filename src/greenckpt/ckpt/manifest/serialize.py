"""A manifest as a JSON document and back, and the manifest's digest of itself.

Why the digest is checked before anything else: validation catches a manifest that does not
make sense, not one that makes sense but lies (an iteration edited from 110 to 111, a level
changed by bit rot), so a version-2 document's own ``manifest_digest`` — its ``checksum``
algorithm over its canonical JSON — must match before any field is believed. A version-1
document (written before the digest existed) is still read, reported unverified, and its
copies stay version 1 (:func:`manifest_to_json`). Internal to :mod:`greenckpt.ckpt.manifest`;
see docs/design/levels-and-config.md.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from greenckpt.ckpt.manifest.check import (
    checksum_field,
    codec_field,
    created_field,
    format_version,
    got,
    int_field,
    level_field,
    nodes_from_json,
    ranks_from_json,
    redundancy_field,
    str_field,
    tool_field,
)
from greenckpt.ckpt.manifest.document import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LEGACY_VERSION,
    MANIFEST_DIGEST_KEY,
    Manifest,
    ManifestError,
    Variable,
)
from greenckpt.io.checksum import digest_bytes


def _canonical(data: Mapping[str, Any]) -> bytes:
    """The bytes the manifest digest covers: the document without its digest, as canonical
    JSON (sorted keys, no whitespace, ASCII), so indentation or key order in the file do not
    matter but every value does."""
    body = {k: v for k, v in data.items() if k != MANIFEST_DIGEST_KEY}
    try:
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"manifest: not representable as JSON ({exc})") from None
    return text.encode("ascii")


def manifest_digest(data: Mapping[str, Any]) -> str:
    """The digest a manifest document must carry under :data:`MANIFEST_DIGEST_KEY`: its
    ``checksum`` algorithm over :func:`_canonical` (what a tool that edits a manifest on
    purpose recomputes; greenckpt itself never rewrites a committed one)."""
    return digest_bytes(checksum_field(data), _canonical(data))


def _check_own_digest(data: Mapping[str, Any]) -> None:
    """Refuse a version-2 document whose content does not match its own digest, before any
    field is trusted (the fields may be valid and still wrong)."""
    expected = manifest_digest(data)
    recorded = data.get(MANIFEST_DIGEST_KEY)
    if not isinstance(recorded, str) or len(recorded) != len(expected):
        raise ManifestError(
            f"manifest.{MANIFEST_DIGEST_KEY}: expected {len(expected)} lowercase hex digits "
            f"(the {data['checksum']} digest of the manifest itself), "
            f"got {got(data, MANIFEST_DIGEST_KEY)}"
        )
    if recorded != expected:
        raise ManifestError(
            f"manifest.{MANIFEST_DIGEST_KEY}: the manifest does not match its own digest "
            f"({data['checksum']} {expected}, recorded {recorded}): it was edited or damaged "
            "after it was written, so none of its fields can be trusted"
        )


def manifest_from_json(data: Any, *, own_digest: bool = True) -> Manifest:
    """Build a :class:`Manifest` from parsed JSON, validating every field and relation.

    ``own_digest=False`` skips recomputing the document's own digest, for a writer checking
    the document :func:`manifest_to_json` has just sealed (the same bytes hashed twice: 41 ms
    of 8192 ranks' 113); anything read is checked."""
    if not isinstance(data, dict):
        raise ManifestError(
            f"manifest: expected a JSON object at the top level, got {type(data).__name__}"
        )
    version = format_version(data)
    if version == FORMAT_VERSION and own_digest:
        _check_own_digest(data)
    name = str_field(data, "name", "manifest")
    ckpt_id = int_field(data, "id", "manifest", minimum=1)
    level = level_field(data)
    created = created_field(data, "manifest")
    iteration = (
        None
        if data.get("iteration") is None
        else int_field(data, "iteration", "manifest", minimum=0)
    )
    checksum = checksum_field(data)
    codec = codec_field(data)
    nranks = int_field(data, "nranks", "manifest", minimum=1)
    nodes = nodes_from_json(data, nranks)
    return Manifest(
        name=name,
        id=ckpt_id,
        level=level,
        created=created,
        iteration=iteration,
        checksum=checksum,
        codec=codec,
        nranks=nranks,
        nodes=nodes,
        ranks=ranks_from_json(data, nodes, nranks, checksum),
        redundancy=redundancy_field(data),
        tool=tool_field(data),
        format_version=version,
    )


def _variable_to_json(v: Variable) -> dict[str, Any]:
    return {
        "name": v.name,
        "kind": v.kind,
        "dtype": v.dtype,
        "shape": None if v.shape is None else list(v.shape),
        "offset": v.offset,
        "nbytes": v.nbytes,
        "digest": v.digest,
    }


def manifest_to_json(manifest: Manifest, *, keep_version: bool = False) -> dict[str, Any]:
    """The JSON document of a manifest (version :data:`FORMAT_VERSION`, with its digest).

    ``keep_version``: a manifest read from a version-1 file stays version 1, without a digest
    — for copies of a manifest that was read, never for a new one. Why: sealing a copy would
    vouch for fields that nothing verified (a digest says "written like this by greenckpt"),
    and it would claim that the data it describes record their checkpoint, as version-2 data
    do; data written with version-1 manifests have no such record, so every later restart
    reading the sealed copy would refuse a good checkpoint as "does not match the data it
    describes". Kept at version 1, the copy stays what the original is: readable, its data
    verified by their digests, its other fields reported unverified.
    """
    legacy = keep_version and manifest.format_version == LEGACY_VERSION
    doc: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": LEGACY_VERSION if legacy else FORMAT_VERSION,
        "name": manifest.name,
        "id": manifest.id,
        "level": manifest.level,
        "created": manifest.created,
        "iteration": manifest.iteration,
        "checksum": manifest.checksum,
        "codec": manifest.codec,
        "nranks": manifest.nranks,
        "nodes": [list(n) for n in manifest.nodes],
        # the only field that holds a caller's mutable object: copied, so that the digest
        # covers exactly what is written even if the caller's redundancy changes afterwards
        # (the rest is built here from immutable fields; a deepcopy of the whole document
        # took 120 of 170 ms for 8192 ranks)
        "redundancy": copy.deepcopy(dict(manifest.redundancy)),
        "tool": manifest.tool,
        "ranks": [
            {
                "rank": r.rank,
                "node": r.node,
                "file": r.file,
                "logical_bytes": r.logical_bytes,
                "stored_bytes": r.stored_bytes,
                "digest": r.digest,
                "variables": [_variable_to_json(v) for v in r.variables],
            }
            for r in manifest.ranks
        ],
    }
    if not legacy:
        doc[MANIFEST_DIGEST_KEY] = manifest_digest(doc)
    return doc
