"""The energy-aware runtime: phase → profile lookup → settings (saito2013 section 5, Figure 5).

When the application starts a checkpoint, flush or restart, the runtime identifies the
operation and the path, hence the storage target (:class:`PhaseRequest`), asks a decision
policy for the CPU frequency (or governor), number of I/O processes, codec and C-states to use
(:class:`Settings`), applies them and puts everything back afterwards.

:mod:`greenckpt.runtime.settings` holds the two value types; :mod:`greenckpt.runtime.policy`
the decision interface (:class:`Policy`) and its implementations: the profile lookup through
the optimizer (the default), the stock-governor baselines and the stated defaults used without
a profile. :mod:`greenckpt.runtime.session` applies them per phase and always restores the node
(:class:`Runtime`, and :class:`RuntimeHook` for the checkpoint library);
:mod:`greenckpt.runtime.run_report` accounts time and energy per phase (:class:`RunReport`);
:mod:`greenckpt.runtime.modelled` puts the model's EPE at the interval a run used beside the
observed one (:func:`modelled_epe`); :mod:`greenckpt.runtime.notify` serves the same to other
processes over a local socket. How the parts fit, and the modules they are split into
(node, baselines, fit, control, spans, metering, lost, hook): docs/design/runtime.md.

Running a command under the runtime, on this node or over a job's nodes, is one call:
:func:`run` (:mod:`greenckpt.runtime.job_run`) with the node runtime's typed options
(:class:`NodeOptions`); it returns a :class:`JobOutcome` (exit status, the run's or the job's
report). ``greenckpt run``, the demo and studies call it; so can a user's own script. Those
three names are imported on first use (PEP 562), so importing one runtime module does not
import the job machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from greenckpt.lazy import lazy_names
from greenckpt.runtime.modelled import ModelledEpe, modelled_epe, with_modelled_epe
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
from greenckpt.runtime.run_report import (
    BaselineRun,
    PhaseRecord,
    RunReport,
    load_report,
    percent_difference,
)
from greenckpt.runtime.session import Runtime, RuntimeHook
from greenckpt.runtime.settings import PHASE_KINDS, PhaseKind, PhaseRequest, Settings

if TYPE_CHECKING:
    from greenckpt.runtime.job_run import JobOutcome, run
    from greenckpt.runtime.node_options import NodeOptions

_LAZY = {
    "JobOutcome": "greenckpt.runtime.job_run",
    "run": "greenckpt.runtime.job_run",
    "NodeOptions": "greenckpt.runtime.node_options",
}
"""Public names imported on first use, and the module they come from."""

__all__ = [
    "DEFAULT_IO_PROCESSES",
    "GOVERNOR_POLICIES",
    "NO_FREQUENCY_CONTROL",
    "PHASE_KINDS",
    "POLICY_NAMES",
    "BaselineRun",
    "DefaultPolicy",
    "GovernorPolicy",
    "JobOutcome",
    "ModelledEpe",
    "Node",
    "NodeOptions",
    "PhaseKind",
    "PhaseRecord",
    "PhaseRequest",
    "Policy",
    "ProfilePolicy",
    "RunReport",
    "Runtime",
    "RuntimeHook",
    "Settings",
    "StorageLookup",
    "load_report",
    "make_policy",
    "modelled_epe",
    "percent_difference",
    "run",
    "storage_key_of",
    "with_modelled_epe",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
