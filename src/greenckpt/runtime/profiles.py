"""One profile per storage target: each phase is decided from the profile of the storage it
writes to or reads from.

Why: a multilevel run writes L1-L3 to node-local storage and L4 to the global file system,
whose throughput and power differ; one profile describes one storage, so a run with a single
profile plans the other levels from the wrong figures (or falls back to defaults). A run may
therefore take several profiles (``greenckpt run --profile A --profile B``); for each phase,
:class:`PerStoragePolicy` finds the storage of the phase's path (:meth:`Node.storage_key`)
and asks the policy built on the profile recorded for that storage and, among those, for this
node's CPU model (:func:`~greenckpt.runtime.fit.machine_fit`), so each node of a job uses the
profile recorded for its own hardware and storage. The settings' ``source`` names the profile
file used; a phase on a storage no profile describes gets the existing fallback (defaults)
with a note naming the profiles and their storage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from greenckpt.errors import InvalidValueError
from greenckpt.optimize.profile_data import Profile
from greenckpt.platform.root import PlatformError
from greenckpt.runtime.baselines import DefaultPolicy
from greenckpt.runtime.fit import machine_fit
from greenckpt.runtime.node import Node
from greenckpt.runtime.policy import Policy, make_policy
from greenckpt.runtime.settings import PhaseRequest, Settings

__all__ = ["NamedProfile", "PerStoragePolicy", "check_storage_profiles", "make_storage_policy"]


@dataclass(frozen=True)
class NamedProfile:
    """A profile and the name it is reported under (its file name as given)."""

    label: str
    profile: Profile

    @property
    def storage_key(self) -> str | None:
        key = self.profile.storage.get("key")
        return key if isinstance(key, str) and key else None


@dataclass(frozen=True)
class _Choice:
    named: NamedProfile
    policy: Policy
    machine_ok: bool


class PerStoragePolicy:
    """Several profiles, one per storage target (and CPU model): each phase is decided by the
    policy built on the profile whose storage holds the phase's path. With one profile, every
    phase goes to it (its own storage check and fallback apply), and the source names it."""

    def __init__(self, name: str, choices: Sequence[tuple[NamedProfile, Policy]], node: Node):
        if not choices:
            raise InvalidValueError("a per-storage policy needs at least one profile")
        self.name = name
        self.node = node
        self._choices = tuple(
            _Choice(named, policy, machine_fit(named.profile, node).mismatch is None)
            for named, policy in choices
        )
        check_storage_profiles([c.named for c in self._choices])
        self._defaults = DefaultPolicy(node=node)

    @property
    def profiles(self) -> tuple[NamedProfile, ...]:
        return tuple(c.named for c in self._choices)

    def decide(self, request: PhaseRequest) -> Settings:
        """The settings for ``request`` from the profile of its storage (see the class)."""
        if len(self._choices) == 1:
            return _labelled(self._choices[0], request)
        try:
            mine = self.node.storage_key(request.path)
        except (PlatformError, OSError) as exc:
            return self._fallback(
                request,
                f"could not identify the storage of {request.path} ({exc}), so none of the "
                f"profiles ({_listing(self.profiles)}) can be chosen for it",
            )
        on_storage = [c for c in self._choices if c.named.storage_key == mine]
        if not on_storage:
            return self._fallback(
                request,
                f"no profile is for the storage of {request.path} ({mine!r}): "
                f"{_listing(self.profiles)}",
            )
        fitting = [c for c in on_storage if c.machine_ok] or on_storage
        return _labelled(fitting[0], request)

    def _fallback(self, request: PhaseRequest, reason: str) -> Settings:
        return self._defaults.settings(
            request, source="defaults (profile not used)", notes=[f"{reason}; using defaults"]
        )


def _labelled(choice: _Choice, request: PhaseRequest) -> Settings:
    """The chosen policy's settings, their source naming the profile file when it was used."""
    settings = choice.policy.decide(request)
    named = choice.named
    where = f"storage {named.storage_key!r}" if named.storage_key else "storage not recorded"
    if settings.source.startswith("defaults"):
        note = f"profile {named.label} ({where}) was chosen for {request.path} but not used"
        return replace(settings, notes=(*settings.notes, note))
    note = f"profile {named.label} ({where}) chosen for {request.path}"
    return replace(
        settings, source=f"{settings.source} ({named.label})", notes=(note, *settings.notes)
    )


def _listing(profiles: Sequence[NamedProfile]) -> str:
    return ", ".join(f"{p.label} is for {p.storage_key!r}" for p in profiles)


def check_storage_profiles(profiles: Sequence[NamedProfile]) -> None:
    """Several profiles: each names its storage, and no two the same storage and CPU model
    (one profile: nothing to check, its own storage check applies at each phase)."""
    if len(profiles) < 2:
        return
    seen: dict[tuple[str, str], str] = {}
    for named in profiles:
        key = named.storage_key
        if key is None:
            raise InvalidValueError(
                f"profile {named.label} records no storage key: with several profiles each "
                "must say which storage it describes (profile it again with greenckpt profile run)"
            )
        cpu = named.profile.machine.get("cpu_model")
        ident = (key, " ".join(str(cpu or "").split()).casefold())
        if ident in seen:
            raise InvalidValueError(
                f"profiles {seen[ident]} and {named.label} both describe storage {key!r} on "
                f"the same CPU model: give one profile per storage target"
            )
        seen[ident] = named.label


def make_storage_policy(
    name: str, profiles: Sequence[NamedProfile], *, node: Node, **options: Any
) -> Policy:
    """The policy ``name`` (:func:`~greenckpt.runtime.policy.make_policy`) on each of
    ``profiles``, wrapped in a :class:`PerStoragePolicy`; no profile, or the ``defaults``
    policy: :func:`make_policy`'s answer as is."""
    if not profiles or name in ("defaults", "fixed"):
        return make_policy(name, None, node=node, **options)
    choices = [(p, make_policy(name, p.profile, node=node, **options)) for p in profiles]
    return PerStoragePolicy(name, choices, node)
