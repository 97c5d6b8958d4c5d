"""The checkpoint manifest: round trip, strict validation with JSON paths, atomic files."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenckpt.ckpt.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_NAME,
    VARIABLE_KINDS,
    Manifest,
    ManifestError,
    RankEntry,
    Variable,
    manifest_from_json,
    manifest_to_json,
    read_manifest,
    utc_now_iso,
    write_manifest,
)
from greenckpt.ckpt.manifest.file import manifest_text
from greenckpt.io.checksum import digest_bytes


def _var(name: str, kind: str, data: bytes, offset: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "dtype": extra.get("dtype"),
        "shape": extra.get("shape"),
        "offset": offset,
        "nbytes": len(data),
        "digest": digest_bytes("xxh3_64", data),
    }


def valid_doc() -> dict[str, Any]:
    """Three ranks on two nodes: arrays, a buffer, a state blob and an empty rank.

    A version-1 document (no digest of its own, still read): the field rules below are the
    same for both versions; tests/ckpt/test_manifest_integrity.py runs them on sealed
    version-2 documents too."""
    u0 = np.arange(10, dtype="<f8").tobytes()
    u1 = np.arange(6, dtype="<i4").tobytes()
    return {
        "format": "greenckpt-checkpoint",
        "format_version": 1,
        "name": "heat",
        "id": 12,
        "level": 2,
        "created": "2024-05-01T12:00:00.000Z",
        "iteration": 1200,
        "checksum": "xxh3_64",
        "codec": "zstd:3",
        "nranks": 3,
        "nodes": [[0, 1], [2]],
        "redundancy": {"partners": [[0, 1], [1, 0]]},
        "tool": "greenckpt 0.1.0",
        "ranks": [
            {
                "rank": 0,
                "node": 0,
                "file": "rank-00000.dat",
                "logical_bytes": 97,
                "stored_bytes": 60,
                "digest": digest_bytes("xxh3_64", b"stored-0"),
                "variables": [
                    _var("u", "array", u0, 0, dtype="<f8", shape=[10]),
                    _var("meta", "buffer", b"hello", 80),
                    _var("rng", "state", b"0123456789ab", 85),
                ],
            },
            {
                "rank": 1,
                "node": 0,
                "file": "rank-00001.dat",
                "logical_bytes": 24,
                "stored_bytes": 20,
                "digest": digest_bytes("xxh3_64", b"stored-1"),
                "variables": [_var("u", "array", u1, 0, dtype="<i4", shape=[2, 3])],
            },
            {
                "rank": 2,
                "node": 1,
                "file": "rank-00002.dat",
                "logical_bytes": 0,
                "stored_bytes": 0,
                "digest": digest_bytes("xxh3_64", b""),
                "variables": [],
            },
        ],
    }


# --- round trip -------------------------------------------------------------------------------


def test_round_trip_json() -> None:
    doc = valid_doc()
    manifest = manifest_from_json(copy.deepcopy(doc))
    written = manifest_to_json(manifest)
    assert written.pop("manifest_digest")
    assert written == {**doc, "format_version": FORMAT_VERSION}
    assert manifest.name == "heat"
    assert manifest.id == 12
    assert manifest.nodes == ((0, 1), (2,))
    assert manifest.ranks[0].variables[0] == Variable(
        "u", "array", "<f8", (10,), 0, 80, digest_bytes("xxh3_64", np.arange(10.0))
    )
    assert manifest.ranks[0].variables[1].dtype is None
    assert manifest.logical_bytes == 97 + 24
    assert manifest.stored_bytes == 80
    assert manifest.ranks_of_node(0) == (0, 1)
    assert manifest.redundancy == {"partners": [[0, 1], [1, 0]]}


def test_round_trip_file(tmp_path: Path) -> None:
    manifest = manifest_from_json(valid_doc())
    path = tmp_path / MANIFEST_NAME
    write_manifest(path, manifest)
    assert read_manifest(path) == manifest
    assert json.loads(path.read_text())["format"] == FORMAT_NAME


def test_nulls_and_optional_fields() -> None:
    doc = valid_doc()
    doc["iteration"] = None
    doc["codec"] = None
    doc["created"] = "2024-05-01T12:00:00+00:00"
    del doc["redundancy"]
    del doc["tool"]
    m = manifest_from_json(doc)
    assert m.iteration is None
    assert m.codec is None
    assert m.redundancy == {}
    assert m.tool == ""


def test_crc32_digests_are_accepted() -> None:
    doc = valid_doc()
    doc["checksum"] = "crc32"
    for r in doc["ranks"]:
        r["digest"] = "0a1b2c3d"
        for v in r["variables"]:
            v["digest"] = "00000000"
    assert manifest_from_json(doc).checksum == "crc32"


def test_unknown_keys_are_ignored() -> None:
    doc = valid_doc()
    doc["future_field"] = 1
    assert manifest_from_json(doc).id == 12


def test_defaults_of_the_dataclass() -> None:
    m = Manifest(
        name="j",
        id=1,
        level=1,
        created=utc_now_iso(),
        iteration=0,
        checksum="crc32",
        codec=None,
        nranks=1,
        nodes=((0,),),
        ranks=(RankEntry(0, 0, "r0", 0, 0, "00000000", ()),),
    )
    assert m.tool.startswith("greenckpt ")
    assert m.redundancy == {}
    assert manifest_from_json(manifest_to_json(m)) == m


def test_utc_now_iso_is_a_valid_created() -> None:
    doc = valid_doc()
    doc["created"] = utc_now_iso()
    assert doc["created"].endswith("Z")
    manifest_from_json(doc)


_shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3)
_dtypes = st.sampled_from(["<f8", "<f4", "<i4", "|u1", ">i2", "<c16"])


@st.composite
def _manifests(draw: st.DrawFn) -> Manifest:
    nranks = draw(st.integers(1, 6))
    nnodes = draw(st.integers(1, nranks))
    node_of = [r % nnodes for r in range(nranks)]
    nodes = tuple(tuple(r for r in range(nranks) if node_of[r] == n) for n in range(nnodes))
    ranks = []
    for r in range(nranks):
        offset = 0
        variables = []
        for i in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(VARIABLE_KINDS))
            if kind == "array":
                shape = tuple(draw(_shapes))
                dtype = draw(_dtypes)
                nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                var = Variable(f"v{i}", "array", dtype, shape, offset, nbytes, "0" * 16)
            else:
                nbytes = draw(st.integers(0, 100))
                var = Variable(f"v{i}", kind, None, None, offset, nbytes, "f" * 16)
            variables.append(var)
            offset += nbytes
        stored = draw(st.integers(0, 1000))
        ranks.append(
            RankEntry(r, node_of[r], f"rank-{r}", offset, stored, "1" * 16, tuple(variables))
        )
    return Manifest(
        name=draw(st.text(min_size=1, max_size=10)),
        id=draw(st.integers(1, 10**9)),
        level=draw(st.integers(1, 4)),
        created="2024-01-02T03:04:05Z",
        iteration=draw(st.none() | st.integers(0, 10**12)),
        checksum="xxh3_64",
        codec=draw(st.none() | st.sampled_from(["zstd:3", "lz4", "zlib:6"])),
        nranks=nranks,
        nodes=nodes,
        ranks=tuple(ranks),
        redundancy={"k": draw(st.integers())},
    )


@settings(max_examples=50)
@given(manifest=_manifests())
def test_round_trip_property(manifest: Manifest) -> None:
    doc = manifest_to_json(manifest)
    assert manifest_from_json(json.loads(json.dumps(doc))) == manifest
    text = manifest_text(doc)  # the file's text: the same document, one rank per line
    assert json.loads(text) == doc
    lines = text.splitlines()
    assert [json.loads(ln.strip().rstrip(",")) for ln in lines if ln.startswith("  {")] == (
        doc["ranks"]
    )
    assert len(lines) == len(doc) + 2 + (1 + len(doc["ranks"]) if doc["ranks"] else 0)


def test_the_written_document_is_not_the_callers_redundancy() -> None:
    manifest = manifest_from_json(valid_doc())
    doc = manifest_to_json(manifest)
    manifest.redundancy["partners"][0][0] = 7  # the caller changes its object afterwards
    assert doc["redundancy"] == {"partners": [[0, 1], [1, 0]]}
    assert manifest_from_json(doc).redundancy == {"partners": [[0, 1], [1, 0]]}  # digest holds


# --- validation: each rule names the JSON path of the bad value ------------------------------


class _Delete:
    """Marker: remove the key instead of setting it (a stable repr keeps test ids equal
    across xdist workers)."""

    def __repr__(self) -> str:
        return "<missing>"


_DELETE = _Delete()

BAD: list[tuple[tuple[Any, ...], Any, str, str]] = [
    # (path in the document, bad value, JSON path in the message, what the message says is valid)
    (("format",), "greenckpt-profile", "manifest.format", "'greenckpt-checkpoint'"),
    (("name",), "", "manifest.name", "non-empty string"),
    (("name",), _DELETE, "manifest.name", "missing"),
    (("id",), 0, "manifest.id", "integer >= 1"),
    (("id",), True, "manifest.id", "integer >= 1"),
    (("id",), 3.0, "manifest.id", "integer >= 1"),
    (("level",), 5, "manifest.level", "one of 1, 2, 3, 4"),
    (("level",), 0, "manifest.level", "one of 1, 2, 3, 4"),
    (("level",), _DELETE, "manifest.level", "missing"),
    (("created",), "yesterday", "manifest.created", "ISO-8601 UTC"),
    (("created",), "2024-05-01T12:00:00", "manifest.created", "not UTC"),
    (("created",), "2024-05-01T12:00:00+02:00", "manifest.created", "not UTC"),
    (("created",), 1714564800, "manifest.created", "ISO-8601 UTC"),
    (("iteration",), -1, "manifest.iteration", "integer >= 0"),
    (("iteration",), "12", "manifest.iteration", "integer >= 0"),
    (("checksum",), "md5", "manifest.checksum", "one of xxh3_64, crc32"),
    (("codec",), "", "manifest.codec", "codec name"),
    (("codec",), 3, "manifest.codec", "codec name"),
    (("nranks",), 0, "manifest.nranks", "integer >= 1"),
    (("nodes",), "all", "manifest.nodes", "lists of ranks"),
    (("nodes",), [], "manifest.nodes", "at least one node"),
    (("nodes",), [[0, 1], []], "manifest.nodes[1]", "non-empty list of ranks"),
    (("nodes",), [[0, 1], [1, 2]], "manifest.nodes[1][0]", "exactly one node"),
    (("nodes",), [[0, 1]], "manifest.nodes", "rank 2 is on no node"),
    (("nodes",), [[0]], "manifest.nodes", "ranks 1, 2 are on no node"),
    (("nodes",), [[0, 1], [3]], "manifest.nodes[1][0]", "rank 0..2"),
    (("nodes",), [[0, True], [2]], "manifest.nodes[0][1]", "rank 0..2"),
    (("ranks",), "all", "manifest.ranks", "list of rank entries"),
    (("ranks", 1), "r1", "manifest.ranks[1]", "expected an object"),
    (("ranks", 1, "rank"), 0, "manifest.ranks[1].rank", "expected 1"),
    (("ranks", 2, "node"), 0, "manifest.ranks[2].node", "node 1"),
    (("ranks", 0, "file"), "a/b", "manifest.ranks[0].file", "plain file name"),
    (("ranks", 0, "file"), "..", "manifest.ranks[0].file", "plain file name"),
    (("ranks", 0, "file"), ".", "manifest.ranks[0].file", "plain file name"),
    (("ranks", 0, "file"), "", "manifest.ranks[0].file", "plain file name"),
    (("ranks", 0, "file"), "manifest.json", "manifest.ranks[0].file", "plain file name"),
    (("ranks", 1, "file"), "rank-00000.dat", "manifest.ranks[1].file", "its own file"),
    (("ranks", 0, "logical_bytes"), -1, "manifest.ranks[0].logical_bytes", "integer >= 0"),
    (("ranks", 0, "logical_bytes"), 96, "manifest.ranks[0].logical_bytes", "expected 97"),
    (("ranks", 2, "logical_bytes"), 1, "manifest.ranks[2].logical_bytes", "expected 0"),
    (("ranks", 0, "stored_bytes"), "60", "manifest.ranks[0].stored_bytes", "integer >= 0"),
    (("ranks", 0, "digest"), "xyz", "manifest.ranks[0].digest", "16 lowercase hex digits"),
    (("ranks", 0, "digest"), "ABCDEF0123456789", "manifest.ranks[0].digest", "lowercase hex"),
    (("ranks", 0, "digest"), "0a1b2c3d", "manifest.ranks[0].digest", "xxh3_64 digest"),
    (("ranks", 0, "variables"), {}, "manifest.ranks[0].variables", "list of variables"),
    (("ranks", 0, "variables", 0), [], "manifest.ranks[0].variables[0]", "expected an object"),
    (("ranks", 0, "variables", 0, "name"), "", "manifest.ranks[0].variables[0].name", "string"),
    (("ranks", 0, "variables", 1, "name"), "u", "manifest.ranks[0].variables[1].name", "unique"),
    (
        ("ranks", 0, "variables", 0, "kind"),
        "tensor",
        "manifest.ranks[0].variables[0].kind",
        "one of array, buffer, state",
    ),
    (
        ("ranks", 0, "variables", 0, "dtype"),
        None,
        "manifest.ranks[0].variables[0].dtype",
        "NumPy dtype string",
    ),
    (
        ("ranks", 0, "variables", 0, "dtype"),
        "float99",
        "manifest.ranks[0].variables[0].dtype",
        "not a NumPy dtype",
    ),
    (
        ("ranks", 0, "variables", 0, "dtype"),
        "O",
        "manifest.ranks[0].variables[0].dtype",
        "numeric dtype",
    ),
    (
        ("ranks", 0, "variables", 1, "dtype"),
        "<f8",
        "manifest.ranks[0].variables[1].dtype",
        "null for a buffer",
    ),
    (
        ("ranks", 0, "variables", 2, "dtype"),
        "|u1",
        "manifest.ranks[0].variables[2].dtype",
        "null for a state",
    ),
    (
        ("ranks", 0, "variables", 0, "shape"),
        None,
        "manifest.ranks[0].variables[0].shape",
        "integers >= 0 for an array",
    ),
    (
        ("ranks", 0, "variables", 0, "shape"),
        [-1],
        "manifest.ranks[0].variables[0].shape",
        "integers >= 0",
    ),
    (
        ("ranks", 0, "variables", 0, "shape"),
        [10.0],
        "manifest.ranks[0].variables[0].shape",
        "integers >= 0",
    ),
    (
        ("ranks", 0, "variables", 0, "nbytes"),
        81,
        "manifest.ranks[0].variables[0].nbytes",
        "has 80 bytes",
    ),
    (
        ("ranks", 0, "variables", 0, "nbytes"),
        -80,
        "manifest.ranks[0].variables[0].nbytes",
        "integer >= 0",
    ),
    (
        ("ranks", 0, "variables", 0, "offset"),
        8,
        "manifest.ranks[0].variables[0].offset",
        "expected 0",
    ),
    (
        ("ranks", 0, "variables", 1, "offset"),
        81,
        "manifest.ranks[0].variables[1].offset",
        "expected 80",
    ),
    (
        ("ranks", 0, "variables", 2, "offset"),
        80,
        "manifest.ranks[0].variables[2].offset",
        "expected 85",
    ),
    (
        ("ranks", 0, "variables", 1, "digest"),
        None,
        "manifest.ranks[0].variables[1].digest",
        "hex digits",
    ),
    (("redundancy",), [], "manifest.redundancy", "expected an object"),
    (("tool",), 5, "manifest.tool", "expected a string"),
]


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value


@pytest.mark.parametrize(
    ("where", "value", "json_path", "valid"),
    BAD,
    ids=[f"{'.'.join(map(str, w))}={v!r}" for w, v, _, _ in BAD],
)
def test_each_rule_names_the_json_path(
    where: tuple[Any, ...], value: Any, json_path: str, valid: str
) -> None:
    doc = valid_doc()
    _set(doc, where, value)
    with pytest.raises(ManifestError) as info:
        manifest_from_json(doc)
    message = str(info.value)
    assert message.startswith(json_path + ":"), message
    assert valid in message
    assert "\n" not in message


def test_top_level_must_be_an_object() -> None:
    with pytest.raises(ManifestError, match=r"^manifest: expected a JSON object"):
        manifest_from_json([valid_doc()])


def test_wrong_rank_count() -> None:
    doc = valid_doc()
    doc["ranks"].pop()
    doc["nodes"] = [[0, 1], [2]]
    with pytest.raises(ManifestError, match=r"^manifest\.ranks: expected 3 entries"):
        manifest_from_json(doc)


@pytest.mark.parametrize("version", [3, 0, "1", None])
def test_other_versions_are_refused(version: Any) -> None:
    doc = valid_doc()
    doc["format_version"] = version
    with pytest.raises(ManifestError) as info:
        manifest_from_json(doc)
    message = str(info.value)
    assert message.startswith("manifest.format_version:")
    assert f"written with format version {version!r}" in message
    assert f"this greenckpt reads version {FORMAT_VERSION}" in message


def test_manifest_error_is_a_value_error() -> None:
    assert issubclass(ManifestError, ValueError)


# --- files ------------------------------------------------------------------------------------


def _write_doc(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=1))


@pytest.mark.parametrize("fraction", [0.0, 0.5, 0.99])
def test_truncated_or_empty_file(tmp_path: Path, fraction: float) -> None:
    path = tmp_path / MANIFEST_NAME
    text = json.dumps(valid_doc(), indent=1)
    path.write_text(text[: int(len(text) * fraction)])
    with pytest.raises(ManifestError) as info:
        read_manifest(path)
    message = str(info.value)
    assert message.startswith(f"{path} is truncated or not JSON: ")
    assert "\n" not in message


def test_binary_garbage_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST_NAME
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ManifestError, match="is truncated or not JSON"):
        read_manifest(path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST_NAME
    with pytest.raises(ManifestError, match=r"manifest\.json does not exist"):
        read_manifest(path)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="is a directory"):
        read_manifest(tmp_path)


def test_version_3_file(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST_NAME
    doc = valid_doc()
    doc["format_version"] = 3
    _write_doc(path, doc)
    with pytest.raises(ManifestError) as info:
        read_manifest(path)
    message = str(info.value)
    assert message.startswith(f"{path}: manifest.format_version:")
    assert "written with format version 3" in message
    assert "this greenckpt reads version 2" in message
    assert "newer greenckpt" in message


def test_other_format_file(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST_NAME
    _write_doc(path, {"format": "greenckpt-profile", "format_version": 2, "points": []})
    with pytest.raises(ManifestError, match="is this a greenckpt checkpoint manifest"):
        read_manifest(path)


def test_invalid_field_in_file_names_file_and_path(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST_NAME
    doc = valid_doc()
    doc["ranks"][1]["variables"][0]["shape"] = [3, 3]
    _write_doc(path, doc)
    with pytest.raises(ManifestError, match=r"manifest\.ranks\[1\]\.variables\[0\]\.nbytes"):
        read_manifest(path)


def test_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    manifest = manifest_from_json(valid_doc())
    path = tmp_path / MANIFEST_NAME
    write_manifest(path, manifest)
    write_manifest(path, manifest)  # overwriting is atomic too
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST_NAME]


def test_write_refuses_an_invalid_manifest_before_touching_disk(tmp_path: Path) -> None:
    good = manifest_from_json(valid_doc())
    bad = Manifest(**{**good.__dict__, "level": 7})
    with pytest.raises(ManifestError, match=r"^manifest\.level"):
        write_manifest(tmp_path / MANIFEST_NAME, bad)
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_old_file_and_removes_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / MANIFEST_NAME
    old = manifest_from_json(valid_doc())
    write_manifest(path, old)
    doc = valid_doc()
    doc["id"] = 13
    new = manifest_from_json(doc)

    def fail(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        write_manifest(path, new)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST_NAME]
    assert read_manifest(path) == old
