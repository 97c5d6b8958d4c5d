"""The one base of every exception greenckpt raises: :class:`GreenckptError`.

Why a common base: a program that drives greenckpt (a batch script, a workflow tool) wants one
``except GreenckptError`` for "greenckpt refused or failed, the message says why" without
listing the library's error classes, and without also catching its own bugs as a bare
``except Exception`` would. Each library error keeps the built-in base that says what kind of
failure it is (``ValueError`` for a bad request, ``RuntimeError`` for a machine that cannot,
``OSError`` for a file), so ``except ValueError`` code keeps working:
``class ConfigError(GreenckptError, ValueError)``. ``tests/test_errors.py`` checks that every
exception class defined in greenckpt has this base and survives a pickle round trip (MPI sends
some of them between ranks).

The bottom leaf: it imports nothing of greenckpt, so every module may use it, the other leaf
modules (:mod:`greenckpt.units`, :mod:`greenckpt.files`) included.
"""

from __future__ import annotations

__all__ = [
    "DeviceIOError",
    "GreenckptError",
    "InvalidTypeError",
    "InvalidValueError",
    "MissingEntryError",
    "UsageError",
]


class GreenckptError(Exception):
    """Base of every exception greenckpt defines; its message says what failed and why."""


class InvalidValueError(GreenckptError, ValueError):
    """A value greenckpt refuses: out of range, malformed, or inconsistent with another.

    The generic refusal for arguments that have no error class of their own; the message names
    the value and what would be accepted.
    """


class InvalidTypeError(GreenckptError, TypeError):
    """An object of a kind greenckpt cannot take here (e.g. an in-process buffer sent to a
    worker process)."""


class MissingEntryError(GreenckptError, KeyError):
    """A lookup for an entry that is not there (a recording without the requested point)."""

    def __str__(self) -> str:
        # KeyError quotes its argument (repr); our messages are sentences.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class UsageError(GreenckptError, RuntimeError):
    """An object used out of order: called before it was started, after it was finished."""


class DeviceIOError(GreenckptError, OSError):
    """An I/O or system call that failed in a way the OS did not report as an errno (a short
    read, an unexpected end of file), or one re-raised with its errno."""
