"""Issue 18 item 9: the library's messages say what is wrong where it is, and its documented
example and settings do what they say.

Each case states the message expected: a damaged manifest is named (not a sound data file), a
corrupt data file names the variables that differ, a missing file says it is missing, a level-2
or level-3 checkpoint that lost too much names the rank whose data are gone (not the rank that
held a copy, nor a ``.partial`` staging path); the API docstring's example runs on a first run
and on a restart; an ``l4`` codec an asynchronous flush would ignore is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenckpt.ckpt import api
from greenckpt.ckpt.api import Checkpointer
from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.ckpt.config import ConfigError
from greenckpt.ckpt.inject import flip_bits_in_file

ROOT = Path(__file__).resolve().parents[2]


def two_checkpoints(tmp_path: Path, **kw: Any) -> Path:
    """Checkpoints 1 and 2 (iterations 1 and 2) of one rank; the directory of checkpoint 2."""
    ck = Checkpointer(local_dir=str(tmp_path), keep=3, **kw)
    u = np.zeros(4096)
    raw = bytearray(100)
    ck.protect("u", u)
    ck.protect("raw", raw)
    for it in (1, 2):
        u[:] = np.arange(u.size) + it
        ck.state["it"] = it
        ck.checkpoint(iteration=it)
    ck.finalize()
    return tmp_path / "greenckpt" / "ckpt-00000002"


def recover_skipped(tmp_path: Path, **kw: Any) -> tuple[int, str]:
    ck = Checkpointer(local_dir=str(tmp_path), keep=3, **kw)
    ck.protect("u", np.zeros(4096))
    ck.protect("raw", bytearray(100))
    info = ck.recover()
    assert info is not None and len(info.skipped) == 1, info
    return info.id, info.skipped[0]


def test_a_damaged_rank_digest_in_an_unverified_manifest_blames_the_manifest(
    tmp_path: Path,
) -> None:
    """A version-1 manifest has no digest of its own; its rank digest is damaged while the
    data file is fine. Every variable read back matches its digest, so the manifest is what
    is damaged — the message must not call rank-000000.data corrupt."""
    directory = two_checkpoints(tmp_path)
    path = directory / "manifest.json"
    doc = json.loads(path.read_text())
    doc["format_version"] = 1
    doc.pop("manifest_digest", None)
    doc["ranks"][0]["digest"] = "0123456789abcdef"
    path.write_text(json.dumps(doc))
    restored, reason = recover_skipped(tmp_path)
    assert restored == 1
    assert f"{path} is damaged" in reason, reason
    assert "every variable matches its own digest" in reason
    assert "is corrupt" not in reason


@pytest.mark.parametrize("codec", [None, "lz4"])
def test_a_corrupt_data_file_names_the_variable_that_differs(
    tmp_path: Path, codec: str | None
) -> None:
    directory = two_checkpoints(tmp_path, **({"l1": {"codec": "none"}} if codec is None else {}))
    data = directory / "rank-000000.data"
    flip_bits_in_file(data, positions=[8 * 100 + 1])  # inside u (the first 32 KiB)
    restored, reason = recover_skipped(tmp_path)
    assert restored == 1
    assert f"{data} is corrupt: its xxh3_64 digest does not match the manifest's" in reason
    assert "(variables u differ)" in reason, reason


def test_a_missing_data_file_says_it_is_missing(tmp_path: Path) -> None:
    directory = two_checkpoints(tmp_path)
    (directory / "rank-000000.data").unlink()
    restored, reason = recover_skipped(tmp_path)
    assert restored == 1
    assert reason == (
        f"checkpoint 2 (level 1): rank 0: its file rank-000000.data is missing from {directory}"
    )


def _docstring_example() -> str:
    doc = api.__doc__
    assert doc is not None
    block = doc.split("::\n\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


def test_the_api_docstring_example_runs_on_a_first_run_and_on_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to define ``start`` only when something was recovered (NameError on a first
    run)."""
    (tmp_path / "local").mkdir()
    (tmp_path / "ckpt.toml").write_text(
        f'[checkpoint]\nlocal_dir = "{tmp_path / "local"}"\n[checkpoint.l1]\nevery = "3it"\n'
    )
    monkeypatch.chdir(tmp_path)
    code = _docstring_example()
    assert "Checkpointer(" in code and "ck.recover()" in code
    # a first run to iteration 7 (checkpoints at 3 and 6), then a restart from 6 to 10
    for n, expected_start in ((7, 0), (10, 6)):
        u = np.zeros(16)
        scope: dict[str, Any] = {
            "Checkpointer": Checkpointer,
            "u": u,
            "n": n,
            "step": lambda a: a.__iadd__(1.0),
        }
        exec(code, scope)  # the library's own documentation
        assert scope["start"] == expected_start
        assert np.all(u == n)  # every iteration done exactly once over the two runs


