"""``greenckpt run --app-processes``: the application's ranks per node reach the policy (the
governor baselines write with all of them; the profile policy counts the others as waiting)
and every agent of a multi-node job."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from greenckpt.cli.agent_cmd import _options as agent_options
from greenckpt.cli.main import build_parser
from greenckpt.cli.runtime_flags import node_options
from greenckpt.runtime.job_agents import agent_args
from tests.cli.test_cli_run import vm_node

ROOT = Path(__file__).resolve().parents[2]
CHILD = textwrap.dedent(
    """
    import sys
    from greenckpt.ckpt.notify_client import hook_from_env
    hook = hook_from_env()
    advice = hook.begin("checkpoint", level=1, path=sys.argv[1], size=8 << 20, node=0)
    print("advice", advice.io_processes, flush=True)
    hook.end("checkpoint", node=0, ok=True, seconds=0.01)
    """
)


def _greenckpt(*args: str, cwd: Path, root: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if root is not None:  # a fake node: the point is the advice, not this machine
        env.update(GREENCKPT_SYSROOT=str(root), XDG_RUNTIME_DIR=str(cwd))
    return subprocess.run(
        [sys.executable, "-m", "greenckpt", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip


def test_a_governor_baseline_writes_with_every_rank_given(tmp_path: Path) -> None:
    proc = _greenckpt(
        "run", "--policy", "performance", "--app-processes", "3", "--report", "rep", "--",
        sys.executable, "-c", CHILD, str(tmp_path), cwd=tmp_path, root=vm_node(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "advice 3" in proc.stdout  # not the node's 2 CPUs


def test_a_bad_count_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = _greenckpt("run", "--app-processes", "0", "--", "true", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("greenckpt run: error: argument --app-processes: '0'")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "greenckpt-report").exists()


def test_every_agent_gets_the_ranks_per_node() -> None:
    ns = build_parser().parse_args(["run", "--app-processes", "8", "--", "true"])
    assert isinstance(ns, argparse.Namespace)
    args = agent_args(node_options(ns))
    agent = build_parser().parse_args(
        ["agent", "--node", "0", "--job-id", "j", "--socket", "s", "--leader", "h:1",
         "--output", "o", *args]
    )  # fmt: skip
    assert agent_options(agent).app_processes == 8
