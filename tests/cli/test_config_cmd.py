"""``greenckpt config`` (issue 16 item 1): the build flags of the C phase API, the libraries
built on first use where the install did not build them, and one-line errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from greenckpt import native
from greenckpt.cli.main import main
from greenckpt.native import build


def test_it_prints_what_is_asked_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--libs", "--cflags"]) == 0
    out = capsys.readouterr().out.split()
    assert out[0].startswith("-L") and out[-1] == f"-I{native.include_dir()}"
    assert "-lgreenckpt" in out


def test_nothing_asked_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cflags --libs" in err


def test_a_missing_build_is_made_in_the_cache_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "PACKAGED_LIB_DIR", tmp_path / "not-built")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = native.library_dir()
    assert folder == tmp_path / "cache" / "greenckpt" / "native" / build.sources_digest()
    assert (folder / "libgreenckpt.so").is_file() and (folder / "greenckpt.pc").is_file()
    before = (folder / "libgreenckpt.so").stat().st_mtime_ns
    assert native.library_dir() == folder  # complete: not built again
    assert (folder / "libgreenckpt.so").stat().st_mtime_ns == before


def test_no_compiler_is_a_one_line_error_that_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(native, "PACKAGED_LIB_DIR", tmp_path / "not-built")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert main(["config", "--libs"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "set CC to a C compiler" in err
    assert not any((tmp_path / "cache").rglob("*.so"))  # nothing half-built left behind


def test_a_compile_error_is_named_in_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'x.c:1:1: error: something is wrong' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(build.BuildError, match=r"failed building libgreenckpt.so: x.c:1:1: error"):
        build.build_libraries(tmp_path / "out", cc=[str(broken)])
    assert not any((tmp_path / "out").glob("*.so"))


def test_config_builds_what_a_rank_then_loads_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(native, "PACKAGED_LIB_DIR", tmp_path / "not-built")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert native.built_library_dir() is None  # looks, never builds
    assert not (tmp_path / "cache").exists()
    assert main(["config", "--lib-dir"]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert native.built_library_dir() == folder
    assert (folder / "libgreenckpt_gf.so").is_file()