def test_an_l4_codec_an_async_flush_would_ignore_is_refused(tmp_path: Path) -> None:
    (tmp_path / "g").mkdir()
    base: dict[str, Any] = {"local_dir": str(tmp_path), "global_dir": str(tmp_path / "g")}
    with pytest.raises(ConfigError) as info:
        Checkpointer(
            **base, l1={"codec": "lz4"}, l4={"every": "2it", "async": True, "codec": "zstd"}
        )
    message = str(info.value)
    assert "l4 codec = 'zstd:3' cannot apply with async = true" in message, message
    assert "level 1's codec ('lz4')" in message
    assert "\n" not in message
    # the same codec on both levels, or none given for level 4, is what the flush does
    Checkpointer(**base, l1={"codec": "lz4"}, l4={"every": "2it", "async": True, "codec": "lz4"})
    Checkpointer(**base, l1={"codec": "lz4"}, l4={"every": "2it", "async": True})
    Checkpointer(**base, l1={"codec": "lz4"}, l4={"every": "2it", "codec": "zstd"})  # sync


# --- under MPI: two nodes lost at levels 2 and 3 ---------------------------------------------

REDUNDANCY = Path(__file__).with_name("mpi_redundancy.py")


@pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec: pip install '.[mpi]'")
@pytest.mark.parametrize(
    ("level", "expected"),
    [
        # 4 nodes of one rank; rank r's copy is on rank r + 1: nodes 1 and 2 erased lose rank
        # 1's file and its copy (held by rank 2); rank 2's copy on rank 3 survives
        ("2", "rebuilding failed: rank 1: its partner copy, kept by rank 2 on node 2, is lost too"),
        # one XOR group of 4: two members lost, one tolerated
        (
            "3",
            "rebuilding failed: ranks 1, 2 of erasure group [0, 1, 2, 3] lost their files, but "
            "the group tolerates 1 lost member (parity = 1)",
        ),
    ],
)
def test_two_lost_nodes_name_the_rank_whose_data_are_gone(
    level: str, expected: str, tmp_path: Path
) -> None:
    (tmp_path / "local").mkdir()
    (tmp_path / "global").mkdir()
    launcher = find_mpiexec()
    assert launcher is not None
    args = ["1", "1", "none", "erase:1,2"]  # 1 rank per node, parity 1, no codec, the damage
    proc = subprocess.run(
        [launcher, "-n", "4", sys.executable, str(REDUNDANCY), str(tmp_path), level, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MIXED": "0"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])["first"]
    assert (got["id"], got["level"]) == (2, 4), got  # the newest global checkpoint serves
    (reason,) = got["skipped"]
    assert reason.startswith(f"checkpoint 3 (level {level}): rank 1: its node holds no copy of ")
    assert reason.endswith(expected), reason
    assert ".partial" not in reason
    assert "Error" not in reason  # no exception class names: plain words


def test_an_explicit_uncompressed_l4_with_a_compressed_l1_is_refused_too(tmp_path: Path) -> None:
    """``codec = "none"`` for level 4 asks for uncompressed global copies; the flush would
    store level 1's lz4 frames there."""
    (tmp_path / "g").mkdir()
    with pytest.raises(ConfigError, match=r"l4 codec = 'none' cannot apply with async = true"):
        Checkpointer(
            local_dir=str(tmp_path),
            global_dir=str(tmp_path / "g"),
            l1={"codec": "lz4"},
            l4={"every": "2it", "async": True, "codec": "none"},
        )
