"""greenckpt.durable: the one atomic-write / fsync-directory helper of every layer (issue 17
item 5), with the choices platform/ needs (predictable temporary names, exclusive publication,
best-effort directory fsync)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from greenckpt import durable
from greenckpt.durable import fsync_directory, write_atomic, write_durable


def _temps(directory: Path) -> list[Path]:
    return sorted(directory.glob(".*.tmp"))


@pytest.mark.parametrize("temp", ["random", "pid"])
def test_write_atomic_replaces_the_file_and_leaves_no_temporary(
    tmp_path: Path, temp: durable.TempName
) -> None:
    target = tmp_path / "profile.json"
    target.write_text("old")
    assert write_atomic(target, "new ✓", temp=temp) is True
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert write_atomic(target, b"\x00bytes") is True
    assert target.read_bytes() == b"\x00bytes"
    assert _temps(tmp_path) == []


def test_the_mode_is_the_callers_less_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "private", "x")
        write_atomic(tmp_path / "shared", "x", mode=0o666)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o644


def test_a_relative_name_is_written_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_atomic("here.json", "{}")
    assert (tmp_path / "here.json").read_text() == "{}"


def test_a_stale_pid_temporary_is_replaced_but_a_link_there_is_never_followed(
    tmp_path: Path,
) -> None:
    target = tmp_path / "state.json"
    stale = tmp_path / f".state.json.{os.getpid()}.tmp"
    stale.write_text("left by a killed process with this pid")
    write_atomic(target, "fresh", temp="pid")
    assert target.read_text() == "fresh"
    assert not stale.exists()

    victim = tmp_path / "victim"
    victim.write_text("untouched")
    stale.symlink_to(victim)
    write_atomic(target, "again", temp="pid")
    assert (target.read_text(), victim.read_text()) == ("again", "untouched")
    assert not stale.is_symlink()


def test_exclusive_never_replaces_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    assert write_atomic(target, "mine", exclusive=True, temp="pid") is True
    assert write_atomic(target, "theirs", exclusive=True, temp="pid") is False
    assert target.read_text() == "mine"
    assert _temps(tmp_path) == []


@pytest.mark.parametrize("code", [errno.EPERM, errno.EXDEV])
def test_exclusive_without_hard_links_checks_then_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    def no_links(src: object, dst: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "link", no_links)
    target = tmp_path / "state.json"
    assert write_atomic(target, "mine", exclusive=True) is True
    assert write_atomic(target, "theirs", exclusive=True) is False
    assert target.read_text() == "mine"
    assert _temps(tmp_path) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "profile.json"
    target.write_text("old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert _temps(tmp_path) == []


def test_fsync_directory_raises_unless_best_effort(tmp_path: Path) -> None:
    fsync_directory(tmp_path)
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(FileNotFoundError):
        fsync_directory(tmp_path / "missing")
    with pytest.raises(NotADirectoryError):
        fsync_directory(plain)
    fsync_directory(tmp_path / "missing", best_effort=True)  # passed over
    fsync_directory(plain, best_effort=True)


def test_write_durable_truncates_in_place(tmp_path: Path) -> None:
    target = tmp_path / "rank-0.json"
    target.write_text("a much longer old text")
    write_durable(target, "short")
    assert target.read_text() == "short"
