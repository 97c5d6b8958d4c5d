"""The table of ``greenckpt`` commands: name, module and one-line help, in ``--help`` order.

Why a table: a command's module brings in what the command uses (the model and SciPy, the
meters, rich, matplotlib), and ``greenckpt notify`` from a job script or ``greenckpt --help``
must not pay for every other command's. :mod:`greenckpt.cli.main` imports only the module of
the command named on the command line and lists the others by name and help line from here;
each module's ``register`` takes its help line from here too, so it is written once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One sub-command: its name, the module whose ``register(sub)`` adds it, its help line."""

    name: str
    module: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command(
        "plan",
        "greenckpt.cli.plan_cmd",
        "choose CPU frequency, I/O processes and interval that minimise EPE",
    ),
    Command(
        "simulate",
        "greenckpt.cli.simulate_cmd",
        "simulate the plan and the baselines with failures; model vs simulation",
    ),
    Command(
        "levels",
        "greenckpt.cli.levels_cmd",
        "multilevel checkpointing: evaluate per-level intervals and optimise them",
    ),
    Command(
        "restore",
        "greenckpt.cli.restore_cmd",
        "restore node settings left changed by a crashed or killed session",
    ),
    Command(
        "probe",
        "greenckpt.cli.probe_cmd",
        "show the meters, CPU frequency and C-state control, and storage this node offers",
    ),
    Command(
        "profile",
        "greenckpt.cli.profile_cmd",
        "measure checkpoint I/O throughput and node power; show, export, plot, merge",
    ),
    Command(
        "run",
        "greenckpt.cli.run_cmd",
        "run a command with energy-aware checkpoints and restarts, then report per phase",
    ),
    Command(
        "agent",
        "greenckpt.cli.agent_cmd",
        "one node's agent of a job (started by greenckpt run on every node, not by hand)",
    ),
    Command(
        "job-report",
        "greenckpt.cli.job_report_cmd",
        "assemble the job report of a job run with the Slurm plugin (sbatch --greenckpt)",
    ),
    Command(
        "demo",
        "greenckpt.cli.demo_cmd",
        "the whole system on this machine in about a minute (profile, plan, run, fail, "
        "restart, report)",
    ),
    Command(
        "study",
        "greenckpt.cli.study_cmd",
        "run a paper's experiment from a study file (factors, repeats, baseline) and write "
        "its statistics and HTML report",
    ),
    Command(
        "notify",
        "greenckpt.cli.notify_cmd",
        "tell a running greenckpt runtime that a checkpoint, flush or restart starts or "
        "ends (for job scripts of other checkpoint tools)",
    ),
    Command(
        "config",
        "greenckpt.cli.config_cmd",
        "print the compiler and linker flags of the C/C++/Fortran phase API (libgreenckpt)",
    ),
)
"""Every command, in the order ``greenckpt --help`` lists them."""

BY_NAME = {command.name: command for command in COMMANDS}


def command_help(name: str) -> str:
    """The one-line help of the command ``name`` (for its module's ``register``)."""
    return BY_NAME[name].help
