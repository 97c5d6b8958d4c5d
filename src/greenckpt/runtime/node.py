"""What a decision policy and the runtime must know about the node they work for.

Why a value: a policy decides the same way on a real node, a fake tree or a node described by
hand in a test, so it sees the node only through :class:`Node` — CPU model (to check a
profile describes it), CPU count, the one frequency-control answer of
:func:`greenckpt.platform.capability.frequency_control`, C-state control and a storage lookup.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from greenckpt.errors import InvalidValueError
from greenckpt.platform.capability import FrequencyControl, frequency_control
from greenckpt.platform.cpuidle import CpuidleController
from greenckpt.platform.levers import node_levers
from greenckpt.platform.probe import probe
from greenckpt.platform.root import PlatformError, SysRoot
from greenckpt.platform.storage import identify_storage

__all__ = [
    "NO_FREQUENCY_CONTROL",
    "Node",
    "StorageLookup",
    "frequency_note",
    "storage_key_of",
]

NO_FREQUENCY_CONTROL = "no frequency control on this node: parallelism only"
"""The note on every decision of a node whose CPU frequency cannot be set."""

StorageLookup = Callable[[str], str]
"""Maps a checkpoint path to its storage key; raises PlatformError when it cannot tell."""


def frequency_note(control: FrequencyControl) -> str:
    """A phase's note for deciding without frequency control: :data:`NO_FREQUENCY_CONTROL`
    and why (the node's reason, or the caller's)."""
    return NO_FREQUENCY_CONTROL + (f"; {control.reason}" if control.reason else "")


def storage_key_of(path: str, root: SysRoot | None = None) -> str:
    """The storage key (profile-lookup key) of the storage that holds ``path``.

    A checkpoint directory may not exist yet when its first checkpoint starts, so the nearest
    existing ancestor is identified instead (it is on the same filesystem unless a mount is
    created in between). Raises :class:`PlatformError` when nothing can be identified.
    """
    chosen = root if root is not None else SysRoot.default()
    current = os.path.abspath(path)
    while True:
        try:
            return identify_storage(current, chosen).key
        except PlatformError:
            parent = os.path.dirname(current)
            if parent == current or os.path.lexists(chosen / current):
                raise
            current = parent


@dataclass(frozen=True)
class Node:
    """What a policy must know about the node it decides for.

    ``cpu_model`` and ``hostname`` are compared with the profile's machine metadata;
    ``frequency_control`` says whether the CPU frequency can be set here (cpufreq present and
    writable), ``frequency_reason`` why not; ``governors`` are those cpufreq offers (the three
    together: :attr:`frequency`); ``cstate_control`` whether idle states can be switched;
    ``storage_lookup`` finds the storage key of a path (``None``: storage cannot be identified
    on this node); ``levers`` which levers beyond the core clock it has.
    """

    hostname: str | None = None
    cpu_model: str | None = None
    cpus: int = 1
    frequency_control: bool = False
    frequency_reason: str = ""
    governors: tuple[str, ...] = ()
    cstate_control: bool = False
    storage_lookup: StorageLookup | None = None
    levers: Mapping[str, bool] | None = None
    """Which levers beyond the core clock the node has (``{"uncore frequency": False, ...}``,
    :func:`~greenckpt.platform.levers.node_levers`' names); ``None``: not known, nothing is
    ruled out (a policy then notes each lever that fails to apply)."""

    def __post_init__(self) -> None:
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int) or self.cpus < 1:
            raise InvalidValueError(f"a node has at least one CPU, got cpus={self.cpus!r}")

    @property
    def frequency(self) -> FrequencyControl:
        """This node's frequency-control answer as the one typed value every caller uses."""
        return FrequencyControl(
            available=self.frequency_control,
            reason=self.frequency_reason,
            governors=self.governors,
        )

    def storage_key(self, path: str) -> str:
        """The storage key of ``path``; PlatformError when it cannot be identified."""
        if self.storage_lookup is None:
            raise PlatformError("this node was described without a storage lookup")
        return self.storage_lookup(path)

    @classmethod
    def detect(cls, root: SysRoot | None = None) -> Node:
        """Describe this node by reading it (through ``root``, for fake trees); change nothing.

        Frequency control is :func:`~greenckpt.platform.capability.frequency_control`'s
        answer: cpufreq policies *and* write access to them (root, usually).
        """
        chosen = root if root is not None else SysRoot.default()
        report = probe((), chosen, meters=False)
        control = frequency_control(chosen)
        return cls(
            hostname=report.host,
            cpu_model=report.cpu_model,
            cpus=report.logical_cpus or os.cpu_count() or 1,
            frequency_control=control.available,
            frequency_reason=control.reason,
            governors=control.governors,
            cstate_control=_cstates_writable(chosen),
            storage_lookup=lambda path: storage_key_of(path, chosen),
            levers={lever.name: lever.present for lever in node_levers(chosen)},
        )


def _cstates_writable(root: SysRoot) -> bool:
    """True when the node has idle states and their ``disable`` files may be written."""
    try:
        info = CpuidleController(root).detect()
    except (PlatformError, OSError, ValueError):
        return False
    return os.access(root / info.states[0].disable_path, os.W_OK)
