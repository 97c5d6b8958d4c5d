"""The energy-aware runtime: phase → profile lookup → settings (saito2013 section 5, Figure 5).

When the application starts a checkpoint, flush or restart, the runtime identifies the
operation and the path, hence the storage target (:class:`PhaseRequest`), asks a decision
policy for the CPU frequency (or governor), number of I/O processes, codec and C-states to use
(:class:`Settings`), applies them and puts everything back afterwards.

:mod:`greenckpt.runtime.settings` holds the two value types; :mod:`greenckpt.runtime.policy`
the decision interface (:class:`Policy`) and its implementations: the profile lookup through
the optimizer (the default), the stock-governor baselines and the stated defaults used without
a profile.
"""

from greenckpt.runtime.policy import (
    DEFAULT_IO_PROCESSES,
    GOVERNOR_POLICIES,
    NO_FREQUENCY_CONTROL,
    POLICY_NAMES,
    DefaultPolicy,
    GovernorPolicy,
    Node,
    Policy,
    ProfilePolicy,
    StorageLookup,
    make_policy,
    storage_key_of,
)
from greenckpt.runtime.settings import PHASE_KINDS, PhaseKind, PhaseRequest, Settings

__all__ = [
    "DEFAULT_IO_PROCESSES",
    "GOVERNOR_POLICIES",
    "NO_FREQUENCY_CONTROL",
    "PHASE_KINDS",
    "POLICY_NAMES",
    "DefaultPolicy",
    "GovernorPolicy",
    "Node",
    "PhaseKind",
    "PhaseRequest",
    "Policy",
    "ProfilePolicy",
    "Settings",
    "StorageLookup",
    "make_policy",
    "storage_key_of",
]
