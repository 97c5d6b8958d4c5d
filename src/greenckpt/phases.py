"""The kinds of phase a run is divided into: one vocabulary, named once.

Why one module: the checkpoint library announces phases (``ckpt.hooks``), the wire protocol
carries them (``ckpt.notify_client``), the runtime decides settings for some and accounts all
(``runtime.settings``, ``runtime.session``, ``runtime.run_report``). Each used to spell its own
``Literal``; a new kind added to one and not the others broke only at run time. Every subset is
built here from the same three groups, and the tuples come from the types, so a new kind is
one edit. A bottom leaf: it imports nothing of greenckpt.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "ACCOUNTED_KINDS",
    "HOOK_KINDS",
    "IO_KINDS",
    "OVERHEAD_KINDS",
    "RUN_KINDS",
    "USEFUL_KINDS",
    "WIRE_KINDS",
    "AccountedKind",
    "HookKind",
    "IOKind",
    "OverheadKind",
    "RunKind",
    "SegmentKind",
    "WireKind",
]

IOKind = Literal["checkpoint", "restart", "flush"]
"""The phases that touch storage: the runtime chooses CPU and I/O settings for them."""
AccountedKind = Literal["compute", "rework"]
"""Phases the runtime only accounts (the application owns them): ``compute`` is useful work,
``rework`` the span after a restart in which the application recomputes what a failure lost."""
HookKind = Literal[IOKind, "rework"]
"""What the checkpoint library announces: the I/O phases and ``rework``."""
WireKind = Literal[IOKind, AccountedKind]
"""What a ``begin`` on the runtime's socket may name."""
OverheadKind = Literal["startup", "teardown"]
"""Time the runtime accounts around the application, never useful compute: ``startup`` from the
runtime's start until the application is started (a job's leader waiting for every node's
agent), ``teardown`` from the application's end until the runtime closes (restoring the
node, the final report). Only the runtime opens them (``Runtime.start(application=False)``,
``application_started``/``application_ended``); no notifier can begin one."""
SegmentKind = Literal[AccountedKind, OverheadKind]
"""What the time between I/O phases counts as."""
RunKind = Literal[AccountedKind, "lost", IOKind, OverheadKind]
"""Every kind of record in a run report: ``lost`` is work done after the checkpoint a restart
read back, and the downtime before the restart (it did not survive)."""

IO_KINDS: tuple[IOKind, ...] = get_args(IOKind)
ACCOUNTED_KINDS: tuple[AccountedKind, ...] = get_args(AccountedKind)
HOOK_KINDS: tuple[HookKind, ...] = get_args(HookKind)
WIRE_KINDS: tuple[WireKind, ...] = get_args(WireKind)
OVERHEAD_KINDS: tuple[OverheadKind, ...] = get_args(OverheadKind)
RUN_KINDS: tuple[RunKind, ...] = get_args(RunKind)
USEFUL_KINDS: tuple[RunKind, ...] = ACCOUNTED_KINDS
"""The kinds whose seconds are useful compute (run report format 2)."""
