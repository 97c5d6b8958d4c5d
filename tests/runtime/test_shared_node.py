"""A node another greenckpt session controls (clusters share nodes between jobs): a new run
still runs, meters and accounts, with control off, says in its report which session has the
node, and changes nothing; with ``require_control`` it is refused in one line instead."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenckpt.platform.nodelock import NodeHeldError
from greenckpt.runtime.session import Runtime
from tests.platform.fake_cpu import FakeSysfsRoot, build_tree, snapshot
from tests.platform.test_restore import run_child
from tests.runtime.test_session import FixedPolicy, control_node, fake_meter, freq

pytestmark = pytest.mark.usefixtures("refused_at_once")  # no waiting for the holder (xdist)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A fake node whose settings another process's session holds (set to 2.0 GHz)."""
    tree = build_tree("intel-acpi-cpufreq", tmp_path / "tree")
    child = run_child(tree, tmp_path / "other" / "node-state.json", 2.0e9)
    try:
        yield tree, child
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=10)
        child.communicate()


def _runtime(tree: Path, tmp_path: Path, *, require_control: bool = False) -> Runtime:
    return Runtime(
        FixedPolicy(checkpoint=freq(1_400_000_000)),
        root=FakeSysfsRoot(tree),
        meters=[fake_meter()],
        state_file=tmp_path / "mine" / "node-state.json",
        node=control_node(),
        require_control=require_control,
    )


def test_a_run_on_a_held_node_runs_and_accounts_with_control_off(
    held: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    tree, child = held
    before = snapshot(tree)
    rt = _runtime(tree, tmp_path).start()
    try:
        assert rt.shared_with is not None and f"pid {child.pid}" in rt.shared_with
        assert not rt.control and not rt.frequency_control and not rt.cstate_control
        with rt.phase("checkpoint", path=str(tmp_path), size=1 << 20) as settings:
            assert snapshot(tree) == before  # decided, never applied
            assert "control off" in " ".join(settings.notes)
    finally:
        rt.close()
    assert snapshot(tree) == before and not (tmp_path / "mine" / "node-state.json").exists()
    report = rt.report()
    assert [r.kind for r in report.records] == ["compute", "checkpoint", "compute"]
    shared = [n for n in report.notes if n.startswith("shared node: another ")]
    assert len(shared) == 1 and f"pid {child.pid}" in shared[0]


def test_require_control_refuses_a_held_node_in_one_line(
    held: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    tree, child = held
    rt = _runtime(tree, tmp_path, require_control=True)
    with pytest.raises(NodeHeldError) as err:
        rt.start()
    assert f"pid {child.pid}" in err.value.holder and "\n" not in str(err.value)
    assert not rt.running
