"""Shared fixtures: the shipped synthetic profile and a small hand-made profile."""

from __future__ import annotations

import copy
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_PROFILE = ROOT / "examples" / "profiles" / "synthetic-pcie-flash.json"


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
