"""Shared fixtures: the shipped synthetic profile and a small hand-made profile."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_PROFILE = ROOT / "examples" / "profiles" / "synthetic-pcie-flash.json"

# which tests act on the real node, proof that the suite leaves its settings as found, and the
# node lock wait under pytest-xdist (tests/real_node.py)
pytest_plugins = ["tests.real_node"]
NODE_LOCK_WAIT_ENV = "GREENCKPT_NODE_LOCK_WAIT"


@pytest.fixture
def refused_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second session on a held node is refused at once (what the lock tests check)."""
    monkeypatch.delenv(NODE_LOCK_WAIT_ENV, raising=False)


def small_profile_doc() -> dict[str, Any]:
    """A tiny SYNTHETIC profile whose optimum is easy to reason about (labelled synthetic)."""

    def pt(
        op: str, f: float | None, n: int, thr: float, pw: float, gov: str | None = None
    ) -> dict[str, Any]:
        return {
            "op": op,
            "frequency_hz": f,
            "governor": gov,
            "processes": n,
            "codec": None,
            "cstates": None,
            "throughput_Bps": thr,
            "power_W": pw,
            "power_source": "synthetic",
        }

    return {
        "format": "greenckpt-profile",
        "format_version": 1,
        "synthetic": True,
        "note": "test fixture",
        "machine": {"cores": 4, "frequencies_hz": [1e9, 2e9]},
        "storage": {"key": "test"},
        "points": [
            pt("write", 1e9, 1, 200e6, 200.0),
            pt("write", 2e9, 1, 400e6, 260.0),
            pt("write", 1e9, 4, 300e6, 230.0),
            pt("write", 2e9, 4, 350e6, 300.0),
            pt("read", 1e9, 1, 500e6, 190.0),
            pt("read", 2e9, 1, 600e6, 250.0),
            pt("read", 1e9, 4, 550e6, 220.0),
            pt("read", 2e9, 4, 700e6, 290.0),
        ],
    }


@pytest.fixture
def small_doc() -> dict[str, Any]:
    return copy.deepcopy(small_profile_doc())


@pytest.fixture
def small_profile_path(tmp_path: Path, small_doc: dict[str, Any]) -> Path:
    p = tmp_path / "small.json"
    p.write_text(json.dumps(small_doc))
    return p


@pytest.fixture
def alarm() -> Iterator[None]:
    """Turn a call that would block forever (reading a FIFO, say) into a TimeoutError after
    5 s, so a regression fails the test instead of hanging the suite."""

    def fire(signum: int, frame: object) -> None:
        raise TimeoutError("blocked for 5 s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(5)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def debian_tool(command: str, package: str) -> str:
    """The path of ``command``, installing Debian's ``package`` first when it is missing (as
    the tests of real tools must run wherever CI runs); skips with one line only when this
    process cannot install it (not root, no apt) or the install fails."""
    found = shutil.which(command)
    if found is not None:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{command} is not installed and this process cannot install it (apt, root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # another test worker may be installing at the same time: wait for dpkg's lock
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", package]
    update = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-q"]
    for cmd in (install, update, install):  # the package index may be stale
        if shutil.which(command) is None:
            subprocess.run(cmd, capture_output=True, env=env, timeout=900, check=False)
    found = shutil.which(command)
    if found is None:
        pytest.skip(f"{command} could not be installed (apt-get install {package} failed)")
    return found


@pytest.fixture
def fio() -> str:
    """fio, installed from Debian's packages when missing (the I/O engine is checked against it)."""
    return debian_tool("fio", "fio")
