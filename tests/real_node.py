"""The test suite and the machine it runs on: which tests act on the real node, and proof that
the suite leaves the node's settings as it found them (issue 30, item 10).

Why: greenckpt changes node-wide settings (CPU frequencies, C-states, page reporting, power
limits). A developer runs the suite on the workstation where jobs run, and on a machine with
cpufreq a test that starts a session on the real root changes real settings for its duration.
Such tests are marked ``real_node`` (they say so) and are kept to the ones whose point is the
real node: end-to-end ``greenckpt run`` and ``demo`` as a user runs them. This plugin
makes both promises checkable rather than hoped for:

- a test that takes the real node lock (``/run/greenckpt-node.lock``: every session on the
  machine's own root takes it) without the ``real_node`` mark fails, so the set cannot grow
  silently;
- the node's settings files are read before the suite and after it, and before and after each
  ``real_node`` test; a difference fails that test, or the session, naming the file.

The settings are read here from sysfs with plain globs, independently of greenckpt's own code,
so a regression in greenckpt's restoration cannot hide itself. Counters that change by
themselves (page reporting's ``reported_kib``) are not settings and are not compared.
Another session on the machine (a user's job, another test run) is not this suite's doing: while
the lock names a live process outside this test process's tree, at a test's start or end, that
test is not checked (its sessions shared the node with control off, and the settings are the
other session's) — unless it is the session named by ``$GREENCKPT_TEST_PASSIVE_HOLDER`` (a
pid) that changes nothing while the suite runs: CI holds the node for the whole suite with a
``greenckpt run -- sleep infinity`` to which nothing announces a phase (``--no-control`` would
not take the node lock at all), so the settings are still checked there. A session of another
process tree that starts and ends within one test would still be blamed on it; so detection of
unmarked tests is off under pytest-xdist, whose workers are such trees for each other.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

NODE_LOCK = Path("/run/greenckpt-node.lock")
MARK = "real_node"
PASSIVE_HOLDER_ENV = "GREENCKPT_TEST_PASSIVE_HOLDER"
NODE_LOCK_WAIT_ENV = "GREENCKPT_NODE_LOCK_WAIT"
SETTING_GLOBS = (
    "/sys/devices/system/cpu/cpufreq/policy*/scaling_governor",
    "/sys/devices/system/cpu/cpufreq/policy*/scaling_min_freq",
    "/sys/devices/system/cpu/cpufreq/policy*/scaling_max_freq",
    "/sys/devices/system/cpu/cpufreq/policy*/scaling_setspeed",
    "/sys/devices/system/cpu/cpufreq/boost",
    "/sys/devices/system/cpu/cpu*/cpuidle/state*/disable",
    "/sys/devices/system/cpu/intel_uncore_frequency/*/min_freq_khz",
    "/sys/devices/system/cpu/intel_uncore_frequency/*/max_freq_khz",
    "/sys/class/powercap/*/constraint_*_power_limit_uw",
    "/sys/module/page_reporting/parameters/min_free_ms",
    "/sys/module/page_reporting/parameters/page_reporting_order",
)
"""Every node-wide setting greenckpt may change, and those it may change in the future."""


def node_settings() -> dict[str, str]:
    """The current value of every setting file present on this machine (unreadable: marked)."""
    values: dict[str, str] = {}
    for pattern in SETTING_GLOBS:
        for path in sorted(glob.glob(pattern)):
            try:
                values[path] = Path(path).read_text(encoding="utf-8").strip()
            except OSError as exc:
                values[path] = f"<unreadable: {exc.strerror}>"
    return values


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """One line per setting that differs (appeared, vanished or changed value)."""
    lines = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path, "<absent>"), after.get(path, "<absent>")
        if old != new:
            lines.append(f"{path}: {old!r} -> {new!r}")
    return lines


def _lock_state() -> tuple[int, int, int] | None:
    """What changes when a session takes the real node lock: the file's identity and content."""
    try:
        st = NODE_LOCK.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _parent(pid: int) -> int | None:
    """The parent of ``pid`` from ``/proc`` (None once it has gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the command name may hold spaces


def _ours(pid: int) -> bool:
    """True when ``pid`` is this process or one of its descendants."""
    me, seen = os.getpid(), 0
    current: int | None = pid
    while current is not None and current > 1 and seen < 256:
        if current == me:
            return True
        current, seen = _parent(current), seen + 1
    return False


def foreign_holder() -> int | None:
    """The live process outside this test run that holds the real node lock, if any."""
    try:
        record = json.loads(NODE_LOCK.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return None
    pid = record.get("pid") if isinstance(record, dict) else None
    if not isinstance(pid, int) or _parent(pid) is None or _ours(pid):
        return None
    if str(pid) == os.environ.get(PASSIVE_HOLDER_ENV):
        return None  # it changes nothing: the settings are still this suite's to keep
    return pid


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}: the test starts greenckpt on the machine's own root (its node lock and "
        "settings); the suite checks that it leaves the settings as found",
    )
    config.stash[_START] = node_settings()
    config.stash[_FOREIGN] = foreign_holder() is not None
    # Under pytest-xdist, tests that start greenckpt on this machine's own root in two workers
    # at once would share the node (the second with control off, saying so on stderr, which
    # tests of exact output do not expect): let them queue for the node lock instead. Not when
    # a session outside this test run (a user's job) holds the node: it will not let go, and
    # every run would wait out the 10 minutes. The refusal of a held node is tested with the
    # variable removed (tests/platform/test_node_lock.py).
    if os.environ.get("PYTEST_XDIST_WORKER") and not config.stash[_FOREIGN]:
        os.environ.setdefault(NODE_LOCK_WAIT_ENV, "10min")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.stash[_FOREIGN] or foreign_holder() is not None:
        return  # another session controls the node: its settings are that session's
    lines = changed(session.config.stash[_START], node_settings())
    if lines:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = "the test suite left this node's settings changed:\n  " + "\n  ".join(lines)
        if reporter is not None:
            reporter.write_line(text, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_START = pytest.StashKey[dict[str, str]]()
_FOREIGN = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def _real_node_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that acted on the real node without saying so, or left its settings changed."""
    marked = request.node.get_closest_marker(MARK) is not None
    lock_before = _lock_state()
    foreign = foreign_holder() is not None
    settings_before = node_settings() if marked else None
    yield
    if foreign or foreign_holder() is not None:
        return  # another session holds the node: not this test's doing
    if settings_before is not None:
        lines = changed(settings_before, node_settings())
        if lines:
            pytest.fail("left this node's settings changed: " + "; ".join(lines))
    if not marked and not os.environ.get("PYTEST_XDIST_WORKER") and _lock_state() != lock_before:
        pytest.fail(
            f"took the real node lock ({NODE_LOCK}): the test started greenckpt on the "
            f"machine's own root; mark it @pytest.mark.{MARK} if that is its point, else give "
            "it a fake root (GREENCKPT_SYSROOT or --root)"
        )
