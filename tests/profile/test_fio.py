"""The fio cross-check: parsing fio's report, its failures, and a real tiny validation."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from greenckpt.profile.fio import (
    VALIDATION_COLUMNS,
    FioError,
    fio_available,
    fio_command,
    parse_fio_output,
    run_fio,
    validate,
)

MiB = 1024 * 1024

CANNED_WRITE_BPS = 123_456_789
CANNED_READ_BPS = 234_567_890


def canned_report() -> dict[str, Any]:
    """What fio 3.x prints with --output-format=json --group_reporting (trimmed)."""
    return {
        "fio version": "fio-3.33",
        "jobs": [
            {
                "jobname": "greenckpt-fio",
                "error": 0,
                "read": {"io_bytes": 8 * MiB, "bw_bytes": CANNED_READ_BPS, "runtime": 34},
                "write": {"io_bytes": 8 * MiB, "bw_bytes": CANNED_WRITE_BPS, "runtime": 67},
            }
        ],
    }


def fake_fio(
    bindir: Path, monkeypatch: pytest.MonkeyPatch, stdout: str, code: int = 0, stderr: str = ""
) -> Path:
    """Put an executable ``fio`` first on PATH that logs its arguments and prints ``stdout``."""
    bindir.mkdir(exist_ok=True)
    (bindir / "out.txt").write_text(stdout)
    (bindir / "err.txt").write_text(stderr)
    log = bindir / "args.log"
    script = bindir / "fio"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{log}"\n'
        f'cat "{bindir / "out.txt"}"\n'
        f'cat "{bindir / "err.txt"}" >&2\n'
        f"exit {code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    return log


def test_fio_command_matches_the_engine_case() -> None:
    write = fio_command("write", "/d", 8 * MiB, 2, MiB)
    assert write[0] == "fio"
    assert {
        "--rw=write",
        f"--bs={MiB}",
        f"--size={4 * MiB}",
        "--numjobs=2",
        "--ioengine=psync",
        "--fallocate=none",
        "--end_fsync=1",
        "--directory=/d",
        "--group_reporting",
        "--output-format=json",
    } <= set(write)
    assert "--direct=1" not in write
    read = fio_command("read", "/d", 8 * MiB, 2, MiB, "native")
    assert "--direct=1" in read and "--end_fsync=1" not in read and "--fallocate=native" in read
    assert "--direct=1" not in fio_command("read", "/d", 8 * MiB, 2, MiB, direct=False)
    with pytest.raises(ValueError, match="size ≥ workers × block size"):
        fio_command("write", "/d", MiB, 2, MiB)


def test_run_fio_parses_a_fake_fio_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A notice line before the JSON, as fio prints for some warnings.
    log = fake_fio(
        tmp_path / "bin", monkeypatch, "fio: note: a notice\n" + json.dumps(canned_report())
    )
    assert fio_available()
    assert run_fio("write", tmp_path, 8 * MiB, 2, MiB) == float(CANNED_WRITE_BPS)
    assert run_fio("read", tmp_path, 8 * MiB, 2, MiB) == float(CANNED_READ_BPS)
    calls = log.read_text().splitlines()
    assert len(calls) == 2
    assert "--rw=write" in calls[0] and "--end_fsync=1" in calls[0]
    assert "--rw=read" in calls[1] and "--direct=1" in calls[1]


@pytest.mark.parametrize(
    ("stdout", "code", "stderr", "message"),
    [
        ("garbage, not a report\n", 0, "", "fio printed no JSON report: garbage, not a report"),
        ("{ broken", 0, "", "fio printed invalid JSON"),
        ('{"jobs": []}', 0, "", r"fio's JSON has no jobs\[0\]\.write\.bw_bytes"),
        ("", 1, "fio: something\nfio: pid=1, err=28/file:x, error=No space left", "code 1: .*"),
    ],
)
def test_run_fio_failures(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stdout: str,
    code: int,
    stderr: str,
    message: str,
) -> None:
    fake_fio(tmp_path / "bin", monkeypatch, stdout, code, stderr)
    with pytest.raises(FioError, match=message) as exc:
        run_fio("write", tmp_path, 8 * MiB, 1, MiB)
    assert "\n" not in str(exc.value)
    if code:
        assert "No space left" in str(exc.value)


def test_parse_fio_output_refuses_errors_and_zero() -> None:
    report = canned_report()
    report["jobs"][0]["error"] = 5
    with pytest.raises(FioError, match="error 5"):
        parse_fio_output(json.dumps(report), "write")
    report = canned_report()
    report["jobs"][0]["read"]["bw_bytes"] = 0
    with pytest.raises(FioError, match="too short to time"):
        parse_fio_output(json.dumps(report), "read")


def test_fio_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert not fio_available()
    with pytest.raises(FioError, match="fio is not installed"):
        run_fio("write", tmp_path, 8 * MiB, 1, MiB)
    with pytest.raises(FioError, match="fio is not installed"):
        validate(tmp_path, 8 * MiB, [1], MiB, repeats=1)


def test_validate_with_fake_fio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_fio(tmp_path / "bin", monkeypatch, json.dumps(canned_report()))
    work = tmp_path / "work"
    work.mkdir()
    result = validate(work, 4 * MiB + 123, [1], MiB, repeats=2)
    assert list(work.iterdir()) == []  # everything removed
    assert [(c.op, c.workers) for c in result.cases] == [("write", 1), ("read", 1)]
    write, read = result.cases
    assert write.fio_runs == (CANNED_WRITE_BPS, CANNED_WRITE_BPS)
    assert read.fio_runs == (CANNED_READ_BPS, CANNED_READ_BPS)
    assert write.total_bytes == 4 * MiB  # rounded down to whole blocks for both tools
    assert len(write.engine_runs) == 2 and write.read_method is None
    assert read.read_method in ("o_direct", "fadvise_dontneed", "cached")
    calls = log.read_text().splitlines()
    assert len(calls) == 4  # 2 repetitions × (write, read)
    assert all(f"--size={4 * MiB}" in c for c in calls)
    assert all(("--direct=1" in c) == (read.read_method == "o_direct") for c in calls[1::2])
    assert read.fio_direct == (read.read_method == "o_direct")


def test_validate_cleans_up_when_fio_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_fio(tmp_path / "bin", monkeypatch, "", 1, "fio: broken")
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(FioError, match="exited with code 1: fio: broken"):
        validate(work, 4 * MiB, [1, 2], MiB, repeats=1)
    assert list(work.iterdir()) == []


def test_validate_checks_arguments_and_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_fio(tmp_path / "bin", monkeypatch, json.dumps(canned_report()))
    with pytest.raises(ValueError, match="workers_list"):
        validate(tmp_path, 8 * MiB, [], MiB)
    with pytest.raises(ValueError, match="repeats a process count"):
        validate(tmp_path, 8 * MiB, [1, 1], MiB)
    with pytest.raises(ValueError, match="less than 4 processes"):
        validate(tmp_path, 2 * MiB, [1, 4], MiB)
    with pytest.raises(ValueError) as exc:
        validate(tmp_path, 1 << 60, [1], MiB)
    message = str(exc.value)
    assert "\n" not in message and "free; checking with S = 1024 PiB needs 2150 PiB" in message
    assert "fio's copy" in message
    assert not any(p.name.startswith("greenckpt-fio-check") for p in tmp_path.iterdir())


def test_validate_with_real_fio(tmp_path: Path, fio: str) -> None:
    result = validate(tmp_path, 8 * MiB, [1, 2], MiB, repeats=1)
    assert list(tmp_path.iterdir()) == []  # the engine's files and fio's are gone
    assert [(c.op, c.workers) for c in result.cases] == [
        ("write", 1),
        ("read", 1),
        ("write", 2),
        ("read", 2),
    ]
    for case in result.cases:
        assert len(case.engine_runs) == len(case.fio_runs) == 1
        assert math.isfinite(case.ratio) and case.ratio > 0
        assert case.meets_target == (case.ratio >= 0.9)
        assert (case.read_method is None) == (case.op == "write")
    rows = result.rows()
    assert len(rows) == 4 and all(len(r) == len(VALIDATION_COLUMNS) for r in rows)
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["size_bytes"] == 8 * MiB and doc["block_size_bytes"] == MiB
    assert doc["target"] == 0.9 and len(doc["cases"]) == 4
    assert {"ratio", "meets_target", "engine_median_Bps", "fio_min_Bps", "read_method"} <= set(
        doc["cases"][1]
    )
