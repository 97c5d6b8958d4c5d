"""Files a user names are read without hanging: greenckpt.files and the run report loader
(issue 18, items 20 and 21 for ``greenckpt run --compare REPORT``: a FIFO blocked forever, JSON
nested past Python's recursion limit ended in a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from greenckpt.files import FileTooLargeError, NotRegularFileError, open_regular, read_regular
from greenckpt.runtime.run_report import load_report


def test_a_regular_file_and_a_link_to_one_are_read(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"abc")
    (tmp_path / "link").symlink_to(f)
    assert read_regular(f) == b"abc"
    assert read_regular(tmp_path / "link", limit=3) == b"abc"
    fd = open_regular(f)
    try:
        assert os.get_blocking(fd)  # kept blocking for a caller that tails the file
    finally:
        os.close(fd)


def test_a_fifo_a_directory_and_a_device_are_refused_at_once(tmp_path: Path, alarm: None) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "FIFO"), (tmp_path, "directory"), (Path("/dev/zero"), "device")):
        with pytest.raises(NotRegularFileError) as info:
            read_regular(path)
        assert info.value.strerror.startswith("not a regular file (it is a")
        assert kind in info.value.strerror


def test_a_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 11)
    assert read_regular(f, limit=11) == b"x" * 11
    with pytest.raises(FileTooLargeError, match="longer than the 10 bytes"):
        read_regular(f, limit=10)


def test_missing_file_is_the_usual_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "none")


def test_load_report_refuses_a_fifo_and_deep_nesting(tmp_path: Path, alarm: None) -> None:
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        load_report(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match="nested too deeply") as info:
        load_report(deep)
    assert "\n" not in str(info.value)


def test_run_compare_with_a_fifo_is_one_line_exit_2(tmp_path: Path) -> None:
    fifo = tmp_path / "baseline.json"
    os.mkfifo(fifo)
    main = "import sys; from greenckpt.cli.main import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", main, "run", "--compare", str(fifo), "-o", "rep", "--", "true"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "not a regular file" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
