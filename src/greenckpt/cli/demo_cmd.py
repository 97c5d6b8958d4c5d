"""``greenckpt demo``: the whole system on this machine, in about a minute, with no arguments.

Why a demo command: a user (or a reviewer) should see every part working together on their
own machine before trusting any of it — measured, not described. The steps are those of
saito2013's Figure 5 plus the failure the system exists for:

1. **probe** the node (CPU, frequency and C-state control, energy meters);
2. **profile** the local disk briefly — write and read throughput and power for 1, 2 and 4
   I/O processes, and first what a waiting rank costs (half a second per CPU setting and wait
   mode) — or reuse the profile kept from an earlier demo in the same directory;
3. **plan** for stated default parameters: the checkpoint and restart settings and interval
   that minimise the expected energy per unit of useful work, against the governors, with the
   demo's ranks per node that do no I/O charged their waiting power;
4. **run** the 2-D heat example under ``mpiexec`` with energy-aware checkpoints (levels 1, 2
   and 4 over 2 emulated nodes), once without failures for reference;
5. **fail and restart**: the same run with rank 2 killed after iteration 170 and node 1's local
   storage lost, then restarted (its files rebuilt from partner copies), all under the runtime;
6. **check and report**: the restarted result must be bit-identical to the reference; the
   per-phase time and energy of the failure run, and the modelled savings against each
   governor baseline, are printed and written to ``<dir>/report``.

Every power and energy figure says whether it was measured or estimated; on a machine without
energy counters (a VM) they are estimates and the output says so.

What "predicted" means here. The demo checkpoints at fixed iteration counts (``INTERVALS``),
not at the plan's interval (for an MTBF of an hour the model would not checkpoint at all in a
run of seconds). So the report's predicted EPE is the model's EPE *at the interval the run
used* (:mod:`greenckpt.runtime.modelled`: the observed mean compute between checkpoints, with
the profile's predictions for the applied settings), and the plan's EPE at its own optimal
interval is printed beside it, labelled as such. The model expects failures at the stated MTBF;
the demo injects one within seconds, which the observed figure includes and the model does not.

Progress: the profiling step shows the profiler's own progress on stderr (it takes most of a
minute). ``--json`` prints one JSON document on stdout at the end and every progress line on
stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from greenckpt.ckpt.comm import find_mpiexec
from greenckpt.ckpt.inject import ENV as INJECT_ENV
from greenckpt.ckpt.inject import erase_node_storage
from greenckpt.ckpt.wait import complete, polite
from greenckpt.cli import profile_cmd
from greenckpt.cli.argtypes import add_hidden_alias
from greenckpt.cli.commands import command_help
from greenckpt.cli.console import make_console
from greenckpt.errors import InvalidValueError
from greenckpt.io import IOJobError
from greenckpt.jsonout import dumps
from greenckpt.optimize import Scenario, plan
from greenckpt.optimize.planner import Plan
from greenckpt.optimize.profile_data import Profile, load_profile
from greenckpt.platform.cpufreq import CpufreqController, CpufreqPolicy
from greenckpt.platform.root import PlatformError
from greenckpt.profile import CpuSetting, SweepSpec, cpu_settings, run_profile
from greenckpt.report.plan_report import plan_tables, plan_to_dict
from greenckpt.report.run_files import write_report_safely
from greenckpt.report.run_text import render_run_text
from greenckpt.runtime.modelled import ModelledEpe, modelled_epe, with_modelled_epe
from greenckpt.runtime.node_options import NodeOptions, node_policy
from greenckpt.runtime.notify import NotifyServer
from greenckpt.runtime.policy import Node
from greenckpt.runtime.profiles import NamedProfile
from greenckpt.runtime.run_report import RunReport
from greenckpt.runtime.session import Runtime
from greenckpt.units import format_duration, format_power, format_size

# The stated default parameters of the demo (printed with the results).
NX = NY = 512
ITERATIONS = 300
RANKS = 4
RANKS_PER_NODE = 2
KILL_RANK, KILL_AT = 2, 170
LOST_NODE = 1
INTERVALS = {
    "GREENCKPT_L1_EVERY": "10it",
    "GREENCKPT_L2_EVERY": "30it",
    "GREENCKPT_L4_EVERY": "100it",
}
MTBF_S = 3600.0
"""The whole job's MTBF (both emulated nodes together)."""
WAITING_SECONDS = 0.5
"""The waiting-power window per CPU setting and mode (``profile run`` measures 2 s): short,
so the demo stays quick; its spread says how noisy so short a window is."""
PROFILE_SWEEP = SweepSpec(
    path="",
    settings=(CpuSetting.uncontrolled(),),
    processes=(1, 2, 4),
    sizes=(32 << 20,),
    repetitions=2,
    warmup=0,
    idle_seconds=0.0,
    waiting_seconds=WAITING_SECONDS,
)
"""The demo's brief sweep (write and read, the meters auto-detected); its path and CPU settings
are filled in for this node by :func:`_profile`."""


