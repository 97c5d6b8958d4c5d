"""The code base stays ruff- and mypy-clean (both tools come with the test extra)."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

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


MAX_MODULE_LINES = 600
"""Issues 17 and 28: "no module over 600 lines": a module past this is doing more than one job."""
MAX_DOCSTRING_LINES = 40
"""Issue 17 item 7: a module docstring says why in a few lines; essays live in docs/design/."""


def _modules() -> list[Path]:
    return sorted((ROOT / "src" / "greenckpt").rglob("*.py"))


def test_no_source_module_is_overfilled() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these by job (over {MAX_MODULE_LINES} lines): {long}"


def test_module_docstrings_stay_short() -> None:
    long = {}
    for path in _modules():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if doc and doc.count("\n") + 1 > MAX_DOCSTRING_LINES:
            long[str(path.relative_to(ROOT))] = doc.count("\n") + 1
    assert not long, f"move the design essay to docs/design/ (docstring lines): {long}"


HISTORY_WORDS = ("hardening", "fixes", "review", "regression", "issue", "misc")
"""Issue 28 item 4: words that say when or why a test file was written, not what it tests."""


def test_test_files_are_named_by_behaviour() -> None:
    """A test file's name says the behaviour it tests (``test_meters_csv_validation``), not its
    history (``test_meters_csv_hardening``, ``test_review_fixes``): the history is in git and
    in the file's docstring."""
    named = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("*.py")
        if any(part in HISTORY_WORDS for part in p.stem.split("_"))
    )
    assert not named, f"name these by what they test: {named}"
