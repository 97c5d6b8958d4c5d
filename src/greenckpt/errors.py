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

__all__ = ["GreenckptError"]


class GreenckptError(Exception):
    """Base of every exception greenckpt defines; its message says what failed and why."""
