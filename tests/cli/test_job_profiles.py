"""``greenckpt run --nodes-emulated N --profile A --profile B``: every node's agent takes the
job's profiles, one per storage target, and decides each phase from the profile of the
storage that phase's path is on *in that node's tree*; each node's report names the profile
file each phase used (issue 15 item 5).

The nodes are fake trees (SYNTHETIC cpufreq and storage: an NVMe scratch and an NFS export)
and the profiles are the shipped SYNTHETIC examples re-labelled for those storages: nothing
here is a measurement.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

from greenckpt.jsonout import dumps
from greenckpt.optimize.profile_data import load_profile, profile_to_json
from greenckpt.runtime.node import storage_key_of
from tests.cli.test_run_job import ROOT, _env
from tests.platform import fake_power
from tests.platform.fake_cpu import build_tree, load_spec
from tests.runtime.test_storage_profiles import _two_storages

# On every node: an L1 checkpoint to node-local /scratch/ckpt, then an L4 flush to the
# global /shared/run1 (paths inside each node's tree).
APP = textwrap.dedent(
    """
    import sys
    from greenckpt.ckpt.notify_client import hook_from_env
    hook = hook_from_env()
    for node in range(int(sys.argv[1])):
        for kind, level, path in (("checkpoint", 1, "/scratch/ckpt"),
                                  ("flush", 4, "/shared/run1")):
            hook.begin(kind, level=level, path=path, size=1 << 20, node=node)
            hook.end(kind, node=node, ok=True, seconds=0.01)
    """
)


def test_each_node_decides_each_level_from_its_storage_profile(tmp_path: Path) -> None:
    keys: dict[str, str] = {}
    for k in range(2):
        base = tmp_path / "trees" / f"node{k}"
        fake_power.intel_tree(build_tree(load_spec("intel-acpi-cpufreq"), base))
        tree, local, shared = _two_storages(base)
        keys = {
            "local": storage_key_of(local, tree.root),
            "global": storage_key_of(shared, tree.root),
        }
    for role, name in (
        ("local", "synthetic-pcie-flash.json"),
        ("global", "synthetic-nfs-1gbe.json"),
    ):
        profile = load_profile(ROOT / "examples" / "profiles" / name)
        machine = {k: v for k, v in profile.machine.items() if k != "cpu_model"}
        profile = replace(profile, storage={**profile.storage, "key": keys[role]}, machine=machine)
        (tmp_path / f"{role}.json").write_text(dumps(profile_to_json(profile)))
    proc = subprocess.run(
        [sys.executable, "-m", "greenckpt", "run", "--nodes-emulated", "2", "--node-root",
         str(tmp_path / "trees" / "node{node}"), "--no-control", "--profile", "local.json",
         "--profile", "global.json", "--app-power", "200W", "--node-mtbf", "14h", "--nodes",
         "2", "-o", "rep", "--", sys.executable, "-c", APP, "2"],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for k in range(2):
        text = (tmp_path / "rep" / "nodes" / f"node{k}" / "report.json").read_text()
        node = json.loads(text)
        sources = {
            (r["kind"], r["level"]): r["settings"]["source"]
            for r in node["records"]
            if r.get("settings")
        }
        assert sources == {
            ("checkpoint", 1): "profile lookup (local.json)",
            ("flush", 4): "profile lookup (global.json)",
        }, sources
