"""The ``slurm`` launcher: one agent per node of a Slurm allocation, started with ``srun``.

Why: on a cluster the batch system knows the job's nodes, so the leader (``greenckpt run
--launcher slurm`` in the batch script) reads them from Slurm's environment instead of being
told: the job id (``SLURM_JOB_ID``, checked), the node list (``SLURM_JOB_NODELIST``, its
compressed form ``host[1-3,5]`` expanded here) and the node count. The agents are one
background job step, ``srun --ntasks-per-node=1 --overlap``, which shares the allocation's
CPUs with the application's own ``srun`` steps; each agent takes its node index from
``SLURM_NODEID``. Ranks find their node's agent at a node-local path derived from the job id
(:func:`slurm_socket`), the same string on every host and different for two jobs. Where Slurm
was asked to set CPU frequencies (``--cpu-freq``), :func:`cpu_freq_request` finds it and the
agents leave frequency to Slurm. Design: docs/design/cluster.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from greenckpt.errors import InvalidValueError
from greenckpt.runtime.launch import AgentHandle, AgentSpec, StepHandle, start_step

__all__ = [
    "SlurmJob",
    "SlurmLauncher",
    "cpu_freq_request",
    "expand_nodelist",
    "parse_job_id",
    "slurm_socket",
]

_JOB_ID = re.compile(r"\d+(_\d+)?")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
MAX_NODES = 1_000_000
"""A node list expanding to more names than this is refused (a typo, not a job)."""


def parse_job_id(text: str) -> str:
    """A Slurm job id: digits, or ``digits_digits`` for an array task; InvalidValueError."""
    if not _JOB_ID.fullmatch(text):
        raise InvalidValueError(
            f"Slurm job id {text!r} does not parse: expected digits (e.g. 4711) or "
            "digits_digits for an array task (e.g. 4711_3)"
        )
    return text


def _split_top(text: str) -> list[str]:
    """``text`` split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise InvalidValueError("nested or unbalanced brackets")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise InvalidValueError("an unclosed bracket")
    parts.append(text[start:])
    return parts


def _expand_one(item: str) -> list[str]:
    """``pre[1-3,05]post...`` -> its names (every bracket group, left to right)."""
    open_at = item.find("[")
    if open_at < 0:
        if not item or "]" in item:
            raise InvalidValueError(f"{item!r} is not a host name")
        return [item]
    close_at = item.index("]", open_at)
    head, body, tail = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    numbers: list[str] = []
    for part in body.split(","):
        m = _RANGE.fullmatch(part)
        if m is None:
            raise InvalidValueError(f"{part!r} in [{body}] is not N or N-M")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo) or int(hi) - int(lo) > MAX_NODES:
            raise InvalidValueError(f"range {part!r} in [{body}] is empty or too long")
        width = len(lo) if lo.startswith("0") else 0
        numbers += [str(k).zfill(width) for k in range(int(lo), int(hi) + 1)]
    rests = _expand_one(tail) if tail else [""]
    return [head + n + rest for n in numbers for rest in rests]


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list (``a1,b[1-3,05],c[1-2]x[7]``) -> host names, in order;
    InvalidValueError (one line) when it does not parse."""
    try:
        names: list[str] = []
        for item in _split_top(text.strip()):
            names += _expand_one(item)
            if len(names) > MAX_NODES:
                raise InvalidValueError(f"more than {MAX_NODES} names")
    except (InvalidValueError, ValueError) as exc:
        raise InvalidValueError(
            f"Slurm node list {text!r} does not parse ({exc}): expected host names or "
            "host[1-3,5] ranges separated by commas"
        ) from None
    return names


def slurm_socket(job_id: str, uid: int | None = None) -> str:
    """The node-local socket of a job's agent: the same path on every node, one per job and
    user (no ``{node}``: each node has its own ``/tmp``)."""
    user = os.getuid() if uid is None else uid
    return f"/tmp/greenckpt-{user}/job-{parse_job_id(job_id)}/agent.sock"


def cpu_freq_request(environ: Mapping[str, str], command: Sequence[str]) -> str | None:
    """What Slurm was asked to set the CPU frequency to, or None: ``$SLURM_CPU_FREQ_REQ``
    (``sbatch``/``srun --cpu-freq``) or ``--cpu-freq`` on the command's own ``srun``."""
    asked = environ.get("SLURM_CPU_FREQ_REQ", "").strip()
    if asked:
        return asked
    if not command or os.path.basename(command[0]) != "srun":
        return None
    for i, arg in enumerate(command[1:], start=1):
        if arg.startswith("--cpu-freq="):
            return arg.partition("=")[2]
        if arg == "--cpu-freq" and i + 1 < len(command):
            return command[i + 1]
        if not arg.startswith("-"):
            break  # the srun's program: its flags are not Slurm's
    return None


@dataclass(frozen=True)
class SlurmJob:
    """The allocation ``greenckpt run --launcher slurm`` runs in, from Slurm's environment."""

    job_id: str
    nodes: int
    node_list: tuple[str, ...]
    node_list_text: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> SlurmJob:
        """InvalidValueError (one line) outside an allocation, or for a job id, node list or
        node count that does not parse or agree."""
        raw_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
        if not raw_id:
            raise InvalidValueError(
                "--launcher slurm runs inside a Slurm allocation (an sbatch script or salloc): "
                "$SLURM_JOB_ID is not set; use --nodes-emulated N on one machine"
            )
        array_id, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
        job_id = parse_job_id(f"{array_id}_{task}" if array_id and task else raw_id)
        text = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
        if not text:
            raise InvalidValueError("Slurm gave no node list: $SLURM_JOB_NODELIST is empty")
        names = expand_nodelist(text)
        count = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")
        if count is not None and (not count.isdigit() or int(count) != len(names)):
            raise InvalidValueError(
                f"Slurm's node count {count!r} does not match its node list {text!r} "
                f"({len(names)} node(s))"
            )
        return cls(job_id, len(names), tuple(names), text)

    def to_dict(self, cpu_freq: str | None) -> dict[str, object]:
        return {
            "name": "slurm",
            "job_id": self.job_id,
            "node_list": list(self.node_list),
            "node_list_text": self.node_list_text,
            "cpu_freq_requested": cpu_freq,
            "frequency_by": "slurm" if cpu_freq else "greenckpt",
        }


class SlurmHandle(StepHandle):
    """A node's share of the agents' srun step (srun's and slurmstepd's lines are not an
    agent's)."""

    def own_line(self, line: str) -> bool:
        return not line.startswith(("srun:", "slurmstepd"))


class SlurmLauncher:
    """``slurm``: one ``srun`` step in the background with one agent task per node (it
    overlaps the application's steps). Every node's handle is that one step: when it ends
    before a node's hello, that node is unmanaged with the step's last log line."""

    name = "slurm"

    def __init__(self, srun: str = "srun") -> None:
        self.srun = srun

    def argv(self, spec: AgentSpec) -> list[str]:
        return [
            self.srun,
            f"--nodes={spec.nodes}",
            f"--ntasks={spec.nodes}",
            "--ntasks-per-node=1",
            "--overlap",
            "--kill-on-bad-exit=0",
            "--mpi=none",
            "--quiet",
            f"--job-name=greenckpt-agents-{spec.job_id}",
            *spec.argv(None),
        ]

    def start(self, spec: AgentSpec) -> list[AgentHandle]:
        return start_step(self.argv(spec), spec, SlurmHandle)
