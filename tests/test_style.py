"""The code base stays ruff- and mypy-clean (both tools come with the test extra)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

from tests.conftest import ROOT


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_check() -> None:
    assert shutil.which("ruff") or _have_module("ruff"), "ruff is part of the test extra"
    proc = _run(sys.executable, "-m", "ruff", "check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format() -> None:
    proc = _run(sys.executable, "-m", "ruff", "format", "--check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict() -> None:
    proc = _run(sys.executable, "-m", "mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _have_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None