def register(sub: Any) -> None:
    """Add the ``demo`` sub-command."""
    p = sub.add_parser(
        "demo",
        help=command_help("demo"),
        description="Probe this node, profile its disk briefly, plan energy-optimal "
        "checkpoint settings, run the 2-D heat example under MPI with energy-aware "
        "checkpoints, kill a rank and lose a node's storage, restart, check the result is "
        "bit-identical to a failure-free run, and report time and energy per phase.",
    )
    output = p.add_argument(
        "-o",
        "--output",
        dest="dir",
        metavar="DIR",
        default="greenckpt-demo",
        help="working directory: profile, checkpoints, report (default ./greenckpt-demo)",
    )
    add_hidden_alias(p, output, "--dir")  # the spelling before issue 18
    p.add_argument(
        "--reprofile", action="store_true", help="profile again even if a profile is kept"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document on stdout at the end (progress goes to stderr)",
    )
    p.set_defaults(run=run)


def _mpiexec() -> str:
    found = find_mpiexec()
    if found is None:
        raise InvalidValueError(
            "the demo runs the heat example under MPI but no mpiexec was found: "
            "pip install 'greenckpt[mpi]' (mpi4py and the MPICH wheel)"
        )
    return found


def _step(number: int, text: str) -> None:
    print(f"\n== {number}/6 {text}", flush=True)


def _probe() -> Node:
    node = Node.detect()
    freq = "yes" if node.frequency_control else f"no ({node.frequency_reason})"
    print(f"host {node.hostname}, {node.cpu_model}, {node.cpus} logical CPUs")
    print(f"CPU frequency control: {freq}")
    print(f"C-state control: {'yes' if node.cstate_control else 'no'}")
    return node


def _profile(work: Path, again: bool) -> Profile:
    """The kept profile, or a new one measured by the library's profile run (a partial one
    left by an interrupted demo is continued; ``again`` overwrites). The progress goes to
    stderr as ``greenckpt profile run`` shows it (a line per finished cell, or a bar on a
    terminal), and the table of points to stdout.

    Waiting ranks: while ``n`` I/O processes write a node's checkpoint, its other ranks wait
    (docs/model.md, section 4), so the sweep first measures their power over short windows
    (:data:`WAITING_SECONDS` per wait mode after as long idle: about a second and a half per
    CPU setting, plus the waiters' start). A kept profile from a demo that did not measure it
    is reused as it is, and the plan says the waiters were taken as idle (``--reprofile``
    measures them); a partial one is continued with the window it was begun with, as a
    resumed sweep must be."""
    path = work / "profile.json"
    kept = load_profile(path) if path.exists() and not again else None
    if kept is not None and kept.status == "complete":
        print(f"reusing {path} ({len(kept.points)} points; --reprofile to measure again)")
        if not kept.waiting:
            print(
                "  it has no waiting-power entries (kept from a demo that did not measure "
                "them): the plan takes waiting ranks as idle; --reprofile measures them"
            )
        return kept
    io_dir = work / "io"
    io_dir.mkdir(exist_ok=True)
    spec = replace(
        PROFILE_SWEEP,
        path=str(io_dir.absolute()),
        settings=_cpu_settings(_cpufreq()),
        waiting_seconds=_waiting_window(kept),
    )
    print(f"profiling takes most of a minute{_waiting_words(spec)}; progress on stderr", flush=True)
    progress = profile_cmd.progress_sink()
    try:
        profile = run_profile(
            spec,
            path,
            resume=not again,
            force=again,
            progress=progress,
            wait_loop=complete,  # the waiters wait as the checkpoint library's ranks do
        )
    except (IOJobError, OSError) as exc:
        raise InvalidValueError(f"profiling {io_dir} failed: {exc}") from None
    finally:
        profile_cmd.stop_progress(progress)
    shutil.rmtree(io_dir, ignore_errors=True)
    profile_cmd.render_profile(profile, str(path), make_console())
    return profile


