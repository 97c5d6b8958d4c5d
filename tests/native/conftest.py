"""Fixtures of the native tests: a stand-in runtime (``FakeTarget``) served on a real
notification socket, in a short directory (Unix socket paths are limited to ~107 bytes)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenckpt.runtime.notify import NotifyServer
from tests.runtime.test_notify import FakeTarget


@pytest.fixture
def target() -> FakeTarget:
    return FakeTarget()


@pytest.fixture
def server(target: FakeTarget) -> Iterator[NotifyServer]:
    sock_dir = Path(tempfile.mkdtemp(prefix="gcn-", dir="/tmp"))
    try:
        with NotifyServer(target, sock_dir / "rt.sock") as srv:
            yield srv
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