def _waiting_window(partial: Profile | None) -> float:
    """The demo's waiting window, or the one a partial profile left by an earlier demo was
    begun with (0 from a demo before it was measured): a resumed sweep must be the same."""
    recorded = None if partial is None else partial.sweep.get("spec")
    if isinstance(recorded, dict):
        value = recorded.get("waiting_seconds", 0.0)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return PROFILE_SWEEP.waiting_seconds


def _waiting_words(spec: SweepSpec) -> str:
    if spec.waiting_seconds <= 0:
        return " (without the waiting ranks' power: this partial profile was begun without it)"
    configs = len(spec.settings) * len(spec.cstates)
    return (
        f", first the waiting ranks' power ({configs} CPU setting(s), each idle then polite then "
        f"spinning waiters, {spec.waiting_seconds:g} s apiece)"
    )


def _cpufreq() -> CpufreqPolicy | None:
    """The first cpufreq policy when frequencies can be set here, else None."""
    controller = CpufreqController()
    if not controller.available():
        return None
    try:
        policy = controller.detect().policies[0]
    except PlatformError:
        return None
    return policy if policy.offers_userspace else None


def cpu_choice(policy: CpufreqPolicy | None) -> tuple[list[int], list[str]] | None:
    """The frequencies (Hz) and governors the demo profiles: None without frequency control
    (the profiler's defaults: the CPU as found); with it, the lowest, a middle and the highest
    frequency and the stock governors the node offers — enough for the plan to compare against
    every governor while keeping the sweep around a minute (a full frequency table can have
    20 entries or more)."""
    if policy is None:
        return None
    table = policy.frequencies_hz or (policy.cpuinfo_min_hz, policy.cpuinfo_max_hz)
    picks = sorted({table[0], table[len(table) // 2], table[-1]})
    governors: list[str] = [
        g for g in ("performance", "powersave", "ondemand") if g in policy.available_governors
    ]
    return picks, governors


def _cpu_settings(policy: CpufreqPolicy | None) -> tuple[CpuSetting, ...]:
    choice = cpu_choice(policy)
    return cpu_settings() if choice is None else cpu_settings(*choice)


def cpu_sweep_args(policy: CpufreqPolicy | None) -> list[str]:
    """:func:`cpu_choice` as ``greenckpt profile run`` flags, to repeat the demo's sweep by
    hand (the demo itself passes the settings to the library as numbers)."""
    choice = cpu_choice(policy)
    return [] if choice is None else profile_cmd.settings_flags(*choice)


def _app_power(profile: Profile) -> float:
    return max(p.power for p in profile.points)


_WAIT_WORDS = {"polite": "politely, as the library does", "spin": "spinning, GREENCKPT_WAIT=spin"}


def _plan(profile: Profile) -> Plan:
    scenario = Scenario(
        ckpt_size=NX * NY * 8 / (RANKS // RANKS_PER_NODE),
        rate=1.0 / MTBF_S,
        app_power=_app_power(profile),
        app_processes=RANKS_PER_NODE,
        wait_mode="polite" if polite() else "spin",
    )
    result = plan(profile, scenario)
    console = make_console()
    print(
        f"stated parameters: checkpoint {format_size(scenario.ckpt_size)} per node (the heat "
        f"grid {NX}x{NY} float64 over {RANKS // RANKS_PER_NODE} nodes), MTBF "
        f"{format_duration(MTBF_S)} (the job's), W_A {format_power(scenario.app_power)} (the "
        f"profile's highest power, a stand-in for the application's), {RANKS_PER_NODE} ranks "
        f"per node (those not writing wait: {_WAIT_WORDS[scenario.wait_mode]})"
    )
    for table in plan_tables(result):
        console.print(table)
    return result


def _heat(work: Path, mpiexec: str, result: Path) -> list[str]:
    return [
        mpiexec, "-n", str(RANKS), sys.executable, "-m", "greenckpt.apps.heat2d",
        "--nx", str(NX), "--ny", str(NY), "--iterations", str(ITERATIONS),
        "--local-dir", str(work / "local"), "--global-dir", str(work / "global"),
        "--ranks-per-node", str(RANKS_PER_NODE), "--name", "heat-demo",
        "--result", str(result),
    ]  # fmt: skip


def _fresh(work: Path) -> None:
    for sub in ("local", "global"):
        shutil.rmtree(work / sub, ignore_errors=True)
        (work / sub).mkdir(parents=True)


def _launch(command: list[str], env: dict[str, str], log: Path) -> int:
    with log.open("a") as out:
        return subprocess.run(command, env=env, stdout=out, stderr=out, check=False).returncode


def _result(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InvalidValueError(
            f"the heat example wrote no result {path}; see {path.parent / 'runs.log'}"
        )
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _failure_run(
    work: Path, mpiexec: str, node: Node, profile: Profile, result: Plan
) -> tuple[RunReport, ModelledEpe, dict[str, Any]]:
    """Kill, lose a node, restart — under the runtime; its report (predicted EPE: the model's
    at the interval the run used), that prediction and the restarted result."""
    env = {**os.environ, **INTERVALS}
    log = work / "runs.log"
    options = NodeOptions(  # the runtime's options, as greenckpt run would build them
        policy="profile",
        profiles=(str(work / "profile.json"),),
        app_power_w=result.scenario.app_power,
        rate_per_s=1.0 / MTBF_S,
        app_processes=RANKS_PER_NODE,
    )
    policy = node_policy(options, node, (NamedProfile(options.profiles[0], profile),))
    out = work / "restarted.json"
    with Runtime(policy, node=node) as runtime, NotifyServer(runtime) as server:
        env.update(server.environ())
        killed = {**env, INJECT_ENV: f"kill@compute:rank={KILL_RANK},iteration={KILL_AT}"}
        code = _launch(_heat(work, mpiexec, work / "killed.json"), killed, log)
        if code == 0:
            raise InvalidValueError("the injected failure did not stop the run; see runs.log")
        print(f"rank {KILL_RANK} killed after iteration {KILL_AT}: mpiexec ended the job ({code})")
        erase_node_storage(work / "local", LOST_NODE)
        print(f"node {LOST_NODE}'s local storage erased (as if the node were replaced)")
        if _launch(_heat(work, mpiexec, out), env, log) != 0:
            raise InvalidValueError(f"the restarted run failed; see {log}")
    report = runtime.report()
    modelled = modelled_epe(
        report, rate=result.scenario.rate, app_power=result.scenario.app_power, policy=policy
    )
    return with_modelled_epe(report, modelled), modelled, _result(out)


def _model_lines(result: Plan, modelled: ModelledEpe, report: RunReport) -> list[str]:
    """What the model says about this run, and what it says about the plan's interval."""
    best = result.best
    optimum = (
        f"the plan's own optimal interval T_A* {format_duration(best.T_A)} would give "
        f"{best.epe:.2f} W ({_source(result)} powers)"
    )
    if modelled.epe_w is None or modelled.T_A is None:
        return [f"model: {modelled.derivation}; {optimum}"]
    return [
        f"model at the interval this run used (T_A {modelled.T_A:.3f} s observed, fixed by "
        f"the demo's iteration counts): EPE {modelled.epe_w:.2f} W ({modelled.source} powers); "
        f"observed {_watts(report.observed_epe)}",
        f"  {optimum}; the model expects failures at the stated job MTBF "
        f"{format_duration(MTBF_S)}, this run had one injected within "
        f"{report.total_seconds:.0f} s",
    ]


def _watts(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} W"


def _savings(result: Plan) -> list[dict[str, Any]]:
    """Print the plan's modelled savings against each governor; return them for --json."""
    rows: list[dict[str, Any]] = []
    print(f"modelled savings of the plan against each governor ({_source(result)} power):")
    if all(b.choice is None for b in result.baselines):
        print(
            "  (this node's profile has no governor or frequency settings to compare with; "
            "`greenckpt plan --profile examples/profiles/synthetic-pcie-flash.json ...` shows "
            "the comparison on a SYNTHETIC profile)"
        )
    for baseline in result.baselines:
        saving = result.savings(baseline)
        if saving is None:
            print(f"  {baseline.name:12} not evaluable: {baseline.how}")
            rows.append({"governor": baseline.name, "evaluable": False, "how": baseline.how})
            continue
        rows.append(
            {
                "governor": baseline.name,
                "evaluable": True,
                "epe": saving.epe,
                "checkpoint_energy_per_gb": saving.write_energy_per_gb,
                "restart_energy_per_gb": saving.read_energy_per_gb,
                "time_factor": saving.time_factor,
                "source": _source(result),
                "definition": "(baseline - plan) / baseline: positive means the plan uses less",
            }
        )
        print(
            f"  {baseline.name:12} EPE {saving.epe:+.1%}, checkpoint energy/GB "
            f"{saving.write_energy_per_gb:+.1%}, restart energy/GB "
            f"{saving.read_energy_per_gb:+.1%}, time {saving.time_factor:+.2%}"
        )
    return rows


def _source(result: Plan) -> str:
    return "/".join(sorted(result.power_sources)) or "unknown"


def run(ns: argparse.Namespace) -> int:
    """Execute ``greenckpt demo``."""
    if not ns.json:
        status, _ = _demo(ns)
        return status
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # progress and tables on stderr
        status, doc = _demo(ns)
    print(dumps(doc), file=stdout, flush=True)
    return status


def _demo(ns: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """The six steps; the exit status and a JSON-ready summary."""
    began = time.monotonic()
    work = Path(ns.dir).resolve()
    if work.exists() and not work.is_dir():
        raise InvalidValueError(f"--dir {work} exists and is not a directory; give a directory")
    work.mkdir(parents=True, exist_ok=True)
    mpiexec = _mpiexec()
    _step(1, "probe this node")
    node = _probe()
    _step(2, "profile the local disk")
    profile = _profile(work, ns.reprofile)
    _step(3, "plan")
    result = _plan(profile)
    _step(4, f"reference run: heat {NX}x{NY}, {ITERATIONS} iterations, {RANKS} ranks")
    _fresh(work)
    (work / "runs.log").write_text("")
    reference = work / "reference.json"
    if _launch(_heat(work, mpiexec, reference), {**os.environ, **INTERVALS}, work / "runs.log"):
        raise InvalidValueError(f"the reference run failed; see {work / 'runs.log'}")
    ref = _result(reference)
    print(f"digest {ref['digest']}, {ref['checkpoints']} checkpoints")
    _step(5, "failure and restart, under the energy-aware runtime")
    _fresh(work)
    report, modelled, restarted = _failure_run(work, mpiexec, node, profile, result)
    restored = restarted["restored"] or {}
    print(
        f"restarted from checkpoint {restored.get('id')} (level {restored.get('level')}, "
        f"iteration {restored.get('iteration')}); digest {restarted['digest']}"
    )
    _step(6, "check and report")
    same = restarted["digest"] == ref["digest"]
    verdict = "bit-identical to" if same else "DIFFERENT FROM"
    print(f"result after failure and restart is {verdict} the failure-free run")
    print(render_run_text(report))
    paths, problem = write_report_safely(report, work / "report")
    if problem is not None:
        print(f"greenckpt demo: error: {problem}", file=sys.stderr)
    first = int(restored.get("iteration") or 0) + 1
    print(
        f"rework: iterations {first}-{KILL_AT - 1} (every rank had reported them done; rank "
        f"{KILL_RANK} died before reporting {KILL_AT}) were computed twice; the library announced "
        f"the second pass to the runtime as rework ({report.rework_seconds:.3f} s, the useful "
        f"copy); the first pass and the downtime until the restart are lost "
        f"({report.lost_seconds:.3f} s)"
    )
    for line in _model_lines(result, modelled, report):
        print(line)
    savings = _savings(result)
    print("report: " + ", ".join(str(p) for p in paths))
    seconds = time.monotonic() - began
    print(f"demo finished in {seconds:.0f} s")
    doc: dict[str, Any] = {
        "directory": str(work),
        "node": {
            "hostname": node.hostname,
            "cpu_model": node.cpu_model,
            "cpus": node.cpus,
            "frequency_control": node.frequency_control,
            "frequency_reason": node.frequency_reason,
            "cstate_control": node.cstate_control,
        },
        "profile": {"file": str(work / "profile.json"), "points": len(profile.points)},
        "stated": {
            "job_mtbf_s": MTBF_S,
            "app_power_w": result.scenario.app_power,
            "app_power_source": "stated: the profile's highest power, a stand-in",
            "intervals": dict(INTERVALS),
        },
        "plan": plan_to_dict(result, profile_path=str(work / "profile.json")),
        "reference": {"digest": ref["digest"], "checkpoints": ref["checkpoints"]},
        "failure": {"killed_rank": KILL_RANK, "after_iteration": KILL_AT, "lost_node": LOST_NODE},
        "restarted": {"digest": restarted["digest"], "restored": restored},
        "bit_identical": same,
        "modelled_epe": modelled.to_dict(),
        "plan_optimum": {"interval_s": result.best.T_A, "epe_w": result.best.epe},
        "savings": savings,
        "report": report.to_dict(include_trace=False),
        "files": [str(p) for p in paths],
        "report_error": problem,
        "seconds": seconds,
    }
    return (0 if same else 1), doc
